package subjects_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// uriValue is a realistic __uri__: a SERVING location on NFS and a WRITING one on HF3FS.
func uriValue(key int64) string {
	return fmt.Sprintf(`{"q0x7m2ab":{"id":"q0x7m2ab","status":3,"type":4,"spec_size":1,"location_specs":[`+
		`{"name":"tp0","uri":"file://nfs_01/tmp/nfs/inst0/tp0/%x_3c1a9f0e77d2b4a1?blkid=0&size=1024"}]},`+
		`"k3j9x0cd":{"id":"k3j9x0cd","status":2,"type":1,"spec_size":1,"location_specs":[`+
		`{"name":"tp0","uri":"hf3fs://hf3fs_01/3fs/stage/kvcm/inst0/tp0/%x?size=1024"}]}}`, key, key)
}

func sampleBatch(blocks int) subjects.Batch {
	b := subjects.Batch{
		V: subjects.SchemaVersion, Cluster: "c1", Instance: "inst-0", Group: "g1", Store: "meta-1",
		Round: 42, LeaseRev: 7, Cursor: 1234, Next: 5678, Part: 0, Parts: 1,
		ScannedAt: 1_760_000_000_000_000, BadKeys: 1,
	}
	for i := range blocks {
		key := int64(i)*7919 - 1000
		b.Blocks = append(b.Blocks, subjects.BlockEntry{
			Key: key, URI: subjects.RawText(uriValue(key)), LRUTime: "1760000000000000",
		})
	}
	return b
}

func sampleDelete() subjects.DeleteRequest {
	return subjects.DeleteRequest{
		V: subjects.SchemaVersion, Cluster: "c1", Instance: "inst-0", Group: "g1", Store: "meta-1", Round: 42,
		Source:   subjects.Source{Stream: "KVCMGC_kvcmgc_c1_BATCHES", Seq: 17, MsgID: "b:c1:inst-0:42:1234:0"},
		JudgedAt: 1_760_000_000_000_000,
		Targets: []subjects.Target{
			{Key: -5, Location: "k3j9x0cd", Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(`{"id":"k3j9x0cd","status":2}`)},
			{Key: 9, Location: "q0x7m2ab", Reason: subjects.ReasonStorageMissing, Expected: subjects.RawText("\xff\x00&")},
		},
		Storages: map[string]subjects.StorageInfo{
			"nfs_01":   {Type: "file", RootPath: "/tmp/nfs/", KeyCountPerFile: 8},
			"hf3fs_01": {Type: "hf3fs", Mountpoint: "/3fs/stage", RootDir: "kvcm/"},
		},
	}
}

func sampleEvent() subjects.Event {
	key := int64(-5)
	return subjects.Event{
		V: subjects.SchemaVersion, Kind: subjects.EventDelete, Stage: "deleter", Cluster: "c1", Instance: "inst-0",
		Round: 42, Key: &key, Location: "k3j9x0cd", Reason: subjects.ReasonOrphanWriting,
		Outcome: subjects.OutcomeDeleted, Detail: "ok", Source: &subjects.Source{Stream: "KVCMGC_kvcmgc_c1_DELETES", Seq: 3},
		Counts: map[string]int64{"targets": 1}, At: 1_760_000_000_000_001,
	}
}

