// Package duty paces a sequence of operations on a server so that they keep it busy for at most
// a configured share of the time, the duty: after an operation that held the server for t,
// the next one starts no sooner than t/duty after this one started, which leaves the server
// (1−duty)/duty × t to itself after each. The pace needs no latency target and no idle
// baseline: a server that slows down makes each operation take longer, and the walk waits
// longer after it by itself. It is deterministic (Pacer takes every time as an argument), so
// its share, floor, cap and back-off are tested without a clock. This is MinIO's data
// scanner's dynamicSleeper (sleep = factor × elapsed, between a minimum and a maximum), with
// the late start of an operation counted as time the server had to itself.
//
// Pacer is the rule; Gate makes an operation wait for it (one operation at a time), and
// Ceiling holds the operations while the server's own count of its busy time says it is busier
// than a limit.
package duty

import (
	"time"
)

// Reasons of a pace: what set the wait before the next operation.
const (
	// ReasonDuty: the duty, the wait (1−duty)/duty times the last operation's time.
	ReasonDuty = "duty"
	// ReasonFloor: operations so short that the least wait after one sets the pace.
	ReasonFloor = "floor"
	// ReasonCap: an operation so slow that the most wait after one set the pace.
	ReasonCap = "cap"
	// ReasonRate: the cap on keys per second (max_keys_per_second) sets the pace.
	ReasonRate = "max_keys_per_second"
	// ReasonBusy: the server is busier than the ceiling; the operations hold (Ceiling).
	ReasonBusy = "redis_busy"
)

// Reasons are every reason, for pre-initialised metric labels.
var Reasons = []string{ReasonDuty, ReasonFloor, ReasonCap, ReasonRate, ReasonBusy}

// Config is a pace.
type Config struct {
	// Duty is the share of the server's time the operations may take, in (0, 1]; 1 waits
	// only the floor.
	Duty float64
	// Floor and Cap bound the wait after one operation (from its end): at least Floor, so
	// the server always gets a gap, at most Cap, so that one operation slowed by something
	// else (a pause of this process, a stall of the server) does not stop the walk for long.
	Floor, Cap time.Duration
	// MaxRate caps the keys per second (0: none): an operation of n keys is followed by no
	// other before n/MaxRate has passed since it started.
	MaxRate float64
	// Window is how long the measured share is taken over (Pace.Share).
	Window time.Duration
}

// Defaults of Config's Floor, Cap and Window.
const (
	// DefaultFloor: the server gets at least this between two operations, and the walk sends
	// at most a few thousand a second whatever the duty.
	DefaultFloor = 200 * time.Microsecond
	// DefaultCap: one operation held up for longer than Cap × duty/(1−duty) (111 ms at a
	// duty of 0.1) waits no more than this.
	DefaultCap = time.Second
	// DefaultWindow is the measured share's window.
	DefaultWindow = 10 * time.Second
)

// Pace is where a paced sequence of operations stands, for status and metrics.
type Pace struct {
	Duty float64
	// Share is the operations' time over the last window's (0 before a window is over): the
	// share of the server's time they took, by the pacer's measure.
	Share float64
	// Wait is the wait after the last operation, Reason what set it.
	Wait   time.Duration
	Reason string
}

// Pacer is the pace of one sequence of operations (a store's walk): the caller asks how long
// to wait before an operation (Wait), says when it starts (Start) and how long it held the
// server once it is answered (Done). It takes every time as an argument and reads no clock.
type Pacer struct {
	cfg Config
	// due is the earliest start of the next operation (zero: at once).
	due time.Time
	// credit is how much later than due the running operation started: time the server had
	// to itself beyond what the duty asked, taken off the next wait (never below the floor:
	// no credit carries further than one operation).
	credit time.Duration
	// start and keys are the running operation's.
	start time.Time
	keys  int
	// The current window of the measured share: when it began and the operations' time in it.
	winStart time.Time
	winBusy  time.Duration
	last     Pace
	tot      Totals
}

