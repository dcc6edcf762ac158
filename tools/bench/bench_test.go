package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0-1": {0, 1}, "0": {0}, "0-2,5,7-8": {0, 1, 2, 5, 7, 8}, "3,1,1": {1, 3}} {
		got, err := parseCPUList(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"a", "2-1", "1-x"} {
		_, err := parseCPUList(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "0,1,5", cpuList([]int{0, 1, 5}))
}

func TestParseFlags(t *testing.T) {
	l, err := ParseLayouts("both")
	require.NoError(t, err)
	require.Equal(t, []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy}, l)
	l, err = ParseLayouts("legacy")
	require.NoError(t, err)
	require.Equal(t, []kvcm.Layout{kvcm.LayoutLegacy}, l)
	l, err = ParseLayouts("none")
	require.NoError(t, err)
	require.Empty(t, l)
	_, err = ParseLayouts("ambiguous")
	require.Error(t, err)

	p, err := ParsePins("pinned, shared,pinned")
	require.NoError(t, err)
	require.Equal(t, []string{PinPinned, PinShared}, p)
	_, err = ParsePins("pinned,both")
	require.Error(t, err)
}

// TestServingPairsWithinPlacement: a window is compared with the off window of its own
// placement and repetition, never with the other placement's.
func TestServingPairsWithinPlacement(t *testing.T) {
	ms := time.Millisecond
	ls := []Latency{
		{Pin: PinPinned, Mode: ModeOff, Rep: 1, N: 1, P99: 1 * ms},
		{Pin: PinPinned, Mode: ModeDefault, Rep: 1, N: 1, P99: 2 * ms},
		{Pin: PinShared, Mode: ModeOff, Rep: 1, N: 1, P99: 10 * ms},
		{Pin: PinShared, Mode: ModeDefault, Rep: 1, N: 1, P99: 5 * ms},
		{Pin: PinPinned, Mode: ModeOff, Rep: 2, N: 1, P99: 2 * ms},
		{Pin: PinPinned, Mode: ModeDefault, Rep: 2, N: 1, P99: 3 * ms},
		{Pin: PinShared, Mode: ModeOff, Rep: 2, N: 1, P99: 10 * ms},
		{Pin: PinShared, Mode: ModeDefault, Rep: 2, N: 1, P99: 20 * ms},
	}
	require.InDelta(t, (2.0+1.5)/2, servingPaired(ls, PinPinned, ModeDefault), 1e-9)
	require.InDelta(t, (0.5+2.0)/2, servingPaired(ls, PinShared, ModeDefault), 1e-9)
	require.Zero(t, servingPaired(ls, PinPinned, ModeUnpaced))
	require.Equal(t, "1000 µs, 2000 µs", servingP99s(ls, PinPinned, ModeOff))
}

// TestServingPooled: the pooled figure takes the p99 of every request of a mode's windows
// against every request of the off windows of the same placement; the off halves compare the
// off windows of odd and even repetitions.
func TestServingPooled(t *testing.T) {
	us := time.Microsecond
	window := func(pin, mode string, rep int, slow time.Duration) Latency {
		// 100 requests: 98 of 100 µs, 2 of slow; the p99 is slow.
		s := make([]time.Duration, 100)
		for i := range s {
			s[i] = 100 * us
		}
		s[98], s[99] = slow, slow
		return Latency{Pin: pin, Mode: mode, Rep: rep, N: len(s), P99: slow, Samples: s}
	}
	ls := []Latency{
		window(PinPinned, ModeOff, 1, 200*us),
		window(PinPinned, ModeDefault, 1, 300*us),
		window(PinShared, ModeOff, 1, 900*us),
		window(PinPinned, ModeOff, 2, 400*us),
		window(PinPinned, ModeDefault, 2, 600*us),
	}
	r, n := servingPooled(ls, PinPinned, ModeDefault)
	require.Equal(t, 200, n)
	// Pooled off: 196 × 100 µs, 2 × 200, 2 × 400; its p99 (the 199th of 200) is 400 µs.
	// Pooled default: 2 × 300, 2 × 600; its p99 is 600 µs.
	require.InDelta(t, 1.5, r, 1e-9)
	r, n = servingPooled(ls, PinPinned, ModeUnpaced)
	require.Zero(t, r)
	require.Zero(t, n)
	odd, even, ok := servingOffHalves(ls, PinPinned)
	require.True(t, ok)
	require.Equal(t, 200*us, odd)
	require.Equal(t, 400*us, even)
	_, _, ok = servingOffHalves(ls, PinShared)
	require.False(t, ok, "one repetition has no even half")
}

