package servers

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// ConsumerIdle reports whether consumer of stream has nothing pending or unacknowledged:
// every message stored so far is handled. An unreadable consumer is not idle.
func ConsumerIdle(ctx context.Context, js jetstream.JetStream, stream, consumer string) bool {
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// StagesDrained reports whether the prober's and the deleter's consumers are idle: every
// batch and delete request stored so far is handled.
func StagesDrained(ctx context.Context, js jetstream.JetStream, names subjects.Names) bool {
	return ConsumerIdle(ctx, js, names.BatchesStream(), names.ProberConsumer()) &&
		ConsumerIdle(ctx, js, names.DeletesStream(), names.DeleterConsumer())
}

// EachMessage calls visit with every message stream holds now, in stream order, read through
// an ordered consumer on filters (every subject when there are none). It fails when the stream
// stops delivering before the last of them.
func EachMessage(ctx context.Context, js jetstream.JetStream, stream string, filters []string, visit func(jetstream.Msg)) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	// A fetch of exactly what is left returns as soon as it is there, not at its timeout.
	for n := uint64(0); n < info.NumPending; {
		b, err := c.Fetch(int(min(info.NumPending-n, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		got := 0
		for m := range b.Messages() {
			got++
			visit(m)
		}
		if got == 0 {
			return fmt.Errorf("stream %s stalled at message %d of %d", stream, n, info.NumPending)
		}
		n += uint64(got)
	}
	return nil
}
