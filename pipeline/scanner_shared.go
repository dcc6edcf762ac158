package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// What every walk of a scanner shares: the operator's pause and the downstream backlog (one
// reading serves every store, and its changes are logged once), and the registry snapshot
// (one read serves every store; failed reads back off).

// controlRefresh bounds how stale a reused pause or backlog answer may be: with a short
// scan_interval and several stores, reading them for every tick would cost more round trips
// than the pages.
const controlRefresh = 250 * time.Millisecond

// RegistryBackoff is the default delay before the attempt-th retry (1-based) of a failed
// registry read: the project's one retry policy (internal/backoff), 200ms doubling up to 30s,
// with jitter so that scanners that failed together do not retry together.
func RegistryBackoff(attempt int) time.Duration {
	return backoff.New(200*time.Millisecond, 30*time.Second).Delay(attempt)
}

// controls caches the pause and the backlog readings for every walk of a scanner.
type controls struct {
	state     jetstream.KeyValue
	backlog   Backlog
	highWater uint64
	m         *Metrics
	log       *slog.Logger

	mu         sync.Mutex
	pauseAt    time.Time
	pauseUntil time.Time
	pauseErr   error
	backlogAt  time.Time
	full       bool
	prober     uint64
	deleter    uint64
	backlogErr error
	// What was logged last, so each change is logged once, not every tick.
	loggedPaused, loggedFull, loggedPauseErr, loggedBacklogErr bool
}

// read returns the pause (zero: none) and whether the backlog is full, from readings at most
// controlRefresh old. A reading that fails is an error: the caller fails closed.
func (c *controls) read(ctx context.Context, now time.Time) (pausedUntil time.Time, full bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stale(c.pauseAt, now) {
		c.pauseUntil, c.pauseErr = readPause(ctx, c.state, now)
		c.pauseAt = now
		if c.pauseErr != nil {
			c.m.opError(StageScanner, "pause")
		}
		c.logPauseErr(ctx)
	}
	if c.backlog != nil && stale(c.backlogAt, now) {
		p, d, err := c.backlog(ctx)
		c.backlogAt, c.backlogErr = now, err
		if err != nil {
			c.m.opError(StageScanner, "backlog")
		} else {
			c.prober, c.deleter = p, d
			c.full = p > c.highWater || d > c.highWater
		}
		c.logBacklog(ctx)
	}
	until := c.pauseUntil
	if !until.IsZero() && !now.Before(until) {
		until = time.Time{} // over, even if the reading is not due again yet
	}
	if c.pauseErr == nil {
		c.logPause(until)
	}
	return until, c.full, errors.Join(c.pauseErr, c.backlogErr)
}

func stale(at, now time.Time) bool {
	return at.IsZero() || now.Sub(at) >= controlRefresh || now.Before(at)
}

func (c *controls) logPauseErr(ctx context.Context) {
	if failed := c.pauseErr != nil; failed != c.loggedPauseErr {
		c.loggedPauseErr = failed
		if failed {
			warn(ctx, c.log, "read scanner pause; walks held until it can be read", "err", c.pauseErr)
		} else {
			c.log.Info("scanner pause readable again")
		}
	}
}

// logPause notes the pause in effect (zero: none): the gauge and one line per change.
func (c *controls) logPause(until time.Time) {
	paused := !until.IsZero()
	if paused == c.loggedPaused {
		return
	}
	c.loggedPaused = paused
	if paused {
		c.m.ScannerPaused.Set(1)
		c.log.Info("scanner paused", "until", until.UTC().Format(time.RFC3339))
	} else {
		c.m.ScannerPaused.Set(0)
		c.log.Info("scanner resumed")
	}
}

func (c *controls) logBacklog(ctx context.Context) {
	if failed := c.backlogErr != nil; failed != c.loggedBacklogErr {
		c.loggedBacklogErr = failed
		if failed {
			warn(ctx, c.log, "read consumer backlog; walks held until it can be read", "err", c.backlogErr)
		} else {
			c.log.Info("consumer backlog readable again")
		}
	}
	if c.backlogErr != nil || c.full == c.loggedFull {
		return
	}
	c.loggedFull = c.full
	if c.full {
		c.m.Backpressure.Set(1)
		c.log.Info("backpressure: scanning held back", "prober_backlog", c.prober, "deleter_backlog", c.deleter, "high_water", c.highWater)
	} else {
		c.m.Backpressure.Set(0)
		c.log.Info("backpressure over: scanning again", "prober_backlog", c.prober, "deleter_backlog", c.deleter, "high_water", c.highWater)
	}
}