func TestComposedDeleteRate(t *testing.T) {
	r := RawResults{CAS: Rate{Ops: 50, Dur: time.Second}, CAD: Rate{Ops: 50, Dur: time.Second}, WriteLocs: 100,
		Unlink: Rate{Ops: 100, Dur: time.Second}, Read: Rate{Ops: 50, Dur: time.Second}}
	// 10 ms of CAS, 10 ms of CAD per location, 2 unlinks of 10 ms: 40 ms.
	require.InDelta(t, 25, composedDeleteRate(r, 2), 1e-9)
	// Two reads of 1 s for the 100 locations: 20 ms more.
	require.InDelta(t, 1/0.06, fullDeleteRate(r, 2), 1e-9)
	require.Zero(t, composedDeleteRate(RawResults{}, 1))
}

// TestKeyspaceLayouts seeds a small keyspace in each layout and checks what the harness
// relies on: its raw write loops leave the keyspace as it was (they write scratch copies
// only); the writes they time are the deleter's and, applied to the keyspace itself, delete
// exactly the garbage, which Verify recognises; Restore undoes a collection; the copies of
// kvcm-gc's scripts are the ones kvcm-gc loads.
func TestKeyspaceLayouts(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	for _, layout := range []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy} {
		t.Run(layout.String(), func(t *testing.T) {
			k, err := SeedKeyspace(ctx, srv.Client(), srv.URI(), KeyspaceSpec{Cluster: "t", Layout: layout, DB: keyspaceDB,
				Instances: 2, Blocks: 400, Locations: 2, Garbage: 0.2, Seed: 3, Root: filepath.Join(t.TempDir(), "data")},
				slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			defer k.Close()
			require.Equal(t, 400, k.Counts.Blocks)
			require.Positive(t, k.Counts.Garbage)
			require.Positive(t, len(k.GarbageFiles))
			if layout == kvcm.LayoutLocation {
				require.Positive(t, k.Counts.SkippedBlocks, "the cached group's blocks")
			}
			untouched := func() {
				v, err := k.Verify(ctx)
				require.NoError(t, err)
				require.Equal(t, k.Counts.Garbage, v.GarbageLeft)
				require.Zero(t, v.LiveChanged+v.BlocksChanged+v.LiveFilesGone, v.Problems)
			}
			untouched()

			var raw RawResults
			require.NoError(t, measureRedisWrites(ctx, k, 1000, &raw))
			require.True(t, raw.ScriptsMatch, "kvcm-gc's scripts are not cached once its store opened")
			require.Equal(t, k.Counts.Garbage, raw.WriteLocs)
			require.Positive(t, raw.CAS.Ops)
			require.NoError(t, measureSequential(ctx, k, 2, 1000, &raw))
			require.Equal(t, k.Counts.Garbage, raw.Sequential.Ops)
			keys, err := k.rdb.Keys(ctx, scratchPrefix+"*").Result()
			require.NoError(t, err)
			require.Empty(t, keys, "scratch keys left")
			untouched()

			// The raw writes on the keyspace itself: exactly the garbage goes; Restore brings
			// it back.
			require.NoError(t, k.Snapshot(ctx))
			blocks, _, err := garbageBlocks(ctx, k, 1<<30, "")
			require.NoError(t, err)
			for i := range blocks {
				blocks[i].scratch = blocks[i].key
			}
			cas, cad, err := deletionWrites(layout, blocks)
			require.NoError(t, err)
			casScript, cadScript := redismeta.Scripts(layout)
			for _, step := range []struct {
				sc *redis.Script
				ws []condWrite
			}{{casScript, cas}, {cadScript, cad}} {
				for _, w := range step.ws {
					require.NoError(t, scriptResult(step.sc.Run(ctx, k.rdb, []string{w.key}, w.args...)))
				}
			}
			for _, f := range k.GarbageFiles {
				require.NoError(t, os.Remove(f))
			}
			v, err := k.Verify(ctx)
			require.NoError(t, err)
			require.True(t, v.OK(), "%+v", v)
			require.NoError(t, k.Restore(ctx))
			untouched()
			for _, f := range k.GarbageFiles {
				_, err := os.Lstat(f)
				require.NoError(t, err, "garbage file relinked")
			}
		})
	}
}

// TestScriptsLoaded: kvcm-gc's scripts, which the raw writes run by hash, are cached once its
// store opened.
func TestScriptsLoaded(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	conn, err := redismeta.ParseURI(srv.URI())
	require.NoError(t, err)
	st, err := redismeta.OpenStore(ctx, conn, redismeta.StoreOptions{})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.Len(t, redismeta.AllScripts(), 4)
	for _, sc := range redismeta.AllScripts() {
		ok, err := srv.Client().ScriptExists(ctx, sc.Hash()).Result()
		require.NoError(t, err)
		require.Equal(t, []bool{true}, ok, sc.Hash())
	}
}

