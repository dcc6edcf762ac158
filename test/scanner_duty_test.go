package test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/internal/duty"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// busyScript holds Redis's event loop for about 20 ms per call: a serving load that makes
// every other client's command wait, as a burst of heavy requests does.
const busyScript = `local s = redis.call('TIME')
repeat
  local n = redis.call('TIME')
until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 20000
return 1`

// dutyEnv runs the scanner alone, rounds back to back, over 3,000 blocks, with the scanner's
// configuration as set, and returns its registry.
func dutyEnv(t *testing.T, set func(o *app.Options)) (*env, *prometheus.Registry) {
	e := newEnv(t)
	opsSeed(t, e, []string{"inst1"}, 3000, 31)
	reg := prometheus.NewRegistry()
	o := e.options(reg)
	o.Scanner.RoundPause = 0 // rounds follow each other: the walk goes on
	o.Scanner.HighWater = 1_000_000
	set(&o)
	stop := e.run(o, app.Stages{Scanner: true})
	t.Cleanup(stop)
	return e, reg
}

// storePace is the store's pace as status reads it from its checkpoint (nil: none yet).
func storePace(t *testing.T, e *env) *pipeline.PaceRecord {
	rep, err := ops.Status(context.Background(), e.js, e.names)
	if err != nil || len(rep.Scanner.Stores) != 1 {
		return nil
	}
	return rep.Scanner.Stores[0].Pace
}

// mainThreadCPU is Redis's main-thread CPU time so far (INFO cpu).
func mainThreadCPU(t *testing.T, e *env) time.Duration {
	info, err := e.redis.Client().Info(context.Background(), "cpu").Result()
	require.NoError(t, err)
	var cpu float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			cpu += f
		}
	}
	return time.Duration(cpu * float64(time.Second))
}

// TestScannerDutyPace: by default a store's walk is paced by the duty. Its share of Redis's
// main-thread CPU, by Redis's own count, stays near the duty and far below an unpaced walk's;
// status and metrics say the duty, the share the pacer measured and what set its last wait. A
// load that holds Redis busy makes each burst take longer on Redis's clock, and the walk slows
// by itself.
func TestScannerDutyPace(t *testing.T) {
	e, reg := dutyEnv(t, func(o *app.Options) {})
	require.Eventually(t, func() bool {
		p := storePace(t, e)
		var table bytes.Buffer
		if p == nil || e == nil {
			return false
		}
		rep, err := ops.Status(context.Background(), e.js, e.names)
		require.NoError(t, err)
		require.NoError(t, rep.WriteTable(&table))
		return p.Duty == 0.1 && slices.Contains(duty.Reasons, p.Reason) && p.CPU == duty.CeilingOff &&
			bytes.Contains(table.Bytes(), []byte("duty 0.10 took"))
	}, time.Minute, 50*time.Millisecond, "status shows the store's duty pace and why")
	require.Equal(t, 0.1, metricValue(t, reg, "kvcm_gc_store_pace_duty_ratio"))

	// The walk's share of Redis's main thread over a few seconds, by INFO cpu: the duty's,
	// with room for what a loaded test machine adds (Redis's other work, INFO itself), and
	// never what an unpaced walk takes (most of the thread).
	keys := func() float64 { return metricValue(t, reg, "kvcm_gc_store_scanned_keys_total") }
	cpu0, k0, t0 := mainThreadCPU(t, e), keys(), time.Now()
	time.Sleep(3 * time.Second) // a window of Redis's CPU time: nothing to await
	cpu1, k1, t1 := mainThreadCPU(t, e), keys(), time.Now()
	share := (cpu1 - cpu0).Seconds() / t1.Sub(t0).Seconds()
	rate := (k1 - k0) / t1.Sub(t0).Seconds()
	t.Logf("duty 0.1: Redis main thread %.3f busy, %.0f keys/s", share, rate)
	require.Greater(t, k1, k0, "the walk goes on")
	require.Less(t, share, 0.25, "the walk keeps to its share of Redis's time")

	// A load that holds Redis busy in 20 ms slices: each burst waits behind them on Redis's
	// clock, and the walk slows down.
	lctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for lctx.Err() == nil {
				_ = e.redis.Client().Eval(lctx, busyScript, nil).Err()
			}
		})
	}
	defer func() { stopLoad(); wg.Wait() }()
	require.Eventually(t, func() bool {
		k2, t2 := keys(), time.Now()
		time.Sleep(time.Second)
		r := (keys() - k2) / time.Since(t2).Seconds()
		t.Logf("under load: %.0f keys/s", r)
		return r < rate/2
	}, 30*time.Second, 10*time.Millisecond, "under load the walk slows (from %.0f keys/s)", rate)
}

// TestScannerCPUCeiling: with scanner.redis_cpu_ceiling, the walk holds while Redis's main
// thread is busier than the ceiling by INFO cpu, says so, and goes on once it is not; a Redis
// that refuses INFO leaves the duty alone to pace the walk, and status says so. The ceiling
// is below what the walk's own duty makes Redis busy (an idle Redis is busy about 0.1-0.3%,
// a walk at a duty of 0.1 several percent) and above an idle Redis: the walk holds, Redis
// idles, the walk goes on, about every other reading. A load of its own could not trip a
// ceiling on a loaded test machine, where Redis gets too little of a core to be busy.
func TestScannerCPUCeiling(t *testing.T) {
	e, reg := dutyEnv(t, func(o *app.Options) {
		o.Scanner.CPUCeiling, o.Scanner.CPUEvery = 0.01, 200*time.Millisecond
	})
	keys := func() float64 { return metricValue(t, reg, "kvcm_gc_store_scanned_keys_total") }
	require.Eventually(t, func() bool {
		return gaugeLabelOne(t, reg, "kvcm_gc_store_pace_reason", "reason") == duty.ReasonBusy &&
			metricValue(t, reg, "kvcm_gc_store_redis_cpu_share_ratio") > 0.01
	}, time.Minute, 5*time.Millisecond, "the walk holds while Redis is busier than the ceiling")
	held := keys()
	require.Eventually(t, func() bool { return keys() > held }, time.Minute, 20*time.Millisecond, "the walk goes on once Redis idles")
	require.Eventually(t, func() bool {
		p := storePace(t, e)
		return p != nil && p.CPULimit == 0.01 && p.CPUShare >= 0 && (p.CPU == duty.CeilingOK || p.CPU == duty.CeilingBusy)
	}, time.Minute, 50*time.Millisecond, "status shows Redis's main-thread share against the ceiling")

	// Redis refuses INFO from now on: the ceiling is off, the duty alone paces the walk.
	ctx := context.Background()
	require.NoError(t, e.redis.Client().Do(ctx, "ACL", "SETUSER", "default", "-info").Err())
	require.Eventually(t, func() bool {
		p := storePace(t, e)
		return p != nil && p.CPU == duty.CeilingRefused
	}, time.Minute, 50*time.Millisecond, "status says the store refuses INFO")
	k := keys()
	require.Eventually(t, func() bool { return keys() > k+1000 }, time.Minute, 20*time.Millisecond, "the duty alone paces the walk")
	var table bytes.Buffer
	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "redis cpu ?/0.01 refused")
}
