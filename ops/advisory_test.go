package ops_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/testenv"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestRecordMaxDeliveries lets a delete request's only allowed delivery time out unanswered,
// as when a deleter dies holding it, and checks that the server's advisory becomes a
// deadletter event that dlq list shows with the message's stream sequence.
func TestRecordMaxDeliveries(t *testing.T) {
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
	s.DeleterAckWait = 200 * time.Millisecond
	require.NoError(t, subjects.Ensure(ctx, js, names, s))

	events, err := pipeline.NewEventLog(pipeline.EventLogConfig{Names: names}, pipeline.EventLogDeps{JS: js})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ops.RecordMaxDeliveries(rctx, nc, js, names, events, pipeline.StageDeleter, nil) }()
	// The subscription must reach the server before the advisory is sent: wait until it
	// exists, then flush.
	require.Eventually(t, func() bool { return nc.NumSubscriptions() > 0 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, nc.Flush())

	ack, err := js.Publish(ctx, names.DeleteSubject("inst-7"), []byte(`{"v":1}`), jetstream.WithMsgID("req-7"))
	require.NoError(t, err)
	cons, err := js.Consumer(ctx, names.DeletesStream(), names.DeleterConsumer())
	require.NoError(t, err)
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	require.NoError(t, err)
	for range b.Messages() {
		// Received and never answered.
	}

	var dls []ops.DeadLetter
	require.Eventually(t, func() bool {
		dls, err = ops.DLQList(ctx, js, names, time.Time{})
		return err == nil && len(dls) == 1
	}, 10*time.Second, 20*time.Millisecond)
	dl := dls[0]
	require.Equal(t, subjects.EventDeadLetter, dl.Kind)
	require.Equal(t, pipeline.StageDeleter, dl.Stage)
	require.Equal(t, "inst-7", dl.Instance)
	require.Equal(t, names.DeletesStream(), dl.Stream)
	require.Equal(t, ack.Sequence, dl.Seq)
	require.Equal(t, "req-7", dl.MsgID)
	require.Equal(t, ops.AdvisoryReason, dl.Reason)

	cancel()
	require.NoError(t, <-done)
	require.Error(t, ops.RecordMaxDeliveries(ctx, nc, js, names, events, pipeline.StageScanner, nil))
}
