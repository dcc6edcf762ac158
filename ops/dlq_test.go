package ops_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestDLQListOneEntryPerMessage stores the events of a message whose last delivery hung past
// the ack wait — the server's advisory, then the consumer loop's own record once the handler
// failed after all — beside a poison message and another dead letter: dlq list shows one
// entry per message, the first event recorded for it, with the number of records.
func TestDLQListOneEntryPerMessage(t *testing.T) {
	ctx := context.Background()
	js, names, events := dlqTopology(t)
	deletes := names.DeletesStream()
	for _, e := range []subjects.Event{
		{Kind: subjects.EventDeadLetter, Stage: pipeline.StageDeleter, Reason: pipeline.AdvisoryReason,
			Source: &subjects.Source{Stream: deletes, Seq: 7}},
		{Kind: subjects.EventPoison, Stage: pipeline.StageDeleter, Instance: "inst1", Reason: "poison message: bad json",
			Source: &subjects.Source{Stream: deletes, Seq: 8, MsgID: "p8"}},
		{Kind: subjects.EventDeadLetter, Stage: pipeline.StageDeleter, Instance: "inst1", Reason: "cas: i/o timeout",
			Source: &subjects.Source{Stream: deletes, Seq: 7, MsgID: "dm:7"}},
		{Kind: subjects.EventDeadLetter, Stage: pipeline.StageProber, Instance: "inst2", Reason: pipeline.AdvisoryReason,
			Source: &subjects.Source{Stream: names.BatchesStream(), Seq: 7, MsgID: "b7"}},
	} {
		require.NoError(t, events.Wait(ctx, []jetstream.PubAckFuture{events.Emit(ctx, e)}))
	}
	dls, err := ops.DLQList(ctx, js, names, time.Time{})
	require.NoError(t, err)
	require.Len(t, dls, 3)
	hung := dls[0]
	require.Equal(t, subjects.EventDeadLetter, hung.Kind)
	require.Equal(t, pipeline.AdvisoryReason, hung.Reason, "the first record of the message")
	require.Equal(t, uint64(7), hung.Seq)
	require.Equal(t, 2, hung.Records)
	require.Equal(t, "inst1", hung.Instance, "filled in from the later record")
	require.Equal(t, "dm:7", hung.MsgID)
	require.Equal(t, subjects.EventPoison, dls[1].Kind)
	require.Zero(t, dls[1].Records)
	require.Equal(t, pipeline.StageProber, dls[2].Stage, "the same sequence of another stream is another message")
	var out bytes.Buffer
	require.NoError(t, ops.WriteDeadLetters(&out, dls))
	require.Contains(t, out.String(), "(recorded 2 times)")
}

// TestDLQRetryRefusesPoison: a message terminated as poison, and a re-published copy that was
// dead-lettered again, are not re-published without force (a PoisonError says why, and the
// stream is unchanged); with force they are, with a warning. A dead letter seen once is
// re-published at once.
func TestDLQRetryRefusesPoison(t *testing.T) {
	ctx := context.Background()
	js, names, events := dlqTopology(t)
	deletes := names.DeletesStream()
	// No deleter consumes them: their fates are recorded by hand.
	publish := func(data string, hdr nats.Header) uint64 {
		t.Helper()
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: names.DeleteSubject("inst1"), Data: []byte(data), Header: hdr})
		require.NoError(t, err)
		return ack.Sequence
	}
	poison := publish(`{"v":1`, nil)
	dead := publish(`{"v":1,"cluster":"c1"}`, nil)
	copyOfDead := publish(`{"v":1,"cluster":"c1"}`, nats.Header{ops.RetryHeader: []string{fmt.Sprintf("%s:%d", deletes, dead)}})
	for _, e := range []subjects.Event{
		{Kind: subjects.EventPoison, Stage: pipeline.StageDeleter, Reason: "poison message: unexpected end of JSON input",
			Source: &subjects.Source{Stream: deletes, Seq: poison}},
		{Kind: subjects.EventDeadLetter, Stage: pipeline.StageDeleter, Reason: "cas: i/o timeout", Source: &subjects.Source{Stream: deletes, Seq: dead}},
		{Kind: subjects.EventDeadLetter, Stage: pipeline.StageDeleter, Reason: "cas: i/o timeout", Source: &subjects.Source{Stream: deletes, Seq: copyOfDead}},
	} {
		require.NoError(t, events.Wait(ctx, []jetstream.PubAckFuture{events.Emit(ctx, e)}))
	}
	last := func() uint64 {
		st, err := js.Stream(ctx, deletes)
		require.NoError(t, err)
		return st.CachedInfo().State.LastSeq
	}

	for _, c := range []struct {
		seq  uint64
		copy bool
		says string
	}{
		{poison, false, fmt.Sprintf("retry %s #%d: %s #%d was terminated as poison by the deleter: poison message: unexpected end of JSON input", deletes, poison, deletes, poison)},
		{copyOfDead, true, fmt.Sprintf("is a re-published copy (of %s:%d) that the deleter dead-lettered again: cas: i/o timeout", deletes, dead)},
	} {
		before := last()
		_, err := ops.DLQRetry(ctx, js, names, "deletes", c.seq, false)
		var pe *ops.PoisonError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, c.copy, pe.Copy)
		require.ErrorContains(t, err, c.says)
		require.Equal(t, before, last(), "nothing re-published")

		res, err := ops.DLQRetry(ctx, js, names, "deletes", c.seq, true)
		require.NoError(t, err)
		require.Equal(t, pe.Error(), res.Warning)
		require.Equal(t, before+1, last())
	}
	res, err := ops.DLQRetry(ctx, js, names, "deletes", dead, false)
	require.NoError(t, err, "a dead letter's first retry")
	require.Empty(t, res.Warning)
}

// dlqTopology is the in-memory topology of a dead-letter test, with its event log.
func dlqTopology(t *testing.T) (jetstream.JetStream, subjects.Names, *pipeline.EventLog) {
	t.Helper()
	s := subjects.DefaultSettings()
	s.Storage = jetstream.MemoryStorage
	js, names := testenv.Topology(t, s)
	events, err := pipeline.NewEventLog(pipeline.EventLogConfig{Names: names}, pipeline.EventLogDeps{JS: js})
	require.NoError(t, err)
	return js, names, events
}
