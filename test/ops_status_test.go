package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestOpsStatus runs one round of the whole pipeline and checks what status reports, as a
// table and as JSON, against the servers' own numbers.
func TestOpsStatus(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	instances := []string{"inst1", "inst2"}
	m, _ := opsSeed(t, e, instances, 300, 7)

	o := e.options(prometheus.NewRegistry())
	o.Scanner.Holder = "scanner-a"
	stop := e.run(o, app.All)
	ck := e.waitRoundDone(1, time.Minute)

	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)

	// Streams: the same numbers as stream info.
	require.Len(t, rep.Streams, 3)
	for _, s := range rep.Streams {
		st, err := e.js.Stream(ctx, s.Name)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, info.State.Msgs, s.Messages, s.Name)
		require.Equal(t, info.State.Bytes, s.Bytes, s.Name)
		require.Equal(t, info.State.FirstSeq, s.FirstSeq, s.Name)
		require.Equal(t, info.State.LastSeq, s.LastSeq, s.Name)
		require.NotZero(t, s.Messages, s.Name)
	}

	// Consumers: drained, with their caps.
	require.Len(t, rep.Consumers, 2)
	byStage := map[string]ops.ConsumerStatus{}
	for _, c := range rep.Consumers {
		byStage[c.Stage] = c
	}
	prober, deleter := byStage[pipeline.StageProber], byStage[pipeline.StageDeleter]
	require.Equal(t, e.names.ProberConsumer(), prober.Name)
	require.Equal(t, e.names.DeleterConsumer(), deleter.Name)
	require.Zero(t, prober.Pending)
	require.Zero(t, deleter.AckPending)
	require.Equal(t, o.JetStream.ProberMaxAckPending, prober.MaxAckPending)
	require.Equal(t, o.JetStream.DeleterMaxAckPending, deleter.MaxAckPending)
	require.Equal(t, rep.Streams[0].LastSeq, prober.AckFloorSeq, "every batch acknowledged")
	require.Equal(t, rep.Streams[1].LastSeq, deleter.AckFloorSeq, "every delete request acknowledged")
	require.False(t, prober.Paused)
	require.False(t, deleter.Paused)

	// Scanner: the leader, the finished round and the next one.
	require.NotNil(t, rep.Scanner.Leader)
	require.Equal(t, "scanner-a", rep.Scanner.Leader.Holder)
	require.NotZero(t, rep.Scanner.Leader.Revision)
	require.Less(t, rep.Scanner.Leader.RenewedAgoSecs, o.JetStream.LeaseTTL.Seconds())
	require.NotNil(t, rep.Scanner.Round)
	require.Equal(t, uint64(1), rep.Scanner.Round.ID)
	require.False(t, rep.Scanner.Round.InProgress)
	require.Equal(t, len(instances), rep.Scanner.Round.Instances)
	require.Equal(t, uint64(len(instances)*300), rep.Scanner.Round.Keys)
	require.NotNil(t, rep.Scanner.LastRound)
	require.Equal(t, ck.LastRoundKeys, rep.Scanner.LastRound.Keys)
	require.WithinDuration(t, rep.Scanner.LastRound.Ended.Add(o.Scanner.RoundPause), rep.Scanner.NextRound, time.Millisecond)
	require.False(t, rep.Scanner.Paused)

	// Last events: the round's end, a candidate and a delete outcome.
	last := map[string]ops.LastEvent{}
	for _, le := range rep.LastEvents {
		last[le.Kind] = le
	}
	require.Equal(t, "end", last[subjects.EventRound].Event.Outcome)
	require.Contains(t, []string{subjects.ReasonOrphanWriting, subjects.ReasonStorageMissing}, last[subjects.EventCandidate].Event.Reason)
	require.NotEmpty(t, last[subjects.EventDelete].Event.Outcome)
	require.NotContains(t, last, subjects.EventPoison)
	require.Equal(t, rep.Streams[2].LastSeq, maxSeq(rep.LastEvents))
	require.NotEmpty(t, m.Garbage())

	// The table shows the same.
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	out := table.String()
	t.Logf("status after one round:\n%s", out)
	for _, want := range []string{e.names.BatchesStream(), e.names.DeletesStream() + "/deleter", "scanner-a since",
		"round       1 done: 1 stores, 2 instances, 600 keys", "next round", "LAST EVENTS", "candidate"} {
		require.Contains(t, out, want)
	}

	// JSON decodes back to the same report (through the CLI adapter).
	var js, errOut bytes.Buffer
	require.NoError(t, opsCommand("status")(ctx, opsEnv(t, e, o), []string{"--json"}, &js, &errOut))
	var back ops.StatusReport
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, rep.Streams, back.Streams)
	require.Equal(t, rep.Scanner.Round, back.Scanner.Round)
	require.Equal(t, rep.Scanner.Leader.Holder, back.Scanner.Leader.Holder)
	require.Equal(t, len(rep.LastEvents), len(back.LastEvents))

	// With no lease holder (scanner stopped and its lease released), status says so.
	stop()
	rep, err = ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.Nil(t, rep.Scanner.Leader)
	table.Reset()
	require.NoError(t, rep.WriteTable(&table))
	require.True(t, strings.Contains(table.String(), "lease       none (no replica holds a store lease)"), table.String())
}

