package testenv

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// NATSCluster is a JetStream cluster of in-process nats-server nodes for one test
// (servers.NATSCluster), with connections that close when the test ends.
type NATSCluster struct {
	*servers.NATSCluster
}

// StartNATSCluster starts size nodes named n0, n1, … of one cluster; they are shut down when
// the test ends. It returns once every node accepts client connections, which is before the
// nodes have elected a JetStream meta leader (see WaitJetStream).
func StartNATSCluster(t testing.TB, size int) *NATSCluster {
	t.Helper()
	c, err := servers.StartNATSCluster(t.TempDir(), size)
	if err != nil {
		t.Fatalf("start nats cluster: %v", err)
	}
	t.Cleanup(c.Shutdown)
	return &NATSCluster{NATSCluster: c}
}

// Conn connects to the cluster (every node's URL); the connection is closed when the test
// ends. It reconnects for ever, every 20 ms, so it survives a node's stop.
func (c *NATSCluster) Conn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return natsConn(t, c.URLs(), opts)
}

// JetStream returns a JetStream context on a new connection (see Conn).
func (c *NATSCluster) JetStream(t testing.TB, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	return jetStreamOn(t, c.Conn(t, opts...))
}
