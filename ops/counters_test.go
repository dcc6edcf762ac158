package ops_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// countersEnv is an instance's keyspace in a real redis-server, as KVCM left it when its
// every replica stopped: blocks, and the metadata hash KVCM persisted for them.
type countersEnv struct {
	rdb    *redis.Client
	store  *redismeta.Store
	locks  []string
	events []subjects.Event
	pub    func(context.Context, subjects.Event) error
}

const (
	inst      = "inst0"
	blocks    = 40
	fileBytes = 4096 // each block: one file location of 4096 bytes …
	poolBytes = 1000 // … and one pace location of 1000
)

func location(id string, status kvcm.Status, typ kvcm.StorageType, uri string) string {
	return fmt.Sprintf(`{"id":%q,"status":%d,"type":%d,"spec_size":1,"create_time":1700000000000000,"location_specs":[{"name":"tp0","uri":%q}]}`,
		id, status, typ, uri)
}

func newCountersEnv(t *testing.T, usage string) *countersEnv {
	ctx := t.Context()
	srv := testenv.StartRedis(t)
	c, err := redismeta.ParseURI(srv.URI())
	require.NoError(t, err)
	st, err := redismeta.OpenStore(ctx, c, redismeta.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e := &countersEnv{rdb: srv.Client(), store: st, locks: kvcm.LeaderLockKeys("c1")}
	for b := range blocks {
		require.NoError(t, e.rdb.HSet(ctx, kvcm.BlockKey(inst, int64(b)), kvcm.FieldPrevKey, "",
			kvcm.LocationField(fmt.Sprintf("f%07d", b)), location(fmt.Sprintf("f%07d", b), kvcm.StatusServing, kvcm.TypeFile,
				fmt.Sprintf("file://nfs_01/kv/inst0/tp0/%x?size=%d", b, fileBytes)),
			kvcm.LocationField(fmt.Sprintf("p%07d", b)), location(fmt.Sprintf("p%07d", b), kvcm.StatusWriting, kvcm.TypePace,
				fmt.Sprintf("pace://pace_01/1?size=%d", poolBytes))).Err())
	}
	// Another instance's keys, which the recount must not count.
	require.NoError(t, e.rdb.HSet(ctx, kvcm.BlockKey("inst01", 1), kvcm.FieldPrevKey, "",
		kvcm.LocationField("x0000001"), location("x0000001", kvcm.StatusServing, kvcm.TypeFile, "file://nfs_01/x?size=7")).Err())
	require.NoError(t, e.rdb.HSet(ctx, kvcm.MetadataKey(inst), kvcm.FieldKeyCount, strconv.Itoa(blocks), kvcm.FieldStorageUsage, usage, "unrelated", "kept").Err())
	e.pub = func(_ context.Context, ev subjects.Event) error {
		e.events = append(e.events, ev)
		return nil
	}
	return e
}

// kvcmUsage is the usage KVCM persists for the seeded blocks, with file and pace at the given
// bytes, in today's KVCM's form.
func kvcmUsage(file, pace uint64) string {
	return string(kvcm.FormatStorageUsage(kvcm.UsageMembersCurrent, map[kvcm.StorageType]uint64{kvcm.TypeFile: file, kvcm.TypePace: pace}))
}

// deleteThroughKVCMGC removes the file locations of the first n blocks with kvcm-gc's own
// writes (its CAS to DELETING, then its CAD), which KVCM's counters never see.
func (e *countersEnv) deleteThroughKVCMGC(t *testing.T, n int) {
	ctx := t.Context()
	var cas, cad []meta.CondWrite
	for b := range n {
		id := fmt.Sprintf("f%07d", b)
		cur := location(id, kvcm.StatusServing, kvcm.TypeFile, fmt.Sprintf("file://nfs_01/kv/inst0/tp0/%x?size=%d", b, fileBytes))
		next, err := kvcm.LocationWithStatus([]byte(cur), kvcm.StatusDeleting)
		require.NoError(t, err)
		cas = append(cas, meta.CondWrite{BlockKey: int64(b), Layout: kvcm.LayoutLocation, Location: id, Expected: []byte(cur), Next: next})
		cad = append(cad, meta.CondWrite{BlockKey: int64(b), Layout: kvcm.LayoutLocation, Location: id, Expected: next})
	}
	errs, err := e.store.CASMany(ctx, inst, cas)
	require.NoError(t, err)
	for _, err := range errs {
		require.NoError(t, err)
	}
	res, err := e.store.CADMany(ctx, inst, cad)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
}

func (e *countersEnv) cfg(apply bool) ops.CountersConfig {
	return ops.CountersConfig{Cluster: "c1", Instance: inst, LockKeys: e.locks, Apply: apply, Settle: 50 * time.Millisecond, ScanCount: 7}
}

func (e *countersEnv) deps() ops.CountersDeps {
	return ops.CountersDeps{Store: e.store, Publish: e.pub}
}

func (e *countersEnv) hash(t *testing.T) map[string]string {
	m, err := e.rdb.HGetAll(t.Context(), kvcm.MetadataKey(inst)).Result()
	require.NoError(t, err)
	return m
}

func row(t *testing.T, r *ops.CountersReport, counter string) ops.CounterRow {
	for _, x := range r.Rows {
		if x.Counter == counter {
			return x
		}
	}
	t.Fatalf("no row %q in %+v", counter, r.Rows)
	return ops.CounterRow{}
}

// TestRepairCountersDriftFromOwnDeletes: kvcm-gc deletes 15 file locations; KVCM's persisted
// usage still counts them. The repair shows the drift, writes nothing without --apply, and
// with it brings the persisted usage to the exact recount; an undo puts the old bytes back.
func TestRepairCountersDriftFromOwnDeletes(t *testing.T) {
	ctx := t.Context()
	e := newCountersEnv(t, kvcmUsage(blocks*fileBytes, blocks*poolBytes))
	const gone = 15
	e.deleteThroughKVCMGC(t, gone)
	before := e.hash(t)

	rep, err := ops.RepairCounters(ctx, e.cfg(false), e.deps())
	require.NoError(t, err)
	require.False(t, rep.Applied)
	require.Equal(t, before, e.hash(t), "without --apply nothing is written")
	file := row(t, rep, "file")
	require.Equal(t, uint64(blocks*fileBytes), *file.Persisted)
	require.Equal(t, uint64((blocks-gone)*fileBytes), *file.Recounted)
	require.Equal(t, int64(gone*fileBytes), *file.Drift, "the phantom bytes of kvcm-gc's deletes")
	require.True(t, file.Write)
	require.Equal(t, int64(0), *row(t, rep, "pace").Drift)
	require.Equal(t, int64(0), *row(t, rep, "keys").Drift, "empty_block keep: the keys stay, so KVCM's key count stays right")
	require.Empty(t, rep.Inexact)
	require.Empty(t, e.events)
	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table))
	t.Log("\n" + table.String())
	require.Regexp(t, `file +163840 +102400 +\+61440 +→ 102400`, table.String())
	require.Contains(t, table.String(), "not applied: 1 counters differ")

	rep, err = ops.RepairCounters(ctx, e.cfg(true), e.deps())
	require.NoError(t, err)
	require.True(t, rep.Applied)
	after := e.hash(t)
	require.Equal(t, kvcmUsage((blocks-gone)*fileBytes, blocks*poolBytes), after[kvcm.FieldStorageUsage])
	require.Equal(t, before[kvcm.FieldKeyCount], after[kvcm.FieldKeyCount])
	require.Equal(t, "kept", after["unrelated"])
	require.Len(t, e.events, 2)
	require.Equal(t, subjects.OutcomeCountersIntent, e.events[0].Outcome)
	applied := e.events[1]
	require.Equal(t, subjects.OutcomeCountersApplied, applied.Outcome)
	require.Equal(t, []subjects.MetadataField{{Key: kvcm.MetadataKey(inst), Field: kvcm.FieldStorageUsage,
		Old: subjects.RawText(before[kvcm.FieldStorageUsage]), New: subjects.RawText(after[kvcm.FieldStorageUsage])}}, applied.Metadata)

	// Again: nothing left to repair.
	rep, err = ops.RepairCounters(ctx, e.cfg(true), e.deps())
	require.NoError(t, err)
	require.False(t, rep.Applied)
	require.Len(t, e.events, 2)

	// The undo writes the old bytes back, only over what the repair wrote.
	_, err = ops.UndoCounters(ctx, e.cfg(true), e.deps(), applied)
	require.NoError(t, err)
	require.Equal(t, before, e.hash(t))
	require.Equal(t, "undo", e.events[len(e.events)-1].Reason)
	_, err = ops.UndoCounters(ctx, e.cfg(true), e.deps(), applied)
	require.ErrorIs(t, err, ops.ErrCountersChanged)
	require.Equal(t, before, e.hash(t))
}

