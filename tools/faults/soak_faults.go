package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Faults of the soak, by schedule: every FaultEvery rounds the next fault of a cycle that
// holds every kind once, so that a run of enough rounds is known to have met each of them,
// rather than hoping a random draw did. The kinds are a kill -9 of each of the five stages, a
// Redis restart (graceful or after a kill -9, drawn), and the NATS faults of the run's
// topology: the server restarted on its store; on a cluster the loss of one node (SIGKILL,
// started again once another leads) and a restart of the whole cluster. Each cycle puts the
// stages in an order of its own (drawn); the infrastructure faults keep their places, so that
// the first three faults of any run are a stage's kill, a Redis restart and the run's first
// NATS fault (the short soak has room for three).
const (
	faultRedis    = "redis"
	faultNATS     = "nats"
	faultNodeLoss = "node"
	faultKill     = "kill "
)

// faultKinds are the kinds of one cycle, in the cycle's order, with the stages' places empty.
func faultKinds(cluster bool) []string {
	if cluster {
		return []string{faultKill, faultRedis, faultNodeLoss, faultKill, faultKill, faultNATS, faultKill, faultKill}
	}
	return []string{faultKill, faultRedis, faultNATS, faultKill, faultKill, faultKill, faultKill}
}

// faultSchedule hands out the run's faults in order.
type faultSchedule struct {
	cluster bool
	rng     *rand.Rand
	cycle   []string // the current cycle's kinds, stages filled in
	next    int      // the next fault's place in cycle
	cycles  int      // cycles completed
	// hit are the rounds each kind hit (kinds as kindOf names them).
	hit map[string][]uint64
}

func newFaultSchedule(cluster bool, seedValue uint64) *faultSchedule {
	return &faultSchedule{cluster: cluster, rng: rand.New(rand.NewPCG(seedValue, seedValue^0x9c1a0e2b5f3d4a17)), hit: map[string][]uint64{}}
}

// take returns the next fault's kind ("kill <stage>", or one of the others).
func (f *faultSchedule) take() string {
	if f.next == 0 {
		f.cycle = faultKinds(f.cluster)
		stages := slices.Clone(soakStages)
		f.rng.Shuffle(len(stages), func(i, j int) { stages[i], stages[j] = stages[j], stages[i] })
		for i, k := range f.cycle {
			if k == faultKill {
				f.cycle[i], stages = faultKill+stages[0], stages[1:]
			}
		}
	}
	k := f.cycle[f.next]
	if f.next++; f.next == len(f.cycle) {
		f.cycles, f.next = f.cycles+1, 0
	}
	return k
}

// done is the number of whole cycles handed out.
func (f *faultSchedule) done() int { return f.cycles }

// record notes that kind hit round r.
func (f *faultSchedule) record(kind string, r uint64) { f.hit[kind] = append(f.hit[kind], r) }

// allKinds lists every kind of the run's topology.
func allKinds(cluster bool) []string {
	var out []string
	for _, k := range faultKinds(cluster) {
		if k != faultKill {
			out = append(out, k)
		}
	}
	for _, s := range soakStages {
		out = append(out, faultKill+s)
	}
	return out
}

// kindName is a kind as the report names it.
func kindName(kind string) string {
	switch kind {
	case faultRedis:
		return "redis restart"
	case faultNATS:
		return "nats restart"
	case faultNodeLoss:
		return "nats node loss"
	}
	return strings.Replace(kind, faultKill, "kill -9 ", 1)
}

// faultRunner strikes the run's faults by schedule on a goroutine of its own, while the rounds
// are checked: a fault hits when its moment comes, whatever the checks are doing.
type faultRunner struct {
	s        *soak
	stopping atomic.Bool
	done     chan struct{}
	err      error
}

// startFaults starts striking the run's faults: every FaultEvery rounds from the second, until
// the run's quiet rounds.
func (s *soak) startFaults(ctx context.Context) *faultRunner {
	f := &faultRunner{s: s, done: make(chan struct{})}
	if s.cfg.FaultEvery <= 0 {
		close(f.done)
		return f
	}
	go func() {
		defer close(f.done)
		f.err = f.run(ctx)
	}()
	return f
}

// stop waits for a fault under way and stops; it returns what made the runner fail.
func (f *faultRunner) stop() error {
	f.stopping.Store(true)
	<-f.done
	return f.err
}

// failed returns what made the runner fail, once it has.
func (f *faultRunner) failed() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

func (f *faultRunner) run(ctx context.Context) error {
	s := f.s
	every := uint64(s.cfg.FaultEvery)
	for r := max(every, 2); ; r += every {
		if err := s.e.waitFor(ctx, fmt.Sprintf("round %d", r), func() bool { return f.stopping.Load() || s.rounds.seen(r) }); err != nil {
			return err
		}
		if f.stopping.Load() {
			return nil
		}
		if s.quiet(r) {
			continue
		}
		s.fmu.Lock()
		held := s.sched.done()
		kind := s.sched.take()
		// Once the run holds its cycles, the stages are killed no more: its last rounds, those
		// the stages' figures are judged over, are each stage's one process, living through
		// Redis's and NATS's faults (a leak at every reconnection is a trend there).
		skip := s.cycles() > 0 && held >= s.cycles() && strings.HasPrefix(kind, faultKill)
		s.fmu.Unlock()
		if skip {
			continue
		}
		err := s.fault(ctx, r, kind)
		s.fmu.Lock()
		if n := len(s.faultSpans); n > 0 && s.faultSpans[n-1].end.IsZero() {
			s.faultSpans[n-1].end = time.Now()
		}
		s.fmu.Unlock()
		if err != nil {
			return fmt.Errorf("round %d: fault %s: %w", r, kindName(kind), err)
		}
	}
}

