package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// ControlRefresh bounds how stale a reused pause or backlog answer may be: with a short
// scan_interval and several stores, reading them for every tick would cost more round trips
// than the pages.
const ControlRefresh = 250 * time.Millisecond

// BacklogFunc reads the backlog of the consumers downstream of a walk: full when a walk must
// wait, with key/value pairs that describe the reading for the log.
type BacklogFunc func(ctx context.Context) (full bool, detail []any, err error)

// ControlsConfig says whose controls they are.
type ControlsConfig struct {
	// Stage is the walking stage (the "stage" of its log lines and its pause).
	Stage string
	// PauseKey is the state-bucket key of the stage's pause (PauseKey); empty: the stage
	// cannot be paused.
	PauseKey string
	// Refresh is how long a reading serves every walk (ControlRefresh for the scanner; 0 reads
	// at every tick).
	Refresh time.Duration
}

// ControlsDeps are what controls read and report to. State is required; a nil Backlog never
// holds a walk back, a nil OpError counts nothing, nil gauges are not set, a nil Logger
// discards.
type ControlsDeps struct {
	State   jetstream.KeyValue
	Backlog BacklogFunc
	// OpError counts a failed reading: op is "pause" or "backlog".
	OpError func(op string)
	// Paused is 1 while a pause holds; Backpressure 1 while the backlog is full.
	Paused, Backpressure prometheus.Gauge
	Logger               *slog.Logger
}

// Controls are what holds the walks of a process back: an operator's pause (a PauseRecord in
// the state bucket) and the backlog downstream. One reading serves every walk for
// ControlsConfig.Refresh, and each change is logged once, not every tick.
type Controls struct {
	cfg  ControlsConfig
	deps ControlsDeps

	mu         sync.Mutex
	pauseAt    time.Time
	pauseUntil time.Time
	pauseErr   error
	backlogAt  time.Time
	full       bool
	detail     []any
	backlogErr error
	// What was logged last, so each change is logged once, not every tick.
	loggedPaused, loggedFull, loggedPauseErr, loggedBacklogErr bool
}

// NewControls returns the controls of cfg.Stage.
func NewControls(cfg ControlsConfig, deps ControlsDeps) *Controls {
	if deps.OpError == nil {
		deps.OpError = func(string) {}
	}
	deps.Logger = OrDiscard(deps.Logger)
	return &Controls{cfg: cfg, deps: deps}
}

// Read returns the pause (zero: none) and whether the backlog is full, from readings at most
// Refresh old. A reading that fails is an error: the caller fails closed.
func (c *Controls) Read(ctx context.Context, now time.Time) (pausedUntil time.Time, full bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stale(c.pauseAt, now) {
		c.pauseUntil, c.pauseErr = c.readPause(ctx, now)
		c.pauseAt = now
		if c.pauseErr != nil {
			c.deps.OpError("pause")
		}
		c.logPauseErr(ctx)
	}
	if c.deps.Backlog != nil && c.stale(c.backlogAt, now) {
		full, detail, err := c.deps.Backlog(ctx)
		c.backlogAt, c.backlogErr = now, err
		if err != nil {
			c.deps.OpError("backlog")
		} else {
			c.full, c.detail = full, detail
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

// readPause returns the end of an active operator pause (zero when none).
func (c *Controls) readPause(ctx context.Context, now time.Time) (time.Time, error) {
	if c.cfg.PauseKey == "" {
		return time.Time{}, nil
	}
	p, err := ReadPause(ctx, c.deps.State, c.cfg.PauseKey)
	if err != nil || p == nil || !p.Active(now) {
		return time.Time{}, err
	}
	return p.Until(), nil
}

func (c *Controls) stale(at, now time.Time) bool {
	return at.IsZero() || now.Sub(at) >= c.cfg.Refresh || now.Before(at)
}

func (c *Controls) logPauseErr(ctx context.Context) {
	c.logReadErr(ctx, c.pauseErr, &c.loggedPauseErr, "stage pause")
}

// logReadErr logs once that what (the pause, the backlog) could not be read (err) and holds
// the walks, and once that it is readable again; logged is whether the failure was logged.
func (c *Controls) logReadErr(ctx context.Context, err error, logged *bool, what string) {
	failed := err != nil
	if failed == *logged {
		return
	}
	*logged = failed
	if failed {
		Warn(ctx, c.deps.Logger, "read "+what+"; walks held until it can be read", "stage", c.cfg.Stage, "err", err)
	} else {
		c.deps.Logger.Info(what+" readable again", "stage", c.cfg.Stage)
	}
}

// logPause notes the pause in effect (zero: none): the gauge and one line per change.
func (c *Controls) logPause(until time.Time) {
	paused := !until.IsZero()
	if paused == c.loggedPaused {
		return
	}
	c.loggedPaused = paused
	if paused {
		setGauge(c.deps.Paused, 1)
		c.deps.Logger.Info("stage paused", "stage", c.cfg.Stage, "until", until.UTC().Format(time.RFC3339))
	} else {
		setGauge(c.deps.Paused, 0)
		c.deps.Logger.Info("stage resumed", "stage", c.cfg.Stage)
	}
}

func (c *Controls) logBacklog(ctx context.Context) {
	c.logReadErr(ctx, c.backlogErr, &c.loggedBacklogErr, "consumer backlog")
	if c.backlogErr != nil || c.full == c.loggedFull {
		return
	}
	c.loggedFull = c.full
	if c.full {
		setGauge(c.deps.Backpressure, 1)
		c.deps.Logger.Info("backpressure: walks held back", append([]any{"stage", c.cfg.Stage}, c.detail...)...)
	} else {
		setGauge(c.deps.Backpressure, 0)
		c.deps.Logger.Info("backpressure over: walking again", append([]any{"stage", c.cfg.Stage}, c.detail...)...)
	}
}

func setGauge(g prometheus.Gauge, v float64) {
	if g != nil {
		g.Set(v)
	}
}

// WalkTick is what a walk's tick reads before it decides: the time, the lease, and, for a
// walk that is ready to move, the controls.
type WalkTick struct {
	Now         time.Time
	LeaseRev    uint64    // 0: the lease is not held
	PausedUntil time.Time // zero: no pause
	BacklogFull bool
	ControlErr  error // the pause or the backlog could not be read: fail closed
}

// Tick reads a tick at now for a walk under lease; the controls are read only when the lease
// is held and read is true (a walk that has loaded its checkpoint and is not stopping).
func (c *Controls) Tick(ctx context.Context, now time.Time, lease *Lease, read bool) WalkTick {
	t := WalkTick{Now: now}
	if rev, held := lease.Held(); held {
		t.LeaseRev = rev
	}
	if t.LeaseRev != 0 && read {
		t.PausedUntil, t.BacklogFull, t.ControlErr = c.Read(ctx, now)
	}
	return t
}
