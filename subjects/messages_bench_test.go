package subjects_test

import (
	"fmt"
	"testing"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The other messages of the hot path: a delete request (at most scan_batch_size targets, each
// carrying its location's exact bytes), and the audit event the prober and the deleter
// publish for every target, with its message id.

func benchDeleteRequest(targets int) subjects.DeleteRequest {
	r := subjects.DeleteRequest{
		V: subjects.SchemaVersion, Cluster: "c1", Instance: "inst-0", Group: "g1", Store: "meta-1", Round: 42,
		Source:   subjects.Source{Stream: "KVCMGC_kvcmgc_c1_BATCHES", Seq: 17, MsgID: "b:c1:inst-0:42:1234:0"},
		JudgedAt: 1_760_000_000_000_000,
		Storages: map[string]subjects.StorageInfo{"nfs_01": {Type: "file", RootPath: "/tmp/nfs/", KeyCountPerFile: 1}},
	}
	for i := range targets {
		key := int64(i)*7919 - 1000
		id := fmt.Sprintf("l%07d", i)
		r.Targets = append(r.Targets, subjects.Target{Key: key, Location: id, Reason: subjects.ReasonStorageMissing,
			Expected: subjects.RawText(fmt.Sprintf(`{"id":%q,"status":3,"type":4,"spec_size":2,"location_specs":[`+
				`{"name":"tp0","uri":"file://nfs_01/tmp/nfs/inst0/tp0/%x_%s?size=1024"},`+
				`{"name":"tp1","uri":"file://nfs_01/tmp/nfs/inst0/tp1/%x_%s?size=1024"}],"x_future":{"s":"<&>"}}`, id, key, id, key, id))})
	}
	return r
}

func BenchmarkEncodeDeleteRequest(b *testing.B) { benchEncode(b, benchDeleteRequest(256)) }

func BenchmarkDecodeDeleteRequest(b *testing.B) {
	benchDecode(b, benchDeleteRequest(256), subjects.DecodeDeleteRequest)
}

func benchEvent() subjects.Event {
	key := int64(-1234567890123)
	return subjects.Event{V: subjects.SchemaVersion, Kind: subjects.EventDelete, Stage: "deleter", Cluster: "c1",
		Instance: "inst-0", Round: 42, Key: &key, Location: "l0000007", Reason: subjects.ReasonOrphanWriting,
		Outcome: subjects.OutcomeDeleted, Detail: "", Source: &subjects.Source{Stream: "KVCMGC_kvcmgc_c1_DELETES", Seq: 99,
			MsgID: "d:KVCMGC_kvcmgc_c1_BATCHES:17"}, At: 1_760_000_000_000_000}
}

// BenchmarkEncodeEvent is one audit event with its message id, as EventLog.Emit builds it.
func BenchmarkEncodeEvent(b *testing.B) {
	e := benchEvent()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := subjects.Encode(e); err != nil {
			b.Fatal(err)
		}
		_ = subjects.EventMsgID(e)
	}
}

func BenchmarkBatchMsgID(b *testing.B) {
	batch := subjects.Batch{Cluster: "c1", Instance: "inst-0", Round: 42, Cursor: 123456789, Part: 0}
	b.ReportAllocs()
	for b.Loop() {
		_ = subjects.BatchMsgID(batch)
	}
}

// BenchmarkInstanceOf is the subject check every consumed message goes through.
func BenchmarkInstanceOf(b *testing.B) {
	n, err := subjects.NewNames("kvcmgc", "c1")
	if err != nil {
		b.Fatal(err)
	}
	subj := n.DeleteSubject("inst-0")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := n.InstanceOf(subj); err != nil {
			b.Fatal(err)
		}
	}
}
