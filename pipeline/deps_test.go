package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// Stand-ins for collaborators a constructor requires but the call under test never reaches
// (or, for failingJS, reaches only to fail).
type (
	noConsumer struct{ jetstream.Consumer }
	failingJS  struct{ jetstream.JetStream }
)

var errDown = errors.New("connection refused")

// t0 is the tests' start of time.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func (failingJS) PublishAsync(string, []byte, ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return nil, errDown
}

// TestConstructorsRequire: a component missing a collaborator it cannot run without is
// refused at construction, with the collaborator named, not found by a nil dereference later.
func TestConstructorsRequire(t *testing.T) {
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
	} {
		t.Run(tc.name, func(t *testing.T) { testenv.RequireRefused(t, tc.new(), tc.want...) })
	}
}

// TestNilMetrics: every component built without metrics counts on a set of its own instead
// of panicking the first time it records one, whichever path records it.
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
			require.Equal(t, 1.0, testenv.CounterValue(t, l.metrics.OperationErrors.WithLabelValues(StageProber, "event")))
			return l.metrics
		}},
		{"consumer: a failed message", func(t *testing.T) any {
			c, err := NewConsumer(ConsumerConfig{Stage: StageDeleter}, ConsumerDeps{Consumer: noConsumer{},
				Handle: func(context.Context, jetstream.Msg) error { return errDown }})
			require.NoError(t, err)
			c.process(ctx, ctx, &delayMsg{delivered: 1})
			require.Equal(t, 1.0, testenv.CounterValue(t, c.metrics.Messages.WithLabelValues(StageDeleter, MsgNak)))
			return c.metrics
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotNil(t, tc.record(t))
		})
	}
}
