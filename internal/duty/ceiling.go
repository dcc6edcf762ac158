package duty

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrRefused is what a Ceiling's read returns (wrapped) when the server will not tell its busy
// time at all (a Redis user without +info, a proxy that does not pass INFO on): the ceiling is
// off from then on, and the pace is the duty's alone.
var ErrRefused = errors.New("the server refuses to report its CPU time")

// CeilingConfig is a ceiling on the server's own load.
type CeilingConfig struct {
	// Limit is the share of its time the server's main thread may be busy, all clients
	// included (the operations' own share too), above which the operations hold.
	Limit float64
	// Every is the time between two readings of the server's CPU time.
	Every time.Duration
	// Read returns the server's main-thread CPU time so far (Redis: INFO cpu,
	// used_cpu_user_main_thread + used_cpu_sys_main_thread), an error wrapping ErrRefused
	// when the server will not tell it.
	Read func(ctx context.Context) (time.Duration, error)
	// OnState, when set, is called with the state after each reading: a walk that holds
	// within an operation (a page's bursts) reports no pace until the operation ends.
	OnState func(CeilingState)
}

// Ceiling state names (CeilingState.State).
const (
	CeilingOff     = "off"     // no limit configured
	CeilingOK      = "ok"      // read, below the limit
	CeilingBusy    = "busy"    // read, above the limit: the operations hold
	CeilingRefused = "refused" // the server refuses to tell its CPU time: the duty alone paces
	CeilingUnread  = "unread"  // no reading yet, or the last ones failed
)

// CeilingState is what the ceiling last saw.
type CeilingState struct {
	Limit float64
	// Share is the server's main-thread busy share between its last two readings (−1: none).
	Share float64
	State string
	// Err is the last failed reading's error (nil after a good one).
	Err error
}

// Ceiling holds a paced walk while the server is busier than a limit, by the server's own
// count of its main thread's CPU time, read every CeilingConfig.Every. A walk that holds
// leaves the server its whole time; when the rest of its load is near the limit the walk
// runs about every other reading, which keeps the server near the limit on average.
type Ceiling struct {
	cfg CeilingConfig

	mu sync.Mutex
	// The last good reading and when it was taken; next is when to read again.
	at, next time.Time
	cpu      time.Duration
	have     bool
	st       CeilingState
}

// staleAfter readings without a good one, the last share no longer holds the walk.
const staleAfter = 3

// NewCeiling returns the ceiling of cfg; a Limit outside (0, 1) is none (nil).
func NewCeiling(cfg CeilingConfig) *Ceiling {
	if cfg.Limit <= 0 || cfg.Limit >= 1 || cfg.Read == nil {
		return nil
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	return &Ceiling{cfg: cfg, st: CeilingState{Limit: cfg.Limit, Share: -1, State: CeilingUnread}}
}

// Every is the time between two readings (a holding walk looks again after it).
func (c *Ceiling) Every() time.Duration { return c.cfg.Every }

// Busy reports whether the walk must hold at now, reading the server's CPU time first when a
// reading is due. A nil ceiling is never busy.
func (c *Ceiling) Busy(ctx context.Context, now time.Time) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	due := c.st.State != CeilingRefused && !now.Before(c.next)
	if due {
		c.next = now.Add(c.cfg.Every)
	}
	c.mu.Unlock()
	if due {
		cpu, err := c.cfg.Read(ctx)
		c.observe(time.Now(), cpu, err)
		if c.cfg.OnState != nil {
			c.cfg.OnState(c.State())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.State == CeilingBusy
}

// observe takes a reading of cpu at at, or its error.
func (c *Ceiling) observe(at time.Time, cpu time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, ErrRefused):
		c.st = CeilingState{Limit: c.cfg.Limit, Share: -1, State: CeilingRefused, Err: err}
		return
	case err != nil:
		c.st.Err = err
		if !c.have || at.Sub(c.at) >= staleAfter*c.cfg.Every {
			c.st.State, c.st.Share = CeilingUnread, -1 // an old share holds nothing
		}
		return
	}
	if c.have && at.After(c.at) && cpu >= c.cpu {
		c.st.Share = (cpu - c.cpu).Seconds() / at.Sub(c.at).Seconds()
		c.st.State = CeilingOK
		if c.st.Share > c.cfg.Limit {
			c.st.State = CeilingBusy
		}
	}
	c.st.Err = nil
	c.at, c.cpu, c.have = at, cpu, true
}

// State is what the ceiling last saw; a nil ceiling is off.
func (c *Ceiling) State() CeilingState {
	if c == nil {
		return CeilingState{Share: -1, State: CeilingOff}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}
