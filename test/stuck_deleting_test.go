package test

// Stuck DELETING (collect_deleting, DESIGN §5.3) end to end, in both layouts: KVCM crashed
// between its CAS to DELETING and its CAD, and nothing retries the delete. deleting_grace is
// at least an hour, so nothing here waits it out: the legacy layout's DELETING are made old
// by their block's __lru_time__ (KVCM's CAS rewrote it), and the location layout's, where
// only kvcm-gc's own first sight tells the age, by moving that first sight back in the
// OBSERVED bucket.

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// stuckBlock is one block of a DELETING location on KVCM's per-block file name.
type stuckBlock struct {
	key  int64
	id   string
	json string
	file string
}

// stuckEnv seeds the registry in layout and one DELETING location per id, each alone in its
// block with its per-block file; lru gives each legacy block's __lru_time__.
func stuckEnv(t *testing.T, layout kvcm.Layout, lru map[string]time.Time, ids ...string) (*env, app.Options, map[string]stuckBlock) {
	t.Helper()
	e := newEnv(t)
	ctx := context.Background()
	rdb := e.redis.Client()
	_, err := seed.Generate(ctx, rdb, seed.Spec{Cluster: cluster, Layout: layout, Instances: []string{"inst1"}, Blocks: 0, Root: e.root, MetaURI: e.redis.URI()})
	require.NoError(t, err)
	o := e.options(prometheus.NewRegistry())
	o.Prober.CollectDeleting, o.Prober.DeletingGrace = true, seed.StuckGrace
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	nfs := filepath.Join(e.root, "nfs") + "/"
	out := map[string]stuckBlock{}
	for i, id := range ids {
		key := int64(9_700_000_000 + i)
		f := writeFile(t, perBlockPath(nfs, "inst1", "tp0", key))
		b := stuckBlock{key: key, id: id, file: f,
			json: locJSON(layout, id, kvcm.StatusDeleting, kvcm.TypeFile, time.Now().Add(-72*time.Hour).UnixMicro(), fileSpec("tp0", f))}
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey("inst1", key), blockFields(layout, lru[id], id, b.json)...).Err())
		out[id] = b
	}
	return e, o, out
}

// stuckCandidates returns the stuck_deleting candidates of the events so far by location, with
// their round.
func stuckCandidates(e *env) map[string]uint64 {
	out := map[string]uint64{}
	for _, ev := range e.events() {
		if ev.Kind == subjects.EventCandidate && ev.Reason == subjects.ReasonStuckDeleting {
			out[ev.Location] = ev.Round
		}
	}
	return out
}

// requireStuckGone requires b's location gone with its per-block file, its key left as KVCM
// reads "exists, no location" (empty_block: keep).
func requireStuckGone(t *testing.T, e *env, layout kvcm.Layout, b stuckBlock, lru time.Time) {
	t.Helper()
	want := map[string]string{kvcm.FieldPrevKey: ""}
	if layout == kvcm.LayoutLegacy {
		want = map[string]string{kvcm.FieldURI: "{}", kvcm.FieldLRUTime: fmt.Sprint(lru.UnixMicro())}
	}
	require.Equal(t, want, e.redis.Client().HGetAll(context.Background(), kvcm.BlockKey("inst1", b.key)).Val(), b.id)
	require.NoFileExists(t, b.file, "%s: a per-block name cannot have been reused", b.id)
}

// requireStuckKept requires b as it was, with its file.
func requireStuckKept(t *testing.T, e *env, layout kvcm.Layout, b stuckBlock) {
	t.Helper()
	fields := e.redis.Client().HGetAll(context.Background(), kvcm.BlockKey("inst1", b.key)).Val()
	got, ok := locationOf(fields, fieldOf(layout, b.id), b.id)
	require.True(t, ok, "%s kept", b.id)
	require.Equal(t, b.json, string(got.Raw), b.id)
	require.FileExists(t, b.file, b.id)
}

