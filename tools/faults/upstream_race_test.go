package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// staged is one race staged on one block: where the emulator is held (at), and what
// kvcm-gc's delete of the block's garbage location must answer there (outcome, resumed); then,
// redelivered once the emulator is done, what it must answer again ("" for no redelivery).
type staged struct {
	name     string
	at       UpstreamPoint
	outcome  string
	resumed  bool
	again    string
	size     uint64 // the garbage location's bytes (its one counted spec)
	unknown  bool   // the garbage location carries a member KVCM's re-serialization drops
	byKVCM   int    // removals the emulator's CAD makes of it
	back     int    // times the emulator's blind write brings it back
	over     bool   // the emulator's CAD subtracts its bytes after kvcm-gc removed it
	phantomG bool   // kvcm-gc removed it and KVCM's CAD never removed it: kvcm-gc's share
}

// TestBesideUpstreamRacesBothWays stages, deterministically, each race between KVCM's own
// GC (the emulator, writing as KVCM writes) and kvcm-gc's delete protocol, on one block each,
// in both layouts: the emulator is held at a Hook while kvcm-gc's deleter acts on the block.
//
//   - mark finished: KVCM set the location DELETING and waits before its physical delete;
//     kvcm-gc finds its own DELETING form and finishes it (resumed); KVCM's CAD finds nothing.
//   - mismatch: KVCM's DELETING copy is its re-serialization, without a member it does not
//     know; kvcm-gc's compare fails (noop_mismatch) and KVCM finishes.
//   - blind write after the CAD: KVCM read the location and waits before its blind HSET;
//     kvcm-gc deletes it, then KVCM's write brings it back DELETING and KVCM deletes it again;
//     kvcm-gc's redelivered request finds it gone (noop_gone).
//   - CAD after kvcm-gc's: KVCM read its own mark for its CAD and waits before its HDEL;
//     kvcm-gc finishes the mark (resumed); KVCM's HDEL finds nothing and subtracts the bytes
//     all the same.
//
// Both directions happen (kvcm-gc finishing KVCM's marks; kvcm-gc losing as a no-op), no
// live location of the blocks is lost or changed in meaning, every garbage location is gone,
// and the phantom bytes each side left are exactly the ones the races explain, as the
// beside-upstream scenario counts them: kvcm-gc's share is the bytes of the locations it
// removed and KVCM's CAD never did (mark finished, CAD after), KVCM's the bytes its CAD
// subtracted for a location kvcm-gc had removed in its window (CAD after). In the location
// layout KVCM's usage ends exactly the first over the recount, less the second.
func TestBesideUpstreamRacesBothWays(t *testing.T) {
	races := []staged{
		{name: "mark finished", at: AfterCAS, outcome: subjects.OutcomeDeleted, resumed: true, size: 1000, phantomG: true},
		{name: "mismatch", at: AfterCAS, outcome: subjects.OutcomeNoopMismatch, size: 200, unknown: true, byKVCM: 1},
		{name: "blind write after the CAD", at: BeforeCASWrite, outcome: subjects.OutcomeDeleted, again: subjects.OutcomeNoopGone, size: 30, byKVCM: 1, back: 1},
		{name: "CAD after kvcm-gc's", at: BeforeCADWrite, outcome: subjects.OutcomeDeleted, resumed: true, size: 4, phantomG: true, over: true},
	}
	for _, layout := range []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy} {
		t.Run(layout.String(), func(t *testing.T) { raceBothWays(t, layout, races) })
	}
}

