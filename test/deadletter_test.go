package test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// Dead letters end to end, for the two stages besides the deleter (TestDeadLetterHungDeleter):
// a message whose last delivery is never answered is dead-lettered by the server alone, and
// only the stage's max-deliveries listener can record it.

// TestDeadLetterHungProber runs a prober stage as deployed (app.Run) with max_deliver 2 and a
// short ack wait, and makes its handler hang: the redis-server of the registry stops answering
// (SIGSTOP), and the prober reads the registry for every batch (registry_refresh 1ms), so each
// delivery of a batch waits past the ack wait in that read. The server gives up after the
// second delivery without a verdict; the stage's listener records a deadletter event naming
// the batch (stream sequence, message id, instance), and `dlq list` shows one entry for it.
// No delete request was published, though the batch holds an orphan.
func TestDeadLetterHungProber(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed(seed.Spec{Layout: kvcm.LayoutLocation, Blocks: 5, Seed: 23, NoFiles: true})
	o := e.options(prometheus.NewRegistry())
	o.JetStream.MaxDeliver = 2
	o.JetStream.ProberAckWait = 300 * time.Millisecond
	o.Prober.RegistryRefresh = time.Millisecond
	stop := e.run(o, app.Stages{Prober: true})
	env := opsEnv(t, e, o)

	const inst, key, id = "inst1", int64(4343), "hung0002"
	loc := fmt.Sprintf(`{"id":%q,"status":2,"type":4,"spec_size":0,"create_time":%d,"location_specs":[]}`, id,
		time.Now().Add(-72*time.Hour).UnixMicro())
	b := subjects.Batch{V: subjects.SchemaVersion, Cluster: cluster, Instance: inst, Group: seed.GroupRedis, Store: e.redis.Addr(),
		Round: 1, Parts: 1, Blocks: []subjects.BlockEntry{{Key: key, Layout: subjects.LayoutLocation,
			Locs: []subjects.LocField{{ID: subjects.RawText(id), V: subjects.RawText(loc)}}, Fields: []string{kvcm.FieldPrevKey}}}}
	data, err := subjects.Encode(b)
	require.NoError(t, err)
	msgID := subjects.BatchMsgID(b)
	e.redis.Freeze()
	t.Cleanup(e.redis.Thaw)
	ack, err := e.js.Publish(ctx, e.names.BatchSubject(inst), data, jetstream.WithMsgID(msgID))
	require.NoError(t, err)

	dl := waitAdvisoryDeadLetter(t, e, pipeline.StageProber)
	require.Equal(t, inst, dl.Instance)
	require.Equal(t, &subjects.Source{Stream: e.names.BatchesStream(), Seq: ack.Sequence, MsgID: msgID}, dl.Source)
	require.Equal(t, "2 deliveries", dl.Detail)

	// The stage stops before the registry answers again: no hung read is left to go on.
	stop()
	e.redis.Thaw()
	requireDLQEntry(t, e, env, pipeline.StageProber, inst, e.names.BatchesStream(), ack.Sequence, msgID)
	deletes, err := e.js.Stream(ctx, e.names.DeletesStream())
	require.NoError(t, err)
	info, err := deletes.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "a batch nobody judged asks for no delete")
	requireConsumerDone(t, e, e.names.BatchesStream(), e.names.ProberConsumer())
}

