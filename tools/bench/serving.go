package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/bench/stage"
)

// Serving modes: kvcm-gc off, at its default pacing, and unpaced.
const (
	ModeOff     = "off"
	ModeDefault = "default"
	ModeUnpaced = "unpaced"
)

// Placements of the serving windows.
const (
	// PinPinned is production's placement: Redis and the read load (KVCM) on one core,
	// kvcm-gc's stages and NATS on the other, so a window measures what kvcm-gc's commands
	// cost Redis and not two programs taking turns on one core.
	PinPinned = "pinned"
	// PinShared leaves every process free to run on every core, as the scheduler likes.
	PinShared = "shared"
)

// ParsePins reads the -serving-pin flag: a comma-separated list of PinPinned and PinShared.
func ParsePins(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		switch p = strings.TrimSpace(p); p {
		case PinPinned, PinShared:
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		case "":
		default:
			return nil, fmt.Errorf("serving placement %q: not %s or %s", p, PinPinned, PinShared)
		}
	}
	return out, nil
}

// Latency is what a KVCM-like read load saw during one window.
type Latency struct {
	Mode string
	// Pin is the window's placement (PinPinned, PinShared).
	Pin string
	Rep int
	// N requests completed; Errors failed; Late could not be sent on schedule because every
	// client was busy (the load is open-loop: a slow server does not slow the schedule).
	N, Errors, Late     int
	P50, P99, P999, Max time.Duration
	// GCKeys are the keys the scanner read during the window (0 when off).
	GCKeys int
	CPU    CPUShare
	// Samples are the window's request latencies, sorted (for the pooled figures).
	Samples []time.Duration
}

// readLoad issues KVCM's read of random blocks at rate per second for window, from a pool of
// clients as a KVCM process does, and measures each request from the moment it is sent until
// its reply. KVCM's read is HGETALL in the location layout (GetAllFields), HMGET __uri__
// __lru_time__ in the legacy one.
func readLoad(ctx context.Context, rdb *redis.Client, layout kvcm.Layout, keys []string, rate int, window time.Duration) Latency {
	var r atomic.Int64
	r.Store(int64(rate))
	l := sendLoad(ctx, rdb, layout, keys, &r, window, nil)
	return l.latency(l.start, l.start.Add(window))
}

// loadResult is every request of a read load: when it was sent and how long it took.
type loadResult struct {
	start time.Time
	// sent[i] is when request i was sent, as an offset from start; lat[i] its latency.
	sent, lat []time.Duration
	// late are the offsets of requests that could not be sent on schedule (every client was
	// busy); errs of requests that failed.
	late, errs []time.Duration
}

// latency is what the requests sent in [from, to) saw.
func (l *loadResult) latency(from, to time.Time) Latency {
	a, b := from.Sub(l.start), to.Sub(l.start)
	in := func(d time.Duration) bool { return d >= a && d < b }
	var res Latency
	var all []time.Duration
	for i, d := range l.sent {
		if in(d) {
			all = append(all, l.lat[i])
		}
	}
	for _, d := range l.late {
		if in(d) {
			res.Late++
		}
	}
	for _, d := range l.errs {
		if in(d) {
			res.Errors++
		}
	}
	slices.Sort(all)
	res.N, res.Samples = len(all), all
	if len(all) > 0 {
		q := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
		res.P50, res.P99, res.P999, res.Max = q(0.50), q(0.99), q(0.999), all[len(all)-1]
	}
	return res
}

// sendLoad is readLoad's schedule: *rate requests per second (read before every request, so
// it may change while the load runs), open-loop (a slow server does not slow the schedule),
// until window has passed, stop is closed or ctx is done.
func sendLoad(ctx context.Context, rdb *redis.Client, layout kvcm.Layout, keys []string, rate *atomic.Int64, window time.Duration, stop <-chan struct{}) *loadResult {
	const workers = 16
	type job struct {
		key  string
		sent time.Duration
	}
	work := make(chan job, workers)
	res := &loadResult{start: time.Now()}
	type done struct{ sent, lat, errs []time.Duration }
	dones := make([]done, workers)
	// Room for a window of a minute at the rate, at most: a longer load grows as it goes.
	capacity := int(min(window, time.Minute).Seconds()*float64(rate.Load()))/workers + 64
	var wg sync.WaitGroup
	for w := range workers {
		dones[w] = done{sent: make([]time.Duration, 0, capacity), lat: make([]time.Duration, 0, capacity)}
		wg.Go(func() {
			d := &dones[w]
			for j := range work {
				t0 := time.Now()
				var err error
				if layout == kvcm.LayoutLegacy {
					err = rdb.HMGet(ctx, j.key, kvcm.FieldURI, kvcm.FieldLRUTime).Err()
				} else {
					err = rdb.Do(ctx, "hgetall", j.key).Err()
				}
				lat := time.Since(t0)
				if err != nil {
					d.errs = append(d.errs, j.sent)
					continue
				}
				d.sent, d.lat = append(d.sent, j.sent), append(d.lat, lat)
			}
		})
	}
	rng := rand.New(rand.NewPCG(uint64(res.start.UnixNano()), 7))
	for at := res.start; ; {
		if at.Sub(res.start) >= window || ctx.Err() != nil || closed(stop) {
			break
		}
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		select {
		case work <- job{key: keys[rng.IntN(len(keys))], sent: at.Sub(res.start)}:
		default:
			res.late = append(res.late, at.Sub(res.start))
		}
		at = at.Add(time.Second / time.Duration(max(rate.Load(), 1)))
	}
	close(work)
	wg.Wait()
	for _, d := range dones {
		res.sent, res.lat, res.errs = append(res.sent, d.sent...), append(res.lat, d.lat...), append(res.errs, d.errs...)
	}
	return res
}