// TestStuckDeleting, legacy layout: a DELETING whose block was last written (its CAS to
// DELETING) longer than deleting_grace ago is collected in the first round, with its
// per-block file; a younger one is kept.
func TestStuckDeletingLegacy(t *testing.T) {
	now := time.Now()
	lru := map[string]time.Time{"stuck000": now.Add(-seed.StuckAge), "young000": now.Add(-30 * time.Minute)}
	e, o, b := stuckEnv(t, kvcm.LayoutLegacy, lru, "stuck000", "young000")
	e.run(o, app.All)
	e.waitRoundDone(1, time.Minute)
	requireStuckGone(t, e, kvcm.LayoutLegacy, b["stuck000"], lru["stuck000"])
	requireStuckKept(t, e, kvcm.LayoutLegacy, b["young000"])
	require.Equal(t, map[string]uint64{"stuck000": 1}, stuckCandidates(e))
}

// TestStuckDeletingLocation, location layout: nothing in Redis tells how long a location has
// been DELETING, so the prober remembers its first sight, and never nominates a DELETING in
// the round it first saw it. Round 1: a DELETING seen for the first time, and one whose first
// sight in this same round is recorded as three hours old (a redelivery, a second prober),
// are both kept. Between the rounds the first sight of the one is moved three hours back;
// round 2 collects both, with their per-block files, and keeps a DELETING first seen in
// round 1 whose first sight is recent.
func TestStuckDeletingLocation(t *testing.T) {
	layout := kvcm.LayoutLocation
	e, o, b := stuckEnv(t, layout, nil, "firstr01", "samer001", "recent01")
	ctx := context.Background()
	now := time.Now()
	e.observeDeleting(t, "inst1", b["samer001"].key, "samer001", []byte(b["samer001"].json), now.Add(-seed.StuckAge), 1)
	before, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	o.Reg = reg
	stop := e.run(o, app.All)
	e.waitRoundDone(1, time.Minute)
	stop()
	after, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing nominated in the round of its first sight")
	require.Empty(t, stuckCandidates(e))
	require.GreaterOrEqual(t, metricLabeled(t, reg, "kvcm_gc_prober_skips_total", map[string]string{"reason": prober.SkipDeletingFirstSeen}), 3.0)
	for _, id := range []string{"firstr01", "recent01"} {
		first, _, ok := e.firstSight(t, "inst1", b[id].key, id)
		require.True(t, ok, "%s: first sight recorded", id)
		require.Equal(t, uint64(1), first.Round, id)
	}

	// As if round 1 had been three hours ago for firstr01.
	e.backdateFirstSight(t, "inst1", b["firstr01"].key, "firstr01", now.Add(-seed.StuckAge))
	e.skipRoundPause(t)
	o.Reg = prometheus.NewRegistry()
	e.run(o, app.All)
	e.waitRoundDone(2, time.Minute)
	requireStuckGone(t, e, layout, b["firstr01"], time.Time{})
	requireStuckGone(t, e, layout, b["samer001"], time.Time{})
	requireStuckKept(t, e, layout, b["recent01"])
	require.Equal(t, map[string]uint64{"firstr01": 2, "samer001": 2}, stuckCandidates(e))
}

// TestStuckDeletingDryRun: a dry run nominates stuck DELETING and records "would delete",
// and writes nothing, anywhere: Redis and the files stay as they were (invariant 8).
func TestStuckDeletingDryRun(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		old := time.Now().Add(-seed.StuckAge)
		e, o, b := stuckEnv(t, layout, map[string]time.Time{"stuck001": old, "stuck002": old}, "stuck001", "stuck002")
		ctx := context.Background()
		if layout == kvcm.LayoutLocation {
			for _, s := range b {
				e.observeDeleting(t, "inst1", s.key, s.id, []byte(s.json), old, 0)
			}
		}
		before, err := seed.Take(ctx, e.redis.Client(), "*")
		require.NoError(t, err)
		e.dryRound(t, o, before)
		would := map[string]string{}
		for _, ev := range e.events() {
			if ev.Kind == subjects.EventDelete {
				require.True(t, ev.DryRun)
				would[ev.Location] = ev.Reason + "/" + ev.Outcome
			}
		}
		want := "stuck_deleting/" + subjects.OutcomeWouldDelete
		require.Equal(t, map[string]string{"stuck001": want, "stuck002": want}, would)
		for _, s := range b {
			require.FileExists(t, s.file)
		}
	})
}

