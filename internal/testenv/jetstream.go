package testenv

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// StagesDrained reports whether the prober's and the deleter's consumers have nothing pending
// or unacknowledged: every batch and delete request stored so far is handled. An unreadable
// consumer is not drained.
func StagesDrained(ctx context.Context, js jetstream.JetStream, names subjects.Names) bool {
	for _, sc := range [][2]string{{names.BatchesStream(), names.ProberConsumer()}, {names.DeletesStream(), names.DeleterConsumer()}} {
		c, err := js.Consumer(ctx, sc[0], sc[1])
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
			return false
		}
	}
	return true
}
