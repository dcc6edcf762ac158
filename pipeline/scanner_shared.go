package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
)

// What every walk of a scanner shares besides its controls (controls.go): the registry
// snapshot (one read serves every store; failed reads back off).

// RegistryBackoff is the default delay before the attempt-th retry (1-based) of a failed
// registry read: the project's one retry policy (internal/backoff), 200ms doubling up to 30s,
// with jitter so that scanners that failed together do not retry together.
func RegistryBackoff(attempt int) time.Duration {
	return backoff.New(200*time.Millisecond, 30*time.Second).Delay(attempt)
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
	// known: every instance id the last snapshot lists, collected or skipped; groups its
	// collected groups; partial: it holds a record that could not be read.
	known   map[string]bool
	groups  map[string]bool
	partial bool
}

// listed returns the collected instances of store the last snapshot lists, as the store's
// checkpoint remembers them (nil before a snapshot, or while the last read failed).
func (c *registryCache) listed(store string) map[string]SeenInstance {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.snap == nil {
		return nil
	}
	out := map[string]SeenInstance{}
	for _, in := range c.snap {
		if in.Store == store {
			out[in.ID] = SeenInstance{Group: in.Group, LastRegisteredUs: c.at.UnixMicro()}
		}
	}
	return out
}

// view reads the registry again (unless a snapshot of the last registryReuse serves) and
// returns what the collection of unregistered instances takes from it.
func (c *registryCache) view(ctx context.Context, now time.Time) regView {
	snap, _, err := c.get(ctx, now)
	if err != nil {
		return regView{err: err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := regView{at: c.at, known: c.known, groups: c.groups, partial: c.partial, instance: map[string]meta.Instance{}}
	for _, in := range snap {
		v.instance[in.ID] = in
	}
	return v
}

// registered reports whether the last snapshot lists instance id, collected or skipped; ok is
// false before any snapshot was read.
func (c *registryCache) registered(id string) (known, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil {
		return false, false
	}
	return c.known[id], true
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
	rv := newRegView(reg, now)
	c.known, c.groups, c.partial = rv.known, rv.groups, rv.partial
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