// TestReportBothLayouts: a run of both layouts reports every summary figure for each, against
// its own baselines, and the serving rows of both placements.
func TestReportBothLayouts(t *testing.T) {
	rate := func(ops int) Rate { return Rate{Ops: ops, Dur: time.Second} }
	stageRun := func(st string, n int) StageRun {
		return StageRun{Stage: st, Items: n, Dur: time.Second, Usage: Usage{PeakRSS: 30 << 20}}
	}
	res := &Results{Config: Config{Unpaced: UnpacedProfile(), ServingWindow: time.Second, ServingRate: 10}, Machine: Machine{Cores: 2, CPUs: []int{0, 1}}}
	for _, layout := range []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy} {
		k := &Keyspace{Spec: KeyspaceSpec{Cluster: "main", Layout: layout}}
		k.Counts = KeyspaceCounts{Blocks: 1000, Locations: 2000, Garbage: 200, StatSpecs: 3800, GarbageFiles: 290}
		raw := &RawResults{Layout: layout, ScanBare: rate(100_000), ScanStore: rate(80_000), Read: rate(100), CAS: rate(100),
			CAD: rate(100), WriteLocs: 200, StatRoot: rate(100_000), StatDirRoot: rate(400_000), Unlink: rate(100_000),
			Publish: rate(1000), ScanPerMsg: 256, Sequential: rate(3000), SeqWorkers: 2, Workers: 2, ScriptsMatch: true}
		if layout == kvcm.LayoutLegacy {
			raw.ScanAll = rate(90_000)
		}
		alone := &AloneResults{Keyspace: "main", Blocks: 1000, Scanner: stageRun("scanner", 1000), Prober: stageRun("prober", 2000),
			Deleter: stageRun("deleter", 200)}
		var serving []Latency
		for _, pin := range []string{PinPinned, PinShared} {
			for _, mode := range []string{ModeOff, ModeDefault, ModeUnpaced} {
				serving = append(serving, Latency{Pin: pin, Mode: mode, Rep: 1, N: 10, P99: time.Millisecond})
			}
		}
		res.Layouts = append(res.Layouts, &LayoutResults{Layout: layout, Main: k, Raw: raw, Alone: alone, AloneSmall: alone,
			Serving: serving, E2E: &E2EResult{Dur: time.Second, Runs: []StageRun{stageRun("deleter", 200)}}})
	}
	rep := Report(res)
	for _, layout := range []string{"location", "legacy"} {
		for _, row := range []string{"scanner alone", "prober alone", "deleter alone", "end to end", "scanner peak RSS",
			"serving p99 per window, kvcm-gc default, pinned", "serving p99 per window, kvcm-gc default, shared cores"} {
			require.Contains(t, rep, "| "+layout+" | "+row, "%s %s", layout, row)
		}
		require.Contains(t, rep, "### Raw baselines, "+layout+" layout")
		require.Contains(t, rep, "### Serving impact, "+layout+" layout")
	}
	require.Contains(t, rep, "SCAN COUNT 256 + pipelined HGETALL) | 0.01")
	require.Contains(t, rep, "SCAN COUNT 256 + pipelined HMGET) | 0.01")
	require.Equal(t, 1, strings.Count(rep, "vs the same loop reading whole blocks"), "legacy only")
}

// TestReportIdle: the idle window's CPU is given per second of the window, each stage in
// the order it was started, and the summary's row is met only when every stage is within TargetIdleCPU.
func TestReportIdle(t *testing.T) {
	idle := func(prober time.Duration) *IdleRun {
		// A window of 20 s: 20 ms of CPU is 1 ms/s.
		return &IdleRun{Window: 20 * time.Second,
			Stages: []IdleStage{{"scanner", 20 * time.Millisecond}, {"prober", prober}, {"deleter", 10 * time.Millisecond}},
			NATS:   100 * time.Millisecond, Redis: 60 * time.Millisecond, RedisMain: 40 * time.Millisecond}
	}
	report := func(r *IdleRun) string {
		res := &Results{Config: Config{Unpaced: UnpacedProfile()}, Machine: Machine{Cores: 2, CPUs: []int{0, 1}}}
		res.Layouts = []*LayoutResults{{Layout: kvcm.LayoutLocation,
			E2E: &E2EResult{Dur: time.Second, Runs: []StageRun{{Stage: "deleter"}}, Idle: r}}}
		return Report(res)
	}

	rep := report(idle(31 * time.Millisecond))
	stages := "scanner 1.00 ms/s, prober 1.55 ms/s, deleter 0.50 ms/s"
	require.Contains(t, rep, "| location | stages idle between rounds, 20s | "+stages+" | NATS 5.00 ms/s, Redis 3.00 ms/s |  | ≤ 10.00 ms/s per stage | yes |")
	require.Contains(t, rep, "over 20s: "+stages+"; NATS 5.00 ms/s, Redis 3.00 ms/s (its main thread 2.00 ms/s)")

	// One stage over the bound: 220 ms in 20 s is 11 ms/s.
	require.Contains(t, report(idle(220*time.Millisecond)), "| ≤ 10.00 ms/s per stage | **no** |")
	// No window measured: no row.
	require.NotContains(t, report(nil), "idle between rounds")
}

