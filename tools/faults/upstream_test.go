package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// upstreamKeyspace writes a few blocks in layout and returns, by block key and location id,
// whether each location is garbage by upstream's rules, and the files each names that exist.
type upLoc struct {
	garbage bool
	files   []string
}

func upstreamFixture(t *testing.T, ctx context.Context, e *env, dir string) map[UpstreamRef]upLoc {
	t.Helper()
	now := time.Now()
	old, young := now.Add(-30*time.Hour).UnixMicro(), now.Add(-time.Hour).UnixMicro()
	file := func(name string, exists bool) (string, string) {
		p := filepath.Join(dir, name)
		if exists {
			require.NoError(t, os.WriteFile(p, []byte("data"), 0o644))
		}
		return fmt.Sprintf(`{"name":"tp0","uri":"file://nfs_01%s?size=4"}`, p), p
	}
	want := map[UpstreamRef]upLoc{}
	put := func(key string, lru int64, locs []locJSON, garbage []bool, files [][]string) {
		require.NoError(t, e.writeBlock(ctx, key, lru, locs))
		for i, l := range locs {
			want[UpstreamRef{Key: key, ID: l.id}] = upLoc{garbage: garbage[i], files: files[i]}
		}
	}
	wr := func(id string, ct int64, specs ...string) locJSON {
		return locJSON{id: id, status: kvcm.StatusWriting, typ: kvcm.TypeFile, createTime: ct, specs: specs}
	}
	sv := func(id string, typ kvcm.StorageType, specs ...string) locJSON {
		return locJSON{id: id, status: kvcm.StatusServing, typ: typ, createTime: young, specs: specs}
	}
	lru := now.Add(-48 * time.Hour).UnixMicro()
	k := func(n int) string { return kvcm.BlockKey("inst0", int64(n)) }

	s1, f1 := file("orphan", true)
	s2a, f2a := file("missing-a", true)
	s2b, _ := file("missing-b", false)
	s3, f3 := file("live", true)
	if e.layout == kvcm.LayoutLocation {
		// An old orphan, alone: its key goes with it (KVCM's empty-key recycle).
		put(k(1), 0, []locJSON{wr("orph0001", old, s1)}, []bool{true}, [][]string{{f1}})
	}
	// Storage-missing beside a live location: the present file goes, the missing one is skipped.
	put(k(2), lru, []locJSON{sv("miss0001", kvcm.TypeFile, s2a, s2b), sv("live0001", kvcm.TypeFile, s3)},
		[]bool{true, false}, [][]string{{f2a}, {f3}})
	// Nothing upstream touches: young WRITING, WRITING of no or a future time, DELETING, a
	// SERVING of a type whose storage has no files, of a type not its storage's, of an
	// EventReport type.
	s4, f4 := file("kept-a", false)
	put(k(3), lru, []locJSON{
		wr("young001", young), wr("zero0001", 0), wr("futur001", now.Add(time.Hour).UnixMicro()),
		{id: "dele0001", status: kvcm.StatusDeleting, typ: kvcm.TypeFile, createTime: old},
		sv("dumm0001", kvcm.TypeDummy, s4), sv("ssd00001", kvcm.TypePaceSSD, s4), sv("kvs#event_report_l1p5#hbm#10.0.0.8:9000", kvcm.TypeEventReportL1P5, s4),
	}, []bool{false, false, false, false, false, false, false}, [][]string{nil, nil, nil, nil, nil, nil, nil})
	_ = f4
	if e.layout == kvcm.LayoutLocation {
		// A guarded copy target and the source it names: both kept. An orphan with an
		// EventReport-form id goes all the same (upstream's rule reads create_time only).
		guard := `,"migration_copy_guard":{"schema_version":1,"state":2,"operation_id":"op","source_location_id":"src00001"}`
		s5, f5 := file("guarded", true)
		s6, _ := file("source", false)
		tgt := wr("dst00001", old, s5).bytes(e.layout)
		tgt = tgt[:len(tgt)-1] + guard + "}"
		require.NoError(t, e.redis.Client().HSet(ctx, k(4), kvcm.FieldPrevKey, "",
			kvcm.LocationField("dst00001"), tgt, kvcm.LocationField("src00001"), sv("src00001", kvcm.TypeFile, s6).bytes(e.layout)).Err())
		want[UpstreamRef{Key: k(4), ID: "dst00001"}] = upLoc{files: []string{f5}}
		want[UpstreamRef{Key: k(4), ID: "src00001"}] = upLoc{}
		s7, f7 := file("orphan-hash-id", true)
		put(k(5), 0, []locJSON{wr("kvs#event_report_l2#mem#h:1|x y", old, s7), sv("live0002", kvcm.TypeFile, s3)},
			[]bool{true, false}, [][]string{{f7}, {f3}})
		// A key with a location that does not decode: KVCM's whole-key read fails, nothing goes.
		s8, f8 := file("corrupt-key", true)
		require.NoError(t, e.writeBlock(ctx, k(6), 0, []locJSON{wr("orph0002", old, s8)}))
		require.NoError(t, e.redis.Client().HSet(ctx, k(6), kvcm.LocationField("bad00001"), `{"id":`).Err())
		want[UpstreamRef{Key: k(6), ID: "orph0002"}] = upLoc{files: []string{f8}}
	}
	return want
}

