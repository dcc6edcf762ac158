package faults

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// samplesOf makes one stage's samples of one metric: vals[i] is round first+i's value, of the
// process procs[i], at the age the process has then.
func samplesOf(stage, metric string, first int, procs []string, vals []float64) []stageSample {
	var out []stageSample
	age := map[string]int{}
	for i, v := range vals {
		age[procs[i]]++
		out = append(out, stageSample{Stage: stage, Proc: procs[i], Round: uint64(first + i), Age: age[procs[i]],
			Values: map[string]float64{metric: v}})
	}
	return out
}

func same(n int, p string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = p
	}
	return out
}

// judged returns the verdict of the prober's metric.
func judged(t *testing.T, samples []stageSample, metric string, rule SteadyRule) Steadiness {
	t.Helper()
	for _, st := range judgeSteady(samples, rule) {
		if st.Stage == stageProber && st.Metric == metric {
			return st
		}
	}
	t.Fatalf("no prober %s", metric)
	return Steadiness{}
}

// TestJudgeSteady: the rule tells a leak from noise, keeps a restart's level out of the slope,
// leaves out the first rounds of a process, and says it cannot tell when the interval holds the
// limit — which fails only a run that must conclude.
func TestJudgeSteady(t *testing.T) {
	long := SteadyRule{Window: 60, Batch: 6, WarmRounds: 5, MaxSlope: 0.01, Conclude: true}
	rng := rand.New(rand.NewPCG(3, 4))
	// 80 rounds of a 40 MiB resident set whose noise keeps 0.7 of the last round's, sd about
	// 1.4% of the mean, on a slope of perRound (a share of the mean).
	series := func(perRound float64, procs []string) []stageSample {
		var vals []float64
		noise := 0.0
		for i := range procs {
			noise = 0.7*noise + rng.NormFloat64()*0.01
			vals = append(vals, 40*(1+perRound*float64(i)+noise))
		}
		return samplesOf(stageProber, "rss", 1, procs, vals)
	}
	one := same(80, "prober-0")
	st := judged(t, series(0, one), "rss", long)
	require.Equal(t, VerdictFlat, st.Verdict, "%+v", st)
	require.False(t, st.Fail)
	require.Equal(t, 60, st.Fit.Samples)
	require.Equal(t, 10, st.Fit.Batches)

	st = judged(t, series(0.03, one), "rss", long)
	require.Equal(t, VerdictGrows, st.Verdict, "%+v", st)
	require.True(t, st.Fail)

	// Restarts every 20 rounds, each process starting at another level: a level per process,
	// so neither the drops nor the climbs of the warm-up make a slope.
	var restarted []string
	var vals []float64
	for i := range 80 {
		p := i / 20
		restarted = append(restarted, "prober-"+string(rune('0'+p)))
		level := []float64{40, 30, 45, 35}[p]
		age := i % 20
		v := level + float64(i%3)*0.2
		if age < 5 {
			v = level * float64(age+1) / 6 // filling its heap and pools
		}
		vals = append(vals, v)
	}
	st = judged(t, samplesOf(stageProber, "rss", 1, restarted, vals), "rss", long)
	require.Equal(t, VerdictFlat, st.Verdict, "%+v", st)
	require.Equal(t, 3, st.Procs, "the window's rounds 21-80, three processes")

	// A leak across restarts is still a leak.
	for i := range vals {
		vals[i] += 0.8 * float64(i%20) // 2% of the mean a round within each process
	}
	st = judged(t, samplesOf(stageProber, "rss", 1, restarted, vals), "rss", long)
	require.Equal(t, VerdictGrows, st.Verdict, "%+v", st)

	// Too few rounds to tell: the interval holds the limit.
	short := series(0.005, same(12, "prober-0"))
	for i := range short {
		short[i].Values["rss"] += 2 * float64(i%2)
	}
	st = judged(t, short, "rss", long)
	require.Equal(t, VerdictCantTell, st.Verdict, "%+v", st)
	require.True(t, st.Fail, "a long run must conclude")
	rule := long
	rule.Conclude = false
	st = judged(t, short, "rss", rule)
	require.Equal(t, VerdictCantTell, st.Verdict, "%+v", st)
	require.False(t, st.Fail, "reported only")

	// Goroutines that never move are flat for certain, and one more a round grows.
	flat := samplesOf(stageProber, "goroutines", 1, one, func() []float64 {
		v := make([]float64, 80)
		for i := range v {
			v[i] = 20
		}
		return v
	}())
	st = judged(t, flat, "goroutines", long)
	require.Equal(t, VerdictFlat, st.Verdict, "%+v", st)
	require.Zero(t, st.Fit.Hi-st.Fit.Lo)
	for i := range flat {
		flat[i].Values["goroutines"] += float64(i)
	}
	require.Equal(t, VerdictGrows, judged(t, flat, "goroutines", long).Verdict)
}

