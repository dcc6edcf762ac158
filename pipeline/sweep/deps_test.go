package sweep

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// Stand-ins for collaborators a constructor requires but the call under test never reaches
// (or, for downRegistry and noPublisher, reaches only to fail).
type (
	noKV         struct{ jetstream.KeyValue }
	noPublisher  struct{}
	downRegistry struct{}
)

var errDown = errors.New("connection refused")

func (noPublisher) PublishAsync(string, []byte, string) (pipeline.AckWait, error) {
	return nil, errDown
}
func (downRegistry) ReadRegistry(context.Context) (*meta.Registry, error) { return nil, errDown }

// TestConstructorsRequire: a sweep stage missing a collaborator it cannot run without is
// refused at construction, with the collaborator named, not found by a nil dereference later.
func TestConstructorsRequire(t *testing.T) {
	reg := downRegistry{}
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name string
		new  func() error
		want []string
	}{
		{"sweeper", func() error { _, err := NewSweeper(cfg, SweeperDeps{}); return err },
			[]string{"sweeper:", "no registry reader", "no metadata store resolver"}},
		{"walker", func() error { _, err := NewWalker(cfg, WalkerDeps{}); return err },
			[]string{"walker:", "no registry reader", "no lease bucket", "no state bucket", "no publisher"}},
		{"walker with a bad config", func() error {
			bad := cfg
			bad.BatchSize = 0
			_, err := NewWalker(bad, WalkerDeps{Registry: reg, Leases: noKV{}, State: noKV{}, Publisher: noPublisher{}})
			return err
		}, []string{"walker: sweep_batch_size: must be > 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testenv.RequireRefused(t, tc.new(), tc.want...) })
	}
	_, err := NewSweeper(cfg, SweeperDeps{Registry: reg, Stores: oneStore{}})
	require.NoError(t, err, "the rest is optional")
}

// TestNilMetrics: a sweep stage built without metrics counts on a set of its own instead of
// panicking the first time it records one.
func TestNilMetrics(t *testing.T) {
	ctx := context.Background()
	names := subjects.Names{Prefix: "kvcmgc", Cluster: "c1"}
	cfg := DefaultConfig()
	t.Run("sweeper: files in flight", func(t *testing.T) {
		s, err := NewSweeper(cfg, SweeperDeps{Names: names, Registry: downRegistry{}, Stores: oneStore{}})
		require.NoError(t, err)
		s.track(3)
		require.Equal(t, 3.0, testenv.GaugeValue(t, s.metrics.InflightFiles))
	})
	t.Run("walker: a failed registry read", func(t *testing.T) {
		w, err := NewWalker(cfg, WalkerDeps{Names: names, Registry: downRegistry{}, Leases: noKV{}, State: noKV{}, Publisher: noPublisher{}})
		require.NoError(t, err)
		_, err = w.snapshot(ctx)
		require.ErrorContains(t, err, "connection refused")
		require.Equal(t, 1.0, testenv.CounterValue(t, w.metrics.Errors.WithLabelValues(pipeline.StageWalker, "registry")))
	})
}
