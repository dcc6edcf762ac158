package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Stand-ins for collaborators a constructor requires but the call under test never reaches
// (or, for failingJS and noPublisher, reaches only to fail).
type (
	noConsumer  struct{ jetstream.Consumer }
	noPublisher struct{}
	failingJS   struct{ jetstream.JetStream }
)

var errDown = errors.New("connection refused")

// oneStore resolves every name to one store.
type oneStore struct{ st meta.Store }

func (o oneStore) Store(string) (meta.Store, error) { return o.st, nil }

func (noPublisher) Publish(context.Context, string, []byte, string) error { return errDown }
func (noPublisher) PublishAsync(string, []byte, string) (AckWait, error)  { return nil, errDown }
func (failingJS) PublishAsync(string, []byte, ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return nil, errDown
}

// TestConstructorsRequire: a stage missing a collaborator it cannot run without is refused
// at construction, with the collaborator named, not found by a nil dereference later.
func TestConstructorsRequire(t *testing.T) {
	reg := &flakyRegistry{}
	for _, tc := range []struct {
		name string
		new  func() error
		want []string
	}{
		{"event log", func() error { _, err := NewEventLog(EventLogConfig{}, EventLogDeps{}); return err },
			[]string{"event log: no JetStream context"}},
		{"consumer", func() error {
			_, err := NewConsumer(ConsumerConfig{Stage: StageProber}, ConsumerDeps{})
			return err
		}, []string{"consumer of prober", "no JetStream consumer", "no handler"}},
		{"prober", func() error { _, err := NewProber(DefaultProberConfig(), ProberDeps{}); return err },
			[]string{"prober:", "no registry reader", "no copy-target guard", "no publisher"}},
		{"prober without guard", func() error {
			_, err := NewProber(DefaultProberConfig(), ProberDeps{Registry: reg, Publisher: noPublisher{}})
			return err
		}, []string{"prober: no copy-target guard"}},
		{"deleter", func() error { _, err := NewDeleter(DefaultDeleterConfig(), DeleterDeps{}); return err },
			[]string{"deleter: no metadata store resolver"}},
		{"scanner", func() error { _, err := NewScanner(DefaultScannerConfig(), ScannerDeps{}); return err },
			[]string{"scanner: lease TTL must be > 0"}},
		{"scanner without JetStream", func() error {
			_, err := NewScanner(DefaultScannerConfig(), ScannerDeps{LeaseTTL: time.Second})
			return err
		}, []string{"scanner: no JetStream context"}},
		{"scanner of a bad configuration", func() error {
			_, err := NewScanner(ScannerConfig{}, ScannerDeps{LeaseTTL: time.Second})
			return err
		}, []string{"scan_batch_size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	_, err := NewDeleter(DefaultDeleterConfig(), DeleterDeps{Stores: oneStore{}})
	require.NoError(t, err, "the rest is optional")
}

// TestNilMetrics: every stage built without metrics counts on a set of its own instead of
// panicking the first time it records one, whichever path records it.
func TestNilMetrics(t *testing.T) {
	ctx := context.Background()
	names := subjects.Names{Prefix: "kvcmgc", Cluster: "c1"}
	for _, tc := range []struct {
		name   string
		record func(t *testing.T) any
	}{
		{"event log: a publish that cannot be queued", func(t *testing.T) any {
			l, err := NewEventLog(EventLogConfig{Names: names}, EventLogDeps{JS: failingJS{}})
			require.NoError(t, err)
			require.Nil(t, l.Emit(ctx, subjects.Event{Kind: subjects.EventSkip, Stage: StageProber, Instance: "i"}))
			require.Equal(t, 1.0, counterOf(t, l.metrics.OperationErrors.WithLabelValues(StageProber, "event")))
			return l.metrics
		}},
		{"consumer: a failed message", func(t *testing.T) any {
			c, err := NewConsumer(ConsumerConfig{Stage: StageDeleter}, ConsumerDeps{Consumer: noConsumer{},
				Handle: func(context.Context, jetstream.Msg) error { return errDown }})
			require.NoError(t, err)
			c.process(ctx, ctx, &delayMsg{delivered: 1})
			require.Equal(t, 1.0, counterOf(t, c.metrics.Messages.WithLabelValues(StageDeleter, MsgNak)))
			return c.metrics
		}},
		{"prober: a failed publish", func(t *testing.T) any {
			p, err := NewProber(DefaultProberConfig(), ProberDeps{Names: names, Registry: &flakyRegistry{},
				Guard: guard.None{}, Publisher: noPublisher{}})
			require.NoError(t, err)
			require.ErrorIs(t, p.publish(ctx, subjects.DeleteRequest{Instance: "i"}), errDown)
			require.Equal(t, 1.0, counterOf(t, p.metrics.ops.WithLabelValues("publish")))
			return p.metrics
		}},
		{"deleter: a request in flight", func(t *testing.T) any {
			d, err := NewDeleter(DefaultDeleterConfig(), DeleterDeps{Names: names, Stores: oneStore{}})
			require.NoError(t, err)
			d.track(7, true)
			require.Equal(t, 1.0, gaugeOf(t, d.metrics.InflightDeletes))
			d.track(7, false)
			return d.metrics
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotNil(t, tc.record(t))
		})
	}
}

func counterOf(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

func gaugeOf(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
}
