package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// statusSetup starts a server with the topology of cluster.
func statusSetup(t *testing.T, cluster string) (context.Context, jetstream.JetStream, subjects.Names) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	js := testenv.StartNATS(t).JetStream(t)
	names, err := subjects.NewNames("kvcmgc", cluster)
	require.NoError(t, err)
	require.NoError(t, subjects.Ensure(ctx, js, names, subjects.DefaultSettings()))
	return ctx, js, names
}

// silentJS leaves the info requests of one stream (and of its consumer) unanswered, as a
// stream whose leader is being elected does.
type silentJS struct {
	jetstream.JetStream
	stream string
}

func (s silentJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if name == s.stream {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.JetStream.Stream(ctx, name)
}

func (s silentJS) Consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	if stream == s.stream {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.JetStream.Consumer(ctx, stream, name)
}

// TestStatusSilentStream: status reads everything at once, each request bounded by the call
// timeout; a stream and a consumer that do not answer keep their rows, which say so.
func TestStatusSilentStream(t *testing.T) {
	ctx, js, names := statusSetup(t, "c1")

	start := time.Now()
	rep, err := ops.Status(ctx, silentJS{JetStream: js, stream: names.DeletesStream()}, names, ops.WithCallTimeout(300*time.Millisecond))
	require.NoError(t, err)
	require.Less(t, time.Since(start), 3*time.Second, "the silent stream costs one call timeout, not one per request")

	require.Len(t, rep.Streams, 3, "no row is dropped")
	require.Equal(t, names.DeletesStream(), rep.Streams[1].Name)
	require.Contains(t, rep.Streams[1].Error, "deadline exceeded")
	require.Empty(t, rep.Streams[0].Error)
	require.Len(t, rep.Consumers, 2)
	require.Equal(t, pipeline.StageDeleter, rep.Consumers[1].Stage)
	require.Contains(t, rep.Consumers[1].Error, "deadline exceeded")
	require.Empty(t, rep.Consumers[0].Error)
	require.False(t, rep.Consumers[0].ReadAt.IsZero(), "a consumer reading carries its time")
	require.GreaterOrEqual(t, rep.Consumers[0].AgeSeconds, 0.0)
	require.Len(t, rep.Problems, 2)

	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	require.Contains(t, out.String(), names.DeletesStream()+"  not read: context deadline exceeded")
	require.Contains(t, out.String(), "AGE")
}

// TestStatusHeldBack: a round that does not move says why: the scanner's pause, or a backlog
// above the high-water mark.
func TestStatusHeldBack(t *testing.T) {
	ctx, js, names := statusSetup(t, "c1")
	state, err := js.KeyValue(ctx, names.StateBucket())
	require.NoError(t, err)
	ck := pipeline.Checkpoint{Round: 1, InRound: true, Stores: 1, RoundStartedUs: time.Now().Add(-time.Minute).UnixMicro()}
	_, err = state.Put(ctx, subjects.CheckpointKey("127.0.0.1:6379"), mustJSON(t, ck))
	require.NoError(t, err)
	for range 3 {
		_, err := js.Publish(ctx, names.DeleteSubject("inst1"), []byte("{}"))
		require.NoError(t, err)
	}

	// The consumer's pending count follows the stream asynchronously: a loaded server may
	// report the last publishes a moment later.
	want := "backpressure: deleter backlog 3 above backpressure_high_water 2; ticks are skipped until it drains"
	var rep ops.StatusReport
	require.Eventually(t, func() bool {
		var err error
		rep, err = ops.Status(ctx, js, names, ops.WithHighWater(2))
		require.NoError(t, err)
		return rep.Scanner.HeldBack == want
	}, 10*time.Second, 20*time.Millisecond, "the deleter backlog above the high-water mark is reported")
	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	require.Contains(t, out.String(), "not moving: backpressure: deleter backlog 3")

	rep, err = ops.Status(ctx, js, names, ops.WithHighWater(100))
	require.NoError(t, err)
	require.Empty(t, rep.Scanner.HeldBack)

	_, err = ops.Pause(ctx, js, names, pipeline.StageScanner, time.Now().Add(time.Hour))
	require.NoError(t, err)
	rep, err = ops.Status(ctx, js, names, ops.WithHighWater(100))
	require.NoError(t, err)
	require.Contains(t, rep.Scanner.HeldBack, "paused by an operator until")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestStatusNoStores: a registry that names no metadata store is a warning naming the cluster.
func TestStatusNoStores(t *testing.T) {
	ctx, js, names := statusSetup(t, "nosuch")
	state, err := js.KeyValue(ctx, names.StateBucket())
	require.NoError(t, err)
	rep, err := ops.Status(ctx, js, names)
	require.NoError(t, err)
	require.Empty(t, rep.Warnings, "no scanner has read the registry yet")
	_, err = state.Put(ctx, subjects.StoresKey, mustJSON(t, scanner.StoreIndex{Stores: []string{}, SavedUs: time.Now().UnixMicro()}))
	require.NoError(t, err)
	rep, err = ops.Status(ctx, js, names)
	require.NoError(t, err)
	require.Equal(t, []string{`no metadata store to walk: the registry of cluster "nosuch" names no instance group on a Redis store (a misspelt cluster name looks like this)`}, rep.Warnings)
	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	require.Contains(t, out.String(), "WARNINGS\n  no metadata store to walk")
}

// TestStatusStuckDeleting: asked for, status counts the stuck DELETING targets of the recent
// delete events by outcome and the data they left by reason; other reasons are not counted.
func TestStatusStuckDeleting(t *testing.T) {
	ctx, js, names := statusSetup(t, "c1")
	publish := func(targets ...subjects.EventTarget) {
		t.Helper()
		ev := subjects.Event{V: subjects.EventSchemaVersion, Kind: subjects.EventDelete, Stage: pipeline.StageDeleter, Cluster: "c1",
			Instance: "inst1", Outcome: subjects.OutcomeMixed, Targets: targets, At: time.Now().UnixMicro()}
		data, err := subjects.Encode(ev)
		require.NoError(t, err)
		_, err = js.Publish(ctx, names.EventSubject(subjects.EventDelete, "inst1"), data)
		require.NoError(t, err)
	}
	stuck := func(key int64, outcome string, skips map[string]int) subjects.EventTarget {
		return subjects.EventTarget{Key: key, Location: "d", Reason: subjects.ReasonStuckDeleting, Outcome: outcome, PhysicalSkips: skips}
	}
	publish(stuck(1, subjects.OutcomeDeleted, nil), stuck(2, subjects.OutcomeDeleted, map[string]int{deleter.DataLeftShared: 1}),
		subjects.EventTarget{Key: 3, Location: "w", Reason: subjects.ReasonOrphanWriting, Outcome: subjects.OutcomeDeleted,
			PhysicalSkips: map[string]int{deleter.PhysSkipShared: 4}})
	publish(stuck(4, subjects.OutcomeDeleted, map[string]int{deleter.DataLeftReusable: 2}), stuck(5, subjects.OutcomeNoopGone, nil))

	rep, err := ops.Status(ctx, js, names)
	require.NoError(t, err)
	require.Nil(t, rep.StuckDeleting, "not asked for")

	rep, err = ops.Status(ctx, js, names, ops.WithStuckDeleting(time.Hour))
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.Equal(t, &ops.StuckDeletingStatus{WindowSeconds: 3600,
		Outcomes: map[string]int{subjects.OutcomeDeleted: 3, subjects.OutcomeNoopGone: 1},
		DataLeft: map[string]int{deleter.DataLeftShared: 1, deleter.DataLeftReusable: 2}}, rep.StuckDeleting)
	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	require.Contains(t, out.String(), "STUCK DELETING (delete events of the last 1h")
	require.Contains(t, out.String(), "  handled    4 (deleted 3, noop_gone 1)\n")
	require.Contains(t, out.String(), "  data left  3 spec URIs (reusable_storage 2, shared 1)\n")
}

// TestStatusDryRun: status says whether the deployment runs dry, from its configuration and
// from each stage's newest event, in its table and its JSON.
func TestStatusDryRun(t *testing.T) {
	ctx, js, names := statusSetup(t, "c1")
	emit := func(dry bool, evs ...subjects.Event) {
		t.Helper()
		log, err := pipeline.NewEventLog(pipeline.EventLogConfig{Names: names, DryRun: dry}, pipeline.EventLogDeps{JS: js})
		require.NoError(t, err)
		for _, e := range evs {
			require.NoError(t, log.Wait(ctx, []jetstream.PubAckFuture{log.Emit(ctx, e)}))
		}
	}
	table := func(rep ops.StatusReport) string {
		var b bytes.Buffer
		require.NoError(t, rep.WriteTable(&b))
		return b.String()
	}

	// Nothing recorded yet: the configuration says it.
	rep, err := ops.Status(ctx, js, names, ops.WithDryRun(true))
	require.NoError(t, err)
	require.True(t, rep.DryRun.Any())
	require.Contains(t, table(rep), "DRY RUN: the stages record what they would do and delete nothing, where they run dry; configuration: dry_run true.")

	// A dry deleter, a prober whose newest event is a live one's.
	emit(true, subjects.Event{Kind: subjects.EventDelete, Stage: pipeline.StageDeleter, Instance: "inst1", Outcome: subjects.OutcomeWouldDelete})
	emit(false, subjects.Event{Kind: subjects.EventCandidate, Stage: pipeline.StageProber, Instance: "inst1"})
	rep, err = ops.Status(ctx, js, names)
	require.NoError(t, err)
	require.False(t, rep.DryRun.Configured)
	require.Equal(t, []string{pipeline.StageProber, pipeline.StageDeleter}, []string{rep.DryRun.Stages[0].Stage, rep.DryRun.Stages[1].Stage})
	require.False(t, rep.DryRun.Stages[0].DryRun)
	require.True(t, rep.DryRun.Stages[1].DryRun)
	require.Regexp(t, `(?m)^DRY RUN: .*configuration: dry_run false; prober: live \(its candidate event \S+ ago\); deleter: dry run \(its delete event \S+ ago\)\.$`, table(rep))
	var back ops.StatusReport
	data, err := json.Marshal(rep)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &back))
	require.Equal(t, rep.DryRun.Stages[1].DryRun, back.DryRun.Stages[1].DryRun)

	// Promoted: the deleter's newest event is a live one's.
	emit(false, subjects.Event{Kind: subjects.EventDelete, Stage: pipeline.StageDeleter, Instance: "inst1", Outcome: subjects.OutcomeDeleted})
	rep, err = ops.Status(ctx, js, names)
	require.NoError(t, err)
	require.False(t, rep.DryRun.Any())
	require.Regexp(t, `(?m)^dry run: no, deletes are on; configuration: dry_run false; prober: live .*; deleter: live \(its delete event \S+ ago\)$`, table(rep))
	t.Log("\n" + table(rep))
}
