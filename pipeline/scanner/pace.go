package scanner

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Adaptive pacing of a store's walk, for when the operator sets no rate (max_keys_per_second
// 0). A fixed pace is either slow (a page a second: a 100M-key store in 4.5 days) or harmful
// (unpaced, the serving p99 grows fivefold), and the right one changes with the serving load
// through the day. The pacer finds it from what the walk measures: a probe command sent to the
// store between the walk's own bursts, which waits in Redis's one event loop behind whatever
// else is queued there, as a serving request does. Its latency over a window is compared with
// an idle baseline, measured while the walk holds; the walk speeds up while the rise stays
// within scanner.latency_budget of the idle round trip and backs off when it does not.
//
// The probe is TIME where the store allows it: the latency is then the server's clock when it
// ran the command less this host's when it sent it (the wait in Redis, without the time this
// process took to read the reply, which on a busy scanner host is most of a round trip's noise
// and grows with the walk's own work), and the idle round trip sets the scale of the budget.
// That latency holds the clocks' offset too, so only its rise over its own idle value means
// anything; a window that reads lower than the idle value by more than a round trip can only
// be the clocks moving, and the baseline is measured anew. Where TIME is refused, PING's round
// trip is both.
//
// The idle baseline is kept fresh and paired with what it is compared with: the walk holds
// briefly every rebaseline (a short hold of hold, after a first, longer one of baseline), and
// the baseline is the quantile of the probes of the last keepHolds holds together. A baseline
// measured once goes stale as the serving load changes through the day: measured at a quiet
// moment, every busier one reads as the walk's doing and the walk crawls at its floor;
// measured at a busy one, the walk takes what a quieter store could not spare. A hold starts
// as a window ends, once that window is judged against the baseline it was measured against,
// and the next window starts as the hold ends: the hold's probes are the baseline's only, and
// no window spans a hold. A hold is no window either: the windows on both sides of it are in a
// row, so one over budget before it and one after it lower the pace, and within budget they
// count together towards a raise.
//
// The signal is noisy (the probe's round trip also holds the scanner host's scheduling), so
// one window over budget is not acted on: the walk holds its pace, and backs off only when the
// next window is over budget too (or a slow store answers too few probes to say more). Each
// confirmed window over budget lowers the rate by lowerStep and halves the depth while it is
// above its minimum (at the lowest rate, only the depth falls): a rise of the serving load
// slows the walk at the second window over budget, not once the bursts are as short as they
// go. Within budget for raiseAfter windows in a row it raises the rate by a quarter and, at a
// depth below the page size, doubles the depth back once the rate has grown to twice the one
// the depth last changed at (for a lowered depth: the rate its longer bursts were over budget
// at). A page's pipeline of HGETALL holds Redis for the whole burst: a request that arrives
// meanwhile waits for the rest of it, so shorter bursts (a smaller pipeline depth) allow a
// higher rate at the same tail latency. Until the first confirmed window over budget (slow
// start) it doubles the rate after every window within budget: an idle store is walked at its
// pace seconds after the walk starts, not minutes.
//
// The pacer is a pure state machine (no clock, no I/O): the driver feeds it probe samples
// with their times and asks for the pace at each tick (pace_test.go is its table).

// Reasons of a pace (the reason label of kvcm_gc_scan_pace and the status's "why").
const (
	PaceBaseline   = "baseline"    // holding the walk to measure the idle latency
	PaceFewSamples = "few_samples" // too few probe samples, within budget, in the window: the pace is kept
	PaceRaise      = "raise"       // latency within budget: faster
	PaceHold       = "hold"        // within budget, not yet for long enough to raise
	PaceLowerDepth = "lower_depth" // over budget at the lowest rate: shorter bursts only
	PaceLowerRate  = "lower_rate"  // over budget: slower, and in shorter bursts above the smallest
	PaceCeiling    = "ceiling"     // within budget at the highest rate allowed
	PaceFloor      = "floor"       // over budget at the lowest rate and burst allowed
)

