package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// readRange selects the messages readStream delivers.
type readRange struct {
	Filters   []string  // subject filters; none means the whole stream
	StartSeq  uint64    // first stream sequence (0: from StartTime, or the beginning)
	StartTime time.Time // first message time when StartSeq is 0 (zero: the beginning)
}

// stallTimeout bounds the wait for the next message the server said was pending: a message
// that ages out of a limits stream mid-read must end the read, not hang it.
const stallTimeout = 30 * time.Second

// readStream delivers, in stream order, the messages of stream that match r and are present
// when it starts, through an ordered ephemeral consumer: a server-side cursor of its own that
// acknowledges nothing and is deleted afterwards, so the durable consumers of the stages are
// never touched (a replay can run while the pipeline runs). total is the number of messages
// the read will deliver, known after the consumer is created; visit returns errStop to end
// early. The consumer is removed when the read ends; should the removal fail, the server
// drops it after a minute of inactivity.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, r readRange,
	start func(total uint64), visit func(m jetstream.Msg, md *jetstream.MsgMetadata) error) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", stream, err)
	}
	// The end of the read: what the stream held when it started. Without it, a read of a busy
	// stream could chase its tail for ever.
	lastSeq := s.CachedInfo().State.LastSeq
	if lastSeq == 0 || r.StartSeq > lastSeq {
		if start != nil {
			start(0)
		}
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: r.Filters, InactiveThreshold: time.Minute}
	switch {
	case r.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.StartSeq
	case !r.StartTime.IsZero():
		t := r.StartTime
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("create ordered consumer on %s: %w", stream, err)
	}
	// A small client buffer: a slow visitor (a replay reading Redis per location) must not
	// have hundreds of large batches sitting in memory.
	it, err := cons.Messages(jetstream.PullMaxMessages(32))
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream, err)
	}
	defer func() {
		name := ""
		if ci := cons.CachedInfo(); ci != nil {
			name = ci.Name
		}
		it.Stop()
		if name != "" {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = js.DeleteConsumer(dctx, stream, name)
		}
	}()
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("read ordered consumer info on %s: %w", stream, err)
	}
	// Messages may already sit in the client's buffer: they count as delivered, not pending.
	total := info.NumPending + info.Delivered.Consumer
	if start != nil {
		start(total)
	}
	if total == 0 {
		return nil
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, stallTimeout)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read stream %s: %w", stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read stream %s: message metadata: %w", stream, err)
		}
		if md.Sequence.Stream > lastSeq {
			return nil // stored after the read started
		}
		if err := visit(m, md); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
		if md.NumPending == 0 || md.Sequence.Stream == lastSeq {
			return nil
		}
	}
}

// errStop ends readStream early without an error.
var errStop = errors.New("stop reading")
