package subjects_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

func sampleSweep(kind string) subjects.SweepBatch {
	b := subjects.SweepBatch{
		V: subjects.SchemaVersion, Cluster: "c1", Instance: "inst-0", Group: "g1", Store: "meta-1", Storage: "nfs_01",
		Kind: kind, Round: 3, Page: 17, LeaseRev: 9, WalkedAt: 1_760_000_000_000_000,
		Files: []subjects.SweepFile{
			{Path: subjects.RawText("/mnt/nfs/inst-0/tp0/1f"), Spec: "tp0", Key: 0x1f, Size: 1024, MtimeUs: 1_750_000_000_000_000, Ino: 77},
			{Path: subjects.RawText("/mnt/nfs/inst-0/tp1/ffffffffffffffff"), Spec: "tp1", Key: -1, Size: 1024, MtimeUs: 1_750_000_000_000_000, Ino: 78},
			// Any bytes a file system allows travel exactly.
			{Path: subjects.RawText("/mnt/nfs/inst-0/tp\xff/2"), Spec: "tp\uFFFD", Key: 2, Ino: 79},
		},
	}
	if kind == subjects.SweepQuarantine {
		for i := range b.Files {
			b.Files[i].Quarantine = subjects.RawText(string(b.Files[i].Path[len("/mnt/nfs/"):]) + "~1760000000000001")
			b.Files[i].QuarantinedUs = 1_760_000_000_000_001
		}
	}
	return b
}