func upstreamEnv(t *testing.T, layout kvcm.Layout) (*env, string) {
	r := testenv.StartRedis(t)
	return &env{redis: r.Redis, layout: layout}, t.TempDir()
}

// TestUpstreamGC: the emulator takes what upstream's rules call garbage, in its order and
// steps, and nothing else; its files go, the confirmed-missing ones are not deleted again.
// Alone on the keyspace, its two ways of writing remove the same locations.
func TestUpstreamGC(t *testing.T) {
	for _, tc := range []struct {
		layout kvcm.Layout
		writes UpstreamWrites
	}{{kvcm.LayoutLocation, WritesAtomic}, {kvcm.LayoutLegacy, WritesAtomic}, {kvcm.LayoutLocation, WritesKVCM}, {kvcm.LayoutLegacy, WritesKVCM}} {
		layout := tc.layout
		t.Run(fmt.Sprintf("%s/writes=%d", layout, tc.writes), func(t *testing.T) {
			ctx := context.Background()
			e, dir := upstreamEnv(t, layout)
			want := upstreamFixture(t, ctx, e, dir)
			before, err := TakeSnapshot(ctx, e.redis.Client(), "*")
			require.NoError(t, err)
			u, err := NewUpstreamGC(UpstreamConfig{Store: e.redis.Client(), Layout: layout, Instances: []string{"inst0"},
				Storages:     map[string]UpstreamStorage{"nfs_01": {Type: kvcm.TypeFile, Files: true}, "ssd_01": {Type: kvcm.TypePaceSSD}},
				ScanInterval: time.Millisecond, ScanBatch: 2, Writes: tc.writes})
			require.NoError(t, err)
			require.NoError(t, u.RunRounds(ctx, 2))
			require.NoError(t, u.Err())
			after, err := TakeSnapshot(ctx, e.redis.Client(), "*")
			require.NoError(t, err)
			removed := u.Removed()
			garbage := 0
			for ref, l := range want {
				_, there := locationIn(after[ref.Key].Fields, e.fieldOf(ref.ID), ref.ID)
				if l.garbage {
					garbage++
					require.False(t, there, "%v is garbage", ref)
					require.Equal(t, 1, removed[ref], "%v removed once", ref)
				} else {
					require.True(t, there, "%v is live", ref)
					require.Zero(t, removed[ref], ref)
					was, _ := locationIn(before[ref.Key].Fields, e.fieldOf(ref.ID), ref.ID)
					now, _ := locationIn(after[ref.Key].Fields, e.fieldOf(ref.ID), ref.ID)
					if layout == kvcm.LayoutLegacy && tc.writes == WritesKVCM {
						// f6aa2b2 re-encodes the whole map it writes: a live location beside a
						// target keeps its meaning, not its bytes (create_time dropped).
						require.Equal(t, string(legacyForm(was)), string(legacyForm(now)), "%v unchanged", ref)
					} else {
						require.Equal(t, string(was.Raw), string(now.Raw), "%v unchanged", ref)
					}
				}
				for _, f := range l.files {
					_, err := os.Lstat(f)
					require.Equal(t, !l.garbage, err == nil, "file %s of %v", f, ref)
				}
			}
			st := u.Stats()
			require.Equal(t, garbage, st.Removed)
			require.Equal(t, 1, st.SkippedMissing, "the missing spec is not deleted again")
			require.Zero(t, st.UnlinkErrors)
			require.Zero(t, st.UnlinkAbsent)
			if layout == kvcm.LayoutLocation {
				_, ok := after[kvcm.BlockKey("inst0", 1)]
				require.False(t, ok, "a key left without a location is DEL'd")
				require.Equal(t, 1, st.KeysRecycled)
				// The two old orphans (the corrupt key's is never judged) are judged in the first
				// round, and again in the second only while the first round's request for them is
				// still in flight: a round does not wait for the requests it submitted.
				n := st.Candidates[upstreamOrphanWriting]
				require.True(t, n >= 2 && n <= 4, "orphans judged %d times: 2 in the first round, at most 2 more", n)
			} else {
				require.True(t, u.Touched()[kvcm.BlockKey("inst0", 2)], "its __lru_time__ rewritten")
				require.NotEqual(t, before[kvcm.BlockKey("inst0", 2)].Fields[kvcm.FieldLRUTime], after[kvcm.BlockKey("inst0", 2)].Fields[kvcm.FieldLRUTime])
			}
		})
	}
}