// executorStore lets KVCM act on the blocks between the deleter's first read of a stuck
// DELETING and its re-read before the unlink.
type executorStore struct {
	meta.Store
	reads int
	after func()
}

func (s *executorStore) ReadBlocks(ctx context.Context, inst string, keys []int64) ([]meta.BlockRead, error) {
	r, err := s.Store.ReadBlocks(ctx, inst, keys)
	if s.reads++; s.reads == 1 {
		s.after()
	}
	return r, err
}

// TestStuckDeletingChangedMeanwhile: a stuck DELETING that KVCM's FinishWriteCache flips to
// SERVING, or that KVCM's delete executor finishes, after the deleter read it, is a no-op:
// the block stays as KVCM left it and the per-block data is not unlinked.
func TestStuckDeletingChangedMeanwhile(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		old := time.Now().Add(-seed.StuckAge)
		e, _, b := stuckEnv(t, layout, map[string]time.Time{"flipped0": old, "finished": old}, "flipped0", "finished")
		ctx := context.Background()
		rdb := e.redis.Client()
		flipped, finished := b["flipped0"], b["finished"]
		var want map[string]map[string]string
		st := &executorStore{Store: e.store(), after: func() {
			finishWriteIn(t, rdb, "inst1", flipped.key, fieldOf(layout, flipped.id), flipped.id)
			// The executor's CAD of the block's last location, then its empty-key recycle.
			require.NoError(t, rdb.Del(ctx, kvcm.BlockKey("inst1", finished.key)).Err())
			want = map[string]map[string]string{}
			for _, s := range b {
				want[s.id] = rdb.HGetAll(ctx, kvcm.BlockKey("inst1", s.key)).Val()
			}
		}}
		var targets []subjects.Target
		for _, s := range []stuckBlock{flipped, finished} {
			targets = append(targets, subjects.Target{Key: s.key, Location: s.id, Layout: layout.String(), Reason: subjects.ReasonStuckDeleting,
				Expected: subjects.RawText(s.json)})
		}
		res, err := deleter.NewProtocol(deleter.DefaultConfig()).DeleteAll(ctx, st, registryStorages(t, e), "inst1", targets)
		require.NoError(t, err)
		require.Equal(t, subjects.OutcomeNoopMismatch, res[0].Outcome, res[0].Detail)
		require.Equal(t, subjects.OutcomeNoopGone, res[1].Outcome, res[1].Detail)
		for _, s := range b {
			require.Equal(t, want[s.id], rdb.HGetAll(ctx, kvcm.BlockKey("inst1", s.key)).Val(), s.id)
			require.FileExists(t, s.file, "%s: data not unlinked", s.id)
		}
	})
}

// registryStorages is the storage set of the registry's storage table, as the deleter builds
// it.
func registryStorages(t *testing.T, e *env) storage.Set {
	t.Helper()
	raw, err := e.redis.Client().HGetAll(context.Background(), "kvcache_registry:"+cluster+":storage").Result()
	require.NoError(t, err)
	cfgs := map[string]kvcm.StorageConfig{}
	for name, v := range raw {
		c, err := kvcm.DecodeStorageConfig([]byte(v))
		require.NoError(t, err)
		cfgs[name] = c
	}
	set, err := storage.NewSet(cfgs, storageOptions())
	require.NoError(t, err)
	return set
}
