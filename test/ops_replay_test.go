package test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/seed"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestOpsReplay runs one round, then replays the prober's and the deleter's input and checks
// the explanation of a deleted and a kept location, then and now; it restores one deleted
// location and checks that "now" sees it as garbage again; and it checks that a replay leaves
// the durable consumers and the consumer list as they were.
func TestOpsReplay(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := opsSeed(t, e, []string{"inst1"}, 80, 11)
	// A block KVCM itself could not parse: the prober records a skip for it.
	const corruptKey = 4242
	require.NoError(t, e.redis.Client().HSet(ctx, kvcm.BlockKey("inst1", corruptKey), "__uri__", `{"abc":{"id":"abc",`,
		"__lru_time__", "1").Err())
	// A migration's copy target with KVCM's guard (#307), and the source it names, whose data
	// is gone: both kept, and the replay says why.
	const guardKey = 4343
	old := time.Now().Add(-72 * time.Hour).UnixMicro()
	srcLoc := fmt.Sprintf(`{"id":"src00001","status":3,"type":4,"spec_size":1,"create_time":%d,"location_specs":[{"name":"tp0","uri":"file://%s%s/guard/missing?size=1"}]}`,
		old, seed.StorageNFS, e.root)
	dstLoc := fmt.Sprintf(`{"id":"dst00001","status":2,"type":4,"spec_size":0,"create_time":%d,"location_specs":[],`+
		`"migration_copy_guard":{"schema_version":1,"state":2,"operation_id":"op-1","source_location_id":"src00001"}}`, old)
	require.NoError(t, e.redis.Client().HSet(ctx, kvcm.BlockKey("inst1", guardKey), kvcm.FieldPrevKey, "",
		kvcm.LocationField("src00001"), srcLoc, kvcm.LocationField("dst00001"), dstLoc).Err())
	o := e.options(prometheus.NewRegistry())
	stop := e.run(o, app.All)
	e.waitRoundDone(1, time.Minute)
	stop()

	// One garbage location (deleted) and one live SERVING location (kept) in the same block
	// when there is one, else anywhere.
	var deleted, kept seed.Loc
	kinds := map[string]seed.Loc{}
	for _, l := range m.Locations {
		kinds[fmt.Sprintf("%d/%s", l.Key, l.Kind)] = l
	}
	for _, l := range m.Locations {
		if l.Kind != seed.KindOrphanWriting && l.Kind != seed.KindMissingServing {
			continue
		}
		if k, ok := kinds[fmt.Sprintf("%d/%s", l.Key, seed.KindLiveServing)]; ok {
			deleted, kept = l, k
			break
		}
	}
	require.NotEmpty(t, deleted.Location, "seed has no block with a garbage and a live location")

	durables := func() map[string][3]uint64 {
		out := map[string][3]uint64{}
		for _, sc := range [][2]string{{e.names.BatchesStream(), e.names.ProberConsumer()}, {e.names.DeletesStream(), e.names.DeleterConsumer()}} {
			ci := opsConsumerInfo(t, e, sc[0], sc[1])
			out[sc[1]] = [3]uint64{ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending}
		}
		return out
	}
	namesBefore, durablesBefore := opsConsumerNames(t, e), durables()

	deps, err := ops.OpenReplayDeps(ctx, opsReplaySetup(t, e, o))
	require.NoError(t, err)
	defer func() { require.NoError(t, deps.Close()) }()

	find := func(msgs []ops.ReplayMessage, key int64, loc string) (ops.ReplayMessage, ops.LocationReplay) {
		t.Helper()
		for _, rm := range msgs {
			for _, l := range rm.Locations {
				if l.Key == key && l.Location == loc {
					return rm, l
				}
			}
		}
		t.Fatalf("location %d/%s not replayed", key, loc)
		return ops.ReplayMessage{}, ops.LocationReplay{}
	}
	replay := func(q ops.ReplayQuery) ([]ops.ReplayMessage, ops.ReplaySummary) {
		t.Helper()
		var msgs []ops.ReplayMessage
		sum, err := ops.Replay(ctx, e.js, e.names, q, *deps, func(rm ops.ReplayMessage) error {
			msgs = append(msgs, rm)
			return nil
		})
		require.NoError(t, err)
		return msgs, sum
	}

	// The prober's input: every batch, every location.
	msgs, sum := replay(ops.ReplayQuery{Stage: pipeline.StageProber})
	// One row per location, and one per block whose __uri__ does not decode.
	require.Equal(t, len(m.Locations)+len(m.Corrupt)+1+2, sum.Locations)
	require.Len(t, corruptRows(msgs), len(m.Corrupt)+1)
	corruptKeys := map[int64]bool{}
	for _, l := range corruptRows(msgs) {
		corruptKeys[l.Key] = true
	}
	require.True(t, corruptKeys[corruptKey])
	for _, l := range corruptRows(msgs) {
		require.Equal(t, ops.Verdict{Decision: ops.DecisionSkip, Reason: pipeline.SkipCorruptURI}, ops.Verdict{Decision: l.Then.Decision, Reason: l.Then.Reason})
		require.Equal(t, pipeline.SkipCorruptURI, l.Rerun.Reason)
	}
	for id, reason := range map[string]string{"dst00001": pipeline.SkipMigrationGuard, "src00001": pipeline.SkipMigrationSource} {
		_, g := find(msgs, guardKey, id)
		require.Equal(t, ops.DecisionKept, g.Then.Decision, id)
		require.Equal(t, ops.Verdict{Decision: ops.DecisionSkip, Reason: reason}, ops.Verdict{Decision: g.Rerun.Decision, Reason: g.Rerun.Reason}, id)
		require.Equal(t, reason, g.Now.Reason, id)
		require.NotEmpty(t, g.Rerun.Detail, id)
	}
	cur, err := e.redis.Client().HGetAll(ctx, kvcm.BlockKey("inst1", guardKey)).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{kvcm.FieldPrevKey: "", kvcm.LocationField("src00001"): srcLoc, kvcm.LocationField("dst00001"): dstLoc}, cur)
	rm, d := find(msgs, deleted.Key, deleted.Location)
	require.Equal(t, ops.DecisionCandidate, d.Then.Decision)
	require.Equal(t, deleted.Kind, d.Then.Reason) // seed kinds are named as the reasons
	require.Equal(t, subjects.OutcomeDeleted, d.Then.Outcome)
	require.NotZero(t, d.Then.EventSeq)
	require.Equal(t, ops.Verdict{Decision: ops.DecisionCandidate, Reason: deleted.Kind}, *d.Rerun)
	require.Equal(t, ops.DecisionGone, d.Now.Decision)
	_, k := find(msgs, kept.Key, kept.Location)
	require.Equal(t, ops.DecisionKept, k.Then.Decision)
	require.Equal(t, ops.DecisionKept, k.Rerun.Decision)
	require.Equal(t, ops.DecisionKept, k.Now.Decision)
	require.Equal(t, "specs_present_or_unknown", k.Now.Reason)
	require.False(t, k.Changed)
	require.Zero(t, sum.Poison)
	require.Zero(t, sum.Differ, "nothing changed since the round but its own deletes")
	require.NotEmpty(t, rm.Locations)

	// The same through the CLI adapter, restricted to the block: the report an operator reads.
	env := opsEnv(t, e, o)
	var cli, cliErr bytes.Buffer
	blockKey := strconv.FormatInt(deleted.Key, 10)
	require.NoError(t, opsCommand("replay")(ctx, env, []string{"--stage", "prober", "--key", blockKey}, &cli, &cliErr))
	require.Contains(t, cli.String(), deleted.Location)
	require.Contains(t, cli.String(), "replayed 1 messages")
	t.Logf("replay --stage prober --key %s\n%s", blockKey, cli.String())
	cli.Reset()
	require.NoError(t, opsCommand("replay")(ctx, env, []string{"--stage", "deleter", "--key", blockKey}, &cli, &cliErr))
	require.Contains(t, cli.String(), "noop_gone")
	t.Logf("replay --stage deleter --key %s\n%s", blockKey, cli.String())

	// The deleter's input: the deleted location's request.
	dmsgs, _ := replay(ops.ReplayQuery{Stage: pipeline.StageDeleter, Instance: "inst1", BlockKey: &deleted.Key})
	require.Len(t, dmsgs, 1)
	drm, dt := find(dmsgs, deleted.Key, deleted.Location)
	require.Equal(t, ops.DecisionDelete, dt.Then.Decision)
	require.Equal(t, subjects.OutcomeDeleted, dt.Then.Outcome)
	require.Equal(t, deleted.Kind, dt.Reason)
	require.Equal(t, ops.DecisionNoopGone, dt.Now.Decision)
	require.Len(t, drm.Locations, 1, "the key filter keeps only the block's targets")

	// Put the garbage block back as it was scanned: now it would be deleted again.
	bk := kvcm.BlockKey("inst1", deleted.Key)
	require.NoError(t, e.redis.Client().HSet(ctx, bk, "__uri__", before[bk]["__uri__"], "__lru_time__", before[bk]["__lru_time__"]).Err())
	dmsgs, _ = replay(ops.ReplayQuery{Stage: pipeline.StageDeleter, BlockKey: &deleted.Key})
	_, dt = find(dmsgs, deleted.Key, deleted.Location)
	require.Equal(t, ops.DecisionWouldDelete, dt.Now.Decision)
	msgs, _ = replay(ops.ReplayQuery{Stage: pipeline.StageProber, BlockKey: &deleted.Key, Instance: "inst1"})
	require.Len(t, msgs, 1)
	_, d = find(msgs, deleted.Key, deleted.Location)
	require.Equal(t, ops.Verdict{Decision: ops.DecisionCandidate, Reason: deleted.Kind}, d.Now)
	var dtable bytes.Buffer
	require.NoError(t, ops.WriteReplayMessage(&dtable, dmsgs[0]))
	t.Logf("deleter replay of block %d after restoring it:\n%s", deleted.Key, dtable.String())
	// The restore is undone, and nothing the replays did wrote to Redis.
	require.NoError(t, e.redis.Client().Del(ctx, bk).Err())
	after, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	require.NotContains(t, after, bk)

	// The CLI adapter: filters, dump, a sequence range past the end.
	var out, errOut bytes.Buffer
	key := strconv.FormatInt(kept.Key, 10)
	require.NoError(t, opsCommand("replay")(ctx, env, []string{"--stage", "prober", "--instance", "inst1", "--key", key, "--dump", "--since", "1h"}, &out, &errOut))
	require.Contains(t, out.String(), kept.Location)
	require.Contains(t, out.String(), "raw: {")
	require.Regexp(t, `header Nats-Msg-Id: b:c1:[^:]+:inst1:1:`, out.String(), "a batch's id: cluster, store, instance, round")
	require.Contains(t, out.String(), "replayed 1 messages")
	out.Reset()
	require.NoError(t, opsCommand("replay")(ctx, env, []string{"deleter", "--from-seq", "1000"}, &out, &errOut))
	require.Contains(t, out.String(), "replayed 0 messages")
	require.ErrorIs(t, opsCommand("replay")(ctx, env, []string{"--stage", "scanner"}, &out, &errOut), errOpsUsage)
	require.ErrorIs(t, opsCommand("replay")(ctx, env, []string{"--stage", "prober", "--key", "x"}, &out, &errOut), errOpsUsage)

	// No durable consumer was created, moved or left behind.
	require.Equal(t, durablesBefore, durables())
	require.Eventually(t, func() bool {
		got := opsConsumerNames(t, e)
		return len(got) == len(namesBefore) && strings.Contains(fmt.Sprint(got), "prober")
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, namesBefore, opsConsumerNames(t, e))
}

// corruptRows returns the rows of blocks whose recorded __uri__ does not decode.
func corruptRows(msgs []ops.ReplayMessage) []ops.LocationReplay {
	var out []ops.LocationReplay
	for _, rm := range msgs {
		for _, l := range rm.Locations {
			if l.Location == "" {
				out = append(out, l)
			}
		}
	}
	return out
}