// legacyForm is a location as KVCM f6aa2b2 writes it.
func legacyForm(l *kvcm.Location) []byte {
	return kvcm.ReencodeLegacyBlock(&kvcm.Block{Locations: []kvcm.Location{*l}})
}

// TestUpstreamGCRace: two collectors of upstream's protocol over the same garbage: each
// location goes exactly once, the loser of every race counts a no-op, and a file the other
// already deleted is "not found", a success.
func TestUpstreamGCRace(t *testing.T) {
	ctx := context.Background()
	e, dir := upstreamEnv(t, kvcm.LayoutLocation)
	old := time.Now().Add(-30 * time.Hour).UnixMicro()
	var refs []UpstreamRef
	var files []string
	for i := range 200 {
		p := filepath.Join(dir, "f"+strconv.Itoa(i))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		id := fmt.Sprintf("o%07d", i)
		key := kvcm.BlockKey("inst0", int64(i))
		spec := fmt.Sprintf(`{"name":"tp0","uri":"file://nfs_01%s?size=1"}`, p)
		require.NoError(t, e.writeBlock(ctx, key, 0, []locJSON{{id: id, status: kvcm.StatusWriting, typ: kvcm.TypeFile, createTime: old, specs: []string{spec}}}))
		refs, files = append(refs, UpstreamRef{Key: key, ID: id}), append(files, p)
	}
	var gcs []*UpstreamGC
	var wg sync.WaitGroup
	for range 2 {
		u, err := NewUpstreamGC(UpstreamConfig{Store: e.redis.Client(), Layout: kvcm.LayoutLocation, Instances: []string{"inst0"},
			Storages: map[string]UpstreamStorage{"nfs_01": {Type: kvcm.TypeFile, Files: true}}, ScanInterval: time.Millisecond, ScanBatch: 16})
		require.NoError(t, err)
		gcs = append(gcs, u)
		wg.Add(1)
		go func() { defer wg.Done(); require.NoError(t, u.RunRounds(ctx, 2)) }()
	}
	wg.Wait()
	total := UpstreamStats{}
	for _, u := range gcs {
		require.NoError(t, u.Err())
		s := u.Stats()
		total.Removed += s.Removed
		total.Unlinked += s.Unlinked
		total.UnlinkAbsent += s.UnlinkAbsent
		total.UnlinkErrors += s.UnlinkErrors
	}
	for _, r := range refs {
		n := 0
		for _, u := range gcs {
			n += u.Removed()[r]
		}
		require.Equal(t, 1, n, "%v removed exactly once", r)
	}
	require.Equal(t, len(refs), total.Removed)
	require.Equal(t, len(files), total.Unlinked)
	require.Zero(t, total.UnlinkErrors)
	for _, f := range files {
		_, err := os.Lstat(f)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	n, err := e.redis.Client().DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n, "every key recycled")
}

