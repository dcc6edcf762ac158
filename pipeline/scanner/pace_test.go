package scanner

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testPaceConfig() paceConfig {
	return paceConfig{budget: 0.1, slack: 0, quantile: 0.9, window: time.Second, minSamples: 5,
		baseline: 2 * time.Second, rebaseline: time.Minute, hold: time.Second / 2, keepHolds: 4, minHoldSamples: 3,
		minRate: 100, maxRate: 10000, startRate: 1000, minDepth: 8, maxDepth: 256, raiseAfter: 2, lowerStep: 0.5}
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
			step = p.window()
		}
		for j := range s.n {
			p.sample(now.Add(time.Duration(j+1)*step/time.Duration(s.n+1)), s.d, s.d)
		}
		now = now.Add(step)
		got := p.pace(now)
		require.Equal(t, s.reason, got.Reason, "step %d: %v", i, got)
		require.Equal(t, s.rate, got.Rate, "step %d: %v", i, got)
		require.Equal(t, s.depth, got.Depth, "step %d: %v", i, got)
	}
}

// raises are k pairs of windows within budget from rate, in bursts of depth: a hold, then a
// raise by a quarter (slow start over).
func raises(rate float64, depth, k int) []paceStep {
	var steps []paceStep
	for range k {
		steps = append(steps, paceStep{n: 10, d: 100 * time.Microsecond, reason: PaceHold, rate: rate, depth: depth})
		rate *= 1.25
		steps = append(steps, paceStep{n: 10, d: 100 * time.Microsecond, reason: PaceRaise, rate: rate, depth: depth})
	}
	return steps
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
		{"over budget twice in a row: slower in shorter bursts, then slower, then the floor", func(c *paceConfig) { c.minDepth = 16 }, []paceStep{
			base,
			{n: 10, d: 111 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 500, depth: 16},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 250, depth: 16},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 125, depth: 16},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 100, depth: 16},
			{n: 10, d: 200 * us, reason: PaceFloor, rate: 100, depth: 16},
		}},
		{"over budget at the lowest rate: only the bursts get shorter, then the floor", func(c *paceConfig) { c.minRate = 1000 }, []paceStep{
			base,
			{n: 10, d: 200 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 200 * us, reason: PaceLowerDepth, rate: 1000, depth: 16},
			{n: 10, d: 200 * us, reason: PaceLowerDepth, rate: 1000, depth: 8},
			{n: 10, d: 200 * us, reason: PaceFloor, rate: 1000, depth: 8},
		}},
		{"the serving load doubles at rate R and depth 256: below R at the second window over", func(c *paceConfig) {
			c.slowStart, c.maxRate = true, 8000
		}, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 2000, depth: 64},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 4000, depth: 128},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 8000, depth: 256},
			{n: 10, d: 100 * us, reason: PaceCeiling, rate: 8000, depth: 256},
			{n: 10, d: 105 * us, reason: PaceCeiling, rate: 8000, depth: 256},
			// The load doubles: the first window over is held, the second lowers the rate.
			{n: 10, d: 200 * us, reason: PaceHold, rate: 8000, depth: 256},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 4000, depth: 128},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 2000, depth: 64},
		}},
		{"the depth comes back once the rate has doubled past the one it was lowered at", nil, slices.Concat(
			[]paceStep{
				base,
				{n: 10, d: 200 * us, reason: PaceHold, rate: 1000, depth: 32},
				{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 500, depth: 16},
			},
			// Within budget: a quarter faster every two windows, in bursts of 16 until the
			// rate reaches 2,000, twice the 1,000 the bursts of 32 were over budget at.
			raises(500, 16, 6),
			[]paceStep{
				{n: 10, d: 100 * us, reason: PaceHold, rate: 1907.3486328125, depth: 16},
				{n: 10, d: 100 * us, reason: PaceRaise, rate: 2384.185791015625, depth: 32},
				{n: 10, d: 100 * us, reason: PaceHold, rate: 2384.185791015625, depth: 32},
				{n: 10, d: 100 * us, reason: PaceRaise, rate: 2980.23223876953125, depth: 32},
			})},
		{"one window over budget is not acted on: the next within starts the count again", nil, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 300 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 300 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 300 * us, reason: PaceLowerRate, rate: 500, depth: 16},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 500, depth: 16},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 625, depth: 16},
		}},
		{"too few samples in a window: the pace is kept", nil, []paceStep{
			base,
			{n: 2, d: 105 * us, reason: PaceFewSamples, rate: 1000, depth: 32},
		}},
		{"too few samples, but over budget: a slow store answers few probes, acted on at once", nil, []paceStep{
			base,
			{n: 2, d: 900 * us, reason: PaceLowerRate, rate: 500, depth: 16},
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
			{n: 10, d: 161 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 161 * us, reason: PaceLowerRate, rate: 500, depth: 16},
		}},
		{"the walk holds again to measure the idle latency, which joins the baseline", func(c *paceConfig) { c.rebaseline = 3 * time.Second }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceBaseline, rate: 0, depth: 64},
			// A short hold (500 ms) finds a higher idle latency: the baseline is the quantile of
			// both holds' probes, 300 µs. The window before the hold was within budget: with the
			// first after it, two in a row.
			{n: 10, d: 300 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 320 * us, reason: PaceRaise, rate: 1562.5, depth: 64},
			{n: 10, d: 320 * us, reason: PaceHold, rate: 1562.5, depth: 64},
		}},
		{"a window that ends as a hold is due is judged before it: over budget a second time, slower after the hold", func(c *paceConfig) { c.rebaseline = 3 * time.Second }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 200 * us, reason: PaceHold, rate: 1000, depth: 32},
			// The hold is due as this window ends: it lowers the pace, then the walk holds.
			{n: 10, d: 200 * us, reason: PaceBaseline, rate: 0, depth: 16},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 500, depth: 16},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 500, depth: 16},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 625, depth: 16},
		}},
		{"over budget, a hold, over budget: the first window after the hold lowers the pace", func(c *paceConfig) { c.rebaseline = 3 * time.Second }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 200 * us, reason: PaceBaseline, rate: 0, depth: 64},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 625, depth: 32},
		}},
		{"over budget, a hold, within budget: the hold's probes are the baseline's, not the next window's", func(c *paceConfig) { c.rebaseline = 3 * time.Second }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 200 * us, reason: PaceBaseline, rate: 0, depth: 64},
			// Too few to join the baseline; in the next window they would make it over budget.
			{n: 2, d: 900 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 200 * us, reason: PaceHold, rate: 1250, depth: 64},
		}},
		{"within budget, a hold, within budget: two windows in a row raise the pace", func(c *paceConfig) { c.rebaseline = 3 * time.Second }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceBaseline, rate: 0, depth: 64},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1562.5, depth: 64},
		}},
		{"a hold with too few probes keeps the baseline", func(c *paceConfig) { c.rebaseline = 2500 * time.Millisecond }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceBaseline, rate: 0, depth: 64},
			{n: 2, d: 900 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 120 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 120 * us, reason: PaceLowerRate, rate: 625, depth: 32},
		}},
		{"the baseline is the last keepHolds holds: 4, a quiet first hold's probes still count", func(c *paceConfig) { c.rebaseline = 2500 * time.Millisecond }, []paceStep{
			{n: 30, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceBaseline, rate: 0, depth: 64},
			{n: 3, d: 300 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 320 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 320 * us, reason: PaceLowerRate, rate: 625, depth: 32},
		}},
		{"the baseline is the last keepHolds holds: 1, the quiet first hold is gone", func(c *paceConfig) { c.rebaseline, c.keepHolds = 2500*time.Millisecond, 1 }, []paceStep{
			{n: 30, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 1250, depth: 64},
			{n: 10, d: 100 * us, reason: PaceBaseline, rate: 0, depth: 64},
			{n: 3, d: 300 * us, reason: PaceHold, rate: 1250, depth: 64},
			{n: 10, d: 320 * us, reason: PaceRaise, rate: 1562.5, depth: 64},
			{n: 10, d: 320 * us, reason: PaceHold, rate: 1562.5, depth: 64},
		}},
		{"slow start: double after each window within budget until a confirmed one over", func(c *paceConfig) { c.slowStart = true }, []paceStep{
			base,
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 2000, depth: 64},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 4000, depth: 128},
			{n: 10, d: 200 * us, reason: PaceHold, rate: 4000, depth: 128},
			{n: 10, d: 200 * us, reason: PaceLowerRate, rate: 2000, depth: 64},
			{n: 10, d: 100 * us, reason: PaceHold, rate: 2000, depth: 64},
			{n: 10, d: 100 * us, reason: PaceRaise, rate: 2500, depth: 64},
		}},
		{"a window decides only when it is over", nil, []paceStep{
			base,
			{n: 10, d: 900 * us, after: time.Second / 2, reason: PaceHold, rate: 1000, depth: 32},
			{n: 0, after: time.Second / 2, reason: PaceHold, rate: 1000, depth: 32},
			{n: 10, d: 900 * us, reason: PaceLowerRate, rate: 500, depth: 16},
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
	p.sample(now.Add(-time.Millisecond), time.Second, time.Second)
	require.Empty(t, p.samples)
}

// paceModel is a serving Redis as the probe sees it: an idle latency that grows with the
// serving load, plus what the walk's bursts add (their share of Redis's time, times half a
// burst's length, and the idle latency stretched by that share). With noise, each probe is
// also multiplied by a log-normal factor (σ 0.3) and one in fifty is five times as long: the
// scheduling of the probe's own host, which neither the walk nor the load causes.
//
// With hostPerKey, the probe's host also delays reading each reply by an exponential time of
// mean hostPerKey per key/s of the walk's rate: the scanner's own work (decoding, encoding,
// publishing its pages) that a faster walk brings, which a round trip holds and TIME's
// latency (the server's clock at the command less ours at the send, plus offset) does not.
type paceModel struct {
	hostPerKey time.Duration
	useTime    bool
	offset     time.Duration
	load       float64
	noise      *rand.Rand
	sigma      float64 // of the log-normal factor (0: 0.3)
	// drift, when set, multiplies the serving load at the run's time t: a load that changes
	// through the day.
	drift func(t time.Duration) float64
	t     time.Duration
}

func (m *paceModel) curLoad() float64 {
	if m.drift != nil {
		return m.load * m.drift(m.t)
	}
	return m.load
}

const modelPerKey = 3 * time.Microsecond // Redis's time per key read

func (m *paceModel) idle() float64 {
	return float64(100*time.Microsecond) * (1 + 0.5*(m.curLoad()-1))
}

// added is what the walk at pc adds to a probe's wait in Redis.
func (m *paceModel) added(pc Pace) time.Duration {
	busy := pc.Rate * modelPerKey.Seconds()
	burst := float64(time.Duration(pc.Depth) * modelPerKey)
	return time.Duration(busy*burst/2 + busy*m.idle())
}

// probe is one probe's latency and round trip at pc.
func (m *paceModel) probe(pc Pace) (d, rtt time.Duration) {
	x := m.server(pc)
	rtt = x
	if m.hostPerKey > 0 && m.noise != nil {
		rtt += time.Duration(m.noise.ExpFloat64() * pc.Rate * float64(m.hostPerKey))
	}
	if m.useTime {
		return m.offset + x - time.Duration(m.idle()/2), rtt
	}
	return rtt, rtt
}

// server is a probe's round trip but for its host's delay in reading the reply.
func (m *paceModel) server(pc Pace) time.Duration {
	d := m.idle() + float64(m.added(pc))
	if m.noise != nil {
		sigma := m.sigma
		if sigma == 0 {
			sigma = 0.3
		}
		d *= math.Exp(sigma * m.noise.NormFloat64())
		if m.noise.IntN(50) == 0 {
			d *= 5
		}
	}
	return time.Duration(d)
}

// limitRate is the highest rate at depth whose noise-free probe stays within the budget.
func (m *paceModel) limitRate(cfg paceConfig, depth int, load float64) float64 {
	idle := float64(100*time.Microsecond) * (1 + 0.5*(load-1))
	allowed := idle*cfg.budget + float64(cfg.slack)
	return allowed / (modelPerKey.Seconds() * (float64(time.Duration(depth)*modelPerKey)/2 + idle))
}

// paceRun drives a pacer with the model, a probe every 5 ms and a decision every 100 ms, for
// seconds; it returns every pace and the mean of what the walk adds to the noise-free probe
// latency while it walks.
type paceRun struct {
	p   *pacer
	m   *paceModel
	now time.Time
	pc  Pace
}

func (r *paceRun) run(seconds int) (paces []Pace, meanProbe time.Duration) {
	clean := paceModel{load: r.m.load, drift: r.m.drift}
	var sum time.Duration
	n := 0
	for range seconds * 10 {
		for j := range 20 {
			d, rtt := r.m.probe(r.pc)
			r.p.sample(r.now.Add(time.Duration(j)*5*time.Millisecond), d, rtt)
		}
		if r.pc.Rate > 0 {
			clean.t = r.m.t
			sum += clean.added(r.pc)
			n++
		}
		r.now = r.now.Add(100 * time.Millisecond)
		r.m.t += 100 * time.Millisecond
		r.pc = r.p.pace(r.now)
		paces = append(paces, r.pc)
	}
	if n > 0 {
		meanProbe = sum / time.Duration(n)
	}
	return paces, meanProbe
}

func meanRate(ps []Pace) float64 {
	sum := 0.0
	for _, p := range ps {
		sum += p.Rate
	}
	return sum / float64(len(ps))
}

// TestPacerFollowsTheLoad closes the loop on the model: without noise, with the noise of a
// busy host, and with a serving load that also drifts by up to 60% and back every minute. The
// walk settles near the fastest rate within the budget (at least a share of it, at the
// smallest burst and the highest load; never at the floor), what it adds to the latency within
// the budget on average; when the serving load doubles, its rate falls within 5 s; when the
// load falls back, it rises again.
//
// The pacer before this one measured its idle latency once, lowered its rate on a single
// window over budget and halved it each time: on this model it held 17,680 keys/s with the
// busy host's noise (a fifth of the limit) and 144 keys/s (its floor) once the load drifted
// above the level it had measured.
func TestPacerFollowsTheLoad(t *testing.T) {
	drift := func(t time.Duration) float64 { return 1 + 0.3*(1-math.Cos(2*math.Pi*t.Seconds()/60)) }
	for _, tc := range []struct {
		name  string
		noise bool
		sigma float64
		drift func(time.Duration) float64
		share float64 // of the limit rate at the smallest burst and the highest load, at least
	}{
		{"noise-free", false, 0, nil, 0.5},
		{"a busy host", true, 0.5, nil, 0.25},
		{"a busy host and a drifting load", true, 0.5, drift, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultPaceConfig(0.1, 256)
			m := &paceModel{load: 1, sigma: tc.sigma, drift: tc.drift}
			if tc.noise {
				m.noise = rand.New(rand.NewPCG(1, 2))
			}
			r := &paceRun{p: newPacer(cfg), m: m, now: time.Unix(1_760_000_000, 0)}
			r.pc = r.p.pace(r.now)
			r.run(120)
			settled, added := r.run(120)
			top := 1.0
			if tc.drift != nil {
				top = 1.6
			}
			limit := m.limitRate(cfg, cfg.minDepth, top)
			avg := meanRate(settled)
			t.Logf("settled at %.0f keys/s on average (limit %.0f at bursts of %d), now %v; the walk adds %v on average",
				avg, limit, cfg.minDepth, r.pc, added)
			require.GreaterOrEqual(t, avg, tc.share*limit)
			require.LessOrEqual(t, added, time.Duration(float64(100*time.Microsecond)*cfg.budget)+cfg.slack, "within budget on average")

			before := r.pc.Rate
			m.load = 2
			after, _ := r.run(5)
			fell := false
			for _, pc := range after {
				fell = fell || (pc.Rate > 0 && pc.Rate < before)
			}
			require.True(t, fell, "the rate fell within 5 s of the load doubling (from %.0f): %v", before, after)

			m.load = 1
			low := r.pc.Rate
			back, _ := r.run(60)
			require.Greater(t, meanRate(back[len(back)-100:]), low, "it rises again once the load is gone")
		})
	}
}