// struck records that kind hit round r, as what.
func (s *soak) struck(kind string, r uint64, what string) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.sched.record(kind, r)
	s.faultRounds[r] = what
	s.lastFault = max(s.lastFault, r)
	s.faultSpans = append(s.faultSpans, faultSpan{start: time.Now()})
	if strings.HasPrefix(kind, faultKill) {
		s.lastKill = max(s.lastKill, r)
	}
}

// faultSpan is when a fault struck and when its injection was over (zero: under way).
type faultSpan struct{ start, end time.Time }

// faultSettle is how long after a fault's injection its effects may still slow the run: a
// JetStream cluster electing leaders, consumers redelivering what was in flight.
const faultSettle = 15 * time.Second

// faultDuring reports whether a fault was under way, or settling, at some moment between from
// and to.
func (s *soak) faultDuring(from, to time.Time) bool {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for _, f := range s.faultSpans {
		end := f.end
		if end.IsZero() {
			end = time.Now()
		}
		if f.start.Before(to) && end.Add(faultSettle).After(from) {
			return true
		}
	}
	return false
}

// faultOf is the fault that hit round r ("" when none did).
func (s *soak) faultOf(r uint64) string {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.faultRounds[r]
}

// faultsHit returns the rounds each kind of fault hit.
func (s *soak) faultsHit() map[string][]uint64 {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	out := map[string][]uint64{}
	for k, rs := range s.sched.hit {
		out[k] = slices.Clone(rs)
	}
	return out
}

// fault injects kind at a moment of round r drawn from the seed (a share of the last round's
// duration after r started). It records the fault as it strikes, in round r, or in the next
// when r was over by then (a short round).
func (s *soak) fault(ctx context.Context, r uint64, kind string) error {
	// Draw everything first, so the seed fixes the schedule whatever happens.
	hard := s.rng.IntN(2) == 0
	node := s.rng.IntN(clusterNodes)
	frac := 0.1 + 0.6*s.rng.Float64()
	down := time.Duration(100+s.rng.IntN(900)) * time.Millisecond
	if d := s.rounds.duration(r - 1); d > 0 {
		at := s.rounds.started(r).Add(time.Duration(frac * float64(d)))
		if err := sleep(ctx, time.Until(at)); err != nil {
			return err
		}
	}
	strike := func(what string) {
		hit := r
		if s.rounds.ended(r) {
			hit = s.rounds.lastEnded() + 1
		}
		s.struck(kind, hit, what)
	}
	e := s.e
	switch {
	case strings.HasPrefix(kind, faultKill):
		stage := strings.TrimPrefix(kind, faultKill)
		ps := e.running(stage)
		if len(ps) == 0 {
			return fmt.Errorf("no running %s to kill", stage)
		}
		strike("kill -9 " + stage)
		e.kill(stage, ps[0])
		if err := sleep(ctx, down); err != nil {
			return err
		}
		_, err := e.startStage(stage)
		return err
	case kind == faultRedis:
		// KVCM's writes wait while Redis is away (they would fail, and KVCM retries them).
		s.work.pause()
		defer s.work.resume()
		if s.up != nil {
			// Upstream's GC persists nothing: its requests finish, and a new one starts after.
			s.up.halt()
			defer func() {
				if err := s.up.start(ctx); err != nil {
					s.problem("restart upstream's GC: %v", err)
				}
			}()
		}
		if hard {
			strike("redis kill -9, restart")
			e.redis.Kill()
		} else {
			strike("redis restart")
		}
		if err := e.redis.Restart(); err != nil {
			return fmt.Errorf("restart redis: %w", err)
		}
		// The writes of the restart are nobody's to notify: the next check reads everything.
		return s.keys.restarted(ctx)
	case kind == faultNATS && e.js3 == nil:
		strike("nats restart")
		e.nats.Shutdown()
		if err := sleep(ctx, down); err != nil {
			return err
		}
		if err := e.nats.Start(); err != nil {
			return fmt.Errorf("start nats again: %w", err)
		}
		return nil
	case kind == faultNATS:
		// Every node stopped, then all started again: the cluster recovers from its stores.
		strike("nats cluster restart")
		e.js3.Shutdown()
		if err := sleep(ctx, down); err != nil {
			return err
		}
		for i := range clusterNodes {
			if err := e.js3.Start(i); err != nil {
				return err
			}
		}
		return s.clusterCurrent(ctx)
	case kind == faultNodeLoss:
		strike(fmt.Sprintf("nats node n%d kill -9, restart", node))
		e.js3.Kill(node)
		if err := sleep(ctx, down+time.Second); err != nil {
			return err
		}
		if err := e.js3.Start(node); err != nil {
			return err
		}
		return s.clusterCurrent(ctx)
	}
	return fmt.Errorf("unknown fault %q", kind)
}

// clusterCurrent waits until every replica of every stream is current: a second loss before
// that could take a stream's quorum.
func (s *soak) clusterCurrent(ctx context.Context) error {
	e := s.e
	for _, st := range []string{e.names.BatchesStream(), e.names.DeletesStream(), e.names.EventsStream(), e.names.SweepStream(),
		"KV_" + e.names.StateBucket(), "KV_" + e.names.LeaseBucket()} {
		if err := e.waitFor(ctx, "every replica of "+st+" current", func() bool {
			_, ok := streamCurrent(withTimeout(ctx, time.Second), e.js, st, clusterNodes)
			return ok
		}); err != nil {
			return err
		}
	}
	return nil
}