func TestUpstreamConfig(t *testing.T) {
	r := testenv.StartRedis(t)
	_, err := NewUpstreamGC(UpstreamConfig{Store: r.Client(), Layout: kvcm.LayoutLocation, OrphanGrace: time.Minute})
	require.ErrorContains(t, err, "below KVCM's minimum")
	_, err = NewUpstreamGC(UpstreamConfig{Store: r.Client(), Layout: kvcm.LayoutAmbiguous})
	require.Error(t, err)
	_, err = NewUpstreamGC(UpstreamConfig{Layout: kvcm.LayoutLocation})
	require.Error(t, err)
	u, err := NewUpstreamGC(UpstreamConfig{Store: r.Client(), Layout: kvcm.LayoutLegacy})
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, u.cfg.ScanInterval)
	require.Equal(t, 256, u.cfg.ScanBatch)
	require.Equal(t, 64, u.cfg.MaxInflight)
	require.Equal(t, 24*time.Hour, u.cfg.OrphanGrace)
	require.Equal(t, 5*time.Minute, u.cfg.RoundPause)
}

// lostAnswers is a go-redis hook that lets a transaction run in Redis and then answers its
// caller with an error, as a timeout after the EXEC went out does.
type lostAnswers struct{ lost int }

func (h *lostAnswers) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lostAnswers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *lostAnswers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "hset" && err == nil {
				h.lost++
				return errors.New("i/o timeout (the answer lost)")
			}
		}
		return err
	}
}

// TestUpstreamGCAnswerLost: a legacy block whose CAS was made though its answer was lost is
// Touched all the same: the __lru_time__ Redis holds is the emulator's, which the soak's model
// accepts only from a Touched key.
func TestUpstreamGCAnswerLost(t *testing.T) {
	ctx := context.Background()
	e, dir := upstreamEnv(t, kvcm.LayoutLegacy)
	upstreamFixture(t, ctx, e, dir)
	key := kvcm.BlockKey("inst0", 2)
	before, err := e.redis.Client().HGet(ctx, key, kvcm.FieldLRUTime).Result()
	require.NoError(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &lostAnswers{}
	rdb.AddHook(hook)
	u, err := NewUpstreamGC(UpstreamConfig{Store: rdb, Layout: kvcm.LayoutLegacy, Instances: []string{"inst0"},
		Storages:     map[string]UpstreamStorage{"nfs_01": {Type: kvcm.TypeFile, Files: true}},
		ScanInterval: time.Millisecond, ScanBatch: 2})
	require.NoError(t, err)
	require.NoError(t, u.RunRounds(ctx, 1))
	require.Positive(t, hook.lost, "a write's answer was lost")
	after, err := e.redis.Client().HGet(ctx, key, kvcm.FieldLRUTime).Result()
	require.NoError(t, err)
	require.NotEqual(t, before, after, "Redis made the write whose answer was lost")
	require.True(t, u.Touched()[key], "the rewrite is the emulator's")
	require.Zero(t, u.Stats().Removed, "no answer, no removal counted")
}

// interfere is a go-redis hook on the emulator's connection that runs another process's
// write, once per key and kind of blind write, just before the emulator's write goes out:
// what lands in KVCM's window between a read and its write.
type interfere struct {
	mu     sync.Mutex
	other  *redis.Client
	before map[string]func(ctx context.Context, other *redis.Client) // "<cmd> <key>" → what lands first
	done   map[string]bool
	sent   map[string][]any // the args of the emulator's writes, by "<cmd> <key>"
}

func (h *interfere) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *interfere) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *interfere) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			args := c.Args()
			if len(args) < 2 || c.Name() != "hset" && c.Name() != "hdel" && c.Name() != "del" {
				continue
			}
			what := c.Name() + " " + fmt.Sprint(args[1])
			h.mu.Lock()
			h.sent[what] = args
			f := h.before[what]
			run := f != nil && !h.done[what]
			h.done[what] = true
			h.mu.Unlock()
			if run {
				f(ctx, h.other)
			}
		}
		return next(ctx, cmds)
	}
}