func raceBothWays(t *testing.T, layout kvcm.Layout, races []staged) {
	ctx := context.Background()
	r := testenv.StartRedis(t)
	e := &env{redis: r.Redis, layout: layout}
	rdb := r.Client()
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("kv"), 0o644))
		return p
	}
	spec := func(name, path string, size uint64) string {
		return fmt.Sprintf(`{"name":%q,"uri":"file://nfs_01%s?size=%d"}`, name, path, size)
	}
	old := time.Now().Add(-48 * time.Hour).UnixMicro()

	// One block per race: its garbage location g<n> and a live SERVING one, l<n>. Location
	// layout: g<n> is an orphan WRITING (KVCM's NFS backend: everything exists, deletes do
	// nothing). Legacy: f6aa2b2 reads no create_time, so g<n> is a storage-missing SERVING
	// (one spec's file gone) on a backend that stats and removes files; the blocks are in
	// f6aa2b2's own encoding, as it wrote them.
	type block struct {
		key            string
		bkey           int64
		garbage, live  string
		gFiles, lFiles []string
	}
	blocks := make([]block, len(races))
	byKey := map[string]int{}
	for i, rc := range races {
		b := block{bkey: int64(100 + i), garbage: fmt.Sprintf("g%07d", i), live: fmt.Sprintf("l%07d", i)}
		b.key = kvcm.BlockKey("inst0", b.bkey)
		lf := file(b.live)
		b.lFiles = []string{lf}
		live := locJSON{id: b.live, status: kvcm.StatusServing, typ: kvcm.TypeFile, createTime: old, specs: []string{spec("tp0", lf, 7)}}
		g := locJSON{id: b.garbage, status: kvcm.StatusWriting, typ: kvcm.TypeFile, createTime: old}
		if layout == kvcm.LayoutLocation {
			gf := file(b.garbage)
			b.gFiles = []string{gf}
			g.specs = []string{spec("tp0", gf, rc.size)}
		} else {
			gf := file(b.garbage)
			b.gFiles = []string{gf}
			g.status, g.createTime = kvcm.StatusServing, -1
			g.specs = []string{spec("tp0", gf, rc.size), spec("tp1", filepath.Join(dir, b.garbage+".gone"), 0)}
			live.createTime = -1
		}
		require.NoError(t, e.writeBlock(ctx, b.key, old, []locJSON{g, live}))
		if layout == kvcm.LayoutLegacy {
			// As f6aa2b2 wrote it: its encoding of the map.
			blk, err := kvcm.DecodeBlock([]byte(rdb.HGet(ctx, b.key, kvcm.FieldURI).Val()))
			require.NoError(t, err)
			require.NoError(t, rdb.HSet(ctx, b.key, kvcm.FieldURI, string(kvcm.ReencodeLegacyBlock(blk))).Err())
		}
		if rc.unknown {
			// A member KVCM does not know, in a location KVCM's writer would re-serialize.
			raw := e.readLocation(t, b.key, b.garbage)
			withMember := append([]byte(`{"checksum":77,`), raw[1:]...)
			e.putLocation(t, b.key, b.garbage, withMember)
		}
		blocks[i], byKey[b.key] = b, i
	}
	// KVCM's counters as its leader would have them: the recount of what it wrote.
	rec := kvcm.NewRecount()
	before, err := TakeSnapshot(ctx, rdb, "*")
	require.NoError(t, err)
	for _, b := range blocks {
		rec.AddFields(before[b.key].Fields)
	}
	require.NoError(t, rdb.HSet(ctx, kvcm.MetadataKey("inst0"), kvcm.FieldKeyCount, rec.Keys,
		kvcm.FieldStorageUsage, string(kvcm.FormatStorageUsage(kvcm.UsageMembersCurrent, rec.Usage))).Err())

	// kvcm-gc's side: its delete protocol, its store and storages, on the same Redis and files.
	conn, err := redismeta.ParseURI(r.URI())
	require.NoError(t, err)
	st, err := redismeta.OpenStore(ctx, conn, redismeta.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{
		"nfs_01": {Type: kvcm.TypeFile, TypeName: "file", Name: "nfs_01", RootPath: dir + "/", KeyCountPerFile: 1},
	}, storage.Options{DefaultProbe: storage.ProbeStat})
	require.NoError(t, err)
	proto := deleter.NewProtocol(deleter.DefaultConfig())
	// Its targets, as its prober judged them from the scan: the bytes before any race.
	targets := make([]subjects.Target, len(blocks))
	for i, b := range blocks {
		tg := subjects.Target{Key: b.bkey, Location: b.garbage, Reason: subjects.ReasonOrphanWriting,
			Expected: subjects.RawText(e.readLocation(t, b.key, b.garbage))}
		if layout == kvcm.LayoutLocation {
			tg.Layout = subjects.LayoutLocation
		} else {
			tg.Reason = subjects.ReasonStorageMissing
		}
		targets[i] = tg
	}
	deleteNow := func(i int) deleter.TargetResult {
		res, err := proto.DeleteAll(ctx, st, set, "inst0", []subjects.Target{targets[i]})
		require.NoError(t, err)
		require.Len(t, res, 1)
		return res[0]
	}

	var mu sync.Mutex
	first := make([]*deleter.TargetResult, len(races))
	hook := func(_ context.Context, at UpstreamPoint, key string) {
		i, ok := byKey[key]
		mu.Lock()
		defer mu.Unlock()
		if !ok || races[i].at != at || first[i] != nil {
			return
		}
		res := deleteNow(i) // kvcm-gc acts while KVCM waits at this point
		first[i] = &res
	}
	u, err := NewUpstreamGC(UpstreamConfig{Store: rdb, Layout: layout, Instances: []string{"inst0"},
		Storages:     map[string]UpstreamStorage{"nfs_01": {Type: kvcm.TypeFile, Files: layout == kvcm.LayoutLegacy}},
		ScanInterval: time.Millisecond, ScanBatch: 64, MaxInflight: 1, Writes: WritesKVCM,
		Counters: true, PersistInterval: time.Hour, Hook: hook})
	require.NoError(t, err)
	require.NoError(t, u.RunRounds(ctx, 1))
	require.NoError(t, u.Err())

	resumed, lost := 0, 0
	count := func(res deleter.TargetResult) {
		if res.Resumed {
			resumed++
		}
		if res.Outcome == subjects.OutcomeNoopGone || res.Outcome == subjects.OutcomeNoopMismatch {
			lost++
		}
	}
	removed, back := u.Removed(), u.Resurrected()
	var phantomGC, phantomKVCM uint64
	for i, rc := range races {
		b := blocks[i]
		ref := UpstreamRef{Key: b.key, ID: b.garbage}
		require.NotNil(t, first[i], "%s: the emulator reached its hook", rc.name)
		require.Equal(t, rc.outcome, first[i].Outcome, "%s: %s", rc.name, first[i].Detail)
		require.Equal(t, rc.resumed, first[i].Resumed, rc.name)
		count(*first[i])
		if rc.again != "" {
			res := deleteNow(i) // the request redelivered, or judged again next round
			require.Equal(t, rc.again, res.Outcome, "%s again: %s", rc.name, res.Detail)
			count(res)
		}
		require.Equal(t, rc.byKVCM, removed[ref], "%s: removals by KVCM's CAD", rc.name)
		require.Equal(t, rc.back, back[ref], "%s: brought back by KVCM's blind write", rc.name)
		if rc.phantomG {
			phantomGC += rc.size
		}
		if rc.over {
			phantomKVCM += rc.size
		}
	}
	require.Positive(t, resumed, "a DELETING mark of KVCM's finished by kvcm-gc")
	require.Positive(t, lost, "a delete of kvcm-gc's lost to KVCM as a no-op")

	// No live location lost or changed in meaning; every garbage location gone, with its files.
	after, err := TakeSnapshot(ctx, rdb, "*")
	require.NoError(t, err)
	for i, b := range blocks {
		was, ok := locationIn(before[b.key].Fields, e.fieldOf(b.live), b.live)
		require.True(t, ok)
		now, ok := locationIn(after[b.key].Fields, e.fieldOf(b.live), b.live)
		require.True(t, ok, "live %s kept", b.live)
		require.True(t, sameMeaning(layout, true, was, now), "live %s: %s, was %s", b.live, now.Raw, was.Raw)
		for _, f := range b.lFiles {
			require.FileExists(t, f)
		}
		_, there := locationIn(after[b.key].Fields, e.fieldOf(b.garbage), b.garbage)
		require.False(t, there, "garbage %s gone", b.garbage)
		for _, f := range b.gFiles {
			if layout == kvcm.LayoutLocation && first[i].Outcome != subjects.OutcomeDeleted {
				// Removed by KVCM alone, whose NFS Delete does nothing: the sweep's to reclaim.
				require.FileExists(t, f, b.garbage)
				continue
			}
			require.NoFileExists(t, f, "%s's data unlinked", b.garbage)
		}
	}

	// The phantom bytes each side left. Legacy: f6aa2b2 keeps no usage for anyone to drift.
	st2 := u.Stats()
	require.Positive(t, st2.CADLost, "KVCM's CAD found kvcm-gc's finished marks gone")
	c := u.Counters()["inst0"]
	if layout == kvcm.LayoutLocation {
		now := kvcm.NewRecount()
		for _, b := range blocks {
			now.AddFields(after[b.key].Fields)
		}
		require.Equal(t, phantomKVCM, c.OverSubtracted[kvcm.TypeFile], "KVCM's share: bytes its CAD subtracted for a location kvcm-gc removed")
		require.Equal(t, now.Usage[kvcm.TypeFile]+phantomGC-phantomKVCM, c.Usage[kvcm.TypeFile],
			"KVCM's usage over the recount by kvcm-gc's share, less KVCM's own")
	}
	counted := "KVCM's usage over the recount by the difference"
	if layout == kvcm.LayoutLegacy {
		counted = "f6aa2b2 keeps no usage to drift"
	}
	t.Logf("%s: kvcm-gc finished %d of KVCM's marks, lost %d races as no-ops; phantom bytes: kvcm-gc's %d, KVCM's %d (subtracted for kvcm-gc's removals); %s",
		layout, resumed, lost, phantomGC, phantomKVCM, counted)
}