// TestSchedTimes: a process's time on a core, from schedstat, grows by about the CPU it
// spends, in nanoseconds where the clock ticks of /proc/<pid>/stat count 10 ms.
func TestSchedTimes(t *testing.T) {
	pid := os.Getpid()
	run0, _ := schedTimes(pid)
	require.Positive(t, run0)
	deadline, x := time.Now().Add(50*time.Millisecond), 0
	for time.Now().Before(deadline) { // spin: 50 ms on a core, unless preempted
		x++
	}
	run1, _ := schedTimes(pid)
	require.Greater(t, run1-run0, time.Millisecond, "%d spins", x)
	require.NotZero(t, (run1-run0)%clockTick, "nanoseconds, not ticks")
}

// TestMeanRSS: each reading holds until the next, the last until the end of the interval;
// the time before the first reading and outside the interval does not count.
func TestMeanRSS(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := []RSSSample{{at(0), 10 << 20}, {at(100), 30 << 20}, {at(400), 20 << 20}}
	// 0–100 ms at 10 MiB, 100–400 at 30, 400–500 at 20: (1 + 9 + 2) / 5 = 24 MiB.
	require.Equal(t, int64(24<<20), meanRSS(s, at(0), at(500)))
	// 50–200 ms: 50 at 10, 100 at 30: 70/3 MiB.
	require.InDelta(t, float64(70<<20)/3, float64(meanRSS(s, at(50), at(200))), 1)
	// Before the first reading nothing is known: -100–100 ms is 10 MiB, not a mean with zeros.
	require.Equal(t, int64(10<<20), meanRSS(s, at(-100), at(100)))
	// A short peak weighs little: a run that is mostly at 20 MiB.
	s = []RSSSample{{at(0), 20 << 20}, {at(1000), 100 << 20}, {at(1050), 20 << 20}}
	require.InDelta(t, float64(20<<20)+float64(80<<20)*0.05/2, float64(meanRSS(s, at(0), at(2000))), 1)
	require.Zero(t, meanRSS(s, at(3000), at(2000)))
	require.Zero(t, meanRSS(nil, at(0), at(1)))
}

// TestDeleterMemoryRows: the deleter's 10% band is judged on the time-weighted mean of its
// resident set, its peak only against 150 MB; the other stages' peaks keep the band.
func TestDeleterMemoryRows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	run := func(st string, peak, mean int64, dur time.Duration) StageRun {
		return StageRun{Stage: st, Items: 1, From: t0, Dur: dur,
			Usage: Usage{PeakRSS: peak, RSS: []RSSSample{{At: t0, RSS: mean}}}}
	}
	small := &AloneResults{Blocks: 100_000, Scanner: run("scanner", 30<<20, 28<<20, time.Second),
		Prober: run("prober", 50<<20, 45<<20, time.Second), Deleter: run("deleter", 37<<20, 30<<20, time.Second)}
	big := &AloneResults{Blocks: 1_000_000, Scanner: run("scanner", 36<<20, 29<<20, 10*time.Second),
		Prober: run("prober", 51<<20, 46<<20, 10*time.Second), Deleter: run("deleter", 44<<20, 31<<20, 10*time.Second)}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	summaryRows(w, Config{}, &LayoutResults{Layout: kvcm.LayoutLocation, Alone: big, AloneSmall: small})
	rows := b.String()
	require.Contains(t, rows, "| location | scanner peak RSS, 100,000 → 1,000,000 blocks | 30 MB → 36 MB |  | +20% | ≤ 150 MB, within 10% | **no** |")
	require.Contains(t, rows, "| location | deleter peak RSS, 100,000 → 1,000,000 blocks | 37 MB → 44 MB |  | +19% | ≤ 150 MB (the 10% band: the time-weighted mean, next row) | yes |")
	require.Contains(t, rows, "| location | deleter RSS, time-weighted mean over its run (VmRSS every 50ms), 100,000 → 1,000,000 blocks | 30 MB → 31 MB | peak 37 MB → 44 MB | +3% | within 10% | yes |")
	lr := &LayoutResults{Layout: kvcm.LayoutLocation, Alone: big, AloneSmall: small}
	require.Contains(t, Report(&Results{Layouts: []*LayoutResults{lr}}), deleterMeanWhy, "the report says why")
	lr.AloneSmall = nil
	require.NotContains(t, Report(&Results{Layouts: []*LayoutResults{lr}}), deleterMeanWhy)
}

