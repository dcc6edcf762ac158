package scanner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// TestAuditTally: a page's recount joins the checkpoint that records it (a page scanned again
// replaces it), only for the instances the round started with; every location counts in any
// status, by base slot (vcns_hf3fs in hf3fs), with KVCM's size reading; specs KVCM's size
// cannot be known for are counted apart.
func TestAuditTally(t *testing.T) {
	loc := func(id string, status, typ int, uri string) []byte {
		return []byte(`{"id":"` + id + `","status":` + itoa(status) + `,"type":` + itoa(typ) +
			`,"spec_size":1,"create_time":1,"location_specs":[{"name":"tp0","uri":"` + uri + `"}]}`)
	}
	entries := []meta.Entry{
		{Instance: "a", BlockKey: 1, Layout: kvcm.LayoutLocation, Locations: []meta.Field{
			{ID: "w", Value: loc("w", 1, 4, "file://nfs_01/r/w?size=100")},   // WRITING
			{ID: "s", Value: loc("s", 3, 4, "file://nfs_01/r/s?size=01024")}, // SERVING, leading zero as from_chars reads it
			{ID: "d", Value: loc("d", 4, 5, "vcns://h/r/d?size=7")},          // DELETING, vcns_hf3fs
			{ID: "t", Value: nil}, // tombstone
		}},
		{Instance: "a", BlockKey: 2, Layout: kvcm.LayoutLocation, Locations: []meta.Field{
			{ID: "u", Value: loc("u", 3, 1, "hf3fs://h/r/u?size=abc")}, // unparsed: KVCM added an unknowable number
		}},
		{Instance: "late", BlockKey: 3, Layout: kvcm.LayoutLocation, Locations: []meta.Field{{ID: "x", Value: loc("x", 3, 4, "file://n/x?size=5")}}},
	}
	var tl auditTally
	c := pipeline.Checkpoint{InRound: true, AuditRound: []pipeline.AuditCount{{Instance: "a"}, {Instance: "b"}}}
	tl.add(0, 40, recountPage(entries))
	tl.add(0, 40, recountPage(entries)) // scanned again: replaces
	c.Cursor = 40
	c = tl.apply(c)
	c = tl.apply(c) // a waiting save of the same cursor adds nothing
	a := c.AuditRound[0]
	require.Equal(t, int64(2), a.Keys)
	require.Equal(t, int64(4), a.Locations)
	require.Equal(t, map[string]uint64{"file": 1124, "hf3fs": 7}, a.Usage)
	require.Equal(t, int64(1), a.Inexact)
	require.Equal(t, pipeline.AuditCount{Instance: "b"}, c.AuditRound[1], "an instance with no key: nothing counted")
	require.Len(t, c.AuditRound, 2, "an instance the round did not start with is not followed")
}

// TestAuditDriftRange: the drift is persisted minus recount with the persisted value at the
// round's start and at its end; without both readings there is no range.
func TestAuditDriftRange(t *testing.T) {
	k := func(v int64) *int64 { return &v }
	a := pipeline.AuditCount{Keys: 10, Usage: map[string]uint64{"file": 1000},
		Start: &pipeline.PersistedCounters{Keys: k(12), Usage: map[string]uint64{"file": 1300, "hf3fs": 5}},
		End:   &pipeline.PersistedCounters{Keys: k(15), Usage: map[string]uint64{"file": 1200}}}
	require.Equal(t, pipeline.DriftRange{Low: 2, High: 5, Ok: true}, a.KeyDrift())
	require.Equal(t, pipeline.DriftRange{Low: 200, High: 300, Ok: true}, a.UsageDrift("file"))
	require.Equal(t, pipeline.DriftRange{Low: 0, High: 5, Ok: true}, a.UsageDrift("hf3fs"), "a member absent at the end is 0 in KVCM")
	require.Equal(t, []string{"file", "hf3fs"}, a.Slots())
	require.False(t, a.KeyDrift().Exact())
	a.End.Keys = k(12)
	require.True(t, a.KeyDrift().Exact(), "KVCM counted nothing during the round: one value")
	a.Start = nil
	require.False(t, a.KeyDrift().Ok)
	require.False(t, a.UsageDrift("file").Ok)
}

// TestReadCounters: the persisted counters as KVCM restores them; an absent hash is no
// reading (KVCM's DEL and HSET are two commands), an unreadable field none for it.
func TestReadCounters(t *testing.T) {
	now := time.UnixMicro(1_800_000_000_000_000)
	ctx := context.Background()
	r := fakeMetadata{"i": {kvcm.FieldKeyCount: "7", kvcm.FieldStorageUsage: `{"unknown":0,"hf3fs":3,"file":9,"vcns_hf3fs":4,"newtype":1}`},
		"junk": {kvcm.FieldKeyCount: "+7", kvcm.FieldStorageUsage: `{"file":-1}`}}
	p := readCounters(ctx, r, "i", now)
	require.Equal(t, int64(7), *p.Keys)
	require.Equal(t, map[string]uint64{"unknown": 0, "hf3fs": 3, "file": 9}, p.Usage)
	require.Empty(t, p.Err)
	p = readCounters(ctx, r, "none", now)
	require.Nil(t, p.Keys)
	require.Nil(t, p.Usage)
	require.Contains(t, p.Err, "no metadata hash")
	p = readCounters(ctx, r, "junk", now)
	require.Nil(t, p.Keys)
	require.Nil(t, p.Usage)
	require.Contains(t, p.Err, "__key_count__")
	p = readCounters(ctx, errMetadata{}, "i", now)
	require.Contains(t, p.Err, "boom")
	require.Contains(t, readCounters(ctx, nil, "i", now).Err, "cannot read")
}

type fakeMetadata map[string]map[string]string

func (f fakeMetadata) ReadMetadata(_ context.Context, inst string) (map[string]string, error) {
	return f[inst], nil
}

type errMetadata struct{}

func (errMetadata) ReadMetadata(context.Context, string) (map[string]string, error) {
	return nil, errors.New("boom")
}

func itoa(v int) string { return string(rune('0' + v)) }
