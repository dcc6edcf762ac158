package test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// The round pause is stored with the checkpoint: a restarted scanner does not start a new
// round early, and starts it once the pause is over.
func TestScannerRoundPauseSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed(seed.Spec{Blocks: 200, Seed: 20, NoFiles: true})
	o := e.options(prometheus.NewRegistry())
	o.Scanner.RoundPause = 4 * time.Second
	stop := e.run(o, app.All)
	ck := e.waitRoundDone(1, time.Minute)
	stop()
	next := time.UnixMicro(ck.NextRoundUs)
	require.WithinDuration(t, time.UnixMicro(ck.LastRoundEndUs).Add(4*time.Second), next, time.Millisecond)

	e.run(o, app.All) // a restart in the middle of the pause
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(t, err)
	var started pipeline.Checkpoint
	require.Eventually(t, func() bool {
		c, _, err := scanner.ReadCheckpoint(ctx, kv)
		if err != nil || c.Round < 2 {
			return false
		}
		started = c
		return true
	}, time.Minute, 10*time.Millisecond)
	require.False(t, time.UnixMicro(started.RoundStartedUs).Before(next), "round 2 started %s before the pause ended", next.Sub(time.UnixMicro(started.RoundStartedUs)))
	ck2 := e.waitRoundDone(2, time.Minute)
	require.Equal(t, uint64(200), ck2.LastRoundKeys)
}

// max_keys_per_second spreads a round over time: 600 keys at 1,000 keys/s take at least
// about half a second more than unpaced pages would.
func TestScannerKeysPerSecondCap(t *testing.T) {
	e := newEnv(t)
	e.seed(seed.Spec{Blocks: 600, Seed: 21, NoFiles: true})
	o := e.options(prometheus.NewRegistry())
	o.Scanner.MaxKeysPerSecond = 1000
	o.Scanner.ScanBatchSize = 50
	e.run(o, app.All)
	ck := e.waitRoundDone(1, time.Minute)
	require.Equal(t, uint64(600), ck.LastRoundKeys)
	// ~12 pages of ~50 keys, each due 50 ms after the one before: the first page is free.
	require.GreaterOrEqual(t, time.Duration(ck.LastRoundDuration)*time.Millisecond, 500*time.Millisecond)
}

// delete_delay longer than the ack wait: the deleter keeps its messages in flight with
// InProgress instead of letting them be redelivered.
func TestDeleteDelayLongerThanAckWait(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := e.seed(seed.Spec{Blocks: 60, GarbageFraction: 0.3, Seed: 22})
	o := e.options(prometheus.NewRegistry())
	o.JetStream.DeleterAckWait = time.Second
	o.Deleter.AckWait = time.Second
	o.Deleter.DeleteDelay = 2500 * time.Millisecond
	start := time.Now()
	e.run(o, app.All)
	e.waitRoundDone(1, time.Minute)
	require.GreaterOrEqual(t, time.Since(start), 2500*time.Millisecond)
	e.verify(before, m)
	c, err := e.js.Consumer(ctx, e.names.DeletesStream(), e.names.DeleterConsumer())
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	// One delivery per request: the consumer sequence (deliveries) equals the stream sequence.
	require.Positive(t, info.Delivered.Stream)
	require.Equal(t, info.Delivered.Stream, info.Delivered.Consumer, "no request was redelivered while it waited")
}

// An operator's scanner pause (a value in the state bucket) stops ticks until it ends.
func TestScannerPause(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed(seed.Spec{Blocks: 100, Seed: 23, NoFiles: true})
	reg := prometheus.NewRegistry()
	o := e.options(reg)
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(t, err)
	until := time.Now().Add(1500 * time.Millisecond)
	_, err = kv.Put(ctx, subjects.ScannerPauseKey, []byte(fmt.Sprintf(`{"until_us":%d}`, until.UnixMicro())))
	require.NoError(t, err)
	e.run(o, app.All)
	require.Eventually(t, func() bool { return metricValue(t, reg, "kvcm_gc_scanner_paused") == 1 }, time.Minute, 10*time.Millisecond)
	ck := e.waitRoundDone(1, time.Minute)
	require.False(t, time.UnixMicro(ck.RoundStartedUs).Before(until), "the round started during the pause")
	require.Zero(t, metricValue(t, reg, "kvcm_gc_scanner_paused"))
}

