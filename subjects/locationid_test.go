package subjects_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/kvcmtest"
)

var msgIDChars = regexp.MustCompile(`^[A-Za-z0-9_%~:-]+$`)

// TestLocationIDForms: every form travels exactly through batches (both schemas), delete
// requests and events, and gives message ids of the id alphabet, one per location.
func TestLocationIDForms(t *testing.T) {
	eventIDs, deleteIDs := map[string]string{}, map[string]string{}
	for _, id := range kvcmtest.LocationIDForms {
		value := `{"id":` + mustJSON(t, id) + `,"status":3,"type":7,"location_specs":[]}`

		for _, v := range []int{subjects.SchemaVersion, subjects.BatchSchemaVersion} {
			b := sampleBatch(0)
			b.V = v
			b.Blocks = []subjects.BlockEntry{{Key: 9, Layout: subjects.LayoutLocation, Fields: []string{kvcm.FieldPrevKey},
				Locs: []subjects.LocField{{ID: subjects.RawText(id), V: subjects.RawText(value)}}}}
			parts, oversized, err := subjects.EncodeBatchParts(b, 1<<20)
			require.NoError(t, err)
			require.Empty(t, oversized)
			require.Len(t, parts, 1)
			got, err := subjects.DecodeBatch(parts[0].Data)
			require.NoError(t, err, "%q, schema %d", id, v)
			require.Equal(t, id, string(got.Blocks[0].Locs[0].ID), "schema %d", v)
			require.Equal(t, value, string(got.Blocks[0].Locs[0].V))
			require.Regexp(t, msgIDChars, subjects.BatchMsgID(got))
		}

		d := sampleDelete()
		d.Targets = []subjects.Target{{Key: 9, Location: id, Layout: subjects.LayoutLocation, Reason: subjects.ReasonOrphanWriting,
			Expected: subjects.RawText(value)}}
		data, err := subjects.Encode(d)
		require.NoError(t, err)
		gotD, err := subjects.DecodeDeleteRequest(data)
		require.NoError(t, err, id)
		require.Equal(t, id, gotD.Targets[0].Location)
		d.Source = subjects.Source{} // a request without a source is named by its targets
		deleteIDs[subjects.DeleteMsgID(d)] = id
		require.Regexp(t, msgIDChars, subjects.DeleteMsgID(d))

		e := sampleEvent()
		e.Location = id
		data, err = subjects.Encode(e)
		require.NoError(t, err)
		gotE, err := subjects.DecodeEvent(data)
		require.NoError(t, err, id)
		require.Equal(t, id, gotE.Location)
		for _, one := range gotE.PerTarget() {
			require.Equal(t, id, one.Location)
		}
		eventIDs[subjects.EventMsgID(gotE)] = id
		require.Regexp(t, msgIDChars, subjects.EventMsgID(gotE))
	}
	require.Len(t, eventIDs, len(kvcmtest.LocationIDForms), "one event id per location")
	require.Len(t, deleteIDs, len(kvcmtest.LocationIDForms), "one request id per location")
}

func mustJSON(t *testing.T, s string) string {
	t.Helper()
	b, err := subjects.Encode(s)
	require.NoError(t, err)
	return string(b)
}
