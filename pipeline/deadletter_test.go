package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestDeadLettersFromAdvisories lets the only allowed delivery of a message of each consuming
// stage time out unanswered, as when its process dies holding it, while two replicas of the
// stage listen: the server's advisory becomes one deadletter event naming the message's
// stream, sequence, id and instance, counted once across the replicas.
func TestDeadLettersFromAdvisories(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartNATS(t)
	nc := srv.Conn(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	s := subjects.DefaultSettings()
	s.Storage = jetstream.MemoryStorage
	s.MaxDeliver = 1
	s.ProberAckWait, s.DeleterAckWait, s.SweeperAckWait = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	require.NoError(t, subjects.Ensure(ctx, js, names, s))
	events, err := pipeline.NewEventLog(pipeline.EventLogConfig{Names: names}, pipeline.EventLogDeps{JS: js})
	require.NoError(t, err)

	for _, c := range []struct {
		stage   string
		subject string
	}{
		{pipeline.StageProber, names.BatchSubject("inst-1")},
		{pipeline.StageDeleter, names.DeleteSubject("inst-2")},
		{pipeline.StageSweeper, names.SweepSubject("inst-3")},
	} {
		t.Run(c.stage, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := pipeline.NewMetrics(reg)
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 2)
			for range 2 { // two replicas of the stage, each with its own connection
				d, err := pipeline.WatchDeadLetters(c.stage, pipeline.DeadLettersDeps{Conn: srv.Conn(t), Names: names,
					Events: events, Metrics: m})
				require.NoError(t, err)
				go func() { done <- d.Run(rctx) }()
			}
			stream, consumer, ok := pipeline.StageConsumer(names, c.stage)
			require.True(t, ok)
			id := "msg-" + c.stage
			ack, err := js.Publish(ctx, c.subject, []byte(`{"v":1}`), jetstream.WithMsgID(id))
			require.NoError(t, err)
			cons, err := js.Consumer(ctx, stream, consumer)
			require.NoError(t, err)
			b, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
			require.NoError(t, err)
			got := 0
			for range b.Messages() {
				got++ // received and never answered
			}
			require.Equal(t, 1, got)

			counted := func() float64 {
				var v dto.Metric
				require.NoError(t, m.Messages.WithLabelValues(c.stage, pipeline.MsgMaxDeliveries).Write(&v))
				return v.GetCounter().GetValue()
			}
			require.Eventually(t, func() bool { return counted() >= 1 }, 10*time.Second, 10*time.Millisecond)
			var dead []subjects.Event
			require.Eventually(t, func() bool {
				dead = stageEvents(t, js, names, subjects.EventDeadLetter, c.stage)
				return len(dead) >= 1
			}, 10*time.Second, 10*time.Millisecond)
			cancel()
			for range 2 {
				require.NoError(t, <-done)
			}
			// Both replicas are done: what they stored and counted is final.
			dead = stageEvents(t, js, names, subjects.EventDeadLetter, c.stage)
			require.Len(t, dead, 1, "one event for the message, whichever replica stored it")
			require.Equal(t, 1.0, counted(), "counted once across the replicas")
			ev := dead[0]
			require.Equal(t, pipeline.AdvisoryReason, ev.Reason)
			require.Equal(t, "1 deliveries", ev.Detail)
			require.NotNil(t, ev.Source)
			require.Equal(t, stream, ev.Source.Stream)
			require.Equal(t, ack.Sequence, ev.Source.Seq)
			require.Equal(t, id, ev.Source.MsgID)
			require.Equal(t, c.subject[len(c.subject)-len("inst-x"):], ev.Instance)
		})
	}

	for _, stage := range []string{pipeline.StageScanner, pipeline.StageWalker, "nobody"} {
		_, err := pipeline.WatchDeadLetters(stage, pipeline.DeadLettersDeps{Conn: nc, Names: names, Events: events})
		require.Error(t, err, stage)
	}
}

// stageEvents reads every event of kind that stage recorded.
func stageEvents(t *testing.T, js jetstream.JetStream, names subjects.Names, kind, stage string) []subjects.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []subjects.Event
	require.NoError(t, testenv.EachMessage(ctx, js, names.EventsStream(), []string{names.EventKindFilter(kind)}, func(m jetstream.Msg) {
		ev, err := subjects.DecodeEvent(m.Data())
		require.NoError(t, err)
		if ev.Stage == stage {
			out = append(out, ev)
		}
	}))
	return out
}
