package deleter

import (
	"testing"

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
		t.Run(tc.name, func(t *testing.T) { testenv.RequireRefused(t, tc.new(), tc.want...) })
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
			require.Equal(t, 1.0, testenv.GaugeValue(t, d.metrics.InflightDeletes))
			d.track(7, false)
			return d.metrics
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotNil(t, tc.record(t))
		})
	}
}
