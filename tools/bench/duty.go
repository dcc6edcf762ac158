package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/duty"
)

// The raw duty walk is the duty pace with nothing of the pipeline around it: the harness walks
// the keyspace through kvcm-gc's store read (ScanStoreBursts: SCAN COUNT 256, the page's keys
// read whole in pipelines of Depth keys, the next SCAN in the last one), each round trip gated
// by a duty pacer (internal/duty) and timed on Redis's clock (TIME first and last in each
// pipeline), or by its round trip. Its share of Redis's main-thread CPU against the duty shows
// what the rule keeps, apart from the scanner process, NATS and the machine's scheduling of
// them.

// DutyRun is a raw duty walk of one window.
type DutyRun struct {
	Duty  float64
	Depth int
	// RoundTrip: the pacer took each pipeline's round trip, not its time on Redis's clock.
	RoundTrip bool
	// Load: the read load ran (in the window and in its idle window).
	Load bool
	// Keys SCAN returned, the round trips the walk sent, and the rounds it began.
	Keys, Trips, Rounds int
	// Held is the pacer's measure of the round trips' time (Redis's clock or the round trip).
	Held time.Duration
	// RoundTrips are the round trips' time as the client saw it, from the gate to the reply;
	// Late how much later than due they started, in all; Floor how many waits the floor set.
	// Together they show what bounds a walk that falls short of its duty: a round trip plus
	// the floor plus the late start longer than held/duty.
	RoundTrips, Late time.Duration
	Floor            int
	// Work is Redis's counters over the window; Idle over a window of the same length
	// without the walk just before it.
	Work, Idle RedisWork
}

// Share is the walk's share of Redis's main-thread CPU: the window's CPU share less the idle
// window's.
func (d DutyRun) Share() float64 { return walkShare(d.Work, d.Idle) }

// HeldShare is the pacer's measure of the walk's share of Redis's time.
func (d DutyRun) HeldShare() float64 {
	if d.Work.Wall <= 0 {
		return 0
	}
	return d.Held.Seconds() / d.Work.Wall.Seconds()
}

// Rate is the walk's keys per second.
func (d DutyRun) Rate() float64 { return Rate{Ops: d.Keys, Dur: d.Work.Wall}.PerSec() }

// PerTrip is the mean per round trip of the time it held Redis, its round trip, its late
// start, and the cycle from one round trip's start to the next's (the window over them).
func (d DutyRun) PerTrip() (held, roundTrip, late, cycle time.Duration) {
	if d.Trips == 0 {
		return 0, 0, 0, 0
	}
	n := time.Duration(d.Trips)
	return d.Held / n, d.RoundTrips / n, d.Late / n, d.Work.Wall / n
}

// rawDutyWalk walks k's store for window at duty in pipelines of depth keys.
func rawDutyWalk(ctx context.Context, k *Keyspace, st meta.BurstScanner, duty_ float64, depth int, roundTrip bool, window time.Duration) (DutyRun, error) {
	res := DutyRun{Duty: duty_, Depth: depth, RoundTrip: roundTrip}
	trips := duty.NewTrips(duty.NewGate(duty.New(duty.Config{Duty: duty_}), nil))
	trips.RoundTrip = roundTrip
	b := meta.Bursts{Size: depth, Gate: trips.Begin, Took: trips.Took}
	owns := k.owns()
	m, err := startRedisMeter(ctx, k.rdb)
	if err != nil {
		return res, err
	}
	end := time.Now().Add(window)
	var cursor uint64
	for time.Now().Before(end) {
		if cursor == 0 {
			res.Rounds++
		}
		page, err := st.ScanStoreBursts(ctx, cursor, 256, owns, b)
		if err != nil {
			return res, err
		}
		res.Keys += len(page.Entries) + len(page.BadKeys) + page.Unowned + page.WrongDB
		cursor = page.Next // 0 at the end of a round: the walk starts again
	}
	if res.Work, err = m.work(ctx); err != nil {
		return res, err
	}
	res.Held, res.Trips = trips.Held()
	tot := trips.Gate().Totals()
	res.RoundTrips, res.Late, res.Floor = trips.RoundTrips(), tot.Late, tot.Floor
	return res, nil
}

