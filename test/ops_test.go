package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/jsmetrics"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
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
		require.Equal(t, ops.Verdict{Decision: ops.DecisionSkip, Reason: prober.SkipCorruptURI}, ops.Verdict{Decision: l.Then.Decision, Reason: l.Then.Reason})
		require.Equal(t, prober.SkipCorruptURI, l.Rerun.Reason)
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

// reportRows are a report's rows as the seeded garbage says them, by instance, storage and
// reason, for one mode.
func reportRows(t *testing.T, r ops.DeleteReport, dry bool) map[reclaimKey]reclaimSum {
	t.Helper()
	out := map[reclaimKey]reclaimSum{}
	for _, row := range r.Rows {
		if row.DryRun != dry {
			continue
		}
		k := reclaimKey{row.Instance, row.Storage, row.Reason}
		require.NotContains(t, out, k, "one row per instance, storage and reason")
		out[k] = reclaimSum{locations: row.Locations, files: row.Files, bytes: row.Bytes}
	}
	return out
}

// TestReportDryRun: after a dry-run round, report (the function and the command) says what the
// deletes would free, location by location the seeded garbage: its locations, data objects
// and bytes by instance, storage and reason, and the totals by storage and reason. After a
// real round of the same keyspace it says the same of what was freed.
func TestReportDryRun(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		m, before := e.seed(seed.Spec{Layout: layout, Instances: []string{"inst1", "inst2"}, Blocks: 300,
			GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 29})
		want := expectedReclaim(t, m, before)
		require.NotEmpty(t, want)
		wantTotals := map[[2]string]reclaimSum{}
		for k, s := range want {
			tk := [2]string{k.storage, k.reason}
			sum := wantTotals[tk]
			sum.locations += s.locations
			sum.files += s.files
			sum.bytes += s.bytes
			wantTotals[tk] = sum
		}

		o := e.options(prometheus.NewRegistry())
		o.DryRun = true
		stop := e.run(o, app.All)
		e.waitRoundDone(1, time.Minute)
		stop()

		r, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{})
		require.NoError(t, err)
		require.Equal(t, []ops.ReportRound{{Store: r.Rounds[0].Store, Round: 1}}, r.Rounds)
		require.Equal(t, want, reportRows(t, r, true))
		require.Empty(t, reportRows(t, r, false), "a dry run frees nothing")
		gotTotals := map[[2]string]reclaimSum{}
		for _, row := range r.Totals {
			require.True(t, row.DryRun)
			gotTotals[[2]string{row.Storage, row.Reason}] = reclaimSum{locations: row.Locations, files: row.Files, bytes: row.Bytes}
		}
		require.Equal(t, wantTotals, gotTotals)
		require.Equal(t, map[string]int{subjects.OutcomeWouldDelete: len(m.Garbage())}, r.Targets)
		require.Positive(t, r.Requests)

		// The command prints the same, as JSON, and as a table naming every storage.
		env := opsEnv(t, e, o)
		var out bytes.Buffer
		require.NoError(t, opsCommand("report")(ctx, env, []string{"--json"}, &out, io.Discard))
		var viaCLI ops.DeleteReport
		require.NoError(t, json.Unmarshal(out.Bytes(), &viaCLI))
		require.Equal(t, r.Rows, viaCLI.Rows)
		require.Equal(t, r.Totals, viaCLI.Totals)
		out.Reset()
		require.NoError(t, opsCommand("report")(ctx, env, []string{"--no-progress"}, &out, io.Discard))
		require.Contains(t, out.String(), "WOULD FREE (dry run: would_delete)")
		for k := range wantTotals {
			require.Contains(t, out.String(), k[0])
		}
		t.Log("\n" + out.String())

		// Only one instance; another round (none walked: nothing).
		ri, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{Instance: "inst2"})
		require.NoError(t, err)
		for k, s := range reportRows(t, ri, true) {
			require.Equal(t, "inst2", k.instance)
			require.Equal(t, want[k], s)
		}
		require.NotEmpty(t, ri.Rows)
		r2, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{Round: 2})
		require.NoError(t, err)
		require.Empty(t, r2.Rows)
		require.Zero(t, r2.Requests)

		// A real round of the same keyspace (round 2) frees what the dry run said.
		o.DryRun = false
		e.skipRoundPause(t)
		e.run(o, app.All)
		e.waitRoundDone(2, time.Minute)
		e.verify(before, m)
		real, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{})
		require.NoError(t, err)
		require.Equal(t, uint64(2), real.Rounds[0].Round)
		require.Equal(t, want, reportRows(t, real, false))
		require.Empty(t, reportRows(t, real, true))
		again, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{Round: 1})
		require.NoError(t, err)
		require.Equal(t, want, reportRows(t, again, true), "round 1 is still the dry run's")
	})
}

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

	// Retry of a poison message: refused, saying why, and nothing is published.
	out.Reset()
	errOut.Reset()
	before, err := e.js.Stream(ctx, e.names.DeletesStream())
	require.NoError(t, err)
	err = opsCommand("dlq")(ctx, env, []string{"retry", "--stream", "DELETES", "--seq", "1"}, &out, &errOut)
	require.ErrorContains(t, err, "exit status 1")
	require.Contains(t, errOut.String(), "not re-published: "+e.names.DeletesStream()+" #1 was terminated as poison by the deleter: poison message")
	require.Contains(t, errOut.String(), "Re-publish it anyway with --force.")
	require.Empty(t, out.String())
	t.Logf("dlq retry of a poison message:\n%s", errOut.String())
	after, err := e.js.Stream(ctx, e.names.DeletesStream())
	require.NoError(t, err)
	require.Equal(t, before.CachedInfo().State.LastSeq, after.CachedInfo().State.LastSeq, "nothing re-published")

	// With --force: the copy gets a new id and sequence, keeps the subject and payload, and
	// (still poison) is terminated and recorded in turn.
	out.Reset()
	errOut.Reset()
	require.NoError(t, opsCommand("dlq")(ctx, env, []string{"retry", "--stream", "DELETES", "--seq", "1", "--force", "--json"}, &out, &errOut))
	require.Contains(t, errOut.String(), "warning: "+e.names.DeletesStream()+" #1 was terminated as poison")
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
	res2, err := ops.DLQRetry(ctx, e.js, e.names, e.names.DeletesStream(), poison.Sequence, true)
	require.NoError(t, err)
	require.NotEmpty(t, res2.Warning)
	require.Equal(t, "poison-1:retry:2", res2.NewMsgID)
	require.Greater(t, res2.NewSeq, res.NewSeq)
	waitEvents(subjects.EventPoison, 3)
	dls, err = ops.DLQList(ctx, e.js, e.names, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Len(t, dls, 3)

	// After the fix: the valid request re-published from the stream is handled (a no-op).
	res3, err := ops.DLQRetry(ctx, e.js, e.names, "deletes", 2, false)
	require.NoError(t, err)
	require.Empty(t, res3.Warning)
	waitEvents(subjects.EventDelete, 2)
	stop()
	opsWaitDeleterDrained(t, e)

	// Only the stages' input streams can be retried from.
	_, err = ops.DLQRetry(ctx, e.js, e.names, e.names.EventsStream(), 1, false)
	require.ErrorIs(t, err, ops.ErrNotRetryable)
	_, err = ops.DLQRetry(ctx, e.js, e.names, "deletes", 999, false)
	require.Error(t, err)
	require.ErrorIs(t, opsCommand("dlq")(ctx, env, []string{"retry", "--stream", "DELETES"}, &out, &errOut), errOpsUsage)
	require.ErrorIs(t, opsCommand("dlq")(ctx, env, []string{"purge"}, &out, &errOut), errOpsUsage)
}

