package test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/seed"
)

// refusalGrace is the unregistered_grace of the refusal tests: short, so that a refusal is
// shown past it.
const refusalGrace = time.Second

// refusalRun is a keyspace of inst0 and of instance gone (g-extra), 10 blocks each with a
// per-block file, under every stage with collect_unregistered_instances and the sweep on.
type refusalRun struct {
	f      *unregFixture
	pr     *prometheus.Registry
	files  []string
	before seed.Snapshot
}

// startRefusal writes the keyspace, registers gone when registered, and runs the stages until
// a round has ended (having seen gone registered, when it was).
func startRefusal(t *testing.T, registered bool) *refusalRun {
	t.Helper()
	e := newEnv(t)
	r := &refusalRun{f: newUnregFixture(t, e), pr: prometheus.NewRegistry()}
	if registered {
		r.f.register(t, "gone")
	}
	r.files = append(r.f.blocks(t, "gone", 10), r.f.blocks(t, "inst0", 10)...)
	r.before = r.snapshot(t)
	e.run(e.unregOptions(r.pr, refusalGrace), app.All)
	require.Eventually(t, func() bool {
		c := e.storeCheckpoint()
		return c.Round >= 1 && !c.InRound && (!registered || c.Seen["gone"].LastRegisteredUs > 0)
	}, time.Minute, 20*time.Millisecond)
	return r
}

// refusedPast waits until the grace since from has passed and, after that, two more walks of
// the sweep have ended and done holds; then nothing of any instance is gone: every key as it
// was, every file in place with its bytes.
func (r *refusalRun) refusedPast(t *testing.T, from time.Time, done func() bool) {
	t.Helper()
	e := r.f.e
	time.Sleep(time.Until(from.Add(refusalGrace + 200*time.Millisecond)))
	w0 := e.sweepCheckpoint().Round
	require.Eventually(t, func() bool { return e.sweepCheckpoint().Round >= w0+2 && done() }, time.Minute, 20*time.Millisecond)
	require.Equal(t, r.before, r.snapshot(t), "no key written")
	require.Equal(t, len(r.files), present(t, r.f.root, r.files), "no file unlinked")
	require.Empty(t, quarantined(t, r.f.root))
	require.Zero(t, metricValue(t, r.pr, "kvcm_gc_unregistered_collected_keys_total"))
	require.Zero(t, metricValue(t, r.pr, "kvcm_gc_sweep_unlinked_files_total"))
}

// snapshot reads the keys of the blocks startRefusal wrote (the seed's own keys of inst0 hold
// garbage, which goes).
func (r *refusalRun) snapshot(t *testing.T) seed.Snapshot {
	t.Helper()
	all, err := seed.Take(context.Background(), r.f.rdb, "kvcache:instance_*")
	require.NoError(t, err)
	out := seed.Snapshot{}
	for _, id := range []string{"gone", "inst0"} {
		for i := range 10 {
			k := kvcm.BlockKey(id, int64(1000+i))
			out[k] = all[k]
		}
	}
	return out
}

func (r *refusalRun) counter(t *testing.T, name, label, value string) float64 {
	return metricByLabel(t, r.pr, name, label)[value]
}

// TestUnregisteredRefusedRegistryUnread: with collect_unregistered_instances, nothing of a
// removed instance goes, keys nor files, past its grace, while the registry holds a record
// that does not decode (a partial read) and then while the registry cannot be read at all
// (its instance index of the wrong type: every read fails).
func TestUnregisteredRefusedRegistryUnread(t *testing.T) {
	r := startRefusal(t, true)
	ctx := context.Background()
	f := r.f
	f.unregister(t, "gone")
	require.NoError(t, f.rdb.HSet(ctx, f.reg+"instance", "bad", "bad").Err())
	require.NoError(t, f.rdb.HSet(ctx, f.reg+"bad", "bad", "{not json").Err())
	removed := time.Now()
	partial := func() float64 {
		return r.counter(t, "kvcm_gc_unregistered_refusals_total", "reason", pipeline.UnregRegistryPartial)
	}
	p0 := partial()
	r.refusedPast(t, removed, func() bool { return partial() > p0 })

	// The index replaced by a string: every registry read fails from now on.
	require.NoError(t, f.rdb.Del(ctx, f.reg+"instance").Err())
	require.NoError(t, f.rdb.Set(ctx, f.reg+"instance", "not a hash", 0).Err())
	failed := func() float64 {
		return r.counter(t, "kvcm_gc_sweep_errors_total", "reason", "registry") +
			metricByLabels(t, r.pr, "kvcm_gc_operation_errors_total", "stage", "op")[[2]string{pipeline.StageScanner, "registry"}]
	}
	f0 := failed()
	r.refusedPast(t, time.Now(), func() bool { return failed() > f0+2 })
}

// TestUnregisteredRefusedStoreEmpty: nothing of a removed instance goes past its grace while
// the registry lists no instance of its store (every instance removed, the groups left).
func TestUnregisteredRefusedStoreEmpty(t *testing.T) {
	r := startRefusal(t, true)
	r.f.unregister(t, "gone")
	r.f.unregister(t, "inst0")
	removed := time.Now()
	unknown := func() float64 { return r.counter(t, "kvcm_gc_sweep_kept_files_total", "reason", "unknown_instance") }
	k0 := unknown()
	r.refusedPast(t, removed, func() bool { return unknown() >= k0+float64(len(r.files)) })
}

// TestUnregisteredRefusedFirstSight: nothing goes of an instance kvcm-gc first saw already
// unregistered, however long it stays so.
func TestUnregisteredRefusedFirstSight(t *testing.T) {
	r := startRefusal(t, false)
	never := func() float64 {
		return r.counter(t, "kvcm_gc_unregistered_refusals_total", "reason", pipeline.UnregNeverRegistered)
	}
	n0 := never()
	r.refusedPast(t, time.Now(), func() bool { return never() > n0 })
	require.NotContains(t, r.f.e.storeCheckpoint().Seen, "gone")
}
