package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/seed"
)

// TestUnregisteredInstances: keys of an instance the registry no longer lists (a failed
// RemoveInstance leaves them) are counted per store and instance, with their locations and
// bytes, in the store's checkpoint and as gauges, and first seen once; keys of a skipped
// group's instance are not; nothing of them is touched. Once the instance is registered again,
// the count is gone.
func TestUnregisteredInstances(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed(seed.Spec{Blocks: 100, Seed: 31, NoFiles: true, Instances: []string{"inst0"}})
	rdb := e.redis.Client()
	loc := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"status":3,"type":4,"spec_size":2,"create_time":1,"location_specs":[`+
			`{"name":"tp0","uri":"file://nfs_01/r/gone/tp0/%s?size=1024"},{"name":"tp1","uri":"file://nfs_01/r/gone/tp1/%s?size=512"}]}`, id, id, id)
	}
	const gone = "gone:inst #1" // any bytes
	for i := range 25 {
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(gone, int64(i)), kvcm.FieldPrevKey, "",
			kvcm.LocationField("a"), loc("a"), kvcm.LocationField("b"), loc("b")).Err())
	}
	// An instance of a group kvcm-gc skips (the seed's local group) is registered: not counted.
	for i := range 5 {
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(seed.InstanceLocal, int64(i)), kvcm.LocationField("a"), loc("a")).Err())
	}
	before, err := seed.Take(ctx, rdb, "kvcache:instance_*")
	require.NoError(t, err)

	pr := prometheus.NewRegistry()
	o := e.options(pr)
	o.Scanner.RoundPause = 200 * time.Millisecond
	e.run(o, app.All)
	store := strings.TrimPrefix(e.redis.URI(), "redis://")
	storeCkpt := func(round uint64) pipeline.Checkpoint {
		t.Helper()
		var c pipeline.Checkpoint
		require.Eventually(t, func() bool {
			kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
			if err != nil {
				return false // not created yet
			}
			c, _, err = pipeline.ReadStoreCheckpoint(ctx, kv, store)
			return err == nil && (c.Round > round || c.Round == round && !c.InRound)
		}, time.Minute, 20*time.Millisecond)
		return c
	}
	c1 := storeCkpt(1)
	require.Len(t, c1.Unregistered, 1, "%+v", c1.Unregistered)
	u := c1.Unregistered[0]
	require.Equal(t, gone, u.Instance)
	require.Equal(t, int64(25), u.Keys)
	require.Equal(t, int64(50), u.Locations)
	require.Equal(t, uint64(25*2*(1024+512)), u.Bytes)
	require.Zero(t, u.Unreadable)
	require.NotZero(t, u.FirstSeenUs)
	require.Empty(t, c1.UnregisteredRound)
	// The gauges follow the checkpoint's write.
	require.Eventually(t, func() bool {
		return metricValue(t, pr, "kvcm_gc_unregistered_instance_keys") == 25 &&
			metricValue(t, pr, "kvcm_gc_unregistered_instance_locations") == 50 &&
			metricValue(t, pr, "kvcm_gc_unregistered_instance_bytes") == float64(25*2*(1024+512))
	}, 10*time.Second, 10*time.Millisecond)

	// A later round counts them again; the first sight stays.
	c2 := storeCkpt(c1.Round + 1)
	require.Len(t, c2.Unregistered, 1)
	require.Equal(t, u.FirstSeenUs, c2.Unregistered[0].FirstSeenUs)
	require.Equal(t, int64(25), c2.Unregistered[0].Keys)

	// status shows them.
	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("status")(ctx, opsEnv(t, e, o), nil, &out, &errOut))
	require.Contains(t, out.String(), "UNREGISTERED INSTANCES")
	require.Contains(t, out.String(), `"gone:inst #1"`, "its id quoted: it holds a space")
	require.Regexp(t, `"gone:inst #1"\s+25\s+50\s+75.0 KiB`, out.String())
	t.Logf("status\n%s", out.String())

	// Counted, never touched: the unregistered and the skipped instance's keys as they were.
	now, err := seed.Take(ctx, rdb, "kvcache:instance_*")
	require.NoError(t, err)
	for k, v := range before {
		if strings.HasPrefix(k, kvcm.KeyPrefix(gone)) || strings.HasPrefix(k, kvcm.KeyPrefix(seed.InstanceLocal)) {
			require.Equal(t, v, now[k], k)
		}
	}

	// Registered again (in the seed's group): no longer counted, its series gone.
	reg := "kvcache_registry:" + cluster + ":"
	info, err := rdb.HGet(ctx, reg+"inst0", "inst0").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, reg+gone, gone, strings.ReplaceAll(info, `"inst0"`, fmt.Sprintf("%q", gone))).Err())
	require.NoError(t, rdb.HSet(ctx, reg+"instance", gone, gone).Err())
	// A round that starts once the registry snapshot (reused a moment) lists it counts none.
	require.Eventually(t, func() bool {
		c := storeCkpt(c2.Round + 1)
		return !c.InRound && len(c.Unregistered) == 0
	}, time.Minute, 50*time.Millisecond)
	require.Eventually(t, func() bool { return metricValue(t, pr, "kvcm_gc_unregistered_instance_keys") == 0 }, 10*time.Second, 10*time.Millisecond)
}

// TestCollectUnregisteredInstances: with collect_unregistered_instances, the keys of an
// instance kvcm-gc saw registered go once it has been absent from the registry for the grace,
// through the deleter's CAS and CAD, a capped number per round; never while the registry holds
// a record that does not decode, nor while the instance's group is gone from it, nor for an
// instance never seen registered; the live instance's keys stay byte for byte.
func TestCollectUnregisteredInstances(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed(seed.Spec{Blocks: 60, Seed: 32, NoFiles: true, Instances: []string{"inst0"}})
	rdb := e.redis.Client()
	reg := "kvcache_registry:" + cluster + ":"
	loc := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"status":3,"type":4,"spec_size":1,"create_time":1,"location_specs":[`+
			`{"name":"tp0","uri":"file://nfs_01/r/gone/tp0/%s?size=1024"}]}`, id, id)
	}
	const gone, ghost, evr = "gone#1", "ghost", "kvs#event_report_l1p5#hbm#10.0.0.8:9000"
	for i := range 25 {
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(gone, int64(i)), kvcm.FieldPrevKey, "",
			kvcm.LocationField("a"), loc("a"), kvcm.LocationField(evr), loc(evr)).Err())
	}
	for i := range 5 { // never registered: counted, never collected
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(ghost, int64(i)), kvcm.LocationField("a"), loc("a")).Err())
	}
	// gone is registered, in a group of its own on the same store.
	info, err := rdb.HGet(ctx, reg+"inst0", "inst0").Result()
	require.NoError(t, err)
	var rec struct {
		Group string `json:"instance_group_name"`
	}
	require.NoError(t, json.Unmarshal([]byte(info), &rec))
	group, err := rdb.HGet(ctx, reg+"instance_group", rec.Group).Result()
	require.NoError(t, err)
	goneInfo := strings.ReplaceAll(strings.ReplaceAll(info, `"inst0"`, fmt.Sprintf("%q", gone)), fmt.Sprintf("%q", rec.Group), `"g-gone"`)
	goneGroup := strings.ReplaceAll(group, fmt.Sprintf("%q", rec.Group), `"g-gone"`)
	require.NoError(t, rdb.HSet(ctx, reg+"instance_group", "g-gone", goneGroup).Err())
	require.NoError(t, rdb.HSet(ctx, reg+gone, gone, goneInfo).Err())
	require.NoError(t, rdb.HSet(ctx, reg+"instance", gone, gone).Err())
	before, err := seed.Take(ctx, rdb, "kvcache:instance_*")
	require.NoError(t, err)

	pr := prometheus.NewRegistry()
	o := e.options(pr)
	o.Scanner.RoundPause = 100 * time.Millisecond
	o.Scanner.CollectUnregistered = true
	o.Scanner.UnregisteredGrace = 300 * time.Millisecond // the configuration refuses less than 24h
	o.Scanner.UnregisteredMaxKeys = 10
	e.run(o, app.All)
	store := strings.TrimPrefix(e.redis.URI(), "redis://")
	ckpt := func() pipeline.Checkpoint {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return pipeline.Checkpoint{}
		}
		c, _, _ := pipeline.ReadStoreCheckpoint(ctx, kv, store)
		return c
	}
	// A round ends that saw gone registered.
	require.Eventually(t, func() bool { c := ckpt(); return c.Round >= 1 && !c.InRound && c.Seen[gone].LastRegisteredUs > 0 },
		time.Minute, 20*time.Millisecond)
	require.NotContains(t, ckpt().Seen, ghost)

	// Removed, and a record that does not decode beside it: a partial registry refuses.
	require.NoError(t, rdb.Del(ctx, reg+gone).Err())
	require.NoError(t, rdb.HDel(ctx, reg+"instance", gone).Err())
	require.NoError(t, rdb.HSet(ctx, reg+"instance", "bad", "bad").Err())
	require.NoError(t, rdb.HSet(ctx, reg+"bad", "bad", "{not json").Err())
	removed := time.Now()
	refusals := func(reason string) float64 {
		return metricByLabel(t, pr, "kvcm_gc_unregistered_refusals_total", "reason")[reason]
	}
	// waitRefused waits for a round that started past the grace and counted gone, with
	// refusals of reason since then, and shows nothing of gone went.
	waitRefused := func(reason string) {
		t.Helper()
		from := refusals(reason)
		start := ckpt().Round
		require.Eventually(t, func() bool {
			c := ckpt()
			counted := slices.ContainsFunc(c.Unregistered, func(u pipeline.UnregisteredCount) bool { return u.Instance == gone })
			return c.Round >= start+2 && !c.InRound && counted && refusals(reason) > from &&
				time.UnixMicro(c.RoundStartedUs).After(removed.Add(o.Scanner.UnregisteredGrace))
		}, time.Minute, 20*time.Millisecond)
		require.Zero(t, metricValue(t, pr, "kvcm_gc_unregistered_collected_keys_total"), reason)
		now, err := seed.Take(ctx, rdb, "kvcache:instance_*")
		require.NoError(t, err)
		require.Equal(t, before, now, "%s: nothing written", reason)
	}
	waitRefused(pipeline.UnregRegistryPartial)

	// Whole again, but gone's group is gone too: refused.
	require.NoError(t, rdb.HDel(ctx, reg+"instance", "bad").Err())
	require.NoError(t, rdb.Del(ctx, reg+"bad").Err())
	require.NoError(t, rdb.HDel(ctx, reg+"instance_group", "g-gone").Err())
	waitRefused(pipeline.UnregGroupAbsent)

	// The group back: gone's keys go, at most 10 a round; ghost's stay.
	r0 := ckpt().Round
	require.NoError(t, rdb.HSet(ctx, reg+"instance_group", "g-gone", goneGroup).Err())
	var most atomic.Int64 // the most a round's checkpoint counted sent
	require.Eventually(t, func() bool {
		if c := ckpt(); c.UnregisteredCollected > most.Load() {
			most.Store(c.UnregisteredCollected)
		}
		for i := range 25 {
			if n, err := rdb.HLen(ctx, kvcm.BlockKey(gone, int64(i))).Result(); err != nil || n > 1 {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond)
	require.LessOrEqual(t, most.Load(), int64(10), "the round's cap")
	require.GreaterOrEqual(t, ckpt().Round, r0+2, "25 keys at most 10 a round take three rounds")
	require.Equal(t, float64(25), metricValue(t, pr, "kvcm_gc_unregistered_collected_keys_total"))
	require.Positive(t, refusals(pipeline.UnregNeverRegistered), "ghost")
	require.Positive(t, metricByLabel(t, pr, "kvcm_gc_physical_delete_skips_total", "reason")[pipeline.PhysSkipSweep])

	now, err := seed.Take(ctx, rdb, "kvcache:instance_*")
	require.NoError(t, err)
	for k, v := range before {
		switch {
		case strings.HasPrefix(k, kvcm.KeyPrefix(gone)):
			// empty_block keep: the key stays as KVCM reads "exists, no location".
			require.Equal(t, map[string]string{kvcm.FieldPrevKey: ""}, now[k], k)
		default:
			require.Equal(t, v, now[k], k)
		}
	}
}
