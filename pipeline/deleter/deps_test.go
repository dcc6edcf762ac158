package deleter

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// oneStore resolves every name to one store.
type oneStore struct{ st meta.Store }

func (o oneStore) Store(string) (meta.Store, error) { return o.st, nil }

// TestDeleterRequires: a deleter missing a collaborator it cannot run without is refused at
// construction, with the collaborator named, not found by a nil dereference later.
func TestDeleterRequires(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func() error
		want []string
	}{
		{"deleter", func() error { _, err := New(DefaultConfig(), Deps{}); return err },
			[]string{"deleter: no metadata store resolver"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	_, err := New(DefaultConfig(), Deps{Stores: oneStore{}})
	require.NoError(t, err, "the rest is optional")
}

// TestDeleterNilMetrics: a deleter built without metrics counts on a set of its own instead
// of panicking the first time it records one.
func TestDeleterNilMetrics(t *testing.T) {
	names := subjects.Names{Prefix: "kvcmgc", Cluster: "c1"}
	for _, tc := range []struct {
		name   string
		record func(t *testing.T) any
	}{
		{"deleter: a request in flight", func(t *testing.T) any {
			d, err := New(DefaultConfig(), Deps{Names: names, Stores: oneStore{}})
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

func gaugeOf(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
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
