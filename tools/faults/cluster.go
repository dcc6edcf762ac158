package faults

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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// natsServerBin is the name of the nats-server binary Build makes for the cluster scenario.
const natsServerBin = "nats-server"

// natsNodes is the cluster scenario's JetStream cluster: nats-server processes on loopback,
// each with its own client port, route port and file store, so a node can be killed (SIGKILL:
// no leadership hand-over, as in a crash) and started again on its ports and store.
type natsNodes struct {
	bin, dir string
	names    []string
	ports    []int
	routes   []int

	mu    sync.Mutex
	procs []*Proc
}

// startNATSNodes starts n nodes named n0, n1, … and waits until each accepts connections.
func startNATSNodes(bin, dir string, n int) (*natsNodes, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("nats-server binary: %w", err)
	}
	ports, err := servers.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &natsNodes{bin: bin, dir: dir, ports: ports[:n], routes: ports[n:], procs: make([]*Proc, n)}
	for i := range n {
		c.names = append(c.names, "n"+strconv.Itoa(i))
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.Start(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Shutdown()
		return nil, fmt.Errorf("start nats cluster: %w", err)
	}
	return c, nil
}

// URLs lists every node's client URL, comma-separated.
func (c *natsNodes) URLs() string {
	var out []string
	for _, p := range c.ports {
		out = append(out, "nats://127.0.0.1:"+strconv.Itoa(p))
	}
	return strings.Join(out, ",")
}

// Index returns the node whose server name is name, or -1.
func (c *natsNodes) Index(name string) int {
	for i, n := range c.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Start starts node i (again) and waits until it accepts client connections.
func (c *natsNodes) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[i]; p != nil && p.Running() {
		return nil
	}
	var routes []string
	for _, p := range c.routes {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	name := c.names[i]
	store := filepath.Join(c.dir, name)
	if err := os.MkdirAll(store, 0o755); err != nil {
		return fmt.Errorf("create store of %s: %w", name, err)
	}
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(c.ports[i]), "-js", "-sd", store,
		"--server_name", name, "--cluster_name", "faults",
		"--cluster", "nats://127.0.0.1:" + strconv.Itoa(c.routes[i]), "--routes", strings.Join(routes, ",")}
	p, err := StartProc("nats-"+name, filepath.Join(c.dir, name+".log"), c.bin, args, nil)
	if err != nil {
		return err
	}
	c.procs[i] = p
	addr := "127.0.0.1:" + strconv.Itoa(c.ports[i])
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("nats node %s exited at start; its log ends:\n%s", name, p.LogTail(10))
		case <-time.After(pollPeriod):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats node %s does not accept connections on %s", name, addr)
		}
	}
}

// Kill ends node i with SIGKILL.
func (c *natsNodes) Kill(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[i]; p != nil && p.Running() {
		p.Kill()
	}
}

// Shutdown stops every node.
func (c *natsNodes) Shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p != nil && p.Running() {
			_ = p.Stop()
		}
	}
}

// streamCurrent reports the leader of a stream and whether every replica is current with it.
func streamCurrent(ctx context.Context, js jetstream.JetStream, stream string, replicas int) (string, bool) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return "", false
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		return "", false
	}
	current := 1 // the leader
	for _, r := range info.Cluster.Replicas {
		if r.Current && !r.Offline {
			current++
		}
	}
	return info.Cluster.Leader, current == replicas
}
