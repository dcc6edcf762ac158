package test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
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
