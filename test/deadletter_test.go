package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestDeadLetterHungDeleter runs a deleter stage as deployed (app.Run) with max_deliver 2 and
// a short ack wait, and makes its handler hang: Redis pauses every write (CLIENT PAUSE WRITE),
// so the compare-and-swap of a delete request waits past the ack wait on each delivery. The
// server gives up after the second delivery without a verdict; the stage's max-deliveries
// listener records that as a deadletter event, and `dlq list` shows one entry for the message,
// with its stream sequence, id and instance. Nothing was written to the block.
func TestDeadLetterHungDeleter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	o := e.options(prometheus.NewRegistry())
	o.JetStream.MaxDeliver = 2
	o.JetStream.DeleterAckWait = 300 * time.Millisecond
	o.Deleter.AckWait = o.JetStream.DeleterAckWait
	// Two workers hang on the two deliveries; the third keeps pulling. The server (2.15) sends
	// the advisory of a pull consumer's message past max_deliver when it next looks for a
	// message to deliver, i.e. on a later pull request: in a deployment another worker or
	// replica, or the replacement of a dead process, makes that request.
	o.DeleterWorkers = 3
	stop := e.run(o, app.Stages{Deleter: true})
	env := opsEnv(t, e, o)

	const inst, key, id = "inst1", int64(4242), "hung0001"
	loc := fmt.Sprintf(`{"id":%q,"status":2,"type":4,"spec_size":0,"create_time":%d,"location_specs":[]}`, id,
		time.Now().Add(-72*time.Hour).UnixMicro())
	bk := kvcm.BlockKey(inst, key)
	require.NoError(t, e.redis.Client().HSet(ctx, bk, kvcm.FieldPrevKey, "", kvcm.LocationField(id), loc).Err())
	// Until the test is done with the message, every write waits (reads go on).
	admin := e.redis.Client()
	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", "120000", "WRITE").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })

	req := subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: cluster, Instance: inst, Store: e.redis.Addr(),
		Round: 1, Source: subjects.Source{MsgID: "test"}, JudgedAt: time.Now().UnixMicro(),
		Targets: []subjects.Target{{Key: key, Location: id, Layout: kvcm.LayoutLocation.String(), Reason: subjects.ReasonOrphanWriting,
			Expected: subjects.RawText(loc)}}}
	data, err := subjects.Encode(req)
	require.NoError(t, err)
	msgID := subjects.DeleteMsgID(req)
	ack, err := e.js.Publish(ctx, e.names.DeleteSubject(inst), data, jetstream.WithMsgID(msgID))
	require.NoError(t, err)

	var dead []subjects.Event
	require.Eventually(t, func() bool {
		dead = opsEvents(t, e, subjects.EventDeadLetter)
		return len(dead) > 0
	}, time.Minute, 20*time.Millisecond, "the server's advisory became a deadletter event")
	var fromAdvisory *subjects.Event
	for i, ev := range dead {
		if ev.Reason == pipeline.AdvisoryReason {
			fromAdvisory = &dead[i]
		}
	}
	require.NotNil(t, fromAdvisory, "the listener recorded the unanswered last delivery: %+v", dead)
	raw, err := json.Marshal(fromAdvisory)
	require.NoError(t, err)
	t.Logf("deadletter event: %s", raw)
	require.Equal(t, pipeline.StageDeleter, fromAdvisory.Stage)
	require.Equal(t, inst, fromAdvisory.Instance)
	require.Equal(t, &subjects.Source{Stream: e.names.DeletesStream(), Seq: ack.Sequence, MsgID: msgID}, fromAdvisory.Source)
	require.Equal(t, "2 deliveries", fromAdvisory.Detail)

	dls, err := ops.DLQList(ctx, e.js, e.names, time.Time{})
	require.NoError(t, err)
	require.Len(t, dls, 1, "one entry for the message, however many events it has: %+v", dls)
	require.Equal(t, subjects.EventDeadLetter, dls[0].Kind)
	require.Equal(t, ack.Sequence, dls[0].Seq)
	require.Equal(t, msgID, dls[0].MsgID)
	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("dlq")(ctx, env, []string{"list"}, &out, &errOut))
	t.Logf("dlq list:\n%s", out.String())
	require.Regexp(t, fmt.Sprintf(`deadletter\s+deleter\s+%s\s+%s\s+%d\s+%s\s+`, inst, e.names.DeletesStream(), ack.Sequence, msgID), out.String())

	// The server delivers the message no more, and the block was never written: the stage is
	// stopped before Redis takes writes again, so no hung compare-and-swap is left to run.
	stop()
	require.NoError(t, admin.Do(ctx, "CLIENT", "UNPAUSE").Err())
	c, err := e.js.Consumer(ctx, e.names.DeletesStream(), e.names.DeleterConsumer())
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumPending+uint64(info.NumAckPending))
	got, err := e.redis.Client().HGet(ctx, bk, kvcm.LocationField(id)).Result()
	require.NoError(t, err)
	require.Equal(t, loc, got)
}
