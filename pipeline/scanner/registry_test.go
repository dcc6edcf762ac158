package scanner

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// Issue: registry errors were retried at every scan_interval (482 warnings a minute at 1ms).
// A failed read is not retried before the backoff delay, whoever asks, and the delay grows.
func TestRegistryCacheBacksOff(t *testing.T) {
	ctx := context.Background()
	logs := &testenv.Messages{}
	r := &metatest.Registry{Err: errors.New("connection refused")}
	var attempts []int
	c := newRegistryCache(r, func(n int) time.Duration { attempts = append(attempts, n); return time.Duration(n) * time.Second },
		NewMetrics(prometheus.NewRegistry(), nil), slog.New(logs))
	now := t0
	_, retry, err := c.get(ctx, now)
	require.Error(t, err)
	require.Equal(t, now.Add(time.Second), retry)
	for i := range 100 { // every walk's ticks within the delay: no read
		_, retry2, err := c.get(ctx, now.Add(time.Duration(i)*time.Millisecond))
		require.ErrorIs(t, err, pipeline.ErrRegistryBackoff)
		require.Equal(t, retry, retry2)
	}
	require.Equal(t, 1, r.Reads)
	now = retry
	_, retry, _ = c.get(ctx, now)
	require.Equal(t, now.Add(2*time.Second), retry, "the delay grows")
	require.Equal(t, []int{1, 2}, attempts)
	require.Equal(t, 2, logs.Count("read registry; backing off"), "one line per read, not per tick")

	r.Err = nil
	r.Reg = &meta.Registry{Instances: []meta.Instance{{ID: "b", Group: "g", Store: "s2"}, {ID: "a", Group: "g", Store: "s1"}}}
	snap, _, err := c.get(ctx, retry)
	require.NoError(t, err)
	require.Equal(t, []string{"s1", "s2"}, storesOf(snap))
	require.Equal(t, 1, logs.Count("registry readable again"))
	_, _, err = c.get(ctx, retry.Add(registryReuse/2))
	require.NoError(t, err)
	require.Equal(t, 3, r.Reads, "a fresh snapshot serves every walk")
	r.Err = errors.New("down again")
	_, retry, _ = c.get(ctx, retry.Add(registryReuse))
	require.Equal(t, []int{1, 2, 1}, attempts, "a success starts the backoff over")
	_ = retry
}

func TestInstancesOf(t *testing.T) {
	snap := []meta.Instance{{ID: "a", Group: "g1", Store: "s1"}, {ID: "b", Group: "g1", Store: "s2"}, {ID: "a", Group: "g2", Store: "s1"}}
	got := instancesOf(snap, "s1")
	require.Len(t, got, 1)
	require.Equal(t, "g1", got["a"].Group, "the first by (group, id) wins")
	require.Empty(t, instancesOf(snap, "s3"))
}

func TestFairShare(t *testing.T) {
	for _, tt := range []struct {
		stores int
		caps   []int
		mine   int
		want   int
	}{
		{4, []int{0}, 0, 4},
		{4, []int{0, 0}, 0, 2},
		{3, []int{0, 0}, 0, 2},
		{4, []int{0, 1}, 0, 3},       // the other one walks at most one
		{4, []int{1, 0}, 1, 1},       // this one walks at most one
		{4, []int{0, 0, 1}, 0, 2},    // 2 + 2 + 1 cover 4
		{5, []int{0, 1, 1}, 0, 3},    // 3 + 1 + 1
		{2, []int{0, 0, 0, 0}, 0, 1}, // more replicas than stores
		{0, []int{0, 0}, 0, 0},
		{4, []int{1, 1}, 1, 1}, // not enough room anywhere: each its cap
	} {
		require.Equal(t, tt.want, fairShare(tt.stores, tt.caps, tt.mine), "%d stores over %v", tt.stores, tt.caps)
	}
}

// TestBacklogFull: the scanner's walks are held back while either downstream backlog is above
// the high-water mark; a backlog that cannot be read is an error, and no backlog reader holds
// nothing back.
func TestBacklogFull(t *testing.T) {
	var p, d uint64
	var b Backlog = func(context.Context) (uint64, uint64, error) { return p, d, nil }
	full := b.full(10)
	for _, tc := range []struct {
		p, d uint64
		want bool
	}{{0, 0, false}, {10, 10, false}, {11, 0, true}, {0, 11, true}} {
		p, d = tc.p, tc.d
		got, _, err := full(context.Background())
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "prober %d, deleter %d", tc.p, tc.d)
	}
	require.Nil(t, Backlog(nil).full(10))
	down := errors.New("no responders")
	var failing Backlog = func(context.Context) (uint64, uint64, error) { return 0, 0, down }
	_, _, err := failing.full(10)(context.Background())
	require.ErrorIs(t, err, down)
}

func TestRegistryBackoff(t *testing.T) {
	prev := time.Duration(0)
	for attempt := 1; attempt <= 20; attempt++ {
		d := RegistryBackoff(attempt)
		ceiling := min(200*time.Millisecond<<(attempt-1), 30*time.Second)
		if attempt > 12 {
			ceiling = 30 * time.Second
		}
		require.GreaterOrEqual(t, d, ceiling/2, "attempt %d", attempt)
		require.LessOrEqual(t, d, ceiling, "attempt %d", attempt)
		prev = max(prev, d)
	}
	require.LessOrEqual(t, prev, 30*time.Second)
	// Jitter: scanners that failed together do not retry together.
	seen := map[time.Duration]bool{}
	for range 20 {
		seen[RegistryBackoff(5)] = true
	}
	require.Greater(t, len(seen), 1)
}