// closed reports whether c is closed (never, for nil).
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// serving alternates windows with kvcm-gc off, at default pacing and unpaced, in each of the
// configured placements, reps times, on k (in dry-run: the keyspace stays as it is, so every
// window sees the same work).
func (h *Harness) serving(ctx context.Context, phase string, k *Keyspace, unpaced stage.Profile) (out []Latency, err error) {
	keys := k.collectedKeys()
	opts := *k.rdb.Options()
	opts.PoolSize = 16
	rdb := redis.NewClient(&opts)
	defer rdb.Close()
	pins := h.cfg.ServingPins
	if len(pins) == 0 {
		pins = []string{PinShared}
	}
	if slices.Contains(pins, PinPinned) {
		if err := h.canPin(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if perr := h.place(context.WithoutCancel(ctx), PinShared); perr != nil && err == nil {
			err = perr
		}
	}()

	def := stage.DefaultProfile()
	def.DryRun = true
	unpaced.DryRun = true
	// Rounds back to back, so an unpaced scanner reads all through the window even when a
	// round is shorter than it.
	unpaced.RoundPause = time.Nanosecond
	cfg := h.cfg
	// Open the clients' connections before the first window measures anything.
	_ = readLoad(ctx, rdb, k.Spec.Layout, keys, cfg.ServingRate, time.Second)
	for rep := 1; rep <= cfg.ServingReps; rep++ {
		for _, pin := range pins {
			if err := h.place(ctx, pin); err != nil {
				return out, err
			}
			for _, mode := range []string{ModeOff, ModeDefault, ModeUnpaced} {
				l, err := h.servingWindow(ctx, phase, k, rdb, keys, mode, pin, rep, map[string]stage.Profile{ModeDefault: def, ModeUnpaced: unpaced}[mode])
				if err != nil {
					return out, err
				}
				h.log.Info("serving window", "layout", k.Spec.Layout, "pin", pin, "mode", mode, "rep", rep, "p50", l.P50, "p99", l.P99,
					"gc_keys", l.GCKeys, "redis_cpu", l.CPU.Redis, "redis_wait", l.CPU.RedisWait, "stages_cpu", l.CPU.Stages,
					"harness_cpu", l.CPU.Harness)
				out = append(out, l)
			}
		}
	}
	return out, nil
}

func (h *Harness) servingWindow(ctx context.Context, phase string, k *Keyspace, rdb *redis.Client, keys []string, mode, pin string, rep int, p stage.Profile) (Latency, error) {
	var r *run
	if mode != ModeOff {
		var err error
		if r, err = h.newRun(ctx, fmt.Sprintf("%s-%s-%s-%d", phase, pin, mode, rep), k, p); err != nil {
			return Latency{}, err
		}
		defer r.close(context.WithoutCancel(ctx))
		if pin == PinPinned {
			r.cpus = h.gcCPUs()
		}
		for _, st := range []string{stage.Scanner, stage.Prober, stage.Deleter} {
			if err := r.start(st); err != nil {
				return Latency{}, err
			}
		}
		// Measure kvcm-gc at work, not starting: wait for the first round to begin.
		if err := r.until(ctx, time.Minute, "round start", func() (bool, error) {
			ck, err := r.checkpoint(ctx)
			return err == nil && ck.Round >= 1, nil
		}); err != nil {
			return Latency{}, err
		}
	}
	// Let the stages reach their steady state, or the last window's settle.
	if r != nil {
		time.Sleep(time.Second)
	} else {
		time.Sleep(time.Second / 2)
	}
	before := h.scannedKeys(ctx, r)
	var pids []int
	if r != nil {
		pids = r.pids()
	}
	cpu := h.cpuNow(ctx, pids...)
	l := readLoad(ctx, rdb, k.Spec.Layout, keys, h.cfg.ServingRate, h.cfg.ServingWindow)
	l.CPU = h.cpuSince(ctx, cpu, pids...)
	l.Mode, l.Pin, l.Rep = mode, pin, rep
	if r != nil {
		if err := r.checkAlive(); err != nil {
			return l, err
		}
		l.GCKeys = h.scannedKeys(ctx, r) - before
	}
	return l, nil
}

// scannedKeys is the scanner's progress in keys (all rounds), from its checkpoint.
func (h *Harness) scannedKeys(ctx context.Context, r *run) int {
	if r == nil {
		return 0
	}
	ck, err := r.checkpoint(ctx)
	if err != nil {
		return 0
	}
	return int(ck.KeysScanned) + int(ck.Round-1)*r.k.Counts.Blocks
}