// TestDeadLetterDeadSweeper: a sweeper keeps a batch in flight for as long as its handler
// runs (a slow file system is no reason to hand the batch to another sweeper), so the server
// gives a batch up only when the sweepers holding it die. Here two sweepers in turn take a
// sweep batch of real orphan files while the metadata store hangs (SIGSTOP) and die holding it
// (their NATS connections cut, as a process killed with its in-flight batch); max_deliver is
// 2. A third sweeper, started once the store answers again, asks for work; the server finds
// the batch's deliveries used up and sends its advisory, and that sweeper's listener records
// the deadletter event, with the batch's stream sequence, message id and instance; `dlq list`
// shows it. Every file of the batch is still where it was.
func TestDeadLetterDeadSweeper(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, _ := e.seed(seed.Spec{Layout: kvcm.LayoutLocation, Instances: []string{"inst0"}, Blocks: 40, GarbageFraction: 0.2,
		Seed: 24, SweepFiles: true})
	o := e.sweepOptions(prometheus.NewRegistry())
	o.JetStream.MaxDeliver = 2
	o.JetStream.SweeperAckWait = 500 * time.Millisecond
	o.Sweep.AckWait = o.JetStream.SweeperAckWait
	o.SweeperWorkers = 1

	// One walk publishes the storage's candidate files; no sweeper runs yet.
	stopWalker := e.run(o, app.Stages{Walker: true})
	require.Eventually(t, func() bool {
		ck := e.sweepCheckpoint()
		return ck.Round >= 1 && !ck.InRound
	}, time.Minute, 20*time.Millisecond)
	stopWalker()
	sweepStream, err := e.js.Stream(ctx, e.names.SweepStream())
	require.NoError(t, err)
	first, err := sweepStream.GetMsg(ctx, 1)
	require.NoError(t, err)
	batch, err := subjects.DecodeSweepBatch(first.Data)
	require.NoError(t, err)
	require.NotEmpty(t, batch.Files)
	files := map[string]bool{}
	for _, f := range batch.Files {
		files[string(f.Path)] = true
	}
	orphans := 0
	for _, f := range m.SweepFiles {
		if files[f.Path] && f.Fate == seed.SweepOrphan {
			orphans++
		}
	}
	require.Positive(t, orphans, "the batch holds orphans a sweeper would quarantine")

	// A sweeper holds the batch once its handler keeps it in flight: the server's delivery
	// alone is not enough, since a delivery the dying connection never received is handed
	// back uncounted, and the next sweeper would then judge the batch a second time.
	progress, err := e.nc.SubscribeSync(fmt.Sprintf("$JS.ACK.%s.%s.>", e.names.SweepStream(), e.names.SweeperConsumer()))
	require.NoError(t, err)
	e.redis.Freeze()
	t.Cleanup(e.redis.Thaw)
	// Two sweepers take the batch in turn and die holding it.
	for delivery := uint64(1); delivery <= 2; delivery++ {
		nc, stop := e.runOwnConn(o, app.Stages{Sweeper: true})
		waitInProgress(t, progress, delivery, first.Sequence)
		nc.Close() // the process dies: no more InProgress, never an ack
		stop()
	}
	e.redis.Thaw()
	// The replacement asks for work; the server sends the advisory on that request.
	_, stop := e.runOwnConn(o, app.Stages{Sweeper: true})
	dl := waitAdvisoryDeadLetter(t, e, pipeline.StageSweeper)
	stop()
	require.Equal(t, "inst0", dl.Instance)
	require.Equal(t, e.names.SweepStream(), dl.Source.Stream)
	require.Equal(t, first.Sequence, dl.Source.Seq)
	require.Equal(t, first.Header.Get(jetstream.MsgIDHeader), dl.Source.MsgID)
	require.Equal(t, "2 deliveries", dl.Detail)
	env := opsEnv(t, e, o)
	requireDLQEntry(t, e, env, pipeline.StageSweeper, "inst0", e.names.SweepStream(), first.Sequence, dl.Source.MsgID)
	// Its files were neither quarantined nor unlinked (the replacement swept the other batches).
	for path := range files {
		require.FileExists(t, path, "a file of the dead-lettered batch")
	}
}

// waitInProgress waits until a handler reports its delivery of the stream's seq in progress,
// in the acknowledgements sub receives: $JS.ACK.<stream>.<consumer>.<delivered>.<seq>.<consumer
// seq>.<time>.<pending>, the form of a server without a JetStream domain.
func waitInProgress(t *testing.T, sub *nats.Subscription, delivered, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		require.NoError(t, err, "delivery %d of sequence %d never in progress", delivered, seq)
		tok := strings.Split(m.Subject, ".")
		if string(m.Data) == "+WPI" && len(tok) == 9 && tok[4] == fmt.Sprint(delivered) && tok[5] == fmt.Sprint(seq) {
			return
		}
	}
}

