package test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// holders returns how many store leases each replica holds; nil when the leases could not be
// read this time (a condition polled again).
func holders(t *testing.T, kv jetstream.KeyValue) map[string]int {
	t.Helper()
	leases, err := pipeline.ReadLeases(context.Background(), kv)
	if err != nil {
		t.Logf("read leases: %v", err)
		return nil
	}
	out := map[string]int{}
	for _, l := range leases {
		out[l.Record.Holder]++
	}
	return out
}

func (e *env) buckets(t *testing.T, o app.Options) (lease, state jetstream.KeyValue) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	lease, err := e.js.KeyValue(ctx, e.names.LeaseBucket())
	require.NoError(t, err)
	state, err = e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(t, err)
	return lease, state
}

// Replicas divide the stores: one alone walks all four; a second one joins and the first
// hands stores back at round boundaries until each walks two; max_stores caps a replica; a
// replica stopped with SIGTERM releases its leases and the other takes them at once, long
// before the lease TTL.
func TestScannersDivideStores(t *testing.T) {
	e := newEnv(t)
	ms := seedStores(t, cluster, 4, 1, 100, filepath.Join(t.TempDir(), "data"))
	ms.register(t)
	o := ms.options(t, e, "scanner-a")
	o.Scanner.RoundPause = 300 * time.Millisecond
	o.Scanner.HighWater = 1_000_000
	o.JetStream.LeaseTTL = 10 * time.Second // a takeover that waits for expiry would show
	lease, _ := e.buckets(t, o)

	e.run(o, app.Stages{Scanner: true})
	require.Eventually(t, func() bool { return holders(t, lease)["scanner-a"] == 4 }, time.Minute, 20*time.Millisecond)

	ob := o
	ob.Scanner.Holder = "scanner-b"
	stopB := e.run(ob, app.Stages{Scanner: true})
	require.Eventually(t, func() bool {
		h := holders(t, lease)
		return h["scanner-a"] == 2 && h["scanner-b"] == 2
	}, time.Minute, 20*time.Millisecond, "the stores are not divided")

	oc := o
	oc.Scanner.Holder = "scanner-c"
	oc.Scanner.MaxStores = 1
	stopC := e.run(oc, app.Stages{Scanner: true})

	stopB()
	// B's member key and leases are gone; A (and C, up to its one store) take them at once.
	require.Eventually(t, func() bool {
		h := holders(t, lease)
		return h != nil && h["scanner-b"] == 0 && h["scanner-a"]+h["scanner-c"] == 4 && h["scanner-c"] <= 1
	}, 8*time.Second, 20*time.Millisecond, "the released stores were not taken over before the lease TTL")
	stopC()
	require.Eventually(t, func() bool { return holders(t, lease)["scanner-a"] == 4 }, 8*time.Second, 20*time.Millisecond)
}

// Stores appear in and vanish from the registry: a store that leaves is released (and shown
// as not in the registry), one that joins is walked. kvcm_gc_store_registered follows the
// registry, so an alert can tell a store nobody walks from one that left.
func TestScannerStoresComeAndGo(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ms := seedStores(t, cluster, 3, 1, 100, filepath.Join(t.TempDir(), "data"))
	ms.register(t, 0, 1)
	o := ms.options(t, e, "scanner-a")
	o.Scanner.HighWater = 1_000_000
	reg := prometheus.NewRegistry()
	o.Reg = reg
	lease, state := e.buckets(t, o)
	stop := e.run(o, app.Stages{Scanner: true})
	ck := e.waitRoundEnded(1, time.Minute)
	require.Equal(t, 2, ck.Stores)
	registered := func() map[string]float64 { return metricByLabel(t, reg, "kvcm_gc_store_registered", "store") }
	require.Equal(t, map[string]float64{ms.storeName(0): 1, ms.storeName(1): 1}, registered())

	ms.unregister(t, 1)
	ms.register(t, 2)
	gone, joined := ms.storeName(1), ms.storeName(2)
	require.Eventually(t, func() bool {
		leases, err := pipeline.ReadLeases(ctx, lease)
		if err != nil || len(leases) != 2 {
			return false
		}
		c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, joined)
		return err == nil && c.Round == 1 && !c.InRound
	}, time.Minute, 20*time.Millisecond, "the new store was not walked, or the gone one not released")
	leases, err := pipeline.ReadLeases(ctx, lease)
	require.NoError(t, err)
	for _, l := range leases {
		require.NotEqual(t, gone, l.Store)
	}

	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	states := map[string]string{}
	for _, st := range rep.Scanner.Stores {
		states[st.Store] = st.State
	}
	require.Equal(t, "not_in_registry", states[gone])
	require.Equal(t, "round_pause", states[joined])
	require.Equal(t, "round_pause", states[ms.storeName(0)])
	ck, _, err = scanner.ReadCheckpoint(ctx, state)
	require.NoError(t, err)
	require.Equal(t, 2, ck.Stores, "the summary counts the registry's stores only")
	require.Equal(t, uint64(1), ck.Round)
	require.False(t, ck.InRound)
	require.Equal(t, map[string]float64{ms.storeName(0): 1, joined: 1}, registered())
	stop()
	require.Empty(t, registered(), "a stopped scanner reads no registry")
}