// dutyPhase runs the raw duty walk at each duty of Config.Duties, in pipelines of each depth
// of Config.DutyDepths, timed on Redis's clock and by the round trip, without and with the
// read load, each window after an idle window of the same length.
func (h *Harness) dutyPhase(ctx context.Context, k *Keyspace) ([]DutyRun, error) {
	cfg := h.cfg
	window := cfg.DutyWindow
	if window <= 0 {
		window = 5 * time.Second
	}
	var out []DutyRun
	st, err := k.openStore(ctx, true)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	opts := *k.rdb.Options()
	opts.PoolSize = 16
	rdb := redis.NewClient(&opts)
	defer rdb.Close()
	pw := &paceWork{h: h, k: k, rdb: rdb, keys: k.collectedKeys()}
	for rep := 1; rep <= max(cfg.DutyReps, 1); rep++ {
		duties := slices.Clone(cfg.Duties)
		if rep%2 == 0 {
			slices.Reverse(duties)
		}
		for _, withLoad := range []bool{false, true} {
			for _, depth := range cfg.DutyDepths {
				for _, d := range duties {
					for _, rt := range []bool{false, true} {
						var l *load
						if withLoad {
							l = pw.startLoad(ctx, cfg.ServingRate)
							sleepCtx(ctx, loadLead)
						}
						idle, err := idleWork(ctx, k.rdb, window)
						if err == nil {
							var r DutyRun
							r, err = rawDutyWalk(ctx, k, st, d, depth, rt, window)
							r.Idle, r.Load = idle, withLoad
							out = append(out, r)
							h.log.Info("raw duty walk", "duty", d, "depth", depth, "round_trip", rt, "load", withLoad,
								"share", fmt.Sprintf("%.3f", r.Share()), "held_share", fmt.Sprintf("%.3f", r.HeldShare()),
								"keys_per_second", int(r.Rate()), "idle_share", fmt.Sprintf("%.4f", idle.Share()),
								"trips", r.Trips, "floor", r.Floor, "held_us", us1(r.Held, r.Trips), "round_trip_us", us1(r.RoundTrips, r.Trips),
								"late_us", us1(r.Late, r.Trips), "cycle_us", us1(r.Work.Wall, r.Trips))
						}
						if l != nil {
							l.finish()
						}
						if err != nil {
							return out, err
						}
					}
				}
			}
		}
	}
	return out, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// idleWork is Redis's work over window with nothing but what already runs.
func idleWork(ctx context.Context, rdb *redis.Client, window time.Duration) (RedisWork, error) {
	m, err := startRedisMeter(ctx, rdb)
	if err != nil {
		return RedisWork{}, err
	}
	sleepCtx(ctx, window)
	return m.work(ctx)
}

// dutyReport is the raw duty walk's section of one layout.
func dutyReport(w func(string, ...any), lay fmt.Stringer, runs []DutyRun) {
	if len(runs) == 0 {
		return
	}
	w("### The raw duty walk, %s layout\n\n", lay)
	w("kvcm-gc's store read driven by the harness with nothing of the pipeline around it (SCAN COUNT 256, pipelines of the depth named), each round trip gated by the duty pacer (internal/duty): the next no sooner than its time on Redis divided by the duty after its start. The pacer takes each round trip's time on Redis's clock (TIME first and last in the pipeline) or, in the rows so marked, its round trip as the client sees it. Redis's main-thread share is the window's less the idle window's just before it (the read load running in both when named); the pacer's share is the round trips' time on Redis's clock over the window.\n\n")
	w("Per round trip (means): the time it held Redis by the pacer's measure, its round trip as the client saw it (from the gate to the reply), how late it started after it was due, and the cycle from one start to the next; the duty asks for a cycle of held/duty, and no wait can make it shorter than round trip + floor (200 µs) + late start: where that is longer, the walk falls short of its duty (the floor-bound column counts the waits the floor set).\n\n")
	w("| duty | pipeline | timed by | read load | Redis main-thread share | the pacer's share | keys/s | 100M blocks at that rate | held | round trip | late | cycle (held/duty) | floor-bound |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		by := "Redis's clock"
		if r.RoundTrip {
			by = "round trip"
		}
		load := "–"
		if r.Load {
			load = "yes"
		}
		round := "–"
		if r.Rate() > 0 {
			round = fmt.Sprintf("%.1f h", 1e8/r.Rate()/3600)
		}
		held, rt, late, cycle := r.PerTrip()
		floor := "–"
		if r.Trips > 0 {
			floor = fmt.Sprintf("%.0f%%", 100*float64(r.Floor)/float64(r.Trips))
		}
		w("| %.2f | %d keys | %s | %s | %.3f | %.3f | %s | %s | %s | %s | %s | %s (%s) | %s |\n", r.Duty, r.Depth, by, load, r.Share(), r.HeldShare(), num(r.Rate()), round,
			us(held), us(rt), us(late), us(cycle), us(time.Duration(float64(held)/r.Duty)), floor)
	}
	w("\n")
}

// us1 is d over n in whole microseconds, for the log.
func us1(d time.Duration, n int) int64 {
	if n == 0 {
		return 0
	}
	return (d / time.Duration(n)).Microseconds()
}
