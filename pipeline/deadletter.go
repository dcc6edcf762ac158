package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// AdvisoryReason is the Reason of a deadletter event recorded from the server's advisory.
const AdvisoryReason = "max deliveries reached without a verdict (server advisory): the last delivery timed out"

// recordTimeout bounds the recording of one dead letter (reading the message, storing the
// event): a JetStream that does not answer must not pile up callbacks.
const recordTimeout = 10 * time.Second

// MaxDeliveriesSubject is the server's advisory subject for messages of a consumer that
// reached MaxDeliver.
func MaxDeliveriesSubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// maxDeliveriesAdvisory is the part of the server's io.nats.jetstream.advisory.v1.max_deliver
// advisory kvcm-gc reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// DeadLetters records a deadletter event for every message of a stage's consumer that the
// server gives up on after MaxDeliver deliveries.
//
// The stage's consumer loop records the messages it fails itself (and terminates them, so the
// server sends no advisory for those). What only the server sees is a last delivery that was
// never answered: the handler hung past AckWait, or its process died. Without this listener
// those messages would leave the pipeline silently. Every replica of a stage runs one: each
// receives every advisory, and the event's deterministic message id lets the server store it
// once; only the replica whose event was stored first counts it.
//
// When the advisory comes: for max_deliver 1 as soon as the only delivery's ack wait has
// passed; for more, the server (2.15) notices the last delivery's expiry only when it next looks
// for a message to deliver, i.e. on a later pull request of the consumer — another worker,
// another replica, or the replacement of the process that died.
type DeadLetters struct {
	stage   string
	names   subjects.Names
	js      nats.JetStreamContext
	events  *EventLog
	metrics *Metrics
	log     *slog.Logger
	sub     *nats.Subscription

	// Callbacks run on the subscription's goroutine; Run joins the one in progress.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// DeadLettersDeps are the listener's collaborators. Conn and Events are required; a nil
// Metrics counts on an unregistered set, a nil Logger discards.
type DeadLettersDeps struct {
	Conn    *nats.Conn
	Names   subjects.Names
	Events  *EventLog
	Metrics *Metrics
	Logger  *slog.Logger
}

// WatchDeadLetters subscribes to the max-deliveries advisories of stage's consumer and waits
// until the server has the subscription, so no advisory sent after it returns is missed:
// call it before the stage's consumer starts, then Run.
func WatchDeadLetters(stage string, deps DeadLettersDeps) (*DeadLetters, error) {
	stream, consumer, ok := StageConsumer(deps.Names, stage)
	if !ok {
		return nil, fmt.Errorf("watch dead letters: stage %q consumes nothing (want %s, %s or %s)",
			stage, StageProber, StageDeleter, StageSweeper)
	}
	if deps.Conn == nil || deps.Events == nil {
		return nil, fmt.Errorf("watch dead letters of %s: no NATS connection or event log", stage)
	}
	// The legacy JetStream context reads a message by sequence with one request
	// ($JS.API.STREAM.MSG.GET.<stream>), without the stream info request jetstream.Stream
	// sends first: one permission fewer for the stage's NATS user.
	js, err := deps.Conn.JetStream()
	if err != nil {
		return nil, fmt.Errorf("watch dead letters of %s: %w", stage, err)
	}
	d := &DeadLetters{stage: stage, names: deps.Names, js: js, events: deps.Events,
		metrics: orUnregistered(deps.Metrics), log: OrDiscard(deps.Logger)}
	d.metrics.Messages.WithLabelValues(stage, MsgMaxDeliveries)
	if d.sub, err = deps.Conn.Subscribe(MaxDeliveriesSubject(stream, consumer), d.receive); err != nil {
		return nil, fmt.Errorf("subscribe to max deliveries advisories of %s/%s: %w", stream, consumer, err)
	}
	if err := deps.Conn.Flush(); err != nil {
		_ = d.sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe to max deliveries advisories of %s/%s: %w", stream, consumer, err)
	}
	return d, nil
}

// Run waits until ctx ends, then unsubscribes and waits for a dead letter being recorded.
func (d *DeadLetters) Run(ctx context.Context) error {
	<-ctx.Done()
	err := d.sub.Unsubscribe()
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wg.Wait()
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		return fmt.Errorf("unsubscribe from max deliveries advisories of %s: %w", d.stage, err)
	}
	return nil
}

func (d *DeadLetters) receive(m *nats.Msg) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.wg.Add(1)
	d.mu.Unlock()
	defer d.wg.Done()

	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 || adv.Stream == "" {
		d.log.Warn("undecodable max deliveries advisory", "stage", d.stage, "err", err)
		return
	}
	// Not cut short by a shutdown: the event is what is left of the message.
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	e := subjects.Event{Kind: subjects.EventDeadLetter, Stage: d.stage, Reason: AdvisoryReason,
		Detail: fmt.Sprintf("%d deliveries", adv.Deliveries),
		Source: &subjects.Source{Stream: adv.Stream, Seq: adv.StreamSeq}}
	// The message itself names the instance and its id, while the stream still holds it.
	if raw, err := d.js.GetMsg(adv.Stream, adv.StreamSeq, nats.Context(ctx)); err == nil {
		e.Source.MsgID = raw.Header.Get(jetstream.MsgIDHeader)
		if inst, err := d.names.InstanceOf(raw.Subject); err == nil {
			e.Instance = inst
		}
	} else {
		d.log.Warn("read dead-lettered message", "stage", d.stage, "stream", adv.Stream, "seq", adv.StreamSeq, "err", err)
	}
	stored, err := d.store(ctx, e)
	if err != nil {
		d.log.Warn("record dead letter from advisory",
			"stage", d.stage, "stream", adv.Stream, "seq", adv.StreamSeq, "err", err)
	}
	// Counted by the replica whose event the server stored first, and by every replica that
	// could not store it: a dead letter nobody could record must still raise the alert.
	if stored || err != nil {
		d.metrics.Messages.WithLabelValues(d.stage, MsgMaxDeliveries).Inc()
		d.log.Warn("message dead-lettered by the server", "stage", d.stage, "stream", adv.Stream, "seq", adv.StreamSeq,
			"deliveries", adv.Deliveries)
	}
}

// store stores e and reports whether this publish stored it (false: a duplicate of another
// replica's).
func (d *DeadLetters) store(ctx context.Context, e subjects.Event) (bool, error) {
	f := d.events.Emit(ctx, e)
	if f == nil {
		return false, errors.New("the event could not be published")
	}
	select {
	case ack := <-f.Ok():
		return !ack.Duplicate, nil
	case err := <-f.Err():
		return false, fmt.Errorf("store event: %w", err)
	case <-ctx.Done():
		return false, fmt.Errorf("store event: %w", ctx.Err())
	}
}