// TestUpstreamGCBlindWrites: KVCM's writes as KVCM makes them. A location another process
// removes between the emulator's read and its status write comes back (DELETING, in KVCM's
// re-serialization: unknown members dropped), a key another process deleted comes back with
// that one field, and a CAD whose HDEL finds the location gone subtracts its bytes all the
// same. KVCM's counters follow, and are persisted.
func TestUpstreamGCBlindWrites(t *testing.T) {
	ctx := context.Background()
	e, _ := upstreamEnv(t, kvcm.LayoutLocation)
	rdb := e.redis.Client()
	old := time.Now().Add(-30 * time.Hour).UnixMicro()
	spec := func(n int) string { return fmt.Sprintf(`{"name":"tp0","uri":"file://nfs_01/kv/%d?size=%d"}`, n, n) }
	k := func(n int) string { return kvcm.BlockKey("inst0", int64(n)) }
	// A location written by a KVCM with a checksum member, its members in another order.
	orph1 := fmt.Sprintf(`{"status":2,"id":"orph0001","type":4,"spec_size":1,"create_time":%d,"checksum":77,"location_specs":[%s]}`, old, spec(100))
	require.NoError(t, rdb.HSet(ctx, k(1), kvcm.FieldPrevKey, "", kvcm.LocationField("orph0001"), orph1,
		kvcm.LocationField("live0001"), locJSON{id: "live0001", status: kvcm.StatusServing, typ: kvcm.TypeFile, createTime: old, specs: []string{spec(7)}}.bytes(e.layout)).Err())
	require.NoError(t, e.writeBlock(ctx, k(2), 0, []locJSON{{id: "orph0002", status: kvcm.StatusWriting, typ: kvcm.TypeFile, createTime: old, specs: []string{spec(50)}}}))
	require.NoError(t, e.writeBlock(ctx, k(3), 0, []locJSON{{id: "orph0003", status: kvcm.StatusWriting, typ: kvcm.TypeFile, createTime: old, specs: []string{spec(30)}}}))
	require.NoError(t, rdb.HSet(ctx, kvcm.MetadataKey("inst0"), kvcm.FieldKeyCount, "3",
		kvcm.FieldStorageUsage, string(kvcm.FormatStorageUsage(kvcm.UsageMembersCurrent, map[kvcm.StorageType]uint64{kvcm.TypeFile: 187}))).Err())

	c := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := &interfere{other: rdb, done: map[string]bool{}, sent: map[string][]any{}, before: map[string]func(context.Context, *redis.Client){
		// kvcm-gc's CAD of orph0001 lands in the window of KVCM's CAS …
		"hset " + k(1): func(ctx context.Context, o *redis.Client) {
			require.NoError(t, o.HDel(ctx, k(1), kvcm.LocationField("orph0001")).Err())
		},
		// … a DEL of k(2) (empty_block: delete) in another …
		"hset " + k(2): func(ctx context.Context, o *redis.Client) { require.NoError(t, o.Del(ctx, k(2)).Err()) },
		// … and kvcm-gc's CAD of orph0003 in the window of KVCM's CAD.
		"hdel " + k(3): func(ctx context.Context, o *redis.Client) {
			require.NoError(t, o.HDel(ctx, k(3), kvcm.LocationField("orph0003")).Err())
		},
	}}
	c.AddHook(h)
	u, err := NewUpstreamGC(UpstreamConfig{Store: c, Layout: kvcm.LayoutLocation, Instances: []string{"inst0"},
		Storages:     map[string]UpstreamStorage{"nfs_01": {Type: kvcm.TypeFile}}, // KVCM's NFS: exists, no-op delete
		ScanInterval: time.Millisecond, ScanBatch: 16, Writes: WritesKVCM, Counters: true, PersistInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, u.RunRounds(ctx, 1))
	require.NoError(t, u.Err())

	ref := func(n int) UpstreamRef { return UpstreamRef{Key: k(n), ID: fmt.Sprintf("orph%04d", n)} }
	// The CAS wrote KVCM's re-serialization: the checksum is gone, the members in KVCM's order.
	want, err := kvcm.DecodeLocation("orph0001", []byte(orph1))
	require.NoError(t, err)
	want.Status = kvcm.StatusDeleting
	written := string(h.sent["hset "+k(1)][3].([]byte))
	require.Equal(t, string(kvcm.ReencodeLocation(&want)), written)
	require.NotContains(t, written, "checksum")

	require.Equal(t, map[UpstreamRef]int{ref(1): 1, ref(2): 1}, u.Resurrected(), "the status writes brought both back")
	require.Equal(t, map[UpstreamRef]int{ref(1): 1, ref(2): 1}, u.Removed(), "and its CADs removed them; orph0003 was gone already")
	st := u.Stats()
	require.Equal(t, 2, st.Resurrected)
	require.Equal(t, 1, st.Recreated)
	require.Equal(t, 3, st.CAS)

	after, err := TakeSnapshot(ctx, rdb, "*")
	require.NoError(t, err)
	require.Equal(t, []string{kvcm.FieldPrevKey, kvcm.LocationField("live0001")}, slices.Sorted(maps.Keys(after[k(1)].Fields)))
	require.NotContains(t, after, k(2), "recycled")
	require.NotContains(t, after, k(3), "recycled, though kvcm-gc's HDEL emptied it first")

	cs := u.Counters()["inst0"]
	require.Equal(t, int64(1), cs.Keys, "3 keys, 2 recycled")
	require.Equal(t, int64(1), cs.Recreated)
	require.Equal(t, int64(0), cs.RecycledGone, "k(2)'s last field went with the CAD's own HDEL: no surprise")
	require.Equal(t, uint64(7), cs.Usage[kvcm.TypeFile], "100, 50 and 30 subtracted")
	require.Equal(t, map[kvcm.StorageType]uint64{kvcm.TypeFile: 30}, cs.OverSubtracted, "orph0003's bytes, which kvcm-gc had removed")
	// Persisted as PersistMetaData writes them, matching the recount of what Redis holds.
	m := after[kvcm.MetadataKey("inst0")].Fields
	require.Equal(t, "1", m[kvcm.FieldKeyCount])
	require.Equal(t, string(kvcm.FormatStorageUsage(kvcm.UsageMembersCurrent, map[kvcm.StorageType]uint64{kvcm.TypeFile: 7})), m[kvcm.FieldStorageUsage])
	require.Positive(t, st.Persists)
}

// TestUpstreamGCBlindWritesLegacy: f6aa2b2 rewrites the whole map it read: a location another
// process removed from it in the window comes back with the rest.
func TestUpstreamGCBlindWritesLegacy(t *testing.T) {
	ctx := context.Background()
	e, dir := upstreamEnv(t, kvcm.LayoutLegacy)
	rdb := e.redis.Client()
	spec := func(name string) string {
		return fmt.Sprintf(`{"name":"tp0","uri":"file://nfs_01%s?size=9"}`, filepath.Join(dir, name)) // no file: missing
	}
	key := kvcm.BlockKey("inst0", 1)
	lru := time.Now().Add(-48 * time.Hour).UnixMicro()
	a := locJSON{id: "miss000a", status: kvcm.StatusServing, typ: kvcm.TypeFile, createTime: -1, specs: []string{spec("a")}}
	b := locJSON{id: "miss000b", status: kvcm.StatusServing, typ: kvcm.TypeFile, createTime: -1, specs: []string{spec("b")}}
	require.NoError(t, e.writeBlock(ctx, key, lru, []locJSON{a, b}))
	require.NoError(t, rdb.HSet(ctx, kvcm.MetadataKey("inst0"), kvcm.FieldKeyCount, "1").Err())
	c := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := &interfere{other: rdb, done: map[string]bool{}, sent: map[string][]any{}, before: map[string]func(context.Context, *redis.Client){
		// kvcm-gc removes b (its CAD writes the map without it) in the window of KVCM's CAS.
		"hset " + key: func(ctx context.Context, o *redis.Client) {
			require.NoError(t, o.HSet(ctx, key, kvcm.FieldURI, `{"miss000a":`+a.bytes(kvcm.LayoutLegacy)+`}`).Err())
		},
	}}
	c.AddHook(h)
	u, err := NewUpstreamGC(UpstreamConfig{Store: c, Layout: kvcm.LayoutLegacy, Instances: []string{"inst0"},
		Storages:     map[string]UpstreamStorage{"nfs_01": {Type: kvcm.TypeFile, Files: true}},
		ScanInterval: time.Millisecond, ScanBatch: 16, Writes: WritesKVCM, Counters: true, PersistInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, u.RunRounds(ctx, 1))
	require.NoError(t, u.Err())
	require.Equal(t, map[UpstreamRef]int{{Key: key, ID: "miss000b"}: 1}, u.Resurrected())
	require.Equal(t, map[UpstreamRef]int{{Key: key, ID: "miss000a"}: 1, {Key: key, ID: "miss000b"}: 1}, u.Removed())
	n, err := rdb.Exists(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "f6aa2b2 DELs a key whose map it empties")
	require.Equal(t, int64(0), u.Counters()["inst0"].Keys)
	m, err := rdb.HGetAll(ctx, kvcm.MetadataKey("inst0")).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{kvcm.FieldKeyCount: "0"}, m, "f6aa2b2 persists its key count only")
}
