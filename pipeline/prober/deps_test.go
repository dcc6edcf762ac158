package prober

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// noPublisher stands in for a publisher that the call under test reaches only to fail.
type noPublisher struct{}

func (noPublisher) Publish(context.Context, string, []byte, string) error { return errDown }
func (noPublisher) PublishAsync(string, []byte, string) (pipeline.AckWait, error) {
	return nil, errDown
}

// TestProberRequires: a prober missing a collaborator it cannot run without is refused at
// construction, with the collaborator named, not found by a nil dereference later.
func TestProberRequires(t *testing.T) {
	reg := &flakyRegistry{}
	for _, tc := range []struct {
		name string
		new  func() error
		want []string
	}{
		{"prober", func() error { _, err := New(DefaultConfig(), Deps{}); return err },
			[]string{"prober:", "no registry reader", "no copy-target guard", "no publisher"}},
		{"prober without guard", func() error {
			_, err := New(DefaultConfig(), Deps{Registry: reg, Publisher: noPublisher{}})
			return err
		}, []string{"prober: no copy-target guard"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// TestProberNilMetrics: a prober built without metrics counts on a set of its own instead of
// panicking the first time it records one.
func TestProberNilMetrics(t *testing.T) {
	ctx := context.Background()
	names := subjects.Names{Prefix: "kvcmgc", Cluster: "c1"}
	for _, tc := range []struct {
		name   string
		record func(t *testing.T) any
	}{
		{"prober: a failed publish", func(t *testing.T) any {
			p, err := New(DefaultConfig(), Deps{Names: names, Registry: &flakyRegistry{},
				Guard: guard.None{}, Publisher: noPublisher{}})
			require.NoError(t, err)
			require.ErrorIs(t, p.publish(ctx, subjects.DeleteRequest{Instance: "i"}), errDown)
			require.Equal(t, 1.0, counterOf(t, p.metrics.ops.WithLabelValues("publish")))
			return p.metrics
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotNil(t, tc.record(t))
		})
	}
}

var errDown = errors.New("connection refused")

func counterOf(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// topology starts a JetStream server holding kvcm-gc's streams, consumers and buckets for
// cluster c1, made with settings st.
func topology(t *testing.T, st subjects.Settings) (jetstream.JetStream, subjects.Names) {
	t.Helper()
	js := testenv.StartNATS(t).JetStream(t)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	require.NoError(t, subjects.Ensure(context.Background(), js, names, st))
	return js, names
}