// PaceReasons are every reason, for pre-initialised metric labels.
var PaceReasons = []string{PaceBaseline, PaceFewSamples, PaceRaise, PaceHold, PaceLowerDepth, PaceLowerRate, PaceCeiling, PaceFloor}

// paceConfig is the pacer's part of Config.
type paceConfig struct {
	// budget is the allowed rise of the probe latency's quantile over its idle baseline
	// (0.1: +10%), and slack an absolute rise always allowed (a baseline of a few µs would
	// otherwise leave no room for the jitter of the scanner's own host).
	budget float64
	slack  time.Duration
	// quantile of the probe latencies compared (0.9: the tenth-worst of a hundred).
	quantile float64
	// window is the time between two decisions; minSamples the probes a window needs.
	window     time.Duration
	minSamples int
	// baseline is how long the walk holds at its start to measure the idle latency; every
	// rebaseline (0: never) it holds again for hold, and the baseline is the quantile of the
	// probes of the last keepHolds holds. minHoldSamples is the fewest probes a later hold
	// needs to count (a slow store keeps its last baseline).
	baseline, rebaseline, hold time.Duration
	keepHolds, minHoldSamples  int
	// Rates in keys per second, depths in keys per burst (maxDepth: the page size).
	minRate, maxRate, startRate float64
	minDepth, maxDepth          int
	// raiseAfter is how many windows within budget in a row raise the rate; lowerStep is the
	// factor a confirmed window over budget lowers it by (while it halves the depth).
	raiseAfter int
	lowerStep  float64
	// slowStart doubles the rate after each window within budget until one is over it.
	slowStart bool
}

// defaultPaceConfig is the pacer for a page size of batch keys.
func defaultPaceConfig(budget float64, batch int) paceConfig {
	return paceConfig{
		budget: budget, slack: 20 * time.Microsecond, quantile: 0.9,
		window: time.Second, minSamples: 50,
		baseline: time.Second, rebaseline: 5 * time.Second, hold: 250 * time.Millisecond,
		keepHolds: 4, minHoldSamples: 10,
		minRate: 64, maxRate: 0, startRate: 1024,
		minDepth: min(8, batch), maxDepth: batch,
		raiseAfter: 2, lowerStep: 0.7, slowStart: true,
	}
}

// Pace is what the walk does now: read rate keys per second (0: hold) in bursts of depth
// keys, and why.
type Pace struct {
	Rate   float64
	Depth  int
	Reason string
	// Signal and Baseline are the latency quantiles the last decision compared (0 before
	// the first).
	Signal, Baseline time.Duration
}

func (p Pace) String() string {
	return fmt.Sprintf("%.0f keys/s in bursts of %d (%s: probe latency %v, idle %v)", p.Rate, p.Depth, p.Reason,
		p.Signal, p.Baseline)
}

// pacer is the state of one walk's pacing.
type pacer struct {
	cfg paceConfig
	// samples are the probe latencies since the window began, rtts their round trips.
	samples, rtts []time.Duration
	// windowStart is when the current window (or baseline measurement) began; zero before the
	// first tick.
	windowStart time.Time
	// baselining: the walk holds while the idle latency is measured; nextBaseline is when to
	// measure it again. holds (holdRTTs) are the probes (round trips) of the last keepHolds
	// holds, baselineQ (baselineRTT) their quantile; haveBase: there is one.
	baselining             bool
	nextBaseline           time.Time
	holds, holdRTTs        [][]time.Duration
	baselineQ, baselineRTT time.Duration
	haveBase               bool
	// overPending: the last window was over budget (one more in a row acts). Neither this
	// nor within is reset by a hold: a hold is not a window.
	overPending bool
	// The pace, and the windows within budget in a row.
	rate   float64
	depth  int
	within int
	// loweredAt is the rate at which the depth was last lowered (the rate before that
	// window's lowering) or last raised: once the rate has doubled past it, the depth is
	// doubled back.
	loweredAt float64
	// overOnce: a window was over budget (slow start is over).
	overOnce bool
	last     Pace
}