// opsWaitDeleterDrained waits until the deleter's consumer has nothing pending or in flight.
func opsWaitDeleterDrained(t *testing.T, e *env) {
	t.Helper()
	require.Eventually(t, func() bool {
		return testenv.ConsumerIdle(context.Background(), e.js, e.names.DeletesStream(), e.names.DeleterConsumer())
	}, 30*time.Second, 20*time.Millisecond)
}

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

// TestOpsPauseDeleter pauses the deleter, runs a round and checks that delete requests pile
// up while nothing is deleted and that status and the metrics show the pause; after resume
// every garbage location goes.
func TestOpsPauseDeleter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := opsSeed(t, e, []string{"inst1", "inst2"}, 200, 5)
	o := e.options(prometheus.NewRegistry())
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	env := opsEnv(t, e, o)

	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("pause")(ctx, env, []string{"deleter", "--for", "1h"}, &out, &errOut))
	require.Contains(t, out.String(), "deleter paused until")
	until := time.Now().Add(time.Hour)

	metrics := prometheus.NewRegistry()
	require.NoError(t, metrics.Register(jsmetrics.New(e.js, e.names, []string{pipeline.StageDeleter})))

	stop := e.run(o, app.All)
	// The round ends and the prober drains; every delete request waits in DELETES while the
	// deleter keeps asking for work (its pull requests wait at the server).
	var requests uint64
	require.Eventually(t, func() bool {
		rep, err := ops.Status(ctx, e.js, e.names)
		if err != nil || rep.Scanner.Round == nil || rep.Scanner.Round.InProgress || len(rep.Consumers) != 2 {
			return false
		}
		prober, deleter := rep.Consumers[0], rep.Consumers[1]
		requests = rep.Streams[1].Messages
		return prober.Pending == 0 && prober.AckPending == 0 && requests > 0 &&
			deleter.Pending == requests && deleter.AckPending == 0 && deleter.Waiting > 0
	}, time.Minute, 20*time.Millisecond)

	require.Empty(t, opsEvents(t, e, subjects.EventDelete), "no delete while paused")
	now, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	require.True(t, reflect.DeepEqual(before, now), "Redis changed while the deleter was paused")

	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	deleter := rep.Consumers[1]
	require.Equal(t, pipeline.StageDeleter, deleter.Stage)
	require.True(t, deleter.Paused)
	require.WithinDuration(t, until, deleter.PausedUntil, 5*time.Second)
	require.False(t, rep.Consumers[0].Paused)
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Regexp(t, `deleter\s+\S+/deleter\s+\d+\s+0/2\s+0\s+\d+\s+0\s+until `, table.String())
	require.Equal(t, 1.0, metricValue(t, metrics, jsmetrics.MetricPaused))
	require.Equal(t, float64(requests), metricValue(t, metrics, jsmetrics.MetricPending))

	out.Reset()
	require.NoError(t, opsCommand("resume")(ctx, env, []string{"deleter"}, &out, &errOut))
	require.Contains(t, out.String(), "deleter resumed")
	e.waitRoundDone(1, time.Minute)
	stop()
	r := opsVerify(t, e, before, m)
	require.Equal(t, r.GarbageLocations, r.GarbageGone)
	require.NotEmpty(t, opsEvents(t, e, subjects.EventDelete))
	require.Zero(t, metricValue(t, metrics, jsmetrics.MetricPaused))
}