// TestScannerWalksEachStoreOnce: instances in two metadata stores (databases 0 and 1 of one
// Redis). A round walks each store once and routes every key to its instance: every block of
// a registered instance is published exactly in a batch of that instance naming its store,
// and keys in a store of instances not registered there (an unknown instance; a registered
// instance's keys in the other database) are counted and never published. Database 1 holds
// its instance's blocks in the location layout (today's KVCM selects db=N); legacy-layout
// copies there are nobody's (a KVCM of that layout ignores db= and keeps its blocks in DB 0):
// counted as such and never published.
func TestScannerWalksEachStoreOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed(seed.Spec{Blocks: 300, Seed: 23, NoFiles: true, Instances: []string{"inst0", "inst1"}})
	rdb := e.redis.Client()
	db1 := redis.NewClient(&redis.Options{Addr: e.redis.Addr(), DB: 1})
	t.Cleanup(func() { _ = db1.Close() })

	// A second group whose metadata store is database 1, with one instance.
	reg := "kvcache_registry:" + cluster + ":"
	groupJSON, err := rdb.HGet(ctx, reg+"instance_group", seed.GroupRedis).Result()
	require.NoError(t, err)
	g1 := strings.ReplaceAll(groupJSON, `"name":"`+seed.GroupRedis+`"`, `"name":"group_db1"`)
	g1 = strings.ReplaceAll(g1, `"storage_uri":"`+e.redis.URI()+`"`, `"storage_uri":"`+e.redis.URI()+`?db=1"`)
	require.NotEqual(t, groupJSON, g1)
	infoJSON, err := rdb.HGet(ctx, reg+"inst0", "inst0").Result()
	require.NoError(t, err)
	info9 := strings.ReplaceAll(strings.ReplaceAll(infoJSON, `"inst0"`, `"inst9"`), `"`+seed.GroupRedis+`"`, `"group_db1"`)
	require.NoError(t, rdb.HSet(ctx, reg+"instance_group", "group_db1", g1).Err())
	require.NoError(t, rdb.HSet(ctx, reg+"inst9", "inst9", info9).Err())
	require.NoError(t, rdb.HSet(ctx, reg+"instance", "inst9", "inst9").Err())

	l1 := `{"id":"l1","status":3,"type":4,"spec_size":0,"create_time":1,"location_specs":[]}`
	uri := `{"l1":{"id":"l1","status":3,"type":4,"spec_size":1,"location_specs":[]}}`
	want := map[string]string{} // "instance/key" → store name
	store0, store1 := strings.TrimPrefix(e.redis.URI(), "redis://"), strings.TrimPrefix(e.redis.URI(), "redis://")+"?db=1"
	for i := range 120 {
		require.NoError(t, db1.HSet(ctx, kvcm.BlockKey("inst9", int64(i)), kvcm.FieldPrevKey, "", kvcm.LocationField("l1"), l1).Err())
		want["inst9/"+strconv.Itoa(i)] = store1
	}
	const legacyCopies = 30 // inst9's blocks in the legacy layout in database 1: nobody's
	for i := range legacyCopies {
		require.NoError(t, db1.HSet(ctx, kvcm.BlockKey("inst9", int64(1000+i)), "__uri__", uri, "__lru_time__", "1").Err())
	}
	for i := range 40 { // not ours: an unknown instance in database 0, inst0's keys in database 1
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey("ghost", int64(i)), "__uri__", uri).Err())
		require.NoError(t, db1.HSet(ctx, kvcm.BlockKey("inst0", int64(i)), "__uri__", uri).Err())
	}
	for _, inst := range []string{"inst0", "inst1"} {
		keys, err := rdb.Keys(ctx, kvcm.ScanPattern(inst)).Result()
		require.NoError(t, err)
		for _, k := range keys {
			b, err := kvcm.ParseBlockKey(inst, k)
			if err != nil {
				continue // the seed's bad keys
			}
			if v, _ := rdb.HGet(ctx, k, "__uri__").Result(); v != "" {
				want[inst+"/"+strconv.FormatInt(b, 10)] = store0
			}
		}
	}

	pr := prometheus.NewRegistry()
	o := e.options(pr)
	o.Scanner.ScanBatchSize = 50
	o.Scanner.HighWater = 1_000_000
	e.run(o, app.Stages{Scanner: true})
	var ck pipeline.Checkpoint
	require.Eventually(t, func() bool {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return false // not created yet
		}
		ck, _, err = scanner.ReadCheckpoint(ctx, kv)
		return err == nil && ck.Round == 1 && !ck.InRound
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, 2, ck.Stores)
	require.Equal(t, 3, ck.Instances)

	st, err := e.js.Stream(ctx, e.names.BatchesStream())
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	got := map[string]string{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		b, err := subjects.DecodeBatch(m.Data)
		require.NoError(t, err)
		require.Equal(t, e.names.BatchSubject(b.Instance), m.Subject)
		for _, blk := range b.Blocks {
			k := b.Instance + "/" + strconv.FormatInt(blk.Key, 10)
			if prev, dup := got[k]; dup { // SCAN may return a key twice
				require.Equal(t, prev, b.Store, k)
			}
			got[k] = b.Store
		}
	}
	require.Equal(t, want, got, "every block published once with its store, no legacy copy in database 1")
	require.Equal(t, uint64(len(want)), ck.LastRoundKeys, "keys read in the round")
	require.GreaterOrEqual(t, metricValue(t, pr, "kvcm_gc_scan_unowned_keys_total"), 80.0)
	// SCAN may return a key twice, so the count is at least the copies.
	require.GreaterOrEqual(t, metricValue(t, pr, "kvcm_gc_scan_wrong_db_keys_total"), float64(legacyCopies))
}