// TestLoadLatencyInWindow: a window of a read load is the requests sent in it, whenever
// their replies came.
func TestLoadLatencyInWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	l := &loadResult{start: t0, sent: []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}, lat: []time.Duration{ms, 5 * ms, 2 * ms, 9 * ms},
		late: []time.Duration{150 * ms, 350 * ms}, errs: []time.Duration{250 * ms}}
	w := l.latency(t0.Add(100*ms), t0.Add(300*ms))
	require.Equal(t, 2, w.N)
	require.Equal(t, []time.Duration{2 * ms, 5 * ms}, w.Samples)
	require.Equal(t, 5*ms, w.P99)
	require.Equal(t, 1, w.Late)
	require.Equal(t, 1, w.Errors)
}

// TestPaceCurve: each point pools the requests of its own windows against every request of
// every off window of the curve, and its keys/s is the keys of its windows over their length;
// a point's Redis CPU share is each window's less the off window's before it, averaged, and a
// duty point's pacer share the mean of its samples that have one.
func TestPaceCurve(t *testing.T) {
	us := time.Microsecond
	lat := func(slow time.Duration) Latency {
		// 100 requests: 98 of 100 µs, 2 of slow; the p99 is slow.
		s := make([]time.Duration, 100)
		for i := range s {
			s[i] = 100 * us
		}
		s[98], s[99] = slow, slow
		return Latency{N: len(s), P99: slow, Samples: s}
	}
	t0 := time.Unix(1000, 0)
	work := func(share float64) RedisWork {
		return RedisWork{Wall: time.Second, Main: time.Duration(share * float64(time.Second))}
	}
	res := &PaceResults{
		Points: []PacePoint{{Rate: 2000, Batch: 256}, {Batch: 256, Duty: 0.1}},
		Windows: []PaceWindow{
			{Point: -1, Rep: 1, Lat: lat(200 * us), Work: work(0.30)},
			{Point: 0, Rep: 1, Lat: lat(300 * us), Keys: 6000, Dur: 3 * time.Second, Work: work(0.40)},
			{Point: -1, Rep: 1, Lat: lat(400 * us), Work: work(0.20)},
			{Point: 1, Rep: 1, Lat: lat(500 * us), Keys: 30_000, Dur: 3 * time.Second, Work: work(0.31),
				Pace: []PaceSample{{At: t0, Share: 0.08, Reason: "duty"}, {At: t0, Reason: ""}, {At: t0, Reason: "duty"}}},
			{Point: -1, Rep: 2, Lat: lat(100 * us), Work: work(0.25)},
			{Point: 0, Rep: 2, Lat: lat(600 * us), Keys: 4000, Dur: 2 * time.Second},
			{Point: -1, Rep: 2, Lat: lat(100 * us), Work: work(0.20)},
			{Point: 1, Rep: 2, Lat: lat(100 * us), Keys: 0, Dur: time.Second, Work: work(0.29),
				Pace: []PaceSample{{At: t0, Share: 0.1, Reason: "floor"}}},
		},
	}
	c := paceCurve(res)
	require.Len(t, c, 2)
	// The off windows pooled: 392 × 100 µs, 2 × 100, 2 × 200, 2 × 400: the p99 (the 396th of
	// 400) is 200 µs.
	require.Equal(t, 200*us, c[0].OffP99)
	require.Equal(t, 200*us, c[1].OffP99)
	// Point 0: 196 × 100 µs, 2 × 300, 2 × 600: the p99 (the 198th of 200) is 600 µs.
	require.Equal(t, 600*us, c[0].P99)
	require.Equal(t, 200, c[0].N)
	require.Equal(t, 2, c[0].Windows)
	require.InDelta(t, 3.0, c[0].Ratio(), 1e-9)
	require.InDelta(t, 10_000.0/5, c[0].KeysPerSec, 1e-9)
	require.Zero(t, c[0].Share)
	require.False(t, c[0].ShareSeen)
	// Point 0's second window has no counters: the first alone, 0.40 − 0.30.
	require.InDelta(t, 0.10, c[0].CPUShare, 1e-9)
	// Point 1: 2 × 500 among 200: 500 µs; 30,000 keys in 4 s; the pacer's share of its two
	// samples that have one (a sample with a reason and a share of 0 was taken before the
	// pacer's first window was over); its CPU share (0.31 − 0.20 + 0.29 − 0.20) / 2.
	require.Equal(t, 500*us, c[1].P99)
	require.InDelta(t, 7500, c[1].KeysPerSec, 1e-9)
	require.InDelta(t, 0.09, c[1].Share, 1e-9)
	require.True(t, c[1].ShareSeen)
	require.Equal(t, "0.090", c[1].pacerShare())
	// A duty point none of whose samples had a share reports none, not a share of 0.
	unseen := res.Windows[3]
	unseen.Pace = []PaceSample{{At: t0}, {At: t0, Reason: "duty"}}
	res.Windows[3], res.Windows[7].Pace = unseen, nil
	c = paceCurve(res)
	require.False(t, c[1].ShareSeen)
	require.Equal(t, "none reported", c[1].pacerShare())
	require.InDelta(t, 0.10, c[1].CPUShare, 1e-9)
	require.Empty(t, paceCurve(&PaceResults{Points: res.Points}))
}