// TestOpsPauseScanner checks the scanner's pause value, how status and metrics show it, and
// that a running scanner starts no round until it is resumed.
func TestOpsPauseScanner(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	o := e.options(nil)
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	metrics := prometheus.NewRegistry()
	require.NoError(t, jsmetrics.Register(metrics, e.js, e.names, []string{pipeline.StageScanner}))

	until := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("pause")(ctx, opsEnv(t, e, o), []string{"--until", until.Format(time.RFC3339), "scanner"}, &out, &errOut))
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(t, err)
	p, err := pipeline.ReadPause(ctx, kv, subjects.ScannerPauseKey)
	require.NoError(t, err)
	require.NotNil(t, p)
	require.True(t, p.Until().Equal(until))
	require.True(t, p.Active(time.Now()))
	require.False(t, p.Active(until))

	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.True(t, rep.Scanner.Paused)
	require.True(t, rep.Scanner.PausedUntil.Equal(until))
	require.Equal(t, 1.0, metricValue(t, metrics, jsmetrics.MetricPaused))
	require.Equal(t, float64(until.Unix()), metricValue(t, metrics, jsmetrics.MetricPauseEnd))

	// The running scanner leads but starts no round while paused, and does once resumed.
	opsSeed(t, e, []string{"inst1"}, 50, 3)
	reg := prometheus.NewRegistry()
	o.Reg = reg
	stop := e.run(o, app.Stages{Scanner: true})
	require.Eventually(t, func() bool { return metricValue(t, reg, "kvcm_gc_scanner_paused") == 1 }, time.Minute, 10*time.Millisecond)
	rep, err = ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.NotNil(t, rep.Scanner.Leader)
	require.Nil(t, rep.Scanner.Round, "no round while paused")

	_, err = ops.Resume(ctx, e.js, e.names, pipeline.StageScanner)
	require.NoError(t, err)
	rep, err = ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.False(t, rep.Scanner.Paused)
	require.Zero(t, metricValue(t, metrics, jsmetrics.MetricPaused))
	require.Eventually(t, func() bool {
		rep, err := ops.Status(ctx, e.js, e.names)
		return err == nil && rep.Scanner.Round != nil && rep.Scanner.Round.ID == 1
	}, time.Minute, 10*time.Millisecond)
	stop()

	// Argument errors.
	env := opsEnv(t, e, o)
	for _, args := range [][]string{{"--for", "1h"}, {"sweep", "--for", "1h"}, {"deleter", "--for", "1h", "--until", until.Format(time.RFC3339)}} {
		err := opsCommand("pause")(ctx, env, args, &out, &errOut)
		require.Error(t, err, "%q", args)
	}
	_, err = ops.Pause(ctx, e.js, e.names, pipeline.StageDeleter, time.Now().Add(-time.Minute))
	require.Error(t, err)
}

