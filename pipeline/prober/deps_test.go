package prober

import (
	"context"
	"errors"
	"testing"

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
		t.Run(tc.name, func(t *testing.T) { testenv.RequireRefused(t, tc.new(), tc.want...) })
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
			require.Equal(t, 1.0, testenv.CounterValue(t, p.metrics.ops.WithLabelValues("publish")))
			return p.metrics
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotNil(t, tc.record(t))
		})
	}
}

var errDown = errors.New("connection refused")