// TestStepReaction: the time from a step until the rate first moves below (or above) the
// rate at the step, sampled; a walk that never moves did not react, and a sample without a
// rate (a failed reading, the first second) is no move.
func TestStepReaction(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := []PaceSample{
		{At: at(-200), Rate: 8000, Reason: "duty"},
		{At: at(-100), Rate: 10_000, Reason: "duty"},
		{At: at(0), Rate: 10_000, Reason: "duty"}, // the step: the rate at it is 10,000
		{At: at(100), Reason: ""},                 // a failed reading says nothing
		{At: at(700), Rate: 0, Reason: "duty"},    // nor does one without a rate
		{At: at(1300), Rate: 10_000, Reason: "duty"},
		{At: at(2400), Rate: 5000, Reason: "duty"},
		{At: at(3500), Rate: 2500, Reason: "duty"},
		{At: at(4600), Rate: 3125, Reason: "floor"},
		{At: at(9000), Rate: 1, Reason: "cap"}, // after until
	}
	r := stepReaction(s, at(0), at(5000), true)
	require.True(t, r.Reacted)
	require.Equal(t, 2400*time.Millisecond, r.Took)
	require.InDelta(t, 10_000, r.At, 0)
	require.InDelta(t, 5000, r.First, 0)
	require.InDelta(t, 3125, r.Final, 0)
	// Rising from the pace at 3.5 s: the first sample above 2,500.
	r = stepReaction(s, at(3500), at(5000), false)
	require.True(t, r.Reacted)
	require.Equal(t, 1100*time.Millisecond, r.Took)
	// It never rose above the pace at the step.
	r = stepReaction(s, at(0), at(5000), false)
	require.False(t, r.Reacted)
	require.InDelta(t, 3125, r.Final, 0)
	// Nothing before the step: no pace to compare with.
	require.False(t, stepReaction(s, at(-1000), at(5000), true).Reacted)

	// Falls: 10,000 → 5,000 → 2,500 in (0, 5 s]; the rise does not count.
	require.Equal(t, 2, paceFalls(s, at(0), at(5000)))
	require.Equal(t, 0, paceFalls(s, at(-300), at(0)))
	require.InDelta(t, 10_000, paceAt(s, at(50)), 0)
	require.InDelta(t, 10_000, paceAt(s, at(800)), 0, "a sample without a rate is none")
}

// TestStepShares: the load step's walk takes, in each period, the period's share of Redis's
// main thread less the read load's own at that period's rate, and the report prints it
// beside the duty, failing a period over duty + 2 points.
func TestStepShares(t *testing.T) {
	work := func(wall, main time.Duration) RedisWork { return RedisWork{Wall: wall, Main: main} }
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	st := &PaceStep{From: 2000, To: 4000, Duty: 0.1,
		SettledAt: t0, Up: t0.Add(10 * time.Second), Down: t0.Add(20 * time.Second), End: t0.Add(30 * time.Second),
		IdleFrom: work(5*time.Second, 1000*ms), IdleTo: work(5*time.Second, 2000*ms), // 0.20 and 0.40 alone
		IdleFromLat: Latency{N: 10_000}, IdleToLat: Latency{N: 19_500}, During: Latency{N: 39_000},
		WorkBefore: work(10*time.Second, 2900*ms), WorkDuring: work(10*time.Second, 5300*ms), WorkAfter: work(10*time.Second, 2800*ms)}
	b, d, a := st.StepShares()
	require.InDelta(t, 0.09, b, 1e-9)
	require.InDelta(t, 0.13, d, 1e-9, "the period at 4,000/s less the read load's share at 4,000/s")
	require.InDelta(t, 0.08, a, 1e-9)
	require.Zero(t, walkShare(work(time.Second, ms), RedisWork{}), "no idle window: no share")
	require.Zero(t, (&PaceStep{}).WorkDuring.Share())

	var rows []string
	row := func(m, gc, base, ratio, target, met string) {
		rows = append(rows, strings.Join([]string{m, gc, base, ratio, target, met}, " | "))
	}
	p := &PaceResults{Step: st}
	paceSummaryRows(row, &LayoutResults{Layout: kvcm.LayoutLocation, Pace: p}, p)
	all := strings.Join(rows, "\n")
	require.Contains(t, all, "0.090, 0.130, 0.080 (read load alone: 0.200 at 2,000/s, 0.400 at 3,900/s) | duty 0.1 | +3.0 points during the step | ≤ duty + 2 points in each period | **no**")
	var out strings.Builder
	paceReport(func(f string, args ...any) { fmt.Fprintf(&out, f, args...) }, Config{ServingRate: 2000, ServingWindow: 3 * time.Second},
		&LayoutResults{Layout: kvcm.LayoutLocation, Pace: p})
	require.NotContains(t, out.String(), "%!")
	require.Contains(t, out.String(), "| after the step up | 4,000/s | 3,900 | 0 → 0 keys/s | 0 | 0 | 0.530 | 0.130 | 0.1 |")
	require.Contains(t, out.String(), "| 0.280 | 0.080 | 0.1 |")

	st.WorkDuring = work(10*time.Second, 5100*ms)
	rows = nil
	paceSummaryRows(row, &LayoutResults{Layout: kvcm.LayoutLocation, Pace: p}, p)
	require.Contains(t, strings.Join(rows, "\n"), "| ≤ duty + 2 points in each period | yes")
}

