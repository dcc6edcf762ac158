package testenv

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

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

// Topology starts a JetStream server holding kvcm-gc's streams, consumers and buckets for
// cluster c1 under the prefix kvcmgc, made with settings st.
func Topology(t testing.TB, st subjects.Settings) (jetstream.JetStream, subjects.Names) {
	t.Helper()
	js := StartNATS(t).JetStream(t)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	require.NoError(t, subjects.Ensure(context.Background(), js, names, st))
	return js, names
}