// Totals are a pacer's sums since it was made: what held its pace, for benchmarks and
// diagnosis. Where Late and the round trips (Trips) add up to more than held/duty per
// operation, the operations cannot keep the duty whatever the waits.
type Totals struct {
	// Ops are the operations done; Held their time on the server.
	Ops  int
	Held time.Duration
	// Late is how much later than due the operations started (a wake-up that waited for a
	// core, a caller busy elsewhere): time the server had to itself beyond the duty's.
	Late time.Duration
	// Floor and Cap count the waits the floor or the cap set.
	Floor, Cap int
}

// New returns a pacer; zero Floor, Cap and Window take their defaults.
func New(cfg Config) *Pacer {
	if cfg.Floor <= 0 {
		cfg.Floor = DefaultFloor
	}
	if cfg.Cap <= 0 {
		cfg.Cap = DefaultCap
	}
	cfg.Cap = max(cfg.Cap, cfg.Floor)
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Duty <= 0 || cfg.Duty > 1 {
		cfg.Duty = 1
	}
	return &Pacer{cfg: cfg, last: Pace{Duty: cfg.Duty, Reason: ReasonDuty}}
}

// Wait is how long an operation asked for at now must wait before it starts (0: at once).
func (p *Pacer) Wait(now time.Time) time.Duration {
	if p.due.IsZero() || !now.Before(p.due) {
		return 0
	}
	return p.due.Sub(now)
}

// Start notes that an operation on keys keys (0 for one that reads none) starts at now.
func (p *Pacer) Start(now time.Time, keys int) {
	p.credit = 0
	if !p.due.IsZero() && now.After(p.due) {
		p.credit = now.Sub(p.due)
		p.tot.Late += p.credit
	}
	p.start, p.keys = now, keys
	if p.winStart.IsZero() {
		p.winStart = now
	}
}

// Done notes that the running operation was answered at end, having held the server for
// held (its time on the server's clock where the caller can tell it, else its round trip:
// at most end less its start). The next operation is then due at its start plus held/duty,
// less the credit of a late start, and between Floor and Cap after end; with MaxRate, no
// sooner than keys/MaxRate after its start.
func (p *Pacer) Done(end time.Time, held time.Duration) {
	held = max(min(held, end.Sub(p.start)), 0)
	due := p.start.Add(time.Duration(float64(held) / p.cfg.Duty)).Add(-p.credit)
	reason := ReasonDuty
	switch lo, hi := end.Add(p.cfg.Floor), end.Add(p.cfg.Cap); {
	case due.After(hi):
		due, reason = hi, ReasonCap
	case due.Before(lo):
		due = lo
		if !p.start.Add(time.Duration(float64(held) / p.cfg.Duty)).After(lo) {
			reason = ReasonFloor // not a credit: the duty itself asked for less
		}
	}
	if p.cfg.MaxRate > 0 && p.keys > 0 {
		if byRate := p.start.Add(time.Duration(float64(p.keys) / p.cfg.MaxRate * float64(time.Second))); byRate.After(due) {
			due, reason = byRate, ReasonRate
		}
	}
	p.due, p.credit = due, 0
	p.last.Wait, p.last.Reason = due.Sub(end), reason
	p.tot.Ops++
	p.tot.Held += held
	switch reason {
	case ReasonFloor:
		p.tot.Floor++
	case ReasonCap:
		p.tot.Cap++
	}
	p.winBusy += held
	if span := end.Sub(p.winStart); span >= p.cfg.Window {
		p.last.Share = p.winBusy.Seconds() / span.Seconds()
		p.winStart, p.winBusy = end, 0
	}
}

// Idle notes that the operations stopped for a reason of the caller's (a pause, a round's
// end, backpressure, the ceiling): the measured share starts a new window when they resume.
func (p *Pacer) Idle() {
	p.winStart, p.winBusy = time.Time{}, 0
}

// Pace is where the pacer stands.
func (p *Pacer) Pace() Pace { return p.last }

// Totals are the pacer's sums so far.
func (p *Pacer) Totals() Totals { return p.tot }
