package scanner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/duty"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// The duty pace of a store's walk (scanner.duty, DESIGN §4.3). Each round trip of the walk,
// a page's SCAN and each burst of at most burst_keys HGETALL, waits at the store's gate
// (internal/duty) until the pace lets it go: a round trip that held Redis for t makes the
// next start no sooner than t/duty after it, which leaves Redis (1−duty)/duty × t to itself,
// between duty.DefaultFloor and duty.DefaultCap after the reply. t is Redis's own clock
// between a TIME first and a TIME last in the pipeline (meta.Bursts.Took): on a loaded host
// the round trip also counts this process's wait for a core, and a walk paced by it took a
// third of its duty (BENCHMARKS.md, the raw duty walk). The walk needs no latency target and
// no idle baseline: a busier Redis takes longer over each burst, and the walk waits longer
// after it by itself.
//
// The defaults, from the full run's figures: a key costs Redis 4.55 µs of main-thread CPU at
// 1M blocks and 6.32 µs at 10M; a burst of 64 keys then holds Redis's event loop for about
// 0.4 ms, the longest a serving request waits behind the walk. At a duty of 0.1 the walk
// reads 0.1 / 6.32 µs ≈ 15,800 keys a second, a 100M-block store in about 1 h 45 min (under
// 3 h as long as a key costs less than 10.8 µs), while Redis keeps nine tenths of its time.
//
// max_keys_per_second stays a hard cap (the pacer's MaxRate). scanner.redis_cpu_ceiling holds
// the walk while Redis's main thread, by INFO cpu, is busier than the ceiling; a server that
// refuses INFO is paced by the duty alone, and the checkpoint (status) says so.

// cpuReader is a store that reports its main thread's CPU time (redismeta: INFO cpu).
type cpuReader interface {
	MainThreadCPU(ctx context.Context) (time.Duration, error)
}

// pace paces one store's walk.
type pace struct {
	cfg     Config
	trips   *duty.Trips
	ceiling *duty.Ceiling
}

// newPace returns the pace of a walk of st under cfg (cfg.Duty > 0); onCeiling is called
// after each reading of the store's CPU time (the metrics: a walk held within a page says so
// before the page ends).
func newPace(cfg Config, st meta.Store, onCeiling func(duty.CeilingState)) *pace {
	var ceiling *duty.Ceiling
	if cr, ok := st.(cpuReader); ok && cfg.CPUCeiling > 0 {
		ceiling = duty.NewCeiling(duty.CeilingConfig{Limit: cfg.CPUCeiling, Every: cfg.CPUEvery,
			Read: func(ctx context.Context) (time.Duration, error) {
				cpu, err := cr.MainThreadCPU(ctx)
				if errors.Is(err, meta.ErrInfoRefused) {
					return 0, fmt.Errorf("%w: %w", duty.ErrRefused, err)
				}
				return cpu, err
			}, OnState: onCeiling})
	}
	p := duty.New(duty.Config{Duty: cfg.Duty, MaxRate: cfg.MaxKeysPerSecond})
	return &pace{cfg: cfg, trips: duty.NewTrips(duty.NewGate(p, ceiling)), ceiling: ceiling}
}

// bursts is how the walk reads a page.
func (p *pace) bursts() meta.Bursts {
	return meta.Bursts{Size: p.cfg.BurstKeys, Gate: p.trips.Begin, Took: p.trips.Took}
}

// record is the pace for the checkpoint (status) and the metrics.
func (p *pace) record() *pipeline.PaceRecord {
	pc := p.trips.Gate().Pace()
	r := &pipeline.PaceRecord{Duty: pc.Duty, Share: pc.Share, WaitUs: pc.Wait.Microseconds(), Reason: pc.Reason,
		BurstKeys: p.cfg.BurstKeys, MaxRate: p.cfg.MaxKeysPerSecond, CPUShare: -1, CPU: duty.CeilingOff}
	if p.cfg.CPUCeiling > 0 {
		st := p.ceiling.State()
		r.CPULimit, r.CPUShare, r.CPU = p.cfg.CPUCeiling, st.Share, st.State
		if p.ceiling == nil {
			r.CPU = duty.CeilingRefused // the store cannot report its CPU time at all
		}
	}
	return r
}
