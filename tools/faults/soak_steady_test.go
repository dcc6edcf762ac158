package faults

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// series makes samples of one metric: vals[i] is round i+1's value of the process procs[i].
func series(procs []string, vals []float64) []stageSample {
	var out []stageSample
	for i, v := range vals {
		out = append(out, stageSample{Stage: "prober", Proc: procs[i], Round: uint64(i + 1), Values: map[string]float64{"rss": v}})
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

// TestSlopeOf: the repeated-median slope per round as a share of the mean, taken between samples of
// one process only, robust to a disturbed round.
func TestSlopeOf(t *testing.T) {
	tests := []struct {
		name    string
		procs   []string
		vals    []float64
		rel     float64 // expected Rel, ±0.001
		fail    bool
		unknown bool
	}{
		{"flat", same(10, "a"), []float64{100, 100, 100, 100, 100, 100, 100, 100, 100, 100}, 0, false, false},
		{"noise around a level", same(10, "a"), []float64{100, 101, 99, 100, 102, 98, 100, 101, 99, 100}, 0, false, false},
		{"a leak of 2% per round", same(10, "a"), []float64{100, 102, 104, 106, 108, 110, 112, 114, 116, 118}, 2.0 / 109, true, false},
		{"one spike in a flat series", same(10, "a"), []float64{100, 100, 100, 100, 180, 100, 100, 100, 100, 100}, 0, false, false},
		{"two disturbed rounds at the end", same(10, "a"), []float64{100, 100, 101, 100, 99, 100, 100, 101, 140, 145}, 0, false, false},
		{"a decline is no leak", same(10, "a"), []float64{118, 116, 114, 112, 110, 108, 106, 104, 102, 100}, -2.0 / 109, false, false},
		{"a restart is no decline and no growth", append(same(5, "a"), same(5, "b")...),
			[]float64{200, 200, 200, 200, 200, 100, 100, 100, 100, 100}, 0, false, false},
		{"a leak across a restart is still found", append(same(5, "a"), same(5, "b")...),
			[]float64{100, 103, 106, 109, 112, 50, 53, 56, 59, 62}, 3.0 / 80.5, true, false},
		{"too few samples of one process", []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"},
			[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := slopeOf("prober", "rss", series(tt.procs, tt.vals), 0.01)
			require.Equal(t, tt.unknown, st.Unknown, "%+v", st)
			if tt.unknown {
				return
			}
			require.InDelta(t, tt.rel, st.Rel, 0.001, "%+v", st)
			require.Equal(t, tt.fail, st.Fail, "%+v", st)
		})
	}
}

// TestSteadinessWindow: only the last Window rounds count, and only samples of processes
// past their warm-up.
func TestSteadinessWindow(t *testing.T) {
	const warmRounds = 3
	s := &soak{cfg: SoakConfig{Window: 10, MaxSlope: 0.01, WarmRounds: warmRounds}}
	// A process that grew while it warmed up (rounds 1–10), then held flat; restarted at
	// round 19, growing again for its first warmRounds rounds, then flat at another level.
	for r := 1; r <= 25; r++ {
		proc, age, v := "prober-0", r, 100.0
		switch {
		case r <= 10:
			v = float64(50 + 5*r)
		case r >= 19:
			proc, age = "prober-1", r-18
			v = 100 + float64(min(age, warmRounds))*10
		}
		s.samples = append(s.samples, stageSample{Stage: stageProber, Proc: proc, Round: uint64(r), Age: age,
			Values: map[string]float64{"rss": v, "goroutines": 20}})
	}
	got := map[string]Steadiness{}
	for _, st := range s.steadiness() {
		if st.Stage == stageProber {
			got[st.Metric] = st
		}
	}
	require.False(t, got["rss"].Fail, "%+v", got["rss"])
	require.False(t, got["rss"].Unknown, "%+v", got["rss"])
	require.Equal(t, 2, got["rss"].Procs, "both processes' settled samples")
	// Rounds 16–25: prober-0's 16–18, prober-1's past its warm-up (ages 4–7: rounds 22–25).
	require.Equal(t, 3+7-warmRounds, got["rss"].Samples, fmt.Sprintf("%+v", got["rss"]))
	require.Zero(t, got["goroutines"].Rel)
}

// TestFloorsSpikes: a round that read high (a prober holding a batch through the round's only
// collection) lifts no floor; a leak under such spikes lifts every floor.
func TestFloorsSpikes(t *testing.T) {
	judge := func(vals []float64) Steadiness {
		return judgeProber(t, SoakConfig{Window: 10, MaxSlope: 0.01, WarmRounds: 1}, "heap_live", 2, vals)
	}
	spiky := []float64{3, 3, 15, 3, 3, 8, 3, 15, 15, 3, 3, 3, 9, 3, 3}
	st := judge(spiky)
	require.False(t, st.Fail, "%+v", st)
	require.InDelta(t, 0, st.Rel, 1e-9, "%+v", st)
	var leak []float64
	for i, v := range spiky {
		leak = append(leak, v+0.1*float64(i)) // 3% of the floor per round
	}
	st = judge(leak)
	require.True(t, st.Fail, "%+v", st)
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

// TestShortSoakJudges: the short soak's settings fail a leak of a goroutine, a file or
// 2 MiB of resident set a round, in a stage that ran from the start and in one a fault
// restarted in round 2, and pass a sound run whose heap floors scatter as they do on a loaded
// machine (reported, not judged).
func TestShortSoakJudges(t *testing.T) {
	cfg := ShortSoakConfig()
	const mib = 1 << 20
	// run makes 12 rounds of the prober (one process) and the deleter (restarted in round 2);
	// leak(stage, round) is what a leak adds to every figure's base at that round.
	run := func(metric string, leak func(stage string, r int) float64) map[string]Steadiness {
		s := &soak{cfg: cfg}
		base := map[string]float64{"rss": 40 * mib, "heap_live": 3 * mib, "heap_inuse": 5 * mib, "goroutines": 20, "fds": 15}
		for r := 1; r <= cfg.Rounds; r++ {
			for _, st := range []string{stageProber, stageDeleter} {
				proc, age := st+"-0", r
				if st == stageDeleter && r >= 2 {
					proc, age = st+"-1", r-1
				}
				vals := map[string]float64{}
				for k, v := range base {
					vals[k] = v
				}
				// The heap floors of a sound run on a loaded machine: up and down by a MiB.
				vals["heap_live"] += float64(r%3) * 0.6 * mib
				vals["heap_inuse"] += float64(r%3) * 0.9 * mib
				vals[metric] += leak(st, r)
				s.samples = append(s.samples, stageSample{Stage: st, Proc: proc, Round: uint64(r), Age: age, Values: vals})
			}
		}
		got := map[string]Steadiness{}
		for _, st := range s.steadiness() {
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
			require.False(t, st.Unknown, "sound run, %s %s: %+v", stage, m.name, st)
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
	// The heap figures are reported: their slope is there, never a failure.
	got := run("heap_live", func(_ string, r int) float64 { return 0.5 * mib * float64(r) })
	require.True(t, got[stageProber].Unjudged)
	require.InDelta(t, 0.5*mib, got[stageProber].Slope, 0.3*mib, "%+v", got[stageProber])
	require.False(t, got[stageProber].Fail)
}

// TestSoakHeapSlack: `make soak`'s settings pass a prober's heap_inuse that scatters between
// 4.4 and 5.6 MiB round by round on a slight slope (what a 30-minute soak read, +1.11% of the
// mean a round while its live heap was flat), and fail a heap that grows by 256 KiB a round.
func TestSoakHeapSlack(t *testing.T) {
	cfg := DefaultSoakConfig()
	const kib = 1 << 10
	judge := func(vals []float64) Steadiness { return judgeProber(t, cfg, "heap_inuse", 1, vals) }
	scatter := []float64{4.4, 5.6, 4.6, 5.2, 4.5, 5.6, 4.8, 5.3, 4.6, 5.5, 4.9, 5.6, 4.7, 5.4, 5.0, 5.6, 4.9, 5.5, 5.1, 5.6}
	var sound, leak []float64
	for i, v := range scatter {
		sound = append(sound, v*1024*kib+float64(i)*57*kib)
		leak = append(leak, v*1024*kib+float64(i)*256*kib)
	}
	st := judge(sound)
	require.False(t, st.Fail, "%+v", st)
	require.True(t, st.Slack, "over 1%% of the mean, within the slack: %+v", st)
	st = judge(leak)
	require.True(t, st.Fail, "%+v", st)
}

// judgeProber judges metric of one prober process that read vals in rounds 1, 2, … at ages
// firstAge, firstAge+1, …, under cfg.
func judgeProber(t *testing.T, cfg SoakConfig, metric string, firstAge int, vals []float64) Steadiness {
	t.Helper()
	s := &soak{cfg: cfg}
	for i, v := range vals {
		s.samples = append(s.samples, stageSample{Stage: stageProber, Proc: "prober-0", Round: uint64(i + 1), Age: i + firstAge,
			Values: map[string]float64{metric: v}})
	}
	for _, st := range s.steadiness() {
		if st.Stage == stageProber && st.Metric == metric {
			return st
		}
	}
	t.Fatalf("no prober %s", metric)
	return Steadiness{}
}
