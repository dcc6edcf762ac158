package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/kvcm-gc/kvcm-gc/natsembed"
)

// NATSCluster is a JetStream cluster of in-process nats-server nodes on loopback, each with its
// own client port, route port and file store. A node can be stopped and started again on the
// same ports and store, as a crashed and restarted server would be.
type NATSCluster struct {
	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	cfg natsembed.Config
	srv *server.Server
}

// StartNATSCluster starts size nodes named n0, n1, … of one cluster, with their stores under
// dir; the caller shuts the cluster down. It returns once every node accepts client
// connections, which is before the nodes have elected a JetStream meta leader (see
// WaitJetStream).
func StartNATSCluster(dir string, size int) (*NATSCluster, error) {
	if size < 1 {
		return nil, fmt.Errorf("nats cluster of %d nodes", size)
	}
	// Every node must know every route before it starts, so the ports are chosen first. A port
	// taken in between makes that node fail to start, and the whole cluster is tried again.
	var lastErr error
	for range 3 {
		c, err := startCluster(dir, size)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startCluster(dir string, size int) (*NATSCluster, error) {
	ports, err := FreePorts(2 * size)
	if err != nil {
		return nil, err
	}
	routes := make([]string, size)
	for i := range size {
		routes[i] = "nats-route://127.0.0.1:" + strconv.Itoa(ports[size+i])
	}
	c := &NATSCluster{}
	for i := range size {
		name := "n" + strconv.Itoa(i)
		store := filepath.Join(dir, name)
		if err := os.MkdirAll(store, 0o755); err != nil {
			return nil, fmt.Errorf("create store of %s: %w", name, err)
		}
		c.nodes = append(c.nodes, &clusterNode{cfg: natsembed.Config{
			StoreDir: store, Host: "127.0.0.1", Port: ports[i], ServerName: name, MaxStore: TestMaxStore,
			Cluster: &natsembed.Cluster{Name: "testenv", Host: "127.0.0.1", Port: ports[size+i], Routes: routes},
		}})
	}
	// The nodes start together: each waits for its own listeners only, not for the others.
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { n.srv, errs[i] = natsembed.Start(n.cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Shutdown()
		return nil, fmt.Errorf("start nats cluster: %w", err)
	}
	return c, nil
}

// FreePorts returns n distinct loopback ports that were free a moment ago, for servers whose
// ports must be known before they start (the nodes of a cluster route to each other).
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// Size is the number of nodes.
func (c *NATSCluster) Size() int { return len(c.nodes) }

// URLs lists every node's client URL, comma-separated, as a client's server list.
func (c *NATSCluster) URLs() string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, "nats://127.0.0.1:"+strconv.Itoa(n.cfg.Port))
	}
	return strings.Join(out, ",")
}

// Name is node i's server name (n<i>).
func (c *NATSCluster) Name(i int) string { return c.nodes[i].cfg.ServerName }

// Index returns the node whose server name is name, or -1.
func (c *NATSCluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.cfg.ServerName == name {
			return i
		}
	}
	return -1
}

// Server is node i's running server, nil while it is stopped.
func (c *NATSCluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// Stop shuts node i down; its clients move to the other nodes.
func (c *NATSCluster) Stop(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Start starts a stopped node again on its ports and store.
func (c *NATSCluster) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.srv != nil {
		return nil
	}
	s, err := natsembed.Start(n.cfg)
	if err != nil {
		return fmt.Errorf("start nats node %s: %w", n.cfg.ServerName, err)
	}
	n.srv = s
	return nil
}

// Shutdown stops every node; calling it again is a no-op.
func (c *NATSCluster) Shutdown() {
	for i := range c.nodes {
		c.Stop(i)
	}
}

// WaitJetStream waits until the running nodes have one JetStream meta leader that knows every
// node, each of them is current with it, and every node has all its routes to every other, so
// JetStream requests are answered and their replies reach the client.
func (c *NATSCluster) WaitJetStream(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if c.jetStreamReady() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for a jetstream meta leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (c *NATSCluster) jetStreamReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, n := range c.nodes {
		if n.srv != nil {
			names = append(names, n.cfg.ServerName)
		}
	}
	leaders := 0
	for _, n := range c.nodes {
		if n.srv == nil {
			continue
		}
		if !n.srv.JetStreamIsCurrent() || !meshed(n.srv, names) {
			return false
		}
		// Only the meta leader answers who the peers are.
		if n.srv.JetStreamIsLeader() {
			leaders++
			if len(n.srv.JetStreamClusterPeers()) < len(c.nodes) {
				return false
			}
		}
	}
	return len(names) > 0 && leaders == 1
}

// routesPerPeer is how many route connections a node keeps to each other node: the default
// pool, plus the one pinned to the system account, which the server adds by default.
const routesPerPeer = server.DEFAULT_ROUTE_POOL_SIZE + 1

// meshed reports whether s has every route to every other running node. A meta leader can be
// elected over a partial mesh (n0–n1 and n1–n2 up, n0–n2 not yet), and routes do not relay:
// then a reply published on n2 to a client of n0 is lost, and the client's request waits for
// its deadline.
func meshed(s *server.Server, names []string) bool {
	rz, err := s.Routez(nil)
	if err != nil {
		return false
	}
	routes := map[string]int{}
	for _, r := range rz.Routes {
		routes[r.RemoteName]++
	}
	for _, name := range names {
		if name != s.Name() && routes[name] < routesPerPeer {
			return false
		}
	}
	return true
}
