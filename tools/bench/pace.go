package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/tools/bench/stage"
)

// The pace phase measures what a scan rate costs the serving p99 and Redis's main thread, and
// what share of Redis's time the scanner's duty pace (scanner.duty) takes, in the pinned
// placement (Redis and the read load on one core, kvcm-gc and NATS on the other) and in
// dry-run (every window sees the same keyspace):
//
//   - the curve: windows with the scanner at fixed rates (max_keys_per_second), unpaced, at
//     some rates with a smaller page (scan_batch_size, hence shorter bursts), and at each duty
//     of Config.PaceDuties, each after a kvcm-gc-off window; Redis's main-thread CPU share
//     (INFO cpu) over each window, less the off window's before it, is the walk's share;
//   - rounds: one whole round of the keyspace unpaced, then at the default duty, timed, the
//     read load running all through each, with kvcm-gc-off windows before, between and after;
//   - a load step: a duty-paced walk while the read load doubles and, later, halves again,
//     its progress read every 100 ms, Redis's main-thread CPU at each change of the load, less
//     the read load's own share at each rate read without the walk before it starts.
//
// The read load runs from before the stages start until after they stop; a window is the
// requests sent between two moments.

// PacePoint is a scanner configuration of the curve.
type PacePoint struct {
	// Rate is max_keys_per_second (0: unpaced, or paced by Duty alone).
	Rate float64
	// Batch is scan_batch_size: a page's keys, read in one pipelined burst at a fixed rate.
	Batch int
	// Duty is scanner.duty (0: the fixed pace; the page then read in bursts of
	// scanner.burst_keys).
	Duty float64
}

// Paced reports whether the point is the duty pace's.
func (p PacePoint) Paced() bool { return p.Duty > 0 }

func (p PacePoint) String() string {
	switch {
	case p.Paced():
		return fmt.Sprintf("duty %g, bursts of %d", p.Duty, scanner.DefaultBurstKeys)
	case p.Rate == 0:
		return fmt.Sprintf("unpaced, pages of %d", p.Batch)
	}
	return fmt.Sprintf("%s keys/s, pages of %d", num(p.Rate), p.Batch)
}

// PaceSample is a duty-paced walk's pace at one moment, from the scanner's /metrics, and the
// keys its store walk had visited by then, from its checkpoint.
type PaceSample struct {
	At time.Time
	// Rate is the keys per second SCAN returned over the second before At (from Visited;
	// 0 for the first second).
	Rate float64
	// Share is the walk's share of Redis's time by the pacer's measure (its last 10 s
	// window), Wait the wait after its last round trip, Reason what set it.
	Share  float64
	Wait   time.Duration
	Reason string
	// Visited are the keys SCAN returned since the walk started, every round.
	Visited int64
}

// PaceWindow is one window of the curve.
type PaceWindow struct {
	// Point is the index of the window's PacePoint; -1: kvcm-gc off.
	Point int
	Rep   int
	Lat   Latency
	// Dur is the window's length; Keys the keys SCAN returned meanwhile.
	Dur  time.Duration
	Keys int64
	// Pace is a duty-paced walk's pace during the window.
	Pace []PaceSample
	// Work is Redis's counters over the window (INFO cpu, commandstats).
	Work RedisWork
}

// PaceRound is one round of the whole keyspace with the read load running all through it.
type PaceRound struct {
	Point PacePoint
	// Keys SCAN returned in the round, from its start to its end (checkpoint).
	Keys int64
	Dur  time.Duration
	// Lat is what the read load saw from the round's start to its end.
	Lat  Latency
	Pace []PaceSample
	// Work is Redis's counters over the round.
	Work RedisWork
	// Partial: the round was not over within the time allowed (Keys and Dur are its
	// progress then).
	Partial bool
}

// Rate is keys per second.
func (r PaceRound) Rate() float64 { return Rate{Ops: int(r.Keys), Dur: r.Dur}.PerSec() }