// TestShortSoakJudges: the short soak's rule fails a leak of a goroutine, a file or 2 MiB of
// resident set a round, in a stage that ran from the start and in one a fault restarted in
// round 2, and does not fail a sound run whose heap floors scatter as they do on a loaded
// machine.
func TestShortSoakJudges(t *testing.T) {
	cfg := ShortSoakConfig()
	const mib = 1 << 20
	run := func(metric string, leak func(stage string, r int) float64) map[string]Steadiness {
		var samples []stageSample
		ages := map[string]int{}
		for r := 1; r <= cfg.Rounds; r++ {
			for _, st := range []string{stageProber, stageDeleter} {
				proc := st + "-0"
				if st == stageDeleter && r >= 2 {
					proc = st + "-1"
				}
				ages[proc]++
				vals := map[string]float64{"rss": 40 * mib, "heap_live": 3 * mib, "heap_inuse": 5 * mib, "goroutines": 20, "fds": 15}
				// The heap floors of a sound run on a loaded machine: up and down by a MiB.
				vals["heap_live"] += float64(r%3) * 0.6 * mib
				vals["heap_inuse"] += float64(r%3) * 0.9 * mib
				vals["rss"] += float64(r%2) * 0.3 * mib
				vals[metric] += leak(st, r)
				samples = append(samples, stageSample{Stage: st, Proc: proc, Round: uint64(r), Age: ages[proc], Values: vals})
			}
		}
		got := map[string]Steadiness{}
		for _, st := range judgeSteady(samples, cfg.Steady) {
			if st.Metric == metric && (st.Stage == stageProber || st.Stage == stageDeleter) {
				got[st.Stage] = st
			}
		}
		return got
	}
	none := func(string, int) float64 { return 0 }
	for _, m := range stageMetrics {
		for stage, st := range run(m.name, none) {
			require.False(t, st.Fail, "sound run, %s %s: %+v", stage, m.name, st)
			require.NotEqual(t, VerdictGrows, st.Verdict, "sound run, %s %s: %+v", stage, m.name, st)
		}
	}
	leaks := []struct {
		metric string
		per    float64
	}{{"rss", 2 * mib}, {"goroutines", 1}, {"fds", 1}}
	for _, l := range leaks {
		for _, stage := range []string{stageProber, stageDeleter} {
			got := run(l.metric, func(st string, r int) float64 {
				if st != stage {
					return 0
				}
				return l.per * float64(r)
			})
			require.True(t, got[stage].Fail, "%s leaking %s: %+v", stage, l.metric, got[stage])
			other := stageProber
			if stage == stageProber {
				other = stageDeleter
			}
			require.False(t, got[other].Fail, "%s not leaking %s: %+v", other, l.metric, got[other])
		}
	}
}

// TestProcFloorHeapFigures: the heap figures of a round are what the last collection found
// live, not what was allocated since: readings at different points of a GC cycle give the
// same floor, which only a larger live heap raises.
func TestProcFloorHeapFigures(t *testing.T) {
	reading := func(live, alloc, inuse float64) map[string]float64 {
		return map[string]float64{"go_gc_heap_live_bytes": live, "go_memstats_heap_alloc_bytes": alloc,
			"go_memstats_heap_inuse_bytes": inuse, "go_goroutines": 20}
	}
	f := &procFloor{proc: "prober-0", least: map[string]float64{}}
	// 4 MiB live with 1 MiB of fragmentation, read 0, 2 and 5 MiB into the cycle.
	for _, since := range []float64{2 << 20, 0, 5 << 20} {
		f.add(reading(4<<20, 4<<20+since, 5<<20+since))
	}
	if got := f.least["heap_live"]; got != 4<<20 {
		t.Fatalf("heap_live %v, want 4 MiB", got)
	}
	if got := f.least["heap_inuse"]; got != 5<<20 {
		t.Fatalf("heap_inuse %v, want 5 MiB", got)
	}
	// A reading without the live heap (an older runtime) gives no heap figures at all.
	g := &procFloor{proc: "prober-1", least: map[string]float64{}}
	g.add(map[string]float64{"go_memstats_heap_alloc_bytes": 9 << 20, "go_goroutines": 20})
	if _, ok := g.least["heap_live"]; ok {
		t.Fatal("heap_live from a reading without go_gc_heap_live_bytes")
	}
	if _, ok := g.least["heap_inuse"]; ok {
		t.Fatal("heap_inuse from a reading without go_gc_heap_live_bytes")
	}
}