// TestRepairCountersKeys: keys deleted behind KVCM's back (kvcm-gc's CAD with empty_block:
// delete, an outside DEL) stay in KVCM's key count, and their locations in its usage; the
// repair recounts both.
func TestRepairCountersKeys(t *testing.T) {
	ctx := t.Context()
	e := newCountersEnv(t, kvcmUsage(blocks*fileBytes, blocks*poolBytes))
	require.NoError(t, e.rdb.Del(ctx, kvcm.BlockKey(inst, 0), kvcm.BlockKey(inst, 1)).Err())
	rep, err := ops.RepairCounters(ctx, e.cfg(true), e.deps())
	require.NoError(t, err)
	require.True(t, rep.Applied)
	require.Equal(t, int64(2), *row(t, rep, "keys").Drift)
	h := e.hash(t)
	require.Equal(t, strconv.Itoa(blocks-2), h[kvcm.FieldKeyCount])
	require.Equal(t, kvcmUsage((blocks-2)*fileBytes, (blocks-2)*poolBytes), h[kvcm.FieldStorageUsage])
}

// TestRepairCountersHeldLockRefuses: while either form of KVCM's leader lock exists, the
// repair refuses before it reads anything, and writes nothing.
func TestRepairCountersHeldLockRefuses(t *testing.T) {
	ctx := t.Context()
	e := newCountersEnv(t, kvcmUsage(blocks*fileBytes, blocks*poolBytes))
	e.deleteThroughKVCMGC(t, 3)
	before := e.hash(t)
	for _, lock := range e.locks {
		require.NoError(t, e.rdb.Set(ctx, lock, "10.0.0.5:6382_k3j9x0cd", 10*time.Second).Err())
		_, err := ops.RepairCounters(ctx, e.cfg(true), e.deps())
		require.ErrorIs(t, err, meta.ErrLeaderLock)
		require.ErrorContains(t, err, "10.0.0.5:6382_k3j9x0cd")
		require.Equal(t, before, e.hash(t))
		require.Empty(t, e.events)
		require.NoError(t, e.rdb.Del(ctx, lock).Err())
	}
	// A lock on another Redis (the coordination URI's), checked before anything.
	other := testenv.StartRedis(t).Client()
	require.NoError(t, other.Set(ctx, e.locks[0], "node", 0).Err())
	deps := e.deps()
	deps.OtherLocks = []func(context.Context) error{func(ctx context.Context) error { return redismeta.LeaderLock(ctx, other, e.locks) }}
	_, err := ops.RepairCounters(ctx, e.cfg(true), deps)
	require.ErrorIs(t, err, meta.ErrLeaderLock)
	require.Equal(t, before, e.hash(t))
}

