package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// MaxDeliveriesSubject is the server's advisory subject for messages of a consumer that
// reached MaxDeliver.
func MaxDeliveriesSubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// maxDeliveriesAdvisory is the part of the server's io.nats.jetstream.advisory.v1.max_deliver
// advisory kvcm-gc reads.
type maxDeliveriesAdvisory struct {
	Type       string    `json:"type"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
	Timestamp  time.Time `json:"timestamp"`
}

// AdvisoryReason is the Reason of a deadletter event recorded from the server's advisory.
const AdvisoryReason = "max deliveries reached without a verdict (server advisory): the last delivery timed out"

// RecordMaxDeliveries records a deadletter event for every message of a stage's consumer that
// the server gives up on after MaxDeliver deliveries, until ctx ends.
//
// The stage's consumer loop records the messages it fails itself (and terminates them, so the
// server sends no such advisory for those). What only the server sees is a last delivery that
// was never answered: the handler hung past AckWait, or its process died. Without this
// listener those messages would leave the pipeline silently. Every replica of a stage may run
// it: the events' deterministic message ids let the server store each one once.
func RecordMaxDeliveries(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, names subjects.Names,
	events *pipeline.EventLog, stage string, log *slog.Logger) error {
	stream, consumer, ok := stageConsumer(names, stage)
	if !ok {
		return fmt.Errorf("record max deliveries: %w %q (prober, deleter)", ErrUnknownStage, stage)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sub, err := nc.Subscribe(MaxDeliveriesSubject(stream, consumer), func(m *nats.Msg) {
		var adv maxDeliveriesAdvisory
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
			log.Warn("undecodable max deliveries advisory", "stage", stage, "err", err)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		e := subjects.Event{Kind: subjects.EventDeadLetter, Stage: stage, Reason: AdvisoryReason,
			Detail: fmt.Sprintf("%d deliveries", adv.Deliveries),
			Source: &subjects.Source{Stream: adv.Stream, Seq: adv.StreamSeq}}
		// The message itself names the instance and its id, while the stream still holds it.
		if s, err := js.Stream(rctx, adv.Stream); err == nil {
			if raw, err := s.GetMsg(rctx, adv.StreamSeq); err == nil {
				e.Source.MsgID = raw.Header.Get(jetstream.MsgIDHeader)
				if inst, err := names.InstanceOf(raw.Subject); err == nil {
					e.Instance = inst
				}
			}
		}
		if err := events.Wait(rctx, []jetstream.PubAckFuture{events.Emit(rctx, e)}); err != nil {
			log.Warn("record dead letter from advisory", "stage", stage, "stream", adv.Stream, "seq", adv.StreamSeq, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to max deliveries advisories of %s/%s: %w", stream, consumer, err)
	}
	<-ctx.Done()
	if err := sub.Unsubscribe(); err != nil && nc.IsConnected() {
		return fmt.Errorf("unsubscribe from max deliveries advisories: %w", err)
	}
	return nil
}
