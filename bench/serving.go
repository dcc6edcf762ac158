package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/bench/stage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
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
	const workers = 16
	work := make(chan string, workers)
	lats := make([][]time.Duration, workers)
	errs := make([]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lats[w] = make([]time.Duration, 0, int(window.Seconds()*float64(rate))/workers+64)
		wg.Go(func() {
			for key := range work {
				t0 := time.Now()
				var err error
				if layout == kvcm.LayoutLegacy {
					err = rdb.HMGet(ctx, key, kvcm.FieldURI, kvcm.FieldLRUTime).Err()
				} else {
					err = rdb.Do(ctx, "hgetall", key).Err()
				}
				d := time.Since(t0)
				if err != nil {
					errs[w]++
					continue
				}
				lats[w] = append(lats[w], d)
			}
		})
	}
	var res Latency
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if at.Sub(start) >= window || ctx.Err() != nil {
			break
		}
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		select {
		case work <- keys[rng.IntN(len(keys))]:
		default:
			res.Late++
		}
	}
	close(work)
	wg.Wait()
	var all []time.Duration
	for w := range workers {
		all = append(all, lats[w]...)
		res.Errors += errs[w]
	}
	slices.Sort(all)
	res.N, res.Samples = len(all), all
	if len(all) > 0 {
		q := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
		res.P50, res.P99, res.P999, res.Max = q(0.50), q(0.99), q(0.999), all[len(all)-1]
	}
	return res
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