func maxSeq(les []ops.LastEvent) uint64 {
	var m uint64
	for _, le := range les {
		m = max(m, le.Seq)
	}
	return m
}

// TestOpsStatusRoundInProgress checks the round progress of a running round: a scanner held
// to a slow pace over three instances of one metadata store, without prober or deleter (the
// backlog limit is raised so it keeps scanning). The first round has no previous key count
// and the only store is the first: the end is the store's own estimate, from its DBSIZE.
func TestOpsStatusRoundInProgress(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	opsSeed(t, e, []string{"inst1", "inst2", "inst3"}, 200, 9)
	o := e.options(nil)
	o.Scanner.Holder = "scanner-b"
	o.Scanner.ScanBatchSize = 50
	o.Scanner.MaxKeysPerSecond = 400
	o.Scanner.HighWater = 1_000_000
	stop := e.run(o, app.Stages{Scanner: true})
	defer stop()

	var rep ops.StatusReport
	require.Eventually(t, func() bool {
		var err error
		rep, err = ops.Status(ctx, e.js, e.names)
		rd := rep.Scanner.Round
		return err == nil && rd != nil && rd.InProgress && rd.Keys >= 200
	}, time.Minute, 10*time.Millisecond)
	rd := rep.Scanner.Round
	require.Equal(t, uint64(1), rd.ID)
	require.Equal(t, 3, rd.Instances)
	require.Equal(t, 1, rd.Store)
	require.Equal(t, 1, rd.Stores)
	require.NotEmpty(t, rd.StoreName)
	require.Less(t, rd.Keys, uint64(600), "the round is still going")
	require.Greater(t, rd.KeysPerSecond, 0.0)
	// No previous round and no store done: the round's end is its one store's own estimate
	// (from the DBSIZE read at the start of its walk) when that store has one, else unknown.
	require.Len(t, rep.Scanner.Stores, 1)
	st := rep.Scanner.Stores[0]
	require.Equal(t, "dbsize", st.ETABasis)
	require.True(t, st.ETA.Equal(rd.ETA), "round end %s, store end %s", rd.ETA, st.ETA)
	require.True(t, rep.Scanner.NextRound.IsZero())
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), fmt.Sprintf("round       1 in progress: store 1 of 1 (%s), 3 instances, cursor ", rd.StoreName))
	if st.ETA.IsZero() {
		require.Empty(t, rd.ETABasis)
		require.Contains(t, table.String(), "estimated end unknown")
	} else {
		require.Equal(t, "store_estimates", rd.ETABasis)
		require.Contains(t, table.String(), "by the latest of the stores' estimates")
	}
	t.Logf("status during a round:\n%s", table.String())
}