// TestScannerIdleDoesNotSpin: an unpaced scanner (scan_interval 1ns) between rounds, with its
// backlog check failing closed or its lease held, waits between ticks instead of spinning
// (invariant 7): idle, it costs the process no more CPU than the same stages whose
// scan_interval is IdleWait, the least wait of a tick that makes no progress.
//
// The baseline is measured in the same run, because what the idle stages cost (their
// consumers, the lease renewals, the embedded NATS server answering) is not a constant: under
// -race it took 0.3–0.9 s of CPU in 5 s on 2 cores. Each window starts
// once there is no work but the idle one (after the round, and the audit's reads that end it),
// and is long, so that a wakeup delayed by a loaded machine weighs little. A spinning walk
// takes its whole window wherever it gets a core; a waiting one ticks at the baseline's rate.
func TestScannerIdleDoesNotSpin(t *testing.T) {
	e := newEnv(t)
	e.seed(seed.Spec{Blocks: 100, Seed: 24, NoFiles: true})
	stages := app.Stages{Scanner: true, Prober: true, Deleter: true}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	const window = 5 * time.Second
	measure := func(what string) time.Duration {
		before, start := cpu(), time.Now()
		time.Sleep(window) // the measured window: there is nothing to await in it
		used, took := cpu()-before, time.Since(start)
		t.Logf("CPU while idle between rounds, %s: %s in %s", what, used, took.Round(time.Millisecond))
		return used
	}

	o := e.options(prometheus.NewRegistry())
	o.Scanner.ScanInterval = time.Nanosecond
	stop := e.run(o, stages)
	e.waitRoundDone(1, time.Minute)
	tiny := measure("scan_interval 1ns")
	stop() // the scanner releases its lease as it stops

	// The same stages again: the checkpoint holds the round pause of an hour, so the walk is
	// idle once it has taken its store's lease and read the checkpoint, its first tick.
	o = e.options(prometheus.NewRegistry())
	o.Scanner.ScanInterval = pipeline.IdleWait
	lease, _ := e.buckets(t, o)
	require.Empty(t, holders(t, lease), "the lease released")
	e.run(o, stages)
	require.Eventually(t, func() bool { return len(holders(t, lease)) == 1 }, time.Minute, 20*time.Millisecond,
		"the scanner holds its store again")
	base := measure("scan_interval IdleWait")
	require.Less(t, tiny, 2*base+window/20, "the idle scanner spins: %s against %s", tiny, base)
}

// A block too large for a message is left out whole and reported by the field that holds its
// bytes: __uri__ in the legacy layout, the L# field in the location layout.
func TestScannerOversizedNamesTheField(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		e.seed(seed.Spec{Layout: layout, Blocks: 20, Seed: 22, NoFiles: true})
		// 10 MiB of location specs in one location of one block, the server's max payload
		// being 1 MiB.
		spec := fileSpec("tp0", "/nfs/"+strings.Repeat("p", 10<<20))
		id := "bigloc01"
		const key = int64(987654321)
		require.NoError(t, e.redis.Client().HSet(ctx, kvcm.BlockKey("inst1", key),
			blockFields(layout, time.Now(), id, locJSON(layout, id, kvcm.StatusServing, kvcm.TypeFile, time.Now().UnixMicro(), spec))...).Err())
		o := e.options(prometheus.NewRegistry())
		e.run(o, app.All)
		e.waitRoundDone(1, time.Minute)
		field := fieldOf(layout, id)
		var skips []subjects.Event
		for _, ev := range e.events() {
			if ev.Kind == subjects.EventSkip && ev.Reason == "oversized" {
				skips = append(skips, ev)
			}
		}
		require.Len(t, skips, 1)
		require.NotNil(t, skips[0].Key)
		require.Equal(t, key, *skips[0].Key)
		require.Contains(t, skips[0].Detail, fmt.Sprintf("its field %s holds %d bytes", field, len(fieldValue(t, e, key, field))))
	})
}

// fieldValue reads one field of inst1's block key.
func fieldValue(t *testing.T, e *env, key int64, field string) string {
	t.Helper()
	v, err := e.redis.Client().HGet(context.Background(), kvcm.BlockKey("inst1", key), field).Result()
	require.NoError(t, err)
	return v
}
