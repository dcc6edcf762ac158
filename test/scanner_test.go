package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/seed"
	"github.com/kvcm-gc/kvcm-gc/subjects"
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
		c, _, err := pipeline.ReadCheckpoint(ctx, kv)
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
	// ~12 pages of ~50 keys; each asks for 50 ms before the next: the first page is free.
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
	_, err = kv.Put(ctx, pipeline.ScannerPauseKey, []byte(fmt.Sprintf(`{"until_us":%d}`, until.UnixMicro())))
	require.NoError(t, err)
	e.run(o, app.All)
	require.Eventually(t, func() bool { return metricValue(t, reg, "kvcm_gc_scanner_paused") == 1 }, time.Minute, 10*time.Millisecond)
	ck := e.waitRoundDone(1, time.Minute)
	require.False(t, time.UnixMicro(ck.RoundStartedUs).Before(until), "the round started during the pause")
	require.Zero(t, metricValue(t, reg, "kvcm_gc_scanner_paused"))
}