// readLocation returns location id's bytes in key, in the env's layout.
func (e *env) readLocation(t *testing.T, key, id string) []byte {
	t.Helper()
	fields, err := e.redis.Client().HGetAll(context.Background(), key).Result()
	require.NoError(t, err)
	l, ok := locationIn(fields, e.fieldOf(id), id)
	require.True(t, ok, "%s/%s", key, id)
	return l.Raw
}

// putLocation writes raw as location id of key, in the env's layout (legacy: in its map).
func (e *env) putLocation(t *testing.T, key, id string, raw []byte) {
	t.Helper()
	ctx := context.Background()
	rdb := e.redis.Client()
	if e.layout == kvcm.LayoutLocation {
		require.NoError(t, rdb.HSet(ctx, key, kvcm.LocationField(id), raw).Err())
		return
	}
	blk, err := kvcm.DecodeBlock([]byte(rdb.HGet(ctx, key, kvcm.FieldURI).Val()))
	require.NoError(t, err)
	out := []byte("{")
	for i, l := range blk.Locations {
		if i > 0 {
			out = append(out, ',')
		}
		v := l.Raw
		if l.ID == id {
			v = raw
		}
		out = append(append(out, fmt.Sprintf("%q:", l.ID)...), v...)
	}
	require.NoError(t, rdb.HSet(ctx, key, kvcm.FieldURI, string(append(out, '}'))).Err())
}