// lockDuringScan is the store with KVCM's leader starting while the recount walks: the lock
// is taken on another connection at the scan's first page.
type lockDuringScan struct {
	*redismeta.Store
	rdb  *redis.Client
	lock string
	done bool
}

func (s *lockDuringScan) ScanStore(ctx context.Context, cursor uint64, count int, owns func(string) bool) (meta.Page, error) {
	if !s.done {
		s.done = true
		if err := s.rdb.SetNX(ctx, s.lock, "new-leader", 10*time.Second).Err(); err != nil {
			return meta.Page{}, err
		}
	}
	return s.Store.ScanStore(ctx, cursor, count, owns)
}

// TestRepairCountersLockMidRunAborts: a lock that appears while the repair runs (at the
// recount, or while it settles) aborts it with nothing written, and says so in an event.
func TestRepairCountersLockMidRunAborts(t *testing.T) {
	ctx := t.Context()
	for _, lock := range kvcm.LeaderLockKeys("c1") {
		t.Run(lock, func(t *testing.T) {
			e := newCountersEnv(t, kvcmUsage(blocks*fileBytes, blocks*poolBytes))
			e.deleteThroughKVCMGC(t, 5)
			before := e.hash(t)
			deps := e.deps()
			deps.Store = &lockDuringScan{Store: e.store, rdb: e.rdb, lock: lock}
			rep, err := ops.RepairCounters(ctx, e.cfg(true), deps)
			require.ErrorIs(t, err, meta.ErrLeaderLock)
			require.False(t, rep.Applied)
			require.Equal(t, before, e.hash(t))
			require.Empty(t, e.events, "aborted before the intent")
		})
	}
	t.Run("the hash written after the intent", func(t *testing.T) {
		e := newCountersEnv(t, kvcmUsage(blocks*fileBytes, blocks*poolBytes))
		e.deleteThroughKVCMGC(t, 5)
		deps := e.deps()
		// A stopping leader's last persist lands after the intent was recorded.
		deps.Publish = func(ctx context.Context, ev subjects.Event) error {
			if ev.Outcome == subjects.OutcomeCountersIntent {
				require.NoError(t, e.rdb.Del(ctx, kvcm.MetadataKey(inst)).Err())
				require.NoError(t, e.rdb.HSet(ctx, kvcm.MetadataKey(inst), kvcm.FieldKeyCount, "41", kvcm.FieldStorageUsage, kvcmUsage(1, 2)).Err())
			}
			return e.pub(ctx, ev)
		}
		rep, err := ops.RepairCounters(ctx, e.cfg(true), deps)
		require.ErrorIs(t, err, meta.ErrConflict)
		require.False(t, rep.Applied)
		require.Equal(t, map[string]string{kvcm.FieldKeyCount: "41", kvcm.FieldStorageUsage: kvcmUsage(1, 2)}, e.hash(t))
		require.Len(t, e.events, 2)
		require.Equal(t, subjects.OutcomeCountersAborted, e.events[1].Outcome)
	})
}

