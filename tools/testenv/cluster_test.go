package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestNATSCluster: three nodes elect a meta leader, hold a stream at replicas 3, and keep it
// through a stop and a start of its leader node.
func TestNATSCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := testenv.StartNATSCluster(t, 3)
	require.NoError(t, c.WaitJetStream(ctx))
	js := c.JetStream(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Replicas: 3})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "s", []byte("x"))
	require.NoError(t, err)

	st, err := js.Stream(ctx, "S")
	require.NoError(t, err)
	leader := c.Index(st.CachedInfo().Cluster.Leader)
	require.GreaterOrEqual(t, leader, 0, "leader %q", st.CachedInfo().Cluster.Leader)
	c.Stop(leader)
	require.Nil(t, c.Server(leader))
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		info, err := st.Info(cctx)
		return err == nil && info.Cluster.Leader != "" && info.Cluster.Leader != c.Name(leader)
	}, 30*time.Second, 20*time.Millisecond, "a new stream leader")
	require.NoError(t, c.Start(leader))
	require.NoError(t, c.WaitJetStream(ctx))
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs)
}