// TestKeysVisited: progress over rounds back to back counts the rounds before the current
// one at the last round's count (the estimate before the first round ends), and rates are
// taken between the samples at the ends of an interval.
func TestKeysVisited(t *testing.T) {
	require.Zero(t, keysVisited(pipeline.Checkpoint{}, 100))
	require.Equal(t, int64(40), keysVisited(pipeline.Checkpoint{Round: 1, KeysVisited: 40}, 100))
	require.Equal(t, int64(100+40), keysVisited(pipeline.Checkpoint{Round: 2, KeysVisited: 40}, 100))
	require.Equal(t, int64(2*105+40), keysVisited(pipeline.Checkpoint{Round: 3, KeysVisited: 40, LastRoundVisited: 105}, 100))
	// A round that is over still holds its count until the next begins.
	require.Equal(t, int64(105), keysVisited(pipeline.Checkpoint{Round: 1, KeysVisited: 105, LastRoundVisited: 105}, 100))

	t0 := time.Unix(1000, 0)
	s := []PaceSample{{At: t0, Visited: 0}, {At: t0.Add(time.Second), Visited: 1000}, {At: t0.Add(2 * time.Second), Visited: 3000},
		{At: t0.Add(3 * time.Second), Visited: 6000}}
	require.InDelta(t, 2500, visitedRate(s, t0.Add(time.Second), t0.Add(3*time.Second)), 1e-9)
	require.Zero(t, visitedRate(s, t0.Add(3*time.Second), t0.Add(3*time.Second)))
	// The rate over the second before a sample, from the sample a second before it.
	require.InDelta(t, 3000, trailingRate(s, s[3], time.Second), 1e-9)
	require.Zero(t, trailingRate(s[:1], PaceSample{At: t0.Add(300 * time.Millisecond), Visited: 50}, time.Second), "less than a second")
}

func TestParsePace(t *testing.T) {
	text := `# HELP kvcm_gc_store_pace_share_ratio The share
# TYPE kvcm_gc_store_pace_share_ratio gauge
kvcm_gc_store_pace_share_ratio{store="redis://127.0.0.1:1/0"} 0.094
kvcm_gc_store_pace_wait_seconds{store="redis://127.0.0.1:1/0"} 0.0021
kvcm_gc_store_pace_reason{reason="duty",store="redis://127.0.0.1:1/0"} 0
kvcm_gc_store_pace_reason{reason="floor",store="redis://127.0.0.1:1/0"} 1
kvcm_gc_scanned_keys_total 12
`
	p, ok := parsePace(strings.NewReader(text))
	require.True(t, ok)
	require.Equal(t, scrapedPace{Share: 0.094, Wait: 2100 * time.Microsecond, Reason: "floor"}, p)
	_, ok = parsePace(strings.NewReader("kvcm_gc_scanned_keys_total 12\n"))
	require.False(t, ok, "a walk paced by scan_interval exports no pace")
}

