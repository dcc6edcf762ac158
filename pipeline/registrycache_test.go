package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
)

// TestRegistryCache: one read serves for Refresh; a failed read (or a failed build) is
// retried after the backoff, and meanwhile returns the error or, with ServeStale, the last
// value marked stale; a success starts the backoff over.
func TestRegistryCache(t *testing.T) {
	ctx := context.Background()
	for _, stale := range []bool{false, true} {
		r := &metatest.Registry{Reg: &meta.Registry{Instances: []meta.Instance{{ID: "a"}}}}
		builds := 0
		var attempts []int
		c := NewRegistryCache(RegistryCacheConfig[int]{Reader: r, Refresh: time.Minute, ServeStale: stale,
			Backoff: func(n int) time.Duration { attempts = append(attempts, n); return time.Duration(n) * time.Second },
			Build: func(_ context.Context, reg *meta.Registry, _ time.Time) (int, error) {
				if reg.Instances[0].ID == "bad" {
					return 0, errors.New("does not build")
				}
				builds++
				return builds, nil
			}})
		_, _, ok, _ := c.Last()
		require.False(t, ok)

		v, info, err := c.Get(ctx, t0)
		require.NoError(t, err)
		require.Equal(t, RegistryRead{Read: true}, info)
		require.Equal(t, 1, v)
		v, info, err = c.Get(ctx, t0.Add(59*time.Second))
		require.NoError(t, err)
		require.False(t, info.Read, "served for Refresh")
		require.Equal(t, 1, v)
		_, info, _ = c.Get(ctx, t0.Add(-time.Second))
		require.True(t, info.Read, "a clock that went back reads again")

		now := t0.Add(2 * time.Minute)
		r.Err = errors.New("connection refused")
		v, info, err = c.Get(ctx, now)
		require.True(t, info.Read)
		require.Equal(t, 1, info.Failures)
		require.Equal(t, now.Add(time.Second), info.RetryAt)
		require.ErrorContains(t, info.Err, "read registry: connection refused")
		if stale {
			require.NoError(t, err)
			require.True(t, info.Stale)
			require.Equal(t, 2, v, "the last value built")
		} else {
			require.Error(t, err)
			require.Zero(t, v)
		}
		_, info, err = c.Get(ctx, now.Add(500*time.Millisecond))
		require.False(t, info.Read, "not before the backoff")
		if !stale {
			require.ErrorIs(t, err, ErrRegistryBackoff)
		}
		_, _, _, failing := c.Last()
		require.True(t, failing)

		r.Err = nil
		r.Reg = &meta.Registry{Instances: []meta.Instance{{ID: "bad"}}}
		_, info, err = c.Get(ctx, now.Add(time.Second))
		require.True(t, info.Read)
		require.Equal(t, 2, info.Failures, "a snapshot that does not build is a failed read")
		require.Equal(t, stale, err == nil)
		require.Equal(t, []int{1, 2}, attempts)

		r.Reg = &meta.Registry{Instances: []meta.Instance{{ID: "b"}}}
		v, info, err = c.Get(ctx, now.Add(3*time.Second))
		require.NoError(t, err)
		require.Equal(t, RegistryRead{Read: true, Recovered: 2}, info)
		require.Equal(t, 3, v)
		last, at, ok, failing := c.Last()
		require.Equal(t, 3, last)
		require.Equal(t, now.Add(3*time.Second), at)
		require.True(t, ok)
		require.False(t, failing)

		r.Err = errors.New("down again")
		_, _, _ = c.Get(ctx, now.Add(5*time.Minute))
		require.Equal(t, []int{1, 2, 1}, attempts, "a success starts the backoff over")
		require.Equal(t, 6, r.Reads, "one read per Get that read: none within Refresh or the backoff")
	}
}