// TestPacerTimeProbe: on a host whose own work delays reading each reply more the faster the
// walk goes (20 µs per 1,000 keys/s on average), a pacer fed PING's round trips reads that as
// the store's latency and holds the walk back; fed TIME's latency it sees only the wait in
// Redis and settles near the store's limit. TIME's latency holds the clocks' offset: the paces
// are the same whatever it is, and a step of the clocks (a window that reads lower than the
// idle latency by more than a round trip) measures the baseline anew.
func TestPacerTimeProbe(t *testing.T) {
	cfg := defaultPaceConfig(0.1, 256)
	settle := func(useTime bool, offset time.Duration, step func(r *paceRun)) (float64, []Pace) {
		m := &paceModel{load: 1, sigma: 0.3, hostPerKey: 20 * time.Nanosecond, useTime: useTime, offset: offset,
			noise: rand.New(rand.NewPCG(3, 4))}
		r := &paceRun{p: newPacer(cfg), m: m, now: time.Unix(1_760_000_000, 0)}
		r.pc = r.p.pace(r.now)
		r.run(60)
		if step != nil {
			step(r)
		}
		r.run(60)
		settled, added := r.run(120)
		require.LessOrEqual(t, added, time.Duration(float64(100*time.Microsecond)*cfg.budget)+cfg.slack, "within budget on average")
		return meanRate(settled), settled
	}
	limit := (&paceModel{load: 1}).limitRate(cfg, cfg.minDepth, 1)
	ping, _ := settle(false, 0, nil)
	timed, paces := settle(true, 0, nil)
	t.Logf("limit %.0f keys/s; settled at %.0f by PING, %.0f by TIME", limit, ping, timed)
	require.GreaterOrEqual(t, timed, 0.25*limit)
	require.Greater(t, timed, 2*ping, "TIME's latency does not hold the host's own delay")

	for _, off := range []time.Duration{3 * time.Millisecond, -5 * time.Millisecond} {
		_, got := settle(true, off, nil)
		require.Equal(t, paces, got, "offset %v", off)
	}

	stepped := false
	timed, _ = settle(true, 0, func(r *paceRun) {
		r.m.offset -= 10 * time.Millisecond // the clocks step back
		before := len(r.p.holds)
		ps, _ := r.run(3)
		for _, pc := range ps {
			stepped = stepped || pc.Reason == PaceBaseline
		}
		require.Positive(t, before)
	})
	require.True(t, stepped, "the step measured the baseline anew")
	require.GreaterOrEqual(t, timed, 0.25*limit, "and the walk went on at its pace")
}