// PaceStep is a duty-paced walk through a step of the read load: from From requests per
// second to To at Up, and back to From at Down, until End.
type PaceStep struct {
	From, To int
	Duty     float64
	// SettledAt is when the walk was at its pace; the load stepped up at Up and back down
	// at Down, each stepObserve after the last; the walk was watched until End.
	SettledAt, Up, Down, End time.Time
	Samples                  []PaceSample
	// Before, During and After are the read load's latency from SettledAt to Up, from Up to
	// Down, and from Down to End.
	Before, During, After Latency
	// IdleFrom and IdleTo are Redis's counters over stepIdle at From and at To requests per
	// second before the walk started: the read load's own work at each rate.
	IdleFrom, IdleTo RedisWork
	// IdleFromLat and IdleToLat are what the read load saw in those windows (its requests
	// done there show whether it reached its rate).
	IdleFromLat, IdleToLat Latency
	// WorkBefore, WorkDuring and WorkAfter are Redis's counters over the three periods.
	WorkBefore, WorkDuring, WorkAfter RedisWork
}

// StepShares are the walk's share of Redis's main-thread CPU in each period of a load step:
// the period's share less the read load's own at that period's rate (0 where either is
// missing).
func (s *PaceStep) StepShares() (before, during, after float64) {
	return walkShare(s.WorkBefore, s.IdleFrom), walkShare(s.WorkDuring, s.IdleTo), walkShare(s.WorkAfter, s.IdleFrom)
}

// walkShare is a walk's share of Redis's main-thread CPU: the share over work less the share
// over idle, a window of the same load without the walk (0 if either has no time).
func walkShare(work, idle RedisWork) float64 {
	if work.Wall <= 0 || idle.Wall <= 0 {
		return 0
	}
	return work.Share() - idle.Share()
}

// PaceResults are the pace phase of one layout.
type PaceResults struct {
	Points  []PacePoint
	Windows []PaceWindow
	// Unpaced and Duty are whole rounds; RoundOff the off windows before, between and
	// after them, RoundOffWork Redis's counters over those.
	Unpaced, Duty *PaceRound
	RoundOff      []Latency
	RoundOffWork  []RedisWork
	Step          *PaceStep
}

// Durations of the pace phase.
const (
	// paceSettle is how long a walk runs after its first round began before it is measured.
	paceSettle = time.Second
	// pacePoll is how often the pace is read.
	pacePoll = 100 * time.Millisecond
	// stepObserve is how long the load step's walk is watched after each step.
	stepObserve = 10 * time.Second
	// stepIdle is how long the read load's own share is read at each of the step's rates,
	// stepSwitch how long after a change of rate.
	stepIdle, stepSwitch = 5 * time.Second, time.Second / 2
	// loadLead is how long the read load runs before the stages start.
	loadLead = time.Second
)

// pacePoints are the curve's points of a run: each fixed rate (0: unpaced) at the unpaced
// page size, the small-batch rates at PaceSmallBatch, and each duty.
func (c Config) pacePoints() []PacePoint {
	var out []PacePoint
	for _, r := range c.PaceRates {
		out = append(out, PacePoint{Rate: r, Batch: c.Unpaced.ScanBatchSize})
	}
	for _, r := range c.PaceSmallBatchRates {
		out = append(out, PacePoint{Rate: r, Batch: c.PaceSmallBatch})
	}
	for _, d := range c.PaceDuties {
		out = append(out, PacePoint{Batch: c.Unpaced.ScanBatchSize, Duty: d})
	}
	return out
}

// profile is the stage profile of a point: the unpaced profile (no pause between ticks, no
// backpressure) in dry-run, rounds back to back unless one round is wanted.
func (p PacePoint) profile(unpaced stage.Profile, oneRound bool) stage.Profile {
	pr := unpaced
	pr.Name = p.String()
	pr.DryRun = true
	pr.MaxKeysPerSecond, pr.ScanBatchSize, pr.Duty = p.Rate, p.Batch, p.Duty
	if !oneRound {
		pr.RoundPause = time.Nanosecond
	}
	return pr
}

