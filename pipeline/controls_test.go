package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// pauseKV is a state bucket holding only a pause (or an error reading it).
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
	logs := &testenv.Messages{}
	kv := &pauseKV{}
	var deleter uint64
	paused := prometheus.NewGauge(prometheus.GaugeOpts{Name: "paused"})
	pressure := prometheus.NewGauge(prometheus.GaugeOpts{Name: "backpressure"})
	backlog := func(context.Context) (bool, []any, error) {
		return deleter > 10, []any{"deleter_backlog", deleter}, nil
	}
	c := NewControls(ControlsConfig{Stage: StageScanner, PauseKey: subjects.ScannerPauseKey, Refresh: ControlRefresh},
		ControlsDeps{State: kv, Backlog: backlog, Paused: paused, Backpressure: pressure, Logger: slog.New(logs)})
	now := t0
	read := func(n int) (time.Time, bool, error) {
		var until time.Time
		var full bool
		var err error
		for range n {
			now = now.Add(ControlRefresh)
			until, full, err = c.Read(ctx, now)
		}
		return until, full, err
	}
	_, full, err := read(3)
	require.NoError(t, err)
	require.False(t, full)
	require.Empty(t, logs.All(), "nothing to say while scanning")

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
	require.Equal(t, 1, logs.Count("stage paused"))
	require.Equal(t, 1, logs.Count("stage resumed"))
	require.Equal(t, 1, logs.Count("backpressure: walks held back"))
	require.Equal(t, 1, logs.Count("backpressure over: walking again"))

	// A pause that ends between two readings is over at once, the gauge with it.
	kv.until = now.Add(ControlRefresh + ControlRefresh/2)
	_, _, _ = read(1)
	until, _, _ = c.Read(ctx, now.Add(ControlRefresh*3/4)) // the reading is reused, the pause is over
	require.True(t, until.IsZero())
	require.Equal(t, 2, logs.Count("stage resumed"))
	require.Zero(t, testenv.GaugeValue(t, paused))
	kv.until = time.Time{}

	// A pause that cannot be read fails closed, said once too.
	kv.err = errors.New("no responders")
	_, _, err = read(5)
	require.Error(t, err)
	kv.err = nil
	_, _, err = read(5)
	require.NoError(t, err)
	require.Equal(t, 1, logs.Count("read stage pause; walks held until it can be read"))
	require.Equal(t, 1, logs.Count("stage pause readable again"))

	// Readings are reused for ControlRefresh: a burst of ticks reads once.
	reads := 0
	c.deps.Backlog = func(context.Context) (bool, []any, error) { reads++; return false, nil, nil }
	for range 50 {
		_, _, _ = c.Read(ctx, now.Add(time.Millisecond))
	}
	require.LessOrEqual(t, reads, 1)
}
