package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// records keeps the log records' messages.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// pauseKV is a state bucket holding only a scanner pause (or an error reading it).
type pauseKV struct {
	jetstream.KeyValue
	until time.Time
	err   error
}

func (p *pauseKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	if p.err != nil {
		return nil, p.err
	}
	if p.until.IsZero() {
		return nil, jetstream.ErrKeyNotFound
	}
	return pauseEntry(fmt.Sprintf(`{"until_us":%d}`, p.until.UnixMicro())), nil
}

type pauseEntry string

func (e pauseEntry) Bucket() string                  { return "STATE" }
func (e pauseEntry) Key() string                     { return subjects.ScannerPauseKey }
func (e pauseEntry) Value() []byte                   { return []byte(e) }
func (e pauseEntry) Revision() uint64                { return 1 }
func (e pauseEntry) Created() time.Time              { return time.Time{} }
func (e pauseEntry) Delta() uint64                   { return 0 }
func (e pauseEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// Issue: scanning stopped by a pause or by backpressure was invisible. Each change is logged
// once, whatever the number of ticks (and of walks) that read it.
func TestControlsLogEachChangeOnce(t *testing.T) {
	ctx := context.Background()
	logs := &records{}
	kv := &pauseKV{}
	var deleter uint64
	c := &controls{state: kv, highWater: 10, m: NewMetrics(prometheus.NewRegistry()), log: slog.New(logs),
		backlog: func(context.Context) (uint64, uint64, error) { return 0, deleter, nil }}
	now := t0
	read := func(n int) (time.Time, bool, error) {
		var until time.Time
		var full bool
		var err error
		for range n {
			now = now.Add(controlRefresh)
			until, full, err = c.read(ctx, now)
		}
		return until, full, err
	}
	_, full, err := read(3)
	require.NoError(t, err)
	require.False(t, full)
	require.Empty(t, logs.msgs, "nothing to say while scanning")

	kv.until = now.Add(time.Hour)
	until, _, _ := read(5)
	require.True(t, kv.until.Equal(until))
	kv.until = time.Time{}
	until, _, _ = read(5)
	require.True(t, until.IsZero())
	deleter = 11
	_, full, _ = read(5)
	require.True(t, full)
	deleter = 3
	_, full, _ = read(5)
	require.False(t, full)
	require.Equal(t, 1, logs.count("scanner paused"))
	require.Equal(t, 1, logs.count("scanner resumed"))
	require.Equal(t, 1, logs.count("backpressure: scanning held back"))
	require.Equal(t, 1, logs.count("backpressure over: scanning again"))

	// A pause that ends between two readings is over at once, the gauge with it.
	kv.until = now.Add(controlRefresh + controlRefresh/2)
	_, _, _ = read(1)
	until, _, _ = c.read(ctx, now.Add(controlRefresh*3/4)) // the reading is reused, the pause is over
	require.True(t, until.IsZero())
	require.Equal(t, 2, logs.count("scanner resumed"))
	require.Zero(t, gaugeValue(c.m.ScannerPaused))
	kv.until = time.Time{}

	// A pause that cannot be read fails closed, said once too.
	kv.err = errors.New("no responders")
	_, _, err = read(5)
	require.Error(t, err)
	kv.err = nil
	_, _, err = read(5)
	require.NoError(t, err)
	require.Equal(t, 1, logs.count("read scanner pause; walks held until it can be read"))
	require.Equal(t, 1, logs.count("scanner pause readable again"))

	// Readings are reused for controlRefresh: a burst of ticks reads once.
	reads := 0
	c.backlog = func(context.Context) (uint64, uint64, error) { reads++; return 0, 0, nil }
	for range 50 {
		_, _, _ = c.read(ctx, now.Add(time.Millisecond))
	}
	require.LessOrEqual(t, reads, 1)
}

type failingRegistry struct {
	calls int
	err   error
	reg   *meta.Registry
}

func (f *failingRegistry) ReadRegistry(context.Context) (*meta.Registry, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.reg, nil
}

// Issue: registry errors were retried at every scan_interval (482 warnings a minute at 1ms).
// A failed read is not retried before the backoff delay, whoever asks, and the delay grows.
func TestRegistryCacheBacksOff(t *testing.T) {
	ctx := context.Background()
	logs := &records{}
	r := &failingRegistry{err: errors.New("connection refused")}
	var attempts []int
	c := &registryCache{r: r, m: NewMetrics(prometheus.NewRegistry()), log: slog.New(logs),
		backoff: func(n int) time.Duration { attempts = append(attempts, n); return time.Duration(n) * time.Second }}
	now := t0
	_, retry, err := c.get(ctx, now)
	require.Error(t, err)
	require.Equal(t, now.Add(time.Second), retry)
	for i := range 100 { // every walk's ticks within the delay: no read
		_, retry2, err := c.get(ctx, now.Add(time.Duration(i)*time.Millisecond))
		require.ErrorIs(t, err, errRegistryBackoff)
		require.Equal(t, retry, retry2)
	}
	require.Equal(t, 1, r.calls)
	now = retry
	_, retry, _ = c.get(ctx, now)
	require.Equal(t, now.Add(2*time.Second), retry, "the delay grows")
	require.Equal(t, []int{1, 2}, attempts)
	require.Equal(t, 2, logs.count("read registry; backing off"), "one line per read, not per tick")

	r.err = nil
	r.reg = &meta.Registry{Instances: []meta.Instance{{ID: "b", Group: "g", Store: "s2"}, {ID: "a", Group: "g", Store: "s1"}}}
	snap, _, err := c.get(ctx, retry)
	require.NoError(t, err)
	require.Equal(t, []string{"s1", "s2"}, storesOf(snap))
	require.Equal(t, 1, logs.count("registry readable again"))
	_, _, err = c.get(ctx, retry.Add(registryReuse/2))
	require.NoError(t, err)
	require.Equal(t, 3, r.calls, "a fresh snapshot serves every walk")
	r.err = errors.New("down again")
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