// pace runs the pace phase on k.
func (h *Harness) pace(ctx context.Context, phase string, k *Keyspace) (res *PaceResults, err error) {
	if err := h.canPin(); err != nil {
		return nil, err
	}
	cfg := h.cfg
	keys := k.collectedKeys()
	opts := *k.rdb.Options()
	opts.PoolSize = 16
	rdb := redis.NewClient(&opts)
	defer rdb.Close()
	if err := h.place(ctx, PinPinned); err != nil {
		return nil, err
	}
	defer func() {
		if perr := h.place(context.WithoutCancel(ctx), PinShared); perr != nil && err == nil {
			err = perr
		}
	}()
	// Open the clients' connections before the first window measures anything.
	_ = readLoad(ctx, rdb, k.Spec.Layout, keys, cfg.ServingRate, time.Second)

	res = &PaceResults{Points: cfg.pacePoints()}
	pw := &paceWork{h: h, phase: phase, k: k, rdb: rdb, keys: keys}
	for rep := 1; rep <= max(cfg.PaceReps, 1); rep++ {
		for i, pt := range res.Points {
			off, err := pw.window(ctx, -1, PacePoint{}, rep)
			if err != nil {
				return res, err
			}
			res.Windows = append(res.Windows, off)
			w, err := pw.window(ctx, i, pt, rep)
			if err != nil {
				return res, err
			}
			h.log.Info("pace window", "layout", k.Spec.Layout, "point", pt.String(), "rep", rep, "p99", w.Lat.P99,
				"off_p99", off.Lat.P99, "keys_per_second", int(Rate{Ops: int(w.Keys), Dur: w.Dur}.PerSec()))
			res.Windows = append(res.Windows, w)
		}
	}

	h.log.Info("pace rounds", "layout", k.Spec.Layout, "blocks", k.Counts.Blocks)
	for _, pt := range []PacePoint{{Batch: cfg.Unpaced.ScanBatchSize}, {Batch: cfg.Unpaced.ScanBatchSize, Duty: scanner.DefaultDuty}} {
		off, err := pw.window(ctx, -1, PacePoint{}, 0)
		if err != nil {
			return res, err
		}
		res.RoundOff, res.RoundOffWork = append(res.RoundOff, off.Lat), append(res.RoundOffWork, off.Work)
		// A paced round that takes ten times the unpaced one is measured as far as it got
		// (its rate so far), and the run goes on.
		limit := pw.h.stageTimeout(k)
		if res.Unpaced != nil && res.Unpaced.Dur > 0 {
			limit = max(10*res.Unpaced.Dur, time.Minute)
		}
		rd, err := pw.round(ctx, pt, limit)
		if err != nil {
			return res, err
		}
		h.log.Info("pace round", "point", pt.String(), "keys", rd.Keys, "took", rd.Dur.Round(time.Millisecond),
			"keys_per_second", int(rd.Rate()), "p99", rd.Lat.P99, "partial", rd.Partial)
		if pt.Paced() {
			res.Duty = &rd
		} else {
			res.Unpaced = &rd
		}
	}
	off, err := pw.window(ctx, -1, PacePoint{}, 0)
	if err != nil {
		return res, err
	}
	res.RoundOff, res.RoundOffWork = append(res.RoundOff, off.Lat), append(res.RoundOffWork, off.Work)

	h.log.Info("pace load step", "layout", k.Spec.Layout, "from", cfg.ServingRate, "to", cfg.PaceStepRate)
	st, err := pw.step(ctx, PacePoint{Batch: cfg.Unpaced.ScanBatchSize, Duty: scanner.DefaultDuty})
	res.Step = st
	return res, err
}

// paceWork is what the pace phase's measurements share.
type paceWork struct {
	h     *Harness
	phase string
	k     *Keyspace
	rdb   *redis.Client
	keys  []string
	seq   int
}

// load is a read load running in the background.
type load struct {
	rate atomic.Int64
	stop chan struct{}
	done chan struct{}
	res  *loadResult
}

// startLoad starts the read load at rate requests per second; finish stops it.
func (pw *paceWork) startLoad(ctx context.Context, rate int) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	l.rate.Store(int64(rate))
	go func() {
		defer close(l.done)
		// At most an hour: a stage that takes longer fails its own timeout first.
		l.res = sendLoad(ctx, pw.rdb, pw.k.Spec.Layout, pw.keys, &l.rate, time.Hour, l.stop)
	}()
	return l
}

