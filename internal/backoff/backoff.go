// Package backoff is kvcm-gc's one retry policy: capped exponential delays with jitter. Every
// path that retries something that failed — creating the JetStream topology at startup,
// redelivering a message that failed, re-reading the registry — waits the delays of a Policy,
// so nothing retries in lock step after a shared outage and nothing spins (DESIGN §8.7).
//
// A Policy is a value: Delay gives the wait before a numbered retry (a message's delivery
// count), a Backoff counts the failures of one loop, and Retry runs such a loop. A loop that
// must keep going between failures (a scanner tick that read the registry and failed) keeps a
// Backoff and asks it when to try again:
//
//	b := backoff.New(time.Second, time.Minute).Start()
//	…
//	if err := read(ctx); err != nil {
//		retryAt = now.Add(b.Next()) // 0.5–1s, 1–2s, 2–4s, … 30–60s
//	} else {
//		b.Reset()
//	}
package backoff

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// DefaultJitter is the share of each delay that is drawn at random when a Policy sets none.
const DefaultJitter = 0.5

// Policy is a capped exponential backoff with jitter: the wait before retry n (n ≥ 1) is
// Initial·Multiplier^(n−1), at most Max, less a random share of up to Jitter of it. With the
// defaults the waits are drawn from [½, 1]·(1s, 2s, 4s, …, Max).
type Policy struct {
	// Initial is the wait before the first retry, before jitter. It must be positive.
	Initial time.Duration
	// Max caps every wait. Below Initial it is Initial.
	Max time.Duration
	// Multiplier grows the wait from one retry to the next; values below 1 mean 2.
	Multiplier float64
	// Jitter is the largest share of a wait taken off at random, in (0, 1]; 0 means
	// DefaultJitter. Waits never exceed the unjittered delay, so Max stays a bound.
	Jitter float64
}

// New returns the policy of waits from initial doubling up to max, with the default jitter.
func New(initial, max time.Duration) Policy {
	return Policy{Initial: initial, Max: max}
}

// Validate reports a policy that cannot produce waits.
func (p Policy) Validate() error {
	if p.Initial <= 0 {
		return fmt.Errorf("backoff: initial delay %v must be positive", p.Initial)
	}
	if p.Jitter < 0 || p.Jitter > 1 {
		return fmt.Errorf("backoff: jitter %v not in [0, 1]", p.Jitter)
	}
	return nil
}

// Ceiling is the wait before retry n without jitter: the most Delay(n) returns.
func (p Policy) Ceiling(n int) time.Duration {
	initial := max(p.Initial, time.Nanosecond)
	ceil := max(p.Max, initial)
	mult := p.Multiplier
	if mult < 1 {
		mult = 2
	}
	d := float64(initial) * math.Pow(mult, float64(max(n, 1)-1))
	if d >= float64(ceil) || math.IsInf(d, 0) || math.IsNaN(d) {
		return ceil
	}
	return time.Duration(d)
}

// Delay is the wait before retry n (1 for the first retry; smaller n count as 1): Ceiling(n)
// less a random share of up to Jitter of it.
func (p Policy) Delay(n int) time.Duration {
	c := p.Ceiling(n)
	j := p.Jitter
	if j <= 0 || j > 1 {
		j = DefaultJitter
	}
	return c - time.Duration(rand.Float64()*j*float64(c))
}

// Backoff counts the retries of one loop. The zero value is not usable; use Policy.Start.
type Backoff struct {
	p Policy
	n int
}

// Start returns a Backoff at its first retry.
func (p Policy) Start() *Backoff { return &Backoff{p: p} }

// Next counts one more failure and returns the wait before the retry that follows it.
func (b *Backoff) Next() time.Duration {
	b.n++
	return b.p.Delay(b.n)
}

// Failures is the number of failures counted since the start or the last Reset.
func (b *Backoff) Failures() int { return b.n }

// Reset starts over after a success: the next failure waits the shortest delay again.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d or until ctx ends, and returns ctx's error in the latter case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// permanent marks an error Retry must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks err as one that waiting cannot cure: Retry returns it at once (unwrapped).
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

// Retry calls op until it returns nil or an error marked Permanent, or ctx ends, waiting the
// policy's delays in between. notify, when set, is told every failure that will be retried,
// with the number of failures so far and the wait before the next call. When ctx ends, the
// last failure is returned together with ctx's error.
func (p Policy) Retry(
	ctx context.Context,
	op func(ctx context.Context) error,
	notify func(err error, failures int, wait time.Duration),
) error {
	b := p.Start()
	for {
		err := op(ctx)
		if err == nil {
			return nil
		}
		var perm permanent
		if errors.As(err, &perm) {
			return perm.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (stopped retrying: %w)", err, ctx.Err())
		}
		wait := b.Next()
		if notify != nil {
			notify(err, b.Failures(), wait)
		}
		if serr := Sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (stopped retrying: %w)", err, serr)
		}
	}
}
