package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
)

func TestCeiling(t *testing.T) {
	p := backoff.New(time.Second, time.Minute)
	for n, want := range map[int]time.Duration{
		-1: time.Second, 0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		6: 32 * time.Second, 7: time.Minute, 1000: time.Minute, 1 << 30: time.Minute,
	} {
		require.Equal(t, want, p.Ceiling(n), "retry %d", n)
	}
	p.Multiplier = 3
	require.Equal(t, 9*time.Second, p.Ceiling(3))
	require.Equal(t, time.Second, backoff.New(time.Second, 0).Ceiling(5), "a max below initial is initial")
}

// TestDelayJitter: every wait lies in [ceiling·(1−jitter), ceiling], and waits of the same
// retry differ, so clients that failed together do not retry together.
func TestDelayJitter(t *testing.T) {
	for _, p := range []backoff.Policy{
		backoff.New(time.Second, time.Minute),
		{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2},
	} {
		jitter := p.Jitter
		if jitter == 0 {
			jitter = backoff.DefaultJitter
		}
		for n := 1; n <= 10; n++ {
			c := p.Ceiling(n)
			seen := map[time.Duration]bool{}
			for range 200 {
				d := p.Delay(n)
				require.LessOrEqual(t, d, c, "retry %d", n)
				require.GreaterOrEqual(t, d, c-time.Duration(jitter*float64(c)), "retry %d", n)
				seen[d] = true
			}
			require.Greater(t, len(seen), 100, "retry %d: waits are spread", n)
		}
	}
}

func TestBackoff(t *testing.T) {
	b := backoff.New(time.Second, 4*time.Second).Start()
	require.Zero(t, b.Failures())
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		d := b.Next()
		require.LessOrEqual(t, d, want)
		require.GreaterOrEqual(t, d, want/2)
	}
	require.Equal(t, 4, b.Failures())
	b.Reset()
	require.LessOrEqual(t, b.Next(), time.Second, "a reset starts over")
}

func TestValidate(t *testing.T) {
	require.NoError(t, backoff.New(time.Millisecond, time.Second).Validate())
	require.Error(t, backoff.New(0, time.Second).Validate())
	require.Error(t, backoff.Policy{Initial: time.Second, Jitter: 1.5}.Validate())
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	p := backoff.New(time.Millisecond, 4*time.Millisecond)
	calls := 0
	var waits []time.Duration
	err := p.Retry(ctx, func(context.Context) error {
		calls++
		if calls < 4 {
			return errors.New("not yet")
		}
		return nil
	}, func(err error, failures int, wait time.Duration) {
		require.EqualError(t, err, "not yet")
		require.Equal(t, len(waits)+1, failures)
		waits = append(waits, wait)
	})
	require.NoError(t, err)
	require.Equal(t, 4, calls)
	require.Len(t, waits, 3)

	// A permanent error ends the loop at once and comes back unwrapped.
	boom := errors.New("boom")
	calls = 0
	err = p.Retry(ctx, func(context.Context) error { calls++; return backoff.Permanent(boom) }, nil)
	require.Equal(t, boom, err)
	require.Equal(t, 1, calls)
	require.False(t, backoff.IsPermanent(boom))
	require.True(t, backoff.IsPermanent(backoff.Permanent(boom)))
	require.NoError(t, backoff.Permanent(nil))

	// A context that ends stops the retries, and the last failure is kept.
	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err = p.Retry(cctx, func(context.Context) error {
		calls++
		if calls == 3 {
			cancel()
		}
		return errors.New("down")
	}, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "down")
	require.Equal(t, 3, calls)
}

func TestSleep(t *testing.T) {
	require.NoError(t, backoff.Sleep(context.Background(), time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, backoff.Sleep(ctx, time.Hour), context.Canceled)
}
