package scanner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// An adaptive walk (scanner.latency_budget set, max_keys_per_second 0) is paced by a pacer
// (pace.go) the driver feeds: a probe goroutine PINGs the store every probeEvery
// while the walk reads, and every burst of a page's reads waits at the gate until the pace
// allows it (meta.BurstScanner). The walk itself then waits nothing between pages.

// probeEvery is the time between two probes of a store being walked: 200 samples a second,
// against the window's minimum of 50 (a PING costs Redis about a microsecond: 0.02% of its
// time). A window's 0.9-quantile of 50 probes moved by more than the budget with nothing
// changed; of 200 it moves less.
const probeEvery = 5 * time.Millisecond

// probeIdleAfter: the probe stops when no burst was gated for this long (between rounds, a
// pause, a full backlog).
const probeIdleAfter = 3 * time.Second

// gatePoll bounds one sleep at the gate, so a pace decided meanwhile (a hold ending, a lower
// rate) applies within it.
const gatePoll = 50 * time.Millisecond

// adaptive paces one walk's reads.
type adaptive struct {
	budget float64
	now    func() time.Time
	// onPace is called with each pace that differs from the last (metrics).
	onPace func(Pace)

	mu sync.Mutex
	p  *pacer
	// next is the earliest start of the next burst; active when the last burst was gated.
	next, active time.Time
	cur          Pace
	probeErrs    int
	// inFlight is when the probe waiting for its answer was sent (zero: none).
	inFlight time.Time
}

func newAdaptive(budget float64, batch int, now func() time.Time, onPace func(Pace)) *adaptive {
	return &adaptive{budget: budget, now: now, onPace: onPace, p: newPacer(defaultPaceConfig(budget, batch))}
}

// burst is the burst size of the current pace.
func (a *adaptive) burst() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur.Depth > 0 {
		return a.cur.Depth
	}
	return a.p.depth
}

// decide asks the pacer for the pace at now; a.mu is held.
func (a *adaptive) decide(now time.Time) Pace {
	if !a.inFlight.IsZero() && a.p.due(now) {
		// A probe still unanswered has taken at least this long: a store too slow to answer
		// enough probes in a window is measured, not left at its pace.
		a.p.sampleUnanswered(a.inFlight, now.Sub(a.inFlight))
	}
	pc := a.p.pace(now)
	if pc != a.cur {
		a.cur = pc
		if a.onPace != nil {
			a.onPace(pc)
		}
	}
	return pc
}

// gate waits until a burst of n keys may start at the current pace (no catch-up after a slow
// one: a late burst starts the next interval from now).
func (a *adaptive) gate(ctx context.Context, n int) error {
	for {
		a.mu.Lock()
		now := a.now()
		a.active = now
		pc := a.decide(now)
		wait := gatePoll
		if pc.Rate > 0 {
			if !now.Before(a.next) {
				a.next = now.Add(time.Duration(float64(n) / pc.Rate * float64(time.Second)))
				a.mu.Unlock()
				return nil
			}
			wait = min(a.next.Sub(now), gatePoll)
		}
		a.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// record is the pace for the checkpoint.
func (a *adaptive) record() *pipeline.PaceRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	pc := a.cur
	return &pipeline.PaceRecord{Rate: pc.Rate, Burst: pc.Depth, Reason: pc.Reason, Budget: a.budget,
		ProbeUs: pc.Signal.Microseconds(), IdleUs: pc.Baseline.Microseconds()}
}

// probeFunc sends one probe and returns its latency and round trip (storeProbe).
type probeFunc func(ctx context.Context) (d, rtt time.Duration, err error)

// probe probes the store while the walk reads, until ctx is done. A failed probe is no sample
// (the walk's own reads report the store's failures); failed reports whether the last one
// failed, for a log line on the first failure of a run.
func (a *adaptive) probe(ctx context.Context, send probeFunc, failed func(err error)) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		idle := a.now().Sub(a.active) > probeIdleAfter
		start := a.now()
		if !idle {
			a.inFlight = start
		}
		a.mu.Unlock()
		if idle {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		d, rtt, err := send(pctx)
		cancel()
		a.mu.Lock()
		a.inFlight = time.Time{}
		if err == nil {
			a.p.sample(start, d, rtt)
			a.probeErrs = 0
		} else if a.probeErrs++; a.probeErrs == 1 && ctx.Err() == nil {
			a.mu.Unlock()
			failed(err)
			continue
		}
		a.mu.Unlock()
	}
}

// startAdaptive sets up the walk's pacer and probe when the configuration asks for one and
// the store can be probed and read in bursts; otherwise the walk paces by scan_interval.
func (d *walkDriver) startAdaptive(ctx context.Context) {
	cfg := d.s.cfg
	if !cfg.adaptive() {
		return
	}
	st, err := d.s.stores.Store(d.h.store)
	if err != nil {
		return // the walk reports it at its first page
	}
	pinger, ok1 := st.(meta.Pinger)
	_, ok2 := st.(meta.BurstScanner)
	if !ok1 || !ok2 {
		d.log.Info("store cannot be probed; its walk is paced by scan_interval")
		return
	}
	store, m := d.h.store, d.s.metrics
	d.w.cfg.adaptive = true
	d.pace = newAdaptive(cfg.LatencyBudget, cfg.ScanBatchSize, d.s.now, func(pc Pace) { m.storePace(store, pc) })
	m.storePace(store, d.pace.cur)
	go d.pace.probe(ctx, storeProbe(st, pinger, d.log), func(err error) {
		d.log.Info("probe of the store's latency failed; the pace holds until it answers", "err", err)
	})
}

// queueProber is a store that can tell how long a command waited in it (redismeta's
// ProbeQueue: TIME, the server's clock less ours).
type queueProber interface {
	ProbeQueue(ctx context.Context) (rtt, oneWay time.Duration, err error)
}

// storeProbe probes with TIME where the store can and lets it (pace.go says why), and
// with PING's round trip otherwise: from the first time the server refuses TIME (a user
// without +time) on, for the rest of the walk.
func storeProbe(st meta.Store, pinger meta.Pinger, log *slog.Logger) probeFunc {
	ping := func(ctx context.Context) (time.Duration, time.Duration, error) {
		start := time.Now()
		err := pinger.Ping(ctx)
		rtt := time.Since(start)
		return rtt, rtt, err
	}
	qp, ok := st.(queueProber)
	if !ok {
		return ping
	}
	var refused atomic.Bool
	return func(ctx context.Context) (time.Duration, time.Duration, error) {
		if refused.Load() {
			return ping(ctx)
		}
		rtt, oneWay, err := qp.ProbeQueue(ctx)
		if errors.Is(err, meta.ErrProbeRefused) {
			refused.Store(true)
			log.Info("the store refuses TIME; its walk is paced by PING's round trip", "err", err)
			return ping(ctx)
		}
		return oneWay, rtt, err
	}
}