// TestOpsPauseAll: `pause all` stops every stage that writes or unlinks, the sweep's walker
// and sweeper with the others. While paused, the walker holds its storage's lease and walks
// nothing, and no Redis key, data file or quarantine changes. Resumed on its own, the walker
// walks the storage and its batches wait in SWEEP for the still-paused sweeper. Resumed
// all, the garbage and the orphan files go.
func TestOpsPauseAll(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := e.seed(seed.Spec{Layout: kvcm.LayoutLocation, Instances: []string{"inst0", "inst1"}, Blocks: 120,
		GarbageFraction: 0.2, Seed: 23, SweepFiles: true})
	reg := prometheus.NewRegistry()
	o := e.sweepOptions(reg)
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	env := opsEnv(t, e, o)
	files := opsTree(t, m.SweepRoot)

	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("pause")(ctx, env, []string{"all", "--for", "1h"}, &out, &errOut))
	for _, st := range pipeline.Stages() {
		require.Contains(t, out.String(), st+" paused until", st)
	}
	metrics := prometheus.NewRegistry()
	require.NoError(t, jsmetrics.Register(metrics, e.js, e.names, pipeline.Stages()))
	paused := metricByLabel(t, metrics, jsmetrics.MetricPaused, "stage")
	for _, st := range pipeline.Stages() {
		require.Equal(t, 1.0, paused[st], st)
	}

	stop := e.run(o, app.All)
	// The walker leads the storage and knows it is paused; it holds while its lease is renewed
	// three times (every 200ms).
	leases, err := e.js.KeyValue(ctx, e.names.LeaseBucket())
	require.NoError(t, err)
	var first uint64
	require.Eventually(t, func() bool {
		rec, rev, err := sweep.ReadLease(ctx, leases, seed.StorageNFS)
		first = rev
		return err == nil && rec != nil && metricValue(t, reg, "kvcm_gc_sweep_walker_paused") == 1 &&
			metricValue(t, reg, "kvcm_gc_scanner_paused") == 1
	}, time.Minute, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		_, rev, err := sweep.ReadLease(ctx, leases, seed.StorageNFS)
		return err == nil && rev >= first+3
	}, time.Minute, 10*time.Millisecond)
	ck := e.sweepCheckpoint()
	require.Zero(t, ck.Round, "no walk while paused")
	require.Zero(t, ck.QPass, "no look into the quarantine while paused")
	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.NotNil(t, rep.Sweep)
	require.True(t, rep.Sweep.WalkerPaused)
	require.True(t, rep.Sweep.Consumer.Paused)
	require.Zero(t, rep.Sweep.Stream.Messages, "nothing published to SWEEP")
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Regexp(t, `walker\s+paused until `, table.String())
	require.Regexp(t, `sweeper\s+\S+: 0 pending, 0/\d+ in flight, 0 redelivered, paused until `, table.String())

	// The walker alone resumed: its batches wait for the sweeper, which touches nothing.
	out.Reset()
	require.NoError(t, opsCommand("resume")(ctx, env, []string{"walker"}, &out, &errOut))
	require.Contains(t, out.String(), "walker resumed")
	var batches uint64
	require.Eventually(t, func() bool {
		ck := e.sweepCheckpoint()
		rep, err := ops.Status(ctx, e.js, e.names)
		if err != nil || rep.Sweep == nil || rep.Sweep.Consumer == nil || ck.Round < 1 || ck.InRound {
			return false
		}
		c := rep.Sweep.Consumer
		batches = rep.Sweep.Stream.Messages
		return batches > 0 && c.Pending == batches && c.AckPending == 0
	}, time.Minute, 20*time.Millisecond)
	require.Empty(t, quarantined(t, m.SweepRoot), "a paused sweeper quarantines nothing")
	require.Equal(t, files, opsTree(t, m.SweepRoot), "a paused sweeper changes no file")
	require.Empty(t, opsEvents(t, e, subjects.EventDelete), "a paused deleter deletes nothing")
	now, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	require.True(t, reflect.DeepEqual(before, now), "Redis changed while paused")

	out.Reset()
	require.NoError(t, opsCommand("resume")(ctx, env, []string{"all"}, &out, &errOut))
	for _, st := range pipeline.Stages() {
		require.Contains(t, out.String(), st+" resumed", st)
	}
	e.waitRoundDone(1, time.Minute)
	e.waitSwept(1, m.SweepRoot, time.Minute)
	stop()
	r := e.verify(before, m)
	require.Equal(t, r.GarbageLocations, r.GarbageGone)
	sr, err := seed.VerifySweep(m)
	require.NoError(t, err)
	require.True(t, sr.OK(), sr.Problems)
	require.Positive(t, sr.Orphans)
	paused = metricByLabel(t, metrics, jsmetrics.MetricPaused, "stage")
	for _, st := range pipeline.Stages() {
		require.Zero(t, paused[st], st)
	}
}