// TestRepairCountersUnknownMembersSurvive: members the repair does not rewrite — a name
// kvcm-gc does not know, a version's member beside today's — keep their bytes, and so do
// the member order and the spacing.
func TestRepairCountersUnknownMembersSurvive(t *testing.T) {
	ctx := t.Context()
	usage := fmt.Sprintf(`{"unknown":0, "hf3fs":0,"mooncake":0,"pace":%d,"file":%d,"future_tier":7,"vcns_hf3fs":0,"dummy":0,"vineyard":0,"pace_ssd":12}`,
		blocks*poolBytes, blocks*fileBytes)
	e := newCountersEnv(t, usage)
	e.deleteThroughKVCMGC(t, 10)
	rep, err := ops.RepairCounters(ctx, e.cfg(true), e.deps())
	require.NoError(t, err)
	require.True(t, rep.Applied)
	want := strings.Replace(usage, fmt.Sprintf(`"file":%d`, blocks*fileBytes), fmt.Sprintf(`"file":%d`, (blocks-10)*fileBytes), 1)
	want = strings.Replace(want, `"pace_ssd":12`, `"pace_ssd":0`, 1)
	require.Equal(t, want, e.hash(t)[kvcm.FieldStorageUsage])
	require.Contains(t, e.hash(t)[kvcm.FieldStorageUsage], `"future_tier":7`)
	require.NotEmpty(t, rep.Warnings)
}

