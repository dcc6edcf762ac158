package test

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
)

// busyScript holds Redis's event loop for about 20 ms per call: a serving load that makes
// every other client's command wait, as a burst of heavy requests does.
const busyScript = `local s = redis.call('TIME')
repeat
  local n = redis.call('TIME')
until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 20000
return 1`

// TestScannerAdaptivePace: with scanner.latency_budget set and no max_keys_per_second, a
// store's walk paces itself on its store's probe latency. It holds first to measure the idle
// latency, then speeds up; a load that holds Redis busy makes it back off (shorter bursts or a
// lower rate), and it speeds up again once the load is gone. Status and metrics say the pace
// and its reason. Only directions are asserted, each eventually: the timings are the machine's.
func TestScannerAdaptivePace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	opsSeed(t, e, []string{"inst1"}, 3000, 31)
	reg := prometheus.NewRegistry()
	o := e.options(reg)
	// A generous budget (+300%): the idle jitter of a busy test machine stays within
	// it, the 20 ms script far outside.
	o.Scanner.LatencyBudget = 3
	o.Scanner.RoundPause = 0 // rounds follow each other: the walk goes on
	o.Scanner.HighWater = 1_000_000
	stop := e.run(o, app.Stages{Scanner: true})
	defer stop()

	rate := func() float64 { return metricValue(t, reg, "kvcm_gc_store_pace_keys_per_second") }
	burst := func() float64 { return metricValue(t, reg, "kvcm_gc_store_pace_burst_keys") }
	reason := func() string { return gaugeLabelOne(t, reg, "kvcm_gc_store_pace_reason", "reason") }

	// Idle: the walk measures the baseline, then raises its rate above the start.
	require.Eventually(t, func() bool { return rate() > 1024 }, time.Minute, 20*time.Millisecond, "the idle walk speeds up")
	require.Eventually(t, func() bool {
		rep, err := ops.Status(ctx, e.js, e.names)
		if err != nil || len(rep.Scanner.Stores) != 1 || rep.Scanner.Stores[0].Pace == nil {
			return false
		}
		p := rep.Scanner.Stores[0].Pace
		var table bytes.Buffer
		require.NoError(t, rep.WriteTable(&table))
		return p.Rate > 0 && slices.Contains(scanner.PaceReasons, p.Reason) && p.Budget == 3 &&
			bytes.Contains(table.Bytes(), []byte("/s ×"))
	}, time.Minute, 50*time.Millisecond, "status shows the store's pace and why")
	before, beforeBurst := rate(), burst()

	// Load: eight clients keep Redis busy in 20 ms slices (a probe waits behind several).
	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for lctx.Err() == nil {
				_ = e.redis.Client().Eval(lctx, busyScript, nil).Err()
			}
		})
	}
	defer func() { stopLoad(); wg.Wait() }()
	require.Eventually(t, func() bool {
		r := reason()
		return (r == scanner.PaceLowerRate || r == scanner.PaceFloor) && rate() < before
	}, time.Minute, 20*time.Millisecond, "under load the walk backs off (from %v keys/s ×%v)", before, beforeBurst)
	require.LessOrEqual(t, burst(), beforeBurst, "its bursts are no longer than before the load")

	// The load ends: the walk speeds up again, above the lowest pace it fell to.
	stopLoad()
	wg.Wait()
	low := rate()
	require.Eventually(t, func() bool {
		r := rate()
		low = min(low, r)
		return r > low
	}, time.Minute, 20*time.Millisecond, "without the load the walk speeds up again")
}
