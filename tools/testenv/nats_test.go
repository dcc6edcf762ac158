package testenv_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestNATSDirStartsAgain: a server a program started comes back on its URL and store after a
// shutdown, with its streams.
func TestNATSDirStartsAgain(t *testing.T) {
	ctx := context.Background()
	n, err := testenv.StartNATSDir(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(n.Shutdown)
	_, err = n.JetStream(t).CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
	require.NoError(t, err)
	url := n.URL()

	n.Shutdown()
	require.Nil(t, n.Server())
	require.NoError(t, n.Start())
	require.NoError(t, n.Start(), "a running server is left as it is")
	require.Equal(t, url, n.URL())
	_, err = n.JetStream(t).Stream(ctx, "S")
	require.NoError(t, err, "the stream is kept")
}