// readPause returns the end of an active operator pause (zero when none).
func readPause(ctx context.Context, kv jetstream.KeyValue, now time.Time) (time.Time, error) {
	p, err := ReadPause(ctx, kv, subjects.ScannerPauseKey)
	if err != nil || p == nil || !p.Active(now) {
		return time.Time{}, err
	}
	return p.Until(), nil
}

// registryReuse is how long a registry snapshot serves every walk (and the lease
// coordination) before it is read again.
const registryReuse = time.Second

// registryCache reads the registry for every walk of a scanner: one read at most every
// registryReuse, and after a failure none before the backoff delay has passed (DESIGN §4: no
// cursor advance on a registry failure; finding: retrying at scan_interval floods the logs
// and the registry). Failures are logged here, once per read.
type registryCache struct {
	r       meta.RegistryReader
	backoff func(attempt int) time.Duration
	m       *Metrics
	log     *slog.Logger

	mu       sync.Mutex
	snap     []meta.Instance
	at       time.Time
	failures int
	retryAt  time.Time
	err      error
	skipped  int
}

// errRegistryBackoff: a registry read failed a moment ago; the next is not due yet.
var errRegistryBackoff = errors.New("registry read backing off")

// get returns the snapshot, sorted by (group, id), or the last error and when to try again.
func (c *registryCache) get(ctx context.Context, now time.Time) ([]meta.Instance, time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil && now.Before(c.retryAt) {
		return nil, c.retryAt, fmt.Errorf("%w until %s: %w", errRegistryBackoff, c.retryAt.UTC().Format(time.RFC3339Nano), c.err)
	}
	if c.err == nil && c.snap != nil && now.Sub(c.at) < registryReuse && !now.Before(c.at) {
		return c.snap, time.Time{}, nil
	}
	reg, err := c.r.ReadRegistry(ctx)
	if err != nil {
		c.failures++
		delay := c.backoff(c.failures)
		c.err, c.retryAt = err, now.Add(delay)
		c.m.opError(StageScanner, "registry")
		warn(ctx, c.log, "read registry; backing off", "attempt", c.failures, "retry_in", delay, "err", err)
		return nil, c.retryAt, fmt.Errorf("read registry: %w", err)
	}
	if c.failures > 0 {
		c.log.Info("registry readable again", "after_attempts", c.failures)
	}
	c.failures, c.err = 0, nil
	snap := append([]meta.Instance(nil), reg.Instances...)
	sort.SliceStable(snap, func(i, j int) bool {
		if snap[i].Group != snap[j].Group {
			return snap[i].Group < snap[j].Group
		}
		return snap[i].ID < snap[j].ID
	})
	if len(reg.Skipped) > 0 && (c.snap == nil || len(reg.Skipped) != c.skipped) {
		c.log.Info("registry entries not collected", "count", len(reg.Skipped), "first", reg.Skipped[0].Instance, "reason", reg.Skipped[0].Reason)
	}
	c.skipped = len(reg.Skipped)
	c.snap, c.at = snap, now
	return snap, time.Time{}, nil
}

// last returns the last snapshot read (nil: none yet), without reading.
func (c *registryCache) last() []meta.Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap
}

// instancesOf returns the instances of a snapshot whose metadata store is store, by id (the
// first by (group, id) wins a duplicate id).
func instancesOf(snap []meta.Instance, store string) map[string]meta.Instance {
	out := map[string]meta.Instance{}
	for _, in := range snap {
		if in.Store != store {
			continue
		}
		if _, dup := out[in.ID]; !dup {
			out[in.ID] = in
		}
	}
	return out
}

// storesOf returns the metadata stores of a snapshot, sorted.
func storesOf(snap []meta.Instance) []string {
	seen := map[string]bool{}
	var out []string
	for _, in := range snap {
		if !seen[in.Store] {
			seen[in.Store] = true
			out = append(out, in.Store)
		}
	}
	sort.Strings(out)
	return out
}

// warn logs a failed operation, except when it failed because the scanner is shutting down.
func warn(ctx context.Context, log *slog.Logger, msg string, args ...any) {
	if ctx.Err() != nil {
		log.Debug(msg, args...)
		return
	}
	log.Warn(msg, args...)
}
