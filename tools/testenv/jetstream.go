package testenv

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// ConsumerIdle reports whether consumer of stream has nothing pending or unacknowledged; see
// servers.ConsumerIdle.
func ConsumerIdle(ctx context.Context, js jetstream.JetStream, stream, consumer string) bool {
	return servers.ConsumerIdle(ctx, js, stream, consumer)
}

// StagesDrained reports whether the prober's and the deleter's consumers are idle; see
// servers.StagesDrained.
func StagesDrained(ctx context.Context, js jetstream.JetStream, names subjects.Names) bool {
	return servers.StagesDrained(ctx, js, names)
}

// EachMessage calls visit with every message stream holds now, in stream order; see
// servers.EachMessage.
func EachMessage(ctx context.Context, js jetstream.JetStream, stream string, filters []string, visit func(jetstream.Msg)) error {
	return servers.EachMessage(ctx, js, stream, filters, visit)
}