// TestRepairCountersRefusals: what a repair will not write over.
func TestRepairCountersRefusals(t *testing.T) {
	ctx := t.Context()
	t.Run("an unreadable hash", func(t *testing.T) {
		e := newCountersEnv(t, `{"file":1.5}`)
		before := e.hash(t)
		rep, err := ops.RepairCounters(ctx, e.cfg(true), e.deps())
		require.ErrorIs(t, err, ops.ErrCountersUnreadable)
		require.NotEmpty(t, rep.Problems)
		require.Equal(t, before, e.hash(t))
	})
	t.Run("an inexact recount", func(t *testing.T) {
		e := newCountersEnv(t, kvcmUsage(1, 1))
		// A URI KVCM's two parsers read differently (a query before any path).
		require.NoError(t, e.rdb.HSet(ctx, kvcm.BlockKey(inst, 900), kvcm.LocationField("q0000001"),
			location("q0000001", kvcm.StatusServing, kvcm.TypeFile, "file://nfs_01?x=/y&size=9")).Err())
		before := e.hash(t)
		rep, err := ops.RepairCounters(ctx, e.cfg(true), e.deps())
		require.ErrorIs(t, err, ops.ErrCountersInexact)
		require.NotEmpty(t, rep.Inexact)
		require.Equal(t, before, e.hash(t))
		cfg := e.cfg(true)
		cfg.AllowInexact = true
		rep, err = ops.RepairCounters(ctx, cfg, e.deps())
		require.NoError(t, err)
		require.True(t, rep.Applied)
	})
	t.Run("no hash: nothing to repair", func(t *testing.T) {
		e := newCountersEnv(t, kvcmUsage(1, 1))
		require.NoError(t, e.rdb.Del(ctx, kvcm.MetadataKey(inst)).Err())
		rep, err := ops.RepairCounters(ctx, e.cfg(true), e.deps())
		require.NoError(t, err)
		require.False(t, rep.Applied)
		require.False(t, rep.Exists)
		n, err := e.rdb.Exists(ctx, kvcm.MetadataKey(inst)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "a repair creates nothing")
	})
}

// TestCountersEventsInJetStream: the events of a repair are stored in EVENTS, listed by
// CountersLog, and an undo reads the applied one back by its sequence.
func TestCountersEventsInJetStream(t *testing.T) {
	ctx := t.Context()
	js := testenv.StartNATS(t).JetStream(t)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	require.NoError(t, subjects.Ensure(ctx, js, names, subjects.DefaultSettings()))
	e := newCountersEnv(t, kvcmUsage(blocks*fileBytes, blocks*poolBytes))
	e.deleteThroughKVCMGC(t, 4)
	before := e.hash(t)
	deps := e.deps()
	deps.Publish = ops.CountersPublisher(js, names)
	_, err = ops.RepairCounters(ctx, e.cfg(true), deps)
	require.NoError(t, err)
	log, err := ops.CountersLog(ctx, js, names, inst, time.Time{})
	require.NoError(t, err)
	require.Len(t, log, 2)
	require.Equal(t, subjects.OutcomeCountersApplied, log[1].Event.Outcome)
	ev, err := ops.CountersEventAt(ctx, js, names, log[1].Seq)
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, ops.WriteCountersLog(&out, log))
	require.Contains(t, out.String(), "applied")
	_, err = ops.UndoCounters(ctx, e.cfg(true), deps, ev)
	require.NoError(t, err)
	require.Equal(t, before, e.hash(t))
	log, err = ops.CountersLog(ctx, js, names, "", time.Time{})
	require.NoError(t, err)
	require.Len(t, log, 4)
}