// opsTree lists the files under root with their size and modification time.
func opsTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
		return nil
	}))
	return out
}

// TestRoundStart is a promotion: a dry-run round, then the deployment restarted live, whose
// next round would start only at the end of round_pause (an hour here: it sits in the
// checkpoint, so the restart does not shorten it). kvcm-gc round start makes the scanner
// start it within RoundStartPoll, and the live round deletes the garbage the dry run found.
func TestRoundStart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := e.seed(seed.Spec{Layout: kvcm.LayoutLocation, Instances: []string{"inst1", "inst2"}, Blocks: 200,
		GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 31})
	o := e.options(prometheus.NewRegistry())
	require.Equal(t, time.Hour, o.Scanner.RoundPause)
	o.DryRun = true
	stop := e.run(o, app.All)
	first := e.waitRoundDone(1, time.Minute)
	stop()
	require.Greater(t, time.UnixMicro(first.NextRoundUs), time.Now().Add(50*time.Minute), "the next round is an hour away")

	o.DryRun = false
	e.run(o, app.All)
	env := opsEnv(t, e, o)

	// An unknown store is a usage error, and asks nothing.
	err := opsCommand("round")(ctx, env, []string{"start", "--store", "nosuch:6379"}, io.Discard, io.Discard)
	require.ErrorIs(t, err, errOpsUsage)
	require.Contains(t, err.Error(), "unknown store")

	var out bytes.Buffer
	asked := time.Now()
	require.NoError(t, opsCommand("round")(ctx, env, []string{"start", "--json"}, &out, io.Discard))
	var res ops.RoundStartResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	require.Len(t, res.Stores, 1)
	require.True(t, res.Stores[0].Starts, "%+v", res.Stores[0])
	require.Equal(t, uint64(1), res.Stores[0].Round)

	var started pipeline.Checkpoint
	require.Eventually(t, func() bool {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return false
		}
		started, _, err = scanner.ReadCheckpoint(ctx, kv)
		return err == nil && started.Round >= 2
	}, scanner.RoundStartPoll+10*time.Second, 20*time.Millisecond)
	t.Logf("round 2 started %v after round start", time.UnixMicro(started.RoundStartedUs).Sub(asked).Round(time.Millisecond))
	e.waitRoundDone(2, time.Minute)
	e.verify(before, m)

	// The table names the store and what it does.
	out.Reset()
	require.NoError(t, opsCommand("round")(ctx, env, []string{"start", "--store", res.Stores[0].Store}, &out, io.Discard))
	require.Contains(t, out.String(), res.Stores[0].Store)
	require.Contains(t, out.String(), "now (round 3;")
	require.Contains(t, out.String(), "starting now: 1 of 1 store;")
	t.Log("\n" + out.String())
}
