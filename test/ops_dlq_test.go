package test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestOpsDLQ injects a poison message into DELETES, followed by a valid request, and checks
// that the deleter terminates the first without blocking the second, that dlq list shows it
// with its sequence and reason, and that dlq retry re-publishes it under a new message id (the
// copy, still poison, is terminated and listed in turn).
func TestOpsDLQ(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	o := e.options(prometheus.NewRegistry())
	stop := e.run(o, app.Stages{Deleter: true})
	env := opsEnv(t, e, o)

	poison, err := e.js.Publish(ctx, e.names.DeleteSubject("inst1"), []byte(`{"v":1,"cluster":"c1"`), jetstream.WithMsgID("poison-1"))
	require.NoError(t, err)
	// A valid request behind it, for a block that does not exist: a no-op, but handled.
	req := subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: cluster, Instance: "inst1", Store: e.redis.Addr(),
		Round: 1, Source: subjects.Source{MsgID: "test"}, JudgedAt: time.Now().UnixMicro(),
		Targets: []subjects.Target{{Key: 42, Location: "loc1", Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(`{"id":"loc1","status":2}`)}}}
	data, err := subjects.Encode(req)
	require.NoError(t, err)
	_, err = e.js.Publish(ctx, e.names.DeleteSubject("inst1"), data, jetstream.WithMsgID(subjects.DeleteMsgID(req)))
	require.NoError(t, err)

	waitEvents := func(kind string, n int) []subjects.Event {
		t.Helper()
		var evs []subjects.Event
		require.Eventually(t, func() bool {
			evs = opsEvents(t, e, kind)
			return len(evs) >= n
		}, 30*time.Second, 20*time.Millisecond)
		return evs
	}
	deletes := waitEvents(subjects.EventDelete, 1)
	require.Equal(t, subjects.OutcomeNoopGone, deletes[0].Outcome)
	waitEvents(subjects.EventPoison, 1)

	dls, err := ops.DLQList(ctx, e.js, e.names, time.Time{})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	dl := dls[0]
	require.Equal(t, subjects.EventPoison, dl.Kind)
	require.Equal(t, pipeline.StageDeleter, dl.Stage)
	require.Equal(t, "inst1", dl.Instance)
	require.Equal(t, e.names.DeletesStream(), dl.Stream)
	require.Equal(t, poison.Sequence, dl.Seq)
	require.Equal(t, "poison-1", dl.MsgID)
	require.Contains(t, dl.Reason, "poison message")

	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("dlq")(ctx, env, []string{"list"}, &out, &errOut))
	require.Regexp(t, `poison\s+deleter\s+inst1\s+`+e.names.DeletesStream()+`\s+1\s+poison-1\s+poison message`, out.String())
	t.Logf("dlq list:\n%s", out.String())

	// Retry: the copy gets a new id and sequence, keeps the subject and payload, and (still
	// poison) is terminated and recorded in turn.
	out.Reset()
	require.NoError(t, opsCommand("dlq")(ctx, env, []string{"retry", "--stream", "DELETES", "--seq", "1", "--json"}, &out, &errOut))
	var res ops.RetryResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	require.Equal(t, "poison-1:retry:1", res.NewMsgID)
	require.Equal(t, e.names.DeleteSubject("inst1"), res.Subject)
	require.Greater(t, res.NewSeq, poison.Sequence)
	st, err := e.js.Stream(ctx, e.names.DeletesStream())
	require.NoError(t, err)
	cp, err := st.GetMsg(ctx, res.NewSeq)
	require.NoError(t, err)
	require.Equal(t, `{"v":1,"cluster":"c1"`, string(cp.Data))
	require.Equal(t, e.names.DeletesStream()+":1", cp.Header.Get(ops.RetryHeader))
	poisons := waitEvents(subjects.EventPoison, 2)
	require.Equal(t, res.NewSeq, poisons[1].Source.Seq)
	require.Equal(t, "poison-1:retry:1", poisons[1].Source.MsgID)

	// A second retry within the duplicate window is a new copy, not a dropped duplicate.
	res2, err := ops.DLQRetry(ctx, e.js, e.names, e.names.DeletesStream(), poison.Sequence)
	require.NoError(t, err)
	require.Equal(t, "poison-1:retry:2", res2.NewMsgID)
	require.Greater(t, res2.NewSeq, res.NewSeq)
	waitEvents(subjects.EventPoison, 3)
	dls, err = ops.DLQList(ctx, e.js, e.names, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Len(t, dls, 3)

	// After the fix: the valid request re-published from the stream is handled (a no-op).
	_, err = ops.DLQRetry(ctx, e.js, e.names, "deletes", 2)
	require.NoError(t, err)
	waitEvents(subjects.EventDelete, 2)
	stop()
	opsWaitDeleterDrained(t, e)

	// Only the stages' input streams can be retried from.
	_, err = ops.DLQRetry(ctx, e.js, e.names, e.names.EventsStream(), 1)
	require.ErrorIs(t, err, ops.ErrNotRetryable)
	_, err = ops.DLQRetry(ctx, e.js, e.names, "deletes", 999)
	require.Error(t, err)
	require.ErrorIs(t, opsCommand("dlq")(ctx, env, []string{"retry", "--stream", "DELETES"}, &out, &errOut), errOpsUsage)
	require.ErrorIs(t, opsCommand("dlq")(ctx, env, []string{"purge"}, &out, &errOut), errOpsUsage)
}

// opsWaitDeleterDrained waits until the deleter's consumer has nothing pending or in flight.
func opsWaitDeleterDrained(t *testing.T, e *env) {
	t.Helper()
	require.Eventually(t, func() bool {
		ci := opsConsumerInfo(t, e, e.names.DeletesStream(), e.names.DeleterConsumer())
		return ci.NumPending == 0 && ci.NumAckPending == 0
	}, 30*time.Second, 20*time.Millisecond)
}