func newPacer(cfg paceConfig) *pacer {
	p := &pacer{cfg: cfg, rate: cfg.startRate, depth: max(cfg.maxDepth/8, cfg.minDepth)}
	p.rate = p.clampRate(p.rate)
	return p
}

// sample records a probe sent at at: its latency d and its round trip rtt (the same for a
// PING). Samples sent before the window began measured the previous pace and are dropped.
func (p *pacer) sample(at time.Time, d, rtt time.Duration) {
	if !p.windowStart.IsZero() && at.Before(p.windowStart) {
		return
	}
	p.samples, p.rtts = append(p.samples, d), append(p.rtts, rtt)
}

// sampleUnanswered records a probe sent at at and unanswered for wait: its round trip is at
// least wait, and its latency at least wait past what the idle probe's latency holds beyond
// its round trip (the clocks' offset, for TIME).
func (p *pacer) sampleUnanswered(at time.Time, wait time.Duration) {
	p.sample(at, wait+p.baselineQ-p.baselineRTT, wait)
}

// pace decides at now, when a window has ended, and returns the pace to walk at.
func (p *pacer) pace(now time.Time) Pace {
	switch {
	case p.windowStart.IsZero():
		p.startBaseline(now)
		return p.last
	case now.Sub(p.windowStart) < p.window():
		return p.last
	}
	q, n := quantile(p.samples, p.cfg.quantile), len(p.samples)
	if p.baselining {
		return p.endHold(now, n)
	}
	p.samples, p.rtts, p.windowStart = p.samples[:0], p.rtts[:0], now
	pc := p.judge(now, q, n)
	if p.cfg.rebaseline > 0 && !p.baselining && !now.Before(p.nextBaseline) {
		// The window is judged first, against the baseline it was measured against: a hold
		// comes between two windows and throws neither away.
		p.startBaseline(now)
		return p.last
	}
	return pc
}

// judge decides on a window that ended at now, with n probes of latency quantile q.
func (p *pacer) judge(now time.Time, q time.Duration, n int) Pace {
	if n >= p.cfg.minSamples && q < p.baselineQ-p.baselineRTT-p.cfg.slack {
		// Lower than the idle latency by more than a round trip: the clocks moved.
		p.holds, p.holdRTTs, p.haveBase = nil, nil, false
		p.startBaseline(now)
		return p.last
	}
	limit := p.baselineQ + time.Duration(float64(p.baselineRTT)*p.cfg.budget) + p.cfg.slack
	if n < p.cfg.minSamples && (n == 0 || q <= limit) {
		// Too few to say it is within budget; a few that are over it say enough (a slow store
		// answers few probes).
		pc := p.set(PaceFewSamples, q)
		if n == 0 {
			pc.Signal, p.last.Signal = 0, 0
		}
		return pc
	}
	if q > limit {
		p.within = 0
		if !p.overPending && n >= p.cfg.minSamples {
			// Once may be the noise of the probe's own host: the next window says. A slow
			// store that answers too few probes to fill a window has said enough.
			p.overPending = true
			return p.set(PaceHold, q)
		}
		p.overOnce = true // and overPending stays: the next window over acts at once too
		// Slower and in shorter bursts at once: a load that rose is not left to wait for the
		// depth to reach its minimum before the rate falls (256 to 8 keys takes five windows).
		depth, rate := p.depth, p.rate
		if depth > p.cfg.minDepth {
			p.depth = max(depth/2, p.cfg.minDepth)
			p.loweredAt = rate // the rate the longer bursts were over budget at
		}
		p.rate = p.clampRate(rate * p.cfg.lowerStep)
		switch {
		case p.rate < rate:
			return p.set(PaceLowerRate, q)
		case p.depth < depth:
			return p.set(PaceLowerDepth, q)
		}
		return p.set(PaceFloor, q)
	}
	p.overPending = false
	p.within++
	slow := p.cfg.slowStart && !p.overOnce
	if p.within < p.cfg.raiseAfter && !slow {
		return p.set(PaceHold, q)
	}
	p.within = 0
	if p.cfg.maxRate > 0 && p.rate >= p.cfg.maxRate {
		return p.set(PaceCeiling, q)
	}
	step := 1.25
	if slow {
		step = 2
	}
	p.rate = p.clampRate(p.rate * step)
	if p.depth < p.cfg.maxDepth && p.rate >= 2*p.loweredAt {
		p.depth = min(p.depth*2, p.cfg.maxDepth)
		p.loweredAt = p.rate
	}
	return p.set(PaceRaise, q)
}

