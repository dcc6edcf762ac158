package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
)

// ErrRegistryBackoff: a registry read failed a moment ago and the next one is not due yet.
var ErrRegistryBackoff = errors.New("registry read backing off")

// RegistryCache is the one way a stage process reads the registry: at most once every
// Refresh, after a failed read not again before its Backoff allows (every batch or tick of a
// busy stage would otherwise send a failing registry a read of its own), each snapshot turned
// once into the T the stage works with. The scanner, the prober and the sweep each keep one;
// they differ only in their T and in what a failed read returns:
//
//   - ServeStale false (the scanner): the error, so the walk holds its cursor (DESIGN §4);
//   - ServeStale true (the prober, the sweep): the last T built, marked stale, when there is
//     one. A stale registry can only keep more: storages or instances registered since are
//     unknown to it, and what is unknown is kept.
type RegistryCache[T any] struct {
	cfg RegistryCacheConfig[T]

	mu       sync.Mutex
	val      T
	have     bool
	at       time.Time // when val was read
	failures int       // failed reads in a row
	err      error     // the last read's failure (nil: it succeeded)
	retryAt  time.Time // after a failure, when the next read is due
}

// RegistryCacheConfig configures a RegistryCache.
type RegistryCacheConfig[T any] struct {
	Reader meta.RegistryReader
	// Build turns a snapshot read at now into the cache's value (ctx: the Get's). An error
	// counts as a failed read.
	Build func(ctx context.Context, reg *meta.Registry, now time.Time) (T, error)
	// Refresh is how long a value serves before the registry is read again.
	Refresh time.Duration
	// Backoff is the wait after the attempt-th failed read in a row (nil: none, the next Get
	// reads again).
	Backoff func(attempt int) time.Duration
	// ServeStale: a failed read returns the last value built, marked stale, when there is one.
	ServeStale bool
}

// RegistryRead says what one Get did, for the caller's logs and metrics.
type RegistryRead struct {
	Read      bool      // this Get read the registry (or tried to)
	Stale     bool      // the value is the last one built before a failed read
	Failures  int       // failed reads in a row, this one included
	Recovered int       // on a successful read: the failed reads in a row before it
	RetryAt   time.Time // after a failure: when the next read is due
	Err       error     // the failure (behind a stale value, or the error returned)
}

// NewRegistryCache returns a cache that has read nothing yet.
func NewRegistryCache[T any](cfg RegistryCacheConfig[T]) *RegistryCache[T] {
	return &RegistryCache[T]{cfg: cfg}
}

// Get returns the value of a snapshot at most Refresh old at now, reading the registry when
// none is and a read is due.
func (c *RegistryCache[T]) Get(ctx context.Context, now time.Time) (T, RegistryRead, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && c.have && now.Sub(c.at) < c.cfg.Refresh && !now.Before(c.at) {
		return c.val, RegistryRead{}, nil
	}
	if c.err != nil && now.Before(c.retryAt) {
		info := RegistryRead{Failures: c.failures, RetryAt: c.retryAt, Err: c.err}
		return c.failed(
			info,
			fmt.Errorf("%w until %s: %w", ErrRegistryBackoff, c.retryAt.UTC().Format(time.RFC3339Nano), c.err),
		)
	}
	reg, err := c.cfg.Reader.ReadRegistry(ctx)
	if err != nil {
		err = fmt.Errorf("read registry: %w", err)
	}
	var v T
	if err == nil {
		v, err = c.cfg.Build(ctx, reg, now)
	}
	if err != nil {
		c.failures++
		c.err, c.retryAt = err, now
		if c.cfg.Backoff != nil {
			c.retryAt = now.Add(c.cfg.Backoff(c.failures))
		}
		return c.failed(RegistryRead{Read: true, Failures: c.failures, RetryAt: c.retryAt, Err: err}, err)
	}
	info := RegistryRead{Read: true, Recovered: c.failures}
	c.val, c.have, c.at = v, true, now
	c.failures, c.err, c.retryAt = 0, nil, time.Time{}
	return v, info, nil
}

// failed returns the stale value (ServeStale, one built before) or err.
func (c *RegistryCache[T]) failed(info RegistryRead, err error) (T, RegistryRead, error) {
	if c.cfg.ServeStale && c.have {
		info.Stale = true
		return c.val, info, nil
	}
	var zero T
	return zero, info, err
}

// Last returns the last value built and when its snapshot was read, without reading; ok is
// false before the first successful read, and failing is true while the last read failed.
func (c *RegistryCache[T]) Last() (v T, at time.Time, ok, failing bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.val, c.at, c.have, c.err != nil
}