// mutate encodes v, lets f edit it as a generic JSON object and returns the result.
func mutate(t *testing.T, v any, f func(m map[string]any)) []byte {
	t.Helper()
	enc, err := subjects.Encode(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(enc, &m))
	f(m)
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

func TestEncodeCompact(t *testing.T) {
	enc, err := subjects.Encode(sampleDelete())
	require.NoError(t, err)
	require.False(t, strings.HasSuffix(string(enc), "\n"))
	require.NotContains(t, string(enc), `\u0026`)
	require.Contains(t, string(enc), `"expected":{"base64":"/wAm"}`)
	require.True(t, strings.HasPrefix(string(enc), `{"v":1,"cluster":"c1",`), string(enc))

	_, err = subjects.Encode(func() {})
	require.Error(t, err)
}

type decodeCase struct {
	name string
	data []byte
	err  string // "" means valid
}

func runDecodeCases(t *testing.T, cases []decodeCase, decode func([]byte) (any, error)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode(tc.data)
			if tc.err == "" {
				require.NoError(t, err)
				// What decodes re-encodes to something that decodes to the same message.
				enc, err := subjects.Encode(got)
				require.NoError(t, err)
				again, err := decode(enc)
				require.NoError(t, err)
				require.Equal(t, got, again)
				return
			}
			require.ErrorIs(t, err, subjects.ErrPoison)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// commonCases apply to every message type.
func commonCases(t *testing.T, valid any) []decodeCase {
	return commonCasesNext(t, valid, 2)
}

// commonCasesNext is commonCases for a message whose first unknown version is next.
func commonCasesNext(t *testing.T, valid any, next int) []decodeCase {
	enc, err := subjects.Encode(valid)
	require.NoError(t, err)
	nv := fmt.Sprint(next)
	return []decodeCase{
		{"valid", enc, ""},
		{"valid with spaces", []byte(" \n" + string(enc) + "\n "), ""},
		{"unknown member tolerated", mutate(t, valid, func(m map[string]any) { m["added_later"] = []int{1} }), ""},
		{"version missing", mutate(t, valid, func(m map[string]any) { delete(m, "v") }), "unsupported schema version 0"},
		{"version " + nv, mutate(t, valid, func(m map[string]any) { m["v"] = next }), "unsupported schema version " + nv},
		{"version " + nv + " with other types", mutate(t, valid, func(m map[string]any) { m["v"] = next; m["cluster"] = 5 }), "unsupported schema version " + nv},
		{"version as string", mutate(t, valid, func(m map[string]any) { m["v"] = "1" }), `unsupported schema version "1"`},
		{"wrong type", mutate(t, valid, func(m map[string]any) { m["cluster"] = 5 }), "cannot unmarshal"},
		{"cluster empty", mutate(t, valid, func(m map[string]any) { m["cluster"] = "" }), "cluster is empty"},
		{"trailing object", []byte(string(enc) + "{}"), "invalid character"},
		{"trailing garbage", []byte(string(enc) + "x"), "invalid character"},
		{"truncated", enc[:len(enc)-1], "unexpected end"},
		{"empty", nil, "not a JSON object"},
		{"null", []byte("null"), "not a JSON object"},
		{"array", []byte("[1]"), "not a JSON object"},
		{"string", []byte(`"x"`), "not a JSON object"},
	}
}

func TestDecodeBatch(t *testing.T) {
	valid := sampleBatch(3)
	cases := append(commonCases(t, valid), []decodeCase{
		{"no blocks", mutate(t, valid, func(m map[string]any) { m["blocks"] = []any{} }), ""},
		{"null blocks", mutate(t, valid, func(m map[string]any) { m["blocks"] = nil }), ""},
		{"instance empty", mutate(t, valid, func(m map[string]any) { m["instance"] = "" }), "instance is empty"},
		{"instance missing", mutate(t, valid, func(m map[string]any) { delete(m, "instance") }), "instance is empty"},
		{"parts 0", mutate(t, valid, func(m map[string]any) { m["parts"] = 0 }), "parts 0 is less than 1"},
		{"part = parts", mutate(t, valid, func(m map[string]any) { m["part"] = 1 }), "part 1 not in [0, 1)"},
		{"part negative", mutate(t, valid, func(m map[string]any) { m["part"] = -1; m["parts"] = 2 }), "part -1 not in [0, 2)"},
		{"bad keys negative", mutate(t, valid, func(m map[string]any) { m["bad_keys"] = -1 }), "bad_keys -1"},
		{"key as number", mutate(t, valid, func(m map[string]any) { m["blocks"].([]any)[0].(map[string]any)["key"] = 5 }), "invalid use of ,string"},
		{"key not int64", mutate(t, valid, func(m map[string]any) { m["blocks"].([]any)[0].(map[string]any)["key"] = "9223372036854775808" }), "cannot unmarshal"},
		{"uri not text", mutate(t, valid, func(m map[string]any) { m["blocks"].([]any)[0].(map[string]any)["uri"] = 5 }), "raw text"},
		{"uri bad base64", mutate(t, valid, func(m map[string]any) {
			m["blocks"].([]any)[0].(map[string]any)["uri"] = map[string]any{"base64": "!"}
		}), "base64"},
		{"round negative", mutate(t, valid, func(m map[string]any) { m["round"] = -1 }), "cannot unmarshal"},
	}...)
	runDecodeCases(t, cases, func(b []byte) (any, error) { return subjects.DecodeBatch(b) })
}

func TestDecodeDeleteRequest(t *testing.T) {
	valid := sampleDelete()
	target := func(m map[string]any, i int) map[string]any { return m["targets"].([]any)[i].(map[string]any) }
	cases := append(commonCases(t, valid), []decodeCase{
		{"source by msg id only", mutate(t, valid, func(m map[string]any) { m["source"] = map[string]any{"msg_id": "x"} }), ""},
		{"instance empty", mutate(t, valid, func(m map[string]any) { m["instance"] = "" }), "instance is empty"},
		{"no source", mutate(t, valid, func(m map[string]any) { delete(m, "source") }), "source names neither"},
		{"source without seq", mutate(t, valid, func(m map[string]any) { m["source"] = map[string]any{"stream": "S"} }), "source names neither"},
		{"no targets", mutate(t, valid, func(m map[string]any) { m["targets"] = []any{} }), "no targets"},
		{"null targets", mutate(t, valid, func(m map[string]any) { m["targets"] = nil }), "no targets"},
		{"location empty", mutate(t, valid, func(m map[string]any) { target(m, 1)["location"] = "" }), "target 1 (key 9): location is empty"},
		{"reason unknown", mutate(t, valid, func(m map[string]any) { target(m, 0)["reason"] = "capacity" }), `unknown reason "capacity"`},
		{"reason missing", mutate(t, valid, func(m map[string]any) { delete(target(m, 0), "reason") }), `unknown reason ""`},
		{"expected empty", mutate(t, valid, func(m map[string]any) { target(m, 0)["expected"] = "" }), "expected bytes are empty"},
		{"expected missing", mutate(t, valid, func(m map[string]any) { delete(target(m, 0), "expected") }), "expected bytes are empty"},
		{"duplicate target", mutate(t, valid, func(m map[string]any) {
			m["targets"] = append(m["targets"].([]any), target(m, 0))
		}), `target 2 repeats key -5 location "k3j9x0cd"`},
		{"same location id in two blocks", mutate(t, valid, func(m map[string]any) {
			target(m, 1)["location"] = "k3j9x0cd"
		}), ""},
	}...)
	runDecodeCases(t, cases, func(b []byte) (any, error) { return subjects.DecodeDeleteRequest(b) })
}

func TestDecodeEvent(t *testing.T) {
	valid := sampleEvent()
	cases := append(commonCasesNext(t, valid, subjects.EventSchemaVersion+1), []decodeCase{
		{"minimal", []byte(`{"v":1,"kind":"round","stage":"scanner","cluster":"c","at_us":1}`), ""},
		{"version 1 delete of one target", []byte(`{"v":1,"kind":"delete","stage":"deleter","cluster":"c","key":"5","location":"a","outcome":"deleted","at_us":1}`), ""},
		{"version 2 delete of a request", []byte(`{"v":2,"kind":"delete","stage":"deleter","cluster":"c","outcome":"mixed","targets":[{"key":"5","location":"a","reason":"orphan_writing","outcome":"deleted"}],"at_us":1}`), ""},
		{"version 2 candidate of one target", []byte(`{"v":2,"kind":"candidate","stage":"prober","cluster":"c","key":"5","location":"a","reason":"orphan_writing","at_us":1}`), ""},
		{"version 3 candidates of a batch", []byte(`{"v":3,"kind":"candidate","stage":"prober","cluster":"c","reason":"mixed","counts":{"orphan_writing":1,"storage_missing":1},"targets":[{"key":"5","location":"a","reason":"orphan_writing"},{"key":"-6","location":"b","reason":"storage_missing"}],"at_us":1}`), ""},
		{"version 3 counters repair", []byte(`{"v":3,"kind":"counters","stage":"admin","cluster":"c","instance":"i","outcome":"applied","metadata":[{"key":"kvcache:instance_i:metadata","field":"__storage_usage_data__","old":"{\"file\":9}","new":{"base64":"/w=="}}],"at_us":1}`), ""},
		{"unknown kind tolerated", mutate(t, valid, func(m map[string]any) { m["kind"] = "future_kind" }), ""},
		{"kind empty", mutate(t, valid, func(m map[string]any) { m["kind"] = "" }), "kind is empty"},
		{"stage empty", mutate(t, valid, func(m map[string]any) { delete(m, "stage") }), "stage is empty"},
		{"no time", mutate(t, valid, func(m map[string]any) { delete(m, "at_us") }), "at_us 0 is not a time"},
		{"empty source", mutate(t, valid, func(m map[string]any) { m["source"] = map[string]any{} }), "source names neither"},
		{"key as number", mutate(t, valid, func(m map[string]any) { m["key"] = 5 }), "invalid use of ,string"},
		{"counts not numbers", mutate(t, valid, func(m map[string]any) { m["counts"] = map[string]any{"a": "b"} }), "cannot unmarshal"},
	}...)
	runDecodeCases(t, cases, func(b []byte) (any, error) { return subjects.DecodeEvent(b) })
}

// TestValidateForProducers checks the Validate methods producers call before publishing agree
// with the decoders.
func TestValidateForProducers(t *testing.T) {
	b := sampleBatch(1)
	require.NoError(t, b.Validate())
	b.Instance = ""
	require.ErrorContains(t, b.Validate(), "instance is empty")
	r := sampleDelete()
	require.NoError(t, r.Validate())
	r.Targets = nil
	require.ErrorContains(t, r.Validate(), "no targets")
	e := sampleEvent()
	require.NoError(t, e.Validate())
	e.V = 4
	require.ErrorContains(t, e.Validate(), "unsupported schema version 4")
	e.V = 0
	require.ErrorContains(t, e.Validate(), "unsupported schema version 0")
}

// TestPerTarget: a delete event of either version reads as one event per target, as version 1
// wrote it; the message id of a request's event follows its targets' outcomes.
func TestPerTarget(t *testing.T) {
	key := int64(-5)
	v1 := subjects.Event{V: 1, Kind: subjects.EventDelete, Key: &key, Location: "a", Reason: subjects.ReasonOrphanWriting, Outcome: subjects.OutcomeDeleted, Detail: "d"}
	require.Equal(t, []subjects.Event{v1}, v1.PerTarget())
	v2 := subjects.Event{V: 2, Kind: subjects.EventDelete, Instance: "i", Outcome: subjects.OutcomeMixed, Targets: []subjects.EventTarget{
		{Key: 1, Location: "a", Reason: subjects.ReasonStuckDeleting, Outcome: subjects.OutcomeDeleted, PhysicalSkips: map[string]int{"shared_file": 2}, Resumed: true},
		{Key: 2, Location: "b", Outcome: subjects.OutcomeNoopGone, Detail: "gone"}}}
	per := v2.PerTarget()
	require.Len(t, per, 2)
	require.Equal(t, int64(1), *per[0].Key)
	require.Equal(t, "a", per[0].Location)
	require.Equal(t, subjects.ReasonStuckDeleting, per[0].Reason)
	require.Equal(t, subjects.OutcomeDeleted, per[0].Outcome)
	require.Equal(t, "physical skips map[shared_file:2]; resumed from DELETING", per[0].Detail)
	require.Equal(t, "i", per[0].Instance)
	require.Nil(t, per[0].Targets)
	require.Equal(t, int64(2), *per[1].Key)
	require.Equal(t, "gone", per[1].Detail)
	require.Equal(t, subjects.OutcomeNoopGone, per[1].Outcome)
	round := subjects.Event{Kind: subjects.EventRound}
	require.Equal(t, []subjects.Event{round}, round.PerTarget())
	// A batch's candidate event (version 3) against the per-target ones of versions 1 and 2.
	c1 := subjects.Event{V: 2, Kind: subjects.EventCandidate, Instance: "i", Key: &key, Location: "a", Reason: subjects.ReasonOrphanWriting}
	require.Equal(t, []subjects.Event{c1}, c1.PerTarget())
	c3 := subjects.Event{V: 3, Kind: subjects.EventCandidate, Instance: "i", Reason: subjects.OutcomeMixed, Targets: []subjects.EventTarget{
		{Key: -5, Location: "a", Reason: subjects.ReasonOrphanWriting}, {Key: 7, Location: "b", Reason: subjects.ReasonStorageMissing}}}
	per = c3.PerTarget()
	require.Len(t, per, 2)
	c1.V = 3
	require.Equal(t, c1, per[0])
	require.Equal(t, int64(7), *per[1].Key)
	require.Equal(t, subjects.ReasonStorageMissing, per[1].Reason)
	other := v2
	other.Targets = []subjects.EventTarget{{Key: 1, Location: "a", Outcome: subjects.OutcomeDeleted}, {Key: 2, Location: "b", Outcome: subjects.OutcomeError}}
	require.NotEqual(t, subjects.EventMsgID(v2), subjects.EventMsgID(other), "another delivery that ended otherwise is another event")
}