func TestSweepNames(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	require.Equal(t, "kvcmgc.c1.sweep.inst-1", n.SweepSubject("inst-1"))
	require.Equal(t, "kvcmgc.c1.sweep.a%2Eb", n.SweepSubject("a.b"))
	require.Equal(t, "kvcmgc.c1.sweep.*", n.SweepFilter())
	require.Equal(t, "KVCMGC_kvcmgc_c1_SWEEP", n.SweepStream())
	require.Equal(t, "sweeper", n.SweeperConsumer())
	for _, id := range []string{"inst-1", "a.b", "实例", "a/b", ""} {
		got, err := n.InstanceOf(n.SweepSubject(id))
		require.NoError(t, err)
		require.Equal(t, id, got)
	}
	require.Equal(t, "kvcmgc.c1.event.sweep.inst-1", n.EventSubject(subjects.EventSweep, "inst-1"))

	for _, s := range []string{"nfs_01", "a.b/c", "", "实例", "x=y"} {
		k := subjects.SweepKey(s)
		require.Regexp(t, `^sweep\.[A-Za-z0-9_-]*$`, k)
		got, err := subjects.SweepStorageOf(k)
		if s == "" {
			require.Error(t, err, "an empty storage name has no key")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	for _, bad := range []string{"sweep.", "store.x", "sweep.@@", "sweep.YQ=="} {
		_, err := subjects.SweepStorageOf(bad)
		require.Error(t, err, bad)
	}
}

func TestSweepBatchRoundTrip(t *testing.T) {
	for _, kind := range []string{subjects.SweepWalk, subjects.SweepQuarantine} {
		b := sampleSweep(kind)
		data, err := subjects.Encode(b)
		require.NoError(t, err)
		got, err := subjects.DecodeSweepBatch(data)
		require.NoError(t, err)
		require.Equal(t, b, got)
	}
}

func TestSweepBatchPoison(t *testing.T) {
	for name, mut := range map[string]func(b *subjects.SweepBatch){
		"version":         func(b *subjects.SweepBatch) { b.V = 2 },
		"no cluster":      func(b *subjects.SweepBatch) { b.Cluster = "" },
		"no instance":     func(b *subjects.SweepBatch) { b.Instance = "" },
		"no storage":      func(b *subjects.SweepBatch) { b.Storage = "" },
		"kind":            func(b *subjects.SweepBatch) { b.Kind = "other" },
		"negative part":   func(b *subjects.SweepBatch) { b.Part = -1 },
		"no files":        func(b *subjects.SweepBatch) { b.Files = nil },
		"relative path":   func(b *subjects.SweepBatch) { b.Files[0].Path = subjects.RawText("inst/tp0/1") },
		"empty path":      func(b *subjects.SweepBatch) { b.Files[0].Path = nil },
		"no spec":         func(b *subjects.SweepBatch) { b.Files[0].Spec = "" },
		"repeated":        func(b *subjects.SweepBatch) { b.Files[1] = b.Files[0] },
		"walk quarantine": func(b *subjects.SweepBatch) { b.Files[0].Quarantine = subjects.RawText("x~1") },
	} {
		b := sampleSweep(subjects.SweepWalk)
		mut(&b)
		data, err := subjects.Encode(b)
		require.NoError(t, err)
		_, err = subjects.DecodeSweepBatch(data)
		require.ErrorIs(t, err, subjects.ErrPoison, name)
	}
	q := sampleSweep(subjects.SweepQuarantine)
	q.Files[2].QuarantinedUs = 0
	data, err := subjects.Encode(q)
	require.NoError(t, err)
	_, err = subjects.DecodeSweepBatch(data)
	require.ErrorIs(t, err, subjects.ErrPoison, "a quarantined file without its time")
	for _, raw := range []string{``, `[]`, `{"v":1}{}`, `{"v":1,"files":"x"}`} {
		_, err := subjects.DecodeSweepBatch([]byte(raw))
		require.ErrorIs(t, err, subjects.ErrPoison, raw)
	}
}

func TestSweepMsgID(t *testing.T) {
	b := sampleSweep(subjects.SweepWalk)
	require.Equal(t, "s:c1:nfs_01:w:3:17:inst-0:0", subjects.SweepMsgID(b))
	q := sampleSweep(subjects.SweepQuarantine)
	require.Equal(t, "s:c1:nfs_01:q:3:17:inst-0:0", subjects.SweepMsgID(q))
	same := b
	same.Files = b.Files[:1]
	same.WalkedAt++
	require.Equal(t, subjects.SweepMsgID(b), subjects.SweepMsgID(same), "a page read again gets its id again")
	for _, mut := range []func(*subjects.SweepBatch){
		func(x *subjects.SweepBatch) { x.Page++ },
		func(x *subjects.SweepBatch) { x.Round++ },
		func(x *subjects.SweepBatch) { x.Part++ },
		func(x *subjects.SweepBatch) { x.Instance = "inst-1" },
		func(x *subjects.SweepBatch) { x.Storage = "nfs_02" },
	} {
		x := b
		mut(&x)
		require.NotEqual(t, subjects.SweepMsgID(b), subjects.SweepMsgID(x))
	}
}

// TestEventFileMsgID: the file is part of an event's id, so the events of two files of one
// block in one batch are both stored; events about no file keep the ids they had.
func TestEventFileMsgID(t *testing.T) {
	key := int64(0x1f)
	e := subjects.Event{V: 1, Kind: subjects.EventSweep, Stage: "sweeper", Cluster: "c1", Instance: "i", Key: &key,
		Outcome: subjects.SweepOutcomeQuarantined, Source: &subjects.Source{Stream: "S", Seq: 1}, At: 1}
	a, b := e, e
	a.File, b.File = subjects.RawText("/r/i/tp0/1f"), subjects.RawText("/r/i/tp1/1f")
	require.NotEqual(t, subjects.EventMsgID(a), subjects.EventMsgID(b))
	require.NotEqual(t, subjects.EventMsgID(e), subjects.EventMsgID(a))
	data, err := subjects.Encode(a)
	require.NoError(t, err)
	got, err := subjects.DecodeEvent(data)
	require.NoError(t, err)
	require.Equal(t, a.File, got.File)
	// Pinned: an event without a file hashes the fields it always did.
	d := sampleEvent()
	require.Equal(t, "e:deleter:delete:"+pinnedDeleteEventHash, subjects.EventMsgID(d))
}

func FuzzDecodeSweepBatch(f *testing.F) {
	f.Add(mustEncode(f, sampleSweep(subjects.SweepWalk)))
	f.Add(mustEncode(f, sampleSweep(subjects.SweepQuarantine)))
	f.Add([]byte(`{"v":1,"cluster":"c","instance":"i","storage":"s","kind":"walk","files":[{"path":"/a","spec":"t","key":"-1"}]}`))
	f.Add([]byte(`{"v":1,"cluster":"c","instance":"i","storage":"s","kind":"quarantine","files":[{"path":{"base64":"L/8="},"spec":"t","key":"1","quarantine":"a~1","quarantined_us":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, data, subjects.DecodeSweepBatch) })
}

// pinnedDeleteEventHash is EventMsgID's hash of sampleEvent before events had a file.
const pinnedDeleteEventHash = "65d269209be96ee5784e5192"