// finish stops the load and returns every request it sent.
func (l *load) finish() *loadResult {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	return l.res
}

// startStages starts the three stages of a point, pinned to kvcm-gc's cores, the scanner
// serving its metrics, and polls the scanner's pace; the caller stops the poll, then closes
// the run.
func (pw *paceWork) startStages(ctx context.Context, name string, pt PacePoint, oneRound bool) (*run, *pacePoller, error) {
	r, err := pw.startRun(ctx, name, pt, oneRound)
	if err != nil {
		return nil, nil, err
	}
	poll, err := r.pollPace(ctx, pw.visitedPerRound())
	if err != nil {
		r.close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	return r, poll, nil
}

// startRun starts the three stages of a point for startStages.
func (pw *paceWork) startRun(ctx context.Context, name string, pt PacePoint, oneRound bool) (*run, error) {
	pw.seq++
	r, err := pw.h.newRun(ctx, fmt.Sprintf("%s-%s-%d", pw.phase, name, pw.seq), pw.k, pt.profile(pw.h.cfg.Unpaced, oneRound))
	if err != nil {
		return nil, err
	}
	r.cpus, r.serve = pw.h.gcCPUs(), true
	for _, st := range []string{stage.Scanner, stage.Prober, stage.Deleter} {
		if err := r.start(st); err != nil {
			r.close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return r, nil
}

// window measures one window of the curve: kvcm-gc off (point -1) or the stages at pt. The
// read load runs from loadLead before the stages start; the walk is measured paceSettle after
// its first round began, Redis's counters over the window with it.
func (pw *paceWork) window(ctx context.Context, point int, pt PacePoint, rep int) (PaceWindow, error) {
	res := PaceWindow{Point: point, Rep: rep}
	l := pw.startLoad(ctx, pw.h.cfg.ServingRate)
	defer l.finish()
	// With kvcm-gc off, half a second lets the last window's stages settle.
	lead := loadLead
	if point < 0 {
		lead = time.Second / 2
	}
	if err := backoff.Sleep(ctx, lead); err != nil {
		return res, err
	}
	var r *run
	var poll *pacePoller
	if point >= 0 {
		var err error
		if r, poll, err = pw.startStages(ctx, "curve", pt, false); err != nil {
			return res, err
		}
		defer r.close(context.WithoutCancel(ctx))
		defer poll.stop()
		if err := pw.settle(ctx, r); err != nil {
			return res, err
		}
	}
	meter, err := startRedisMeter(ctx, pw.k.rdb)
	if err != nil {
		return res, err
	}
	from := time.Now()
	before := poll.visited()
	if err := backoff.Sleep(ctx, pw.h.cfg.ServingWindow); err != nil {
		return res, err
	}
	to := time.Now()
	if res.Work, err = meter.work(ctx); err != nil {
		return res, err
	}
	res.Keys = poll.visited() - before
	res.Dur = to.Sub(from)
	if r != nil {
		if err := r.checkAlive(); err != nil {
			return res, err
		}
		res.Pace = samplesIn(poll.stop(), from, to)
	}
	res.Lat = l.finish().latency(from, to)
	res.Lat.Mode, res.Lat.Pin, res.Lat.Rep = pt.String(), PinPinned, rep
	if point < 0 {
		res.Lat.Mode = ModeOff
	}
	return res, nil
}

// settle waits until a walk is at its pace: paceSettle after its first round began.
func (pw *paceWork) settle(ctx context.Context, r *run) error {
	if err := r.until(ctx, time.Minute, "round start", func() (bool, error) {
		ck, err := r.checkpoint(ctx)
		return err == nil && ck.Round >= 1, nil
	}); err != nil {
		return err
	}
	return backoff.Sleep(ctx, paceSettle)
}

// round times one whole round of the keyspace at pt, the read load running all through it.
// A round not over within limit is measured as far as it got (Partial).
func (pw *paceWork) round(ctx context.Context, pt PacePoint, limit time.Duration) (PaceRound, error) {
	res := PaceRound{Point: pt}
	l := pw.startLoad(ctx, pw.h.cfg.ServingRate)
	defer l.finish()
	if err := backoff.Sleep(ctx, loadLead); err != nil {
		return res, err
	}
	r, poll, err := pw.startStages(ctx, "round", pt, true)
	if err != nil {
		return res, err
	}
	defer r.close(context.WithoutCancel(ctx))
	defer poll.stop()
	meter, err := startRedisMeter(ctx, pw.k.rdb)
	if err != nil {
		return res, err
	}
	var ck pipeline.Checkpoint
	deadline := time.Now().Add(limit)
	if err := r.until(ctx, limit+time.Minute, "round", func() (bool, error) {
		var err error
		ck, err = r.checkpoint(ctx)
		if err != nil {
			return false, nil
		}
		res.Partial = ck.Round >= 1 && ck.InRound && time.Now().After(deadline)
		return roundDone(ck) || res.Partial, nil
	}); err != nil {
		return res, err
	}
	start, end := time.UnixMicro(ck.RoundStartedUs), time.UnixMicro(ck.LastRoundEndUs)
	res.Keys = int64(ck.LastRoundVisited)
	if res.Partial {
		end, res.Keys = time.Now(), int64(ck.KeysVisited)
	}
	res.Dur = end.Sub(start)
	if res.Work, err = meter.work(ctx); err != nil {
		return res, err
	}
	if pt.Paced() {
		res.Pace = samplesIn(poll.stop(), start, end)
	}
	res.Lat = l.finish().latency(start, end)
	res.Lat.Mode, res.Lat.Pin = pt.String()+", one round", PinPinned
	return res, nil
}

// step runs a duty-paced walk through a step of the read load: settled at the serving rate,
// then PaceStepRate for stepObserve, then the serving rate again for stepObserve.
func (pw *paceWork) step(ctx context.Context, pt PacePoint) (*PaceStep, error) {
	cfg := pw.h.cfg
	res := &PaceStep{From: cfg.ServingRate, To: cfg.PaceStepRate, Duty: pt.Duty}
	l := pw.startLoad(ctx, res.From)
	defer l.finish()
	if err := backoff.Sleep(ctx, loadLead); err != nil {
		return res, err
	}
	// The read load's own share of Redis's main thread at each rate, without the walk: a
	// period's share less its rate's is the walk's.
	var err error
	idleFrom := time.Now()
	if res.IdleFrom, err = idleWork(ctx, pw.k.rdb, stepIdle); err != nil {
		return res, err
	}
	idleFromEnd := time.Now()
	l.rate.Store(int64(res.To))
	if err := backoff.Sleep(ctx, stepSwitch); err != nil {
		return res, err
	}
	idleTo := time.Now()
	if res.IdleTo, err = idleWork(ctx, pw.k.rdb, stepIdle); err != nil {
		return res, err
	}
	idleToEnd := time.Now()
	l.rate.Store(int64(res.From))
	if err := backoff.Sleep(ctx, stepSwitch); err != nil {
		return res, err
	}
	r, poll, err := pw.startStages(ctx, "step", pt, false)
	if err != nil {
		return res, err
	}
	defer r.close(context.WithoutCancel(ctx))
	defer poll.stop()
	if err := pw.settle(ctx, r); err != nil {
		return res, err
	}
	// Redis's counters at each boundary, read just before the load changes.
	var at [4]redisCounters
	if at[0], err = readRedisCounters(ctx, pw.k.rdb); err != nil {
		return res, err
	}
	// observe watches the walk for stepObserve, then reads the counters at boundary i.
	observe := func(i int) error {
		if err := backoff.Sleep(ctx, stepObserve); err != nil {
			return err
		}
		var err error
		at[i], err = readRedisCounters(ctx, pw.k.rdb)
		return err
	}
	res.SettledAt = time.Now()
	// Watched as long before the step as after it, so the report can say how often the pace
	// fell with nothing changed.
	if err := observe(1); err != nil {
		return res, err
	}
	res.Up = time.Now()
	l.rate.Store(int64(res.To))
	if err := observe(2); err != nil {
		return res, err
	}
	res.Down = time.Now()
	l.rate.Store(int64(res.From))
	if err := observe(3); err != nil {
		return res, err
	}
	res.End = time.Now()
	res.WorkBefore, res.WorkDuring, res.WorkAfter = at[1].since(at[0]), at[2].since(at[1]), at[3].since(at[2])
	if err := r.checkAlive(); err != nil {
		return res, err
	}
	res.Samples = poll.stop()
	lr := l.finish()
	res.Before, res.During, res.After = lr.latency(res.SettledAt, res.Up), lr.latency(res.Up, res.Down), lr.latency(res.Down, res.End)
	res.IdleFromLat, res.IdleToLat = lr.latency(idleFrom, idleFromEnd), lr.latency(idleTo, idleToEnd)
	return res, nil
}

// visitedPerRound is how many keys a round's SCAN returns: every block key, the skipped
// groups' included.
func (pw *paceWork) visitedPerRound() int64 {
	return int64(pw.k.Counts.Blocks + pw.k.Counts.SkippedBlocks)
}

// keysVisited are the keys SCAN returned over every round so far: the current round's, and
// perRound for each round before it (the last completed round's count when there is one).
func keysVisited(ck pipeline.Checkpoint, perRound int64) int64 {
	if ck.Round == 0 {
		return 0
	}
	if ck.LastRoundVisited > 0 {
		perRound = int64(ck.LastRoundVisited)
	}
	return int64(ck.Round-1)*perRound + int64(ck.KeysVisited)
}

// pacePoller reads a run's scanner pace and progress every pacePoll.
type pacePoller struct {
	mu      sync.Mutex
	samples []PaceSample
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
}

// pollPace starts reading the scanner's /metrics and checkpoint every pacePoll. A nil poller
// (kvcm-gc off) reads nothing.
func (r *run) pollPace(ctx context.Context, perRound int64) (*pacePoller, error) {
	addr, err := r.serveAddr(ctx, stage.Scanner)
	if err != nil {
		return nil, err
	}
	kv, err := r.h.js.KeyValue(ctx, r.names.StateBucket())
	if err != nil {
		return nil, fmt.Errorf("open state bucket: %w", err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &pacePoller{cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: time.Second}
	go func() {
		defer close(p.done)
		t := time.NewTicker(pacePoll)
		defer t.Stop()
		for {
			s := PaceSample{At: time.Now()}
			if pc, ok := scrapePace(pctx, client, "http://"+addr+"/metrics"); ok {
				s.Share, s.Wait, s.Reason = pc.Share, pc.Wait, pc.Reason
			}
			if ck, _, err := scanner.ReadCheckpoint(pctx, kv); err == nil {
				s.Visited = keysVisited(ck, perRound)
			}
			p.mu.Lock()
			s.Rate = trailingRate(p.samples, s, time.Second)
			p.samples = append(p.samples, s)
			p.mu.Unlock()
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p, nil
}

// last is the latest sample.
func (p *pacePoller) last() (PaceSample, bool) {
	if p == nil {
		return PaceSample{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) == 0 {
		return PaceSample{}, false
	}
	return p.samples[len(p.samples)-1], true
}

// visited is the latest sample's progress; 0 without a poller.
func (p *pacePoller) visited() int64 {
	s, _ := p.last()
	return s.Visited
}

// stop ends the polling (once) and returns every sample.
func (p *pacePoller) stop() []PaceSample {
	if p == nil {
		return nil
	}
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.samples
}

// samplesIn are the samples taken in [from, to].
func samplesIn(s []PaceSample, from, to time.Time) []PaceSample {
	var out []PaceSample
	for _, x := range s {
		if !x.At.Before(from) && !x.At.After(to) {
			out = append(out, x)
		}
	}
	return out
}

// trailingRate is the keys per second SCAN returned from the earliest of s taken within d
// before x until x (0 when none is d old).
func trailingRate(s []PaceSample, x PaceSample, d time.Duration) float64 {
	for _, y := range s {
		if y.Visited == 0 || x.At.Sub(y.At) > d+pacePoll/2 {
			continue
		}
		if x.At.Sub(y.At) < d-pacePoll/2 || x.Visited < y.Visited {
			return 0
		}
		return float64(x.Visited-y.Visited) / x.At.Sub(y.At).Seconds()
	}
	return 0
}

// scrapedPace is the pace gauges of a scanner's /metrics.
type scrapedPace struct {
	Share  float64
	Wait   time.Duration
	Reason string
}

func scrapePace(ctx context.Context, client *http.Client, url string) (scrapedPace, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return scrapedPace{}, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return scrapedPace{}, false
	}
	defer resp.Body.Close()
	return parsePace(resp.Body)
}

// parsePace reads the pace gauges of one store's duty-paced walk from the Prometheus text
// format: kvcm_gc_store_pace_share_ratio, kvcm_gc_store_pace_wait_seconds and the reason
// whose kvcm_gc_store_pace_reason is 1. ok is false when the walk exports no pace.
func parsePace(r io.Reader) (scrapedPace, bool) {
	var p scrapedPace
	var seen bool
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			continue
		}
		switch name {
		case "kvcm_gc_store_pace_share_ratio":
			p.Share, seen = v, true
		case "kvcm_gc_store_pace_wait_seconds":
			p.Wait = time.Duration(v * float64(time.Second))
		case "kvcm_gc_store_pace_reason":
			if v == 1 {
				if _, after, ok := strings.Cut(rest, `reason="`); ok {
					p.Reason, _, _ = strings.Cut(after, `"`)
				}
			}
		}
	}
	return p, seen
}

// serveAddr waits for the address a stage process serves its metrics on.
func (r *run) serveAddr(ctx context.Context, name string) (string, error) {
	var addr string
	err := r.until(ctx, 30*time.Second, name+"'s metrics address", func() (bool, error) {
		data, err := os.ReadFile(r.file(name, "addr"))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		addr = strings.TrimSpace(string(data))
		return err == nil && addr != "", err
	})
	return addr, err
}

// PaceCurvePoint is a point of the curve with its windows pooled.
type PaceCurvePoint struct {
	Point PacePoint
	// Windows of the point; KeysPerSec the keys SCAN returned over their total length.
	Windows    int
	KeysPerSec float64
	// P99 of every request of the point's windows, and OffP99 of every request of the off
	// windows; N the requests of the point's windows.
	P99, OffP99 time.Duration
	N           int
	// CPUShare is the walk's share of Redis's main-thread CPU: each window's share (INFO
	// cpu) less the off window's just before it, averaged over the point's windows.
	CPUShare float64
	// Share is a duty-paced walk's mean share by the pacer's own measure, over its samples;
	// ShareSeen whether any sample had one (the pacer reports its share once a window of its
	// own closes, longer than a short curve window; until then it reads 0).
	Share     float64
	ShareSeen bool
}

// pacerShare is the point's share by the pacer's own measure, as a report cell.
func (c PaceCurvePoint) pacerShare() string {
	if !c.ShareSeen {
		return "none reported"
	}
	return fmt.Sprintf("%.3f", c.Share)
}

// Ratio is the point's pooled p99 over the off windows'.
func (c PaceCurvePoint) Ratio() float64 {
	if c.OffP99 <= 0 {
		return 0
	}
	return float64(c.P99) / float64(c.OffP99)
}

// paceCurve pools the curve's windows: per point, every request of its windows against every
// request of every off window of the curve, and the keys SCAN returned over the windows' total
// length.
func paceCurve(r *PaceResults) []PaceCurvePoint {
	off, _ := pooledP99(paceOffs(r), func(Latency) bool { return true })
	var out []PaceCurvePoint
	for i, pt := range r.Points {
		c := PaceCurvePoint{Point: pt, OffP99: off}
		var ls []Latency
		var keys int64
		var dur time.Duration
		var share, cpu float64
		var paced, metered int
		for j, w := range r.Windows {
			if w.Point != i {
				continue
			}
			c.Windows++
			ls = append(ls, w.Lat)
			keys += w.Keys
			dur += w.Dur
			if j > 0 && r.Windows[j-1].Point < 0 && w.Work.Wall > 0 && r.Windows[j-1].Work.Wall > 0 {
				cpu, metered = cpu+w.Work.Share()-r.Windows[j-1].Work.Share(), metered+1
			}
			for _, s := range w.Pace {
				// The pacer's share is 0 until its first window is over, and a walk that
				// reads takes some of Redis's time: 0 is no measure yet, not a share.
				if s.Reason != "" && s.Share > 0 {
					share, paced = share+s.Share, paced+1
				}
			}
		}
		if metered > 0 {
			c.CPUShare = cpu / float64(metered)
		}
		if c.Windows == 0 {
			continue
		}
		c.P99, c.N = pooledP99(ls, func(Latency) bool { return true })
		c.KeysPerSec = Rate{Ops: int(keys), Dur: dur}.PerSec()
		if paced > 0 {
			c.Share, c.ShareSeen = share/float64(paced), true
		}
		out = append(out, c)
	}
	return out
}

// StepReaction is how a duty-paced walk's rate answered a step of the load.
type StepReaction struct {
	// At is the pace at the step and Reason why the walk was at it; Reacted whether it moved
	// the expected way by the end, after Took; First is the pace it moved to, Final the pace
	// at the end.
	At, First, Final float64
	Reason           string
	Reacted          bool
	Took             time.Duration
}

// paced reports whether x says a rate: the first second of a poll says none.
func paced(x PaceSample) bool { return x.Rate > 0 }

// stepReaction is the time from at until the pace first falls below (fall) or rises above
// (!fall) the pace at at, among the samples up to until. The pace at a moment is the last
// sample taken at or before it that has one.
func stepReaction(s []PaceSample, at, until time.Time, fall bool) StepReaction {
	var res StepReaction
	have := false
	for _, x := range s {
		if !paced(x) || x.At.After(until) {
			continue
		}
		if !x.At.After(at) {
			res.At, res.Reason, have = x.Rate, x.Reason, true
			continue
		}
		if !have {
			continue
		}
		res.Final = x.Rate
		if !res.Reacted && ((fall && x.Rate < res.At) || (!fall && x.Rate > res.At)) {
			res.Reacted, res.Took, res.First = true, x.At.Sub(at), x.Rate
		}
	}
	if !have {
		return StepReaction{}
	}
	return res
}

// paceFalls counts the samples in (from, to] whose pace is lower than the sample before:
// how often the walk slowed down.
func paceFalls(s []PaceSample, from, to time.Time) int {
	n := 0
	prev := -1.0
	for _, x := range s {
		if !paced(x) || x.At.After(to) {
			continue
		}
		if x.At.After(from) && prev >= 0 && x.Rate < prev {
			n++
		}
		prev = x.Rate
	}
	return n
}

// visitedRate is the keys per second SCAN returned between the samples nearest to from and
// to.
func visitedRate(s []PaceSample, from, to time.Time) float64 {
	a, b := -1, -1
	for i, x := range s {
		if x.Visited == 0 {
			continue
		}
		if !x.At.After(from) || a < 0 {
			a = i
		}
		if !x.At.After(to) {
			b = i
		}
	}
	if a < 0 || b <= a {
		return 0
	}
	return float64(s[b].Visited-s[a].Visited) / s[b].At.Sub(s[a].At).Seconds()
}

// paceMean is the mean rate and the pacer's mean share of the samples with a pace.
func paceMean(s []PaceSample) (rate, share float64) {
	var n, m int
	for _, x := range s {
		if paced(x) {
			rate, n = rate+x.Rate, n+1
		}
		if x.Reason != "" {
			share, m = share+x.Share, m+1
		}
	}
	if n > 0 {
		rate /= float64(n)
	}
	if m > 0 {
		share /= float64(m)
	}
	return rate, share
}

// pacePooledAgainst is the pooled p99 of l against the pooled p99 of offs.
func pacePooledAgainst(l Latency, offs []Latency) (ratio float64, off time.Duration) {
	off, _ = pooledP99(offs, func(Latency) bool { return true })
	if off <= 0 || l.N == 0 {
		return 0, off
	}
	p, _ := pooledP99([]Latency{l}, func(Latency) bool { return true })
	return float64(p) / float64(off), off
}