// waitAdvisoryDeadLetter waits for the deadletter event stage's max-deliveries listener records
// from the server's advisory, and returns it.
func waitAdvisoryDeadLetter(t *testing.T, e *env, stage string) subjects.Event {
	t.Helper()
	var seen []subjects.Event
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		seen = opsEvents(t, e, subjects.EventDeadLetter)
		for _, ev := range seen {
			if ev.Reason == pipeline.AdvisoryReason && ev.Stage == stage {
				require.NotNil(t, ev.Source)
				return ev
			}
		}
	}
	// What the consumer says tells a message never given up from an advisory missed.
	state := "no consumer"
	if stream, consumer, ok := pipeline.StageConsumer(e.names, stage); ok {
		if info, err := consumerInfo(context.Background(), e, stream, consumer); err == nil {
			state = fmt.Sprintf("delivered %+v, ack floor %+v, ack pending %d, redelivered %d, pending %d",
				info.Delivered, info.AckFloor, info.NumAckPending, info.NumRedelivered, info.NumPending)
		} else {
			state = err.Error()
		}
	}
	var events []string
	for _, ev := range seen {
		src := "no source"
		if ev.Source != nil {
			src = fmt.Sprintf("%s/%d", ev.Source.Stream, ev.Source.Seq)
		}
		events = append(events, fmt.Sprintf("%s %s (%s): %s", ev.Stage, src, ev.Detail, ev.Reason))
	}
	t.Fatalf("the server's advisory never became a deadletter event of the %s within a minute; "+
		"deadletter events: %q; the consumer: %s", stage, events, state)
	return subjects.Event{}
}

// requireDLQEntry: `dlq list` shows one entry for the message, however many events it has.
func requireDLQEntry(t *testing.T, e *env, env opsTarget, stage, inst, stream string, seq uint64, msgID string) {
	t.Helper()
	ctx := context.Background()
	dls, err := ops.DLQList(ctx, e.js, e.names, time.Time{})
	require.NoError(t, err)
	require.Len(t, dls, 1, "%+v", dls)
	require.Equal(t, subjects.EventDeadLetter, dls[0].Kind)
	require.Equal(t, stage, dls[0].Stage)
	require.Equal(t, seq, dls[0].Seq)
	require.Equal(t, msgID, dls[0].MsgID)
	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("dlq")(ctx, env, []string{"list"}, &out, &errOut))
	t.Logf("dlq list:\n%s", out.String())
	require.Regexp(t, fmt.Sprintf(`deadletter\s+%s\s+%s\s+%s\s+%d\s+%s\s+`, stage, inst, stream, seq, msgID), out.String())
}

// requireConsumerDone: the server delivers nothing more of the consumer's stream.
func requireConsumerDone(t *testing.T, e *env, stream, consumer string) {
	t.Helper()
	info, err := consumerInfo(context.Background(), e, stream, consumer)
	require.NoError(t, err)
	require.Zero(t, info.NumPending+uint64(info.NumAckPending), "%+v", info)
}

func consumerInfo(ctx context.Context, e *env, stream, consumer string) (*jetstream.ConsumerInfo, error) {
	c, err := e.js.Consumer(ctx, stream, consumer)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// runOwnConn runs the stages on a NATS connection of their own, as a process of their own
// would: closing it is the process's death as the server sees it. stop cancels them and waits.
func (e *env) runOwnConn(o app.Options, which app.Stages) (*nats.Conn, func()) {
	e.t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL())
	require.NoError(e.t, err)
	if o.Reg != nil {
		e.runs++
		o.Reg = prometheus.WrapRegistererWith(prometheus.Labels{"run": fmt.Sprint(e.runs)}, o.Reg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, nc, o, which) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				e.t.Error("stages did not stop within 30s")
			}
			nc.Close()
		})
	}
	e.t.Cleanup(stop)
	return nc, stop
}
