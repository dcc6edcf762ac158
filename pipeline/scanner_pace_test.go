package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testPaceConfig() paceConfig {
	return paceConfig{budget: 0.1, slack: 0, quantile: 0.9, window: time.Second, minSamples: 5,
		baseline: 2 * time.Second, rebaseline: time.Minute, minRate: 100, maxRate: 10000, startRate: 1000,
		minDepth: 8, maxDepth: 256, raiseAfter: 2}
}

// paceStep is one window of a table: samples of latency d, n of them, then a decision at the
// window's end.
type paceStep struct {
	n      int
	d      time.Duration
	after  time.Duration // the decision comes this long after the previous one (default: a window)
	reason string
	rate   float64
	depth  int
}

func runPace(t *testing.T, cfg paceConfig, steps []paceStep) {
	t.Helper()
	p := newPacer(cfg)
	now := time.Unix(1_760_000_000, 0)
	first := p.pace(now)
	require.Equal(t, PaceBaseline, first.Reason)
	require.Zero(t, first.Rate, "the walk holds while the idle latency is measured")
	for i, s := range steps {
		step := s.after
		if step == 0 {
			step = cfg.window
			if p.baselining {
				step = cfg.baseline
			}
		}
		for j := range s.n {
			p.sample(now.Add(time.Duration(j+1)*step/time.Duration(s.n+1)), s.d)
		}
		now = now.Add(step)
		got := p.pace(now)
		require.Equal(t, s.reason, got.Reason, "step %d: %v", i, got)
		require.Equal(t, s.rate, got.Rate, "step %d: %v", i, got)
		require.Equal(t, s.depth, got.Depth, "step %d: %v", i, got)
	}
}

func TestPacer(t *testing.T) {
	const us = time.Microsecond
	base := paceStep{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32}
	for _, tc := range []struct {
		name  string
		cfg   func(*paceConfig)
		steps []paceStep
	}{
		{"within budget: hold, then raise by a quarter and double the burst", nil, []paceStep{
			base,
			{n: 10, d: 105 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 110 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1562.5, depth: 64},
		}},
		{"too few samples to measure the idle latency: keep measuring", nil, []paceStep{
			{n: 3, d: 100 * us, reason: PaceBaseline, rate: 0, depth: 32},
			base,
		}},
		{"over budget: shorter bursts first, then slower, then the floor", func(c *paceConfig) { c.minDepth = 16 }, []paceStep{
			base,
			{n: 10, d: 111 * us, reason: PaceLowerDepth, rate: 1000, depth: 16},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 500, depth: 16},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 250, depth: 16},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 125, depth: 16},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 100, depth: 16},
			{n: 10, d: 200 * us, reason: PaceFloor, rate: 100, depth: 16},
		}},
		{"a quiet window after an over-budget one starts the count again", nil, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 300 * us, reason: PaceLowerDepth, rate: 1000, depth: 16},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 16},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 16},
		}},
		{"too few samples in a window: the pace is kept", nil, []paceStep{
			base,
			{n: 2, d: 105 * us, reason: PaceFewSamples, rate: 1000, depth: 32},
		}},
		{"too few samples, but over budget: a slow store answers few probes", nil, []paceStep{
			base,
			{n: 2, d: 900 * us, reason: PaceLowerDepth, rate: 1000, depth: 16},
		}},
		{"the ceiling", func(c *paceConfig) { c.maxRate = 1250 }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceCeiling, rate: 1250, depth: 64},
		}},
		{"the slack allows a rise the budget alone would not", func(c *paceConfig) { c.slack = 50 * us }, []paceStep{
			base,
			{n: 10, d: 150 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 161 * us, reason: PaceLowerDepth, rate: 1000, depth: 16},
		}},
		{"the idle latency is measured again", func(c *paceConfig) { c.rebaseline = 3 * time.Second }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceBaseline, rate: 0, depth: 64},
			{n: 10, d: 300 * us, reason: PaceHold, rate: 1250, depth: 64}, // a new, higher idle latency
			{n: 10, d: 320 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 320 * us, reason: PaceRaise, rate: 1562.5, depth: 64},
		}},
		{"slow start: double after each window within budget until one is over", func(c *paceConfig) { c.slowStart = true }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 2000, depth: 64},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 4000, depth: 128},
			{n: 10, d: 200 * us, reason: PaceLowerDepth, rate: 4000, depth: 64},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 4000, depth: 64},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 5000, depth: 64},
		}},
		{"a window decides only when it is over", nil, []paceStep{
			base,
			{n: 10, d: 900 * us, after: time.Second / 2, reason: PaceHold, rate: 1000, depth: 32},
			{n: 0, after: time.Second / 2, reason: PaceLowerDepth, rate: 1000, depth: 16},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testPaceConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			runPace(t, cfg, tc.steps)
		})
	}
}

// TestPacerDropsStaleSamples: a probe sent before the window began measured the previous
// pace and is not counted.
func TestPacerDropsStaleSamples(t *testing.T) {
	p := newPacer(testPaceConfig())
	now := time.Unix(1_760_000_000, 0)
	p.pace(now)
	p.sample(now.Add(-time.Millisecond), time.Second)
	require.Empty(t, p.samples)
}

// TestPacerFollowsTheLoad closes the loop on a model of a serving Redis: the probe's latency
// is an idle latency that grows with the serving load, plus what the walk's bursts add (their
// share of Redis's time, times half a burst's length). The walk settles below the budget; when
// the serving load doubles, its rate falls within 5 s; when the load falls back, it rises again.
func TestPacerFollowsTheLoad(t *testing.T) {
	cfg := defaultPaceConfig(0.1, 256)
	cfg.rebaseline = 0
	p := newPacer(cfg)
	const perKey = 3 * time.Microsecond // Redis's time per key read
	load := 1.0
	probe := func(pc Pace) time.Duration {
		idle := time.Duration(float64(100*time.Microsecond) * (1 + 0.5*(load-1)))
		busy := pc.Rate * perKey.Seconds()        // share of Redis's time the walk takes
		burst := time.Duration(pc.Depth) * perKey // one burst's length
		return idle + time.Duration(busy*float64(burst)/2) + time.Duration(busy*float64(idle))
	}
	now := time.Unix(1_760_000_000, 0)
	pc := p.pace(now)
	run := func(seconds int) []Pace {
		var out []Pace
		for range seconds * 10 {
			for j := range 5 {
				p.sample(now.Add(time.Duration(j)*20*time.Millisecond), probe(pc))
			}
			now = now.Add(100 * time.Millisecond)
			pc = p.pace(now)
			out = append(out, pc)
		}
		return out
	}
	run(120)
	settled := pc
	require.Positive(t, settled.Rate)
	require.LessOrEqual(t, probe(settled), 110*time.Microsecond+cfg.slack+5*time.Microsecond)
	t.Logf("settled at %v", settled)

	load = 2
	after := run(5)
	require.Less(t, after[len(after)-1].Rate, settled.Rate, "the rate fell within 5 s of the load doubling: %v", after)

	load = 1
	run(120)
	require.GreaterOrEqual(t, pc.Rate, after[len(after)-1].Rate)
	t.Logf("back at %v", pc)
}