// TestGrowKeyspace: a metadata-only keyspace has no data files and empty storage roots, and
// grows by copies of every block under new keys of the same instance, field for field.
func TestGrowKeyspace(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "data")
	k, err := SeedKeyspace(ctx, srv.Client(), srv.URI(), KeyspaceSpec{Cluster: "t", Layout: kvcm.LayoutLocation, DB: keyspaceDB,
		Instances: 2, Blocks: 300, Locations: 2, Garbage: 0.2, Seed: 5, Root: root, NoFiles: true}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer k.Close()
	require.Zero(t, k.Counts.Files)
	for _, d := range []string{"nfs", "shared"} {
		entries, err := os.ReadDir(filepath.Join(root, d))
		require.NoError(t, err, "the storage roots exist")
		require.Empty(t, entries)
	}
	_, err = k.Verify(ctx)
	require.ErrorIs(t, err, errNotVerifiable)

	before := k.Counts
	keys, err := k.rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, k.Grow(ctx, 3))
	after, err := k.rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	blocks := int64(before.Blocks + before.SkippedBlocks)
	require.Equal(t, keys+2*blocks, after, "two copies of every block, nothing else")
	require.Equal(t, 3*before.Blocks, k.Counts.Blocks)
	require.Equal(t, 3*before.Garbage, k.Counts.Garbage)
	require.Equal(t, 3*before.SkippedBlocks, k.Counts.SkippedBlocks)
	for _, i := range []int{0, len(k.blocks) / 2, len(k.blocks) - 1} {
		b := k.blocks[i]
		src, err := k.rdb.HGetAll(ctx, k.BlockKey(i)).Result()
		require.NoError(t, err)
		for c := int64(1); c < 3; c++ {
			dst, err := k.rdb.HGetAll(ctx, kvcm.BlockKey(k.names[b.inst], b.key^c<<59)).Result()
			require.NoError(t, err)
			require.Equal(t, src, dst)
		}
	}
	require.Error(t, k.Grow(ctx, 2), "a second growth would copy onto the first copies")
}

// TestScaleRows: the scale phase judges the scanner's and the prober's rates and peaks on a
// band of 10% between its two sizes, the deleter's memory on its time-weighted mean.
func TestScaleRows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	run := func(st string, items int, dur time.Duration, peak, mean int64) StageRun {
		return StageRun{Stage: st, Items: items, From: t0, Dur: dur, Usage: Usage{PeakRSS: peak, RSS: []RSSSample{{At: t0, RSS: mean}}}}
	}
	small := &AloneResults{Scanner: run("scanner", 1_000_000, 10*time.Second, 33<<20, 32<<20),
		Prober: run("prober", 2_000_000, 10*time.Second, 60<<20, 55<<20), Deleter: run("deleter", 100_000, 5*time.Second, 40<<20, 33<<20)}
	large := &AloneResults{Scanner: run("scanner", 10_000_000, 105*time.Second, 34<<20, 32<<20),
		Prober: run("prober", 20_000_000, 130*time.Second, 61<<20, 56<<20), Deleter: run("deleter", 1_000_000, 50*time.Second, 48<<20, 35<<20)}
	r := &ScaleResults{Small: ScaleSize{Counts: KeyspaceCounts{Blocks: 1_000_000}, Alone: small},
		Large: ScaleSize{Counts: KeyspaceCounts{Blocks: 10_000_000}, Alone: large}}
	var rows []string
	scaleSummaryRows(func(m, gc, base, ratio, target, met string) {
		rows = append(rows, strings.Join([]string{m, gc, base, ratio, target, met}, " | "))
	}, r)
	require.Equal(t, []string{
		"scanner alone, metadata only (stat probe off), 1,000,000 → 10,000,000 blocks | 100,000 → 95,238 keys/s |  | -5% | within 10% | yes",
		"prober alone, metadata only (stat probe off), 1,000,000 → 10,000,000 blocks | 200,000 → 153,846 locations/s |  | -23% | within 10% | **no**",
		"deleter alone, metadata only (stat probe off), 1,000,000 → 10,000,000 blocks | 20,000 → 20,000 locations/s |  | +0% |  | ",
		"scanner peak RSS, metadata only, 1,000,000 → 10,000,000 blocks | 33 MB → 34 MB | time-weighted mean 32 MB → 32 MB | +3% | ≤ 150 MB, within 10% | yes",
		"prober peak RSS, metadata only, 1,000,000 → 10,000,000 blocks | 60 MB → 61 MB | time-weighted mean 55 MB → 56 MB | +2% | ≤ 150 MB, within 10% | yes",
		"deleter peak RSS, metadata only, 1,000,000 → 10,000,000 blocks | 40 MB → 48 MB | time-weighted mean 33 MB → 35 MB | +20% | ≤ 150 MB (the 10% band: the time-weighted mean, next row) | yes",
		"deleter RSS, time-weighted mean over its run, metadata only, 1,000,000 → 10,000,000 blocks | 33 MB → 35 MB | peak 40 MB → 48 MB | +6% | within 10% | yes",
	}, rows)
}