// endHold ends a hold whose window is over, with n probes in it: they join the baseline when
// there are enough of them, and the walk goes on at its pace. The first hold, and a later one
// with no baseline yet, measures on until it has minSamples.
func (p *pacer) endHold(now time.Time, n int) Pace {
	if !p.haveBase && n < p.cfg.minSamples {
		p.windowStart = now // keep the samples: measure for another window
		p.last.Reason = PaceBaseline
		return p.last
	}
	if n >= p.cfg.minHoldSamples || !p.haveBase {
		keep := max(p.cfg.keepHolds, 1)
		p.holds = lastN(append(p.holds, slices.Clone(p.samples)), keep)
		p.holdRTTs = lastN(append(p.holdRTTs, slices.Clone(p.rtts)), keep)
		p.baselineQ = quantile(slices.Concat(p.holds...), p.cfg.quantile)
		p.baselineRTT = quantile(slices.Concat(p.holdRTTs...), p.cfg.quantile)
		p.haveBase = true
	}
	p.samples, p.rtts, p.windowStart = p.samples[:0], p.rtts[:0], now
	p.baselining = false
	if p.cfg.rebaseline > 0 {
		p.nextBaseline = now.Add(p.cfg.rebaseline)
	}
	p.last.Reason, p.last.Rate, p.last.Baseline = PaceHold, p.rate, p.baselineRTT
	return p.last
}

// lastN is the last n of s.
func lastN[T any](s []T, n int) []T { return s[max(len(s)-n, 0):] }

// due reports whether pace(now) decides (a window, or the baseline measurement, is over).
func (p *pacer) due(now time.Time) bool {
	return !p.windowStart.IsZero() && now.Sub(p.windowStart) >= p.window()
}

func (p *pacer) window() time.Duration {
	if p.baselining {
		if !p.haveBase || p.cfg.hold <= 0 {
			return p.cfg.baseline
		}
		return p.cfg.hold
	}
	return p.cfg.window
}

func (p *pacer) startBaseline(now time.Time) {
	p.baselining, p.windowStart, p.samples, p.rtts = true, now, p.samples[:0], p.rtts[:0]
	p.last = Pace{Rate: 0, Depth: p.depth, Reason: PaceBaseline, Baseline: p.baselineRTT, Signal: p.last.Signal}
}

// set makes the pace at reason, after a window whose latency quantile was q. The pace shows
// the latency as a round trip (the idle round trip plus the rise over the idle latency), and
// the idle round trip, so that TIME's clock offset never shows.
func (p *pacer) set(reason string, q time.Duration) Pace {
	p.last = Pace{Rate: p.rate, Depth: p.depth, Reason: reason, Signal: q - p.baselineQ + p.baselineRTT, Baseline: p.baselineRTT}
	return p.last
}

func (p *pacer) clampRate(r float64) float64 {
	if p.cfg.maxRate > 0 {
		r = math.Min(r, p.cfg.maxRate)
	}
	return math.Max(r, p.cfg.minRate)
}

// quantile is the q-quantile of ds (nearest rank; 0 for none). ds is reordered.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
