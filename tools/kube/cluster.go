// Package kube runs a real Kubernetes control plane on loopback for tests: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler as child processes, with fake
// nodes played by kwok. Everything the API server, the controllers, the scheduler and the
// admission plugins decide is real; only the kubelet is fake: kwok plays the pods' status
// (they become Running and Ready, a Job's pods complete) and no container ever runs.
//
// The binaries come from the tools cache `make tools` fills (see FindTools). Start returns
// once a fake node is Ready and the CRDs it was given are established; Stop kills every
// process and removes the cluster's directory.
package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// KwokNodeAnnotation marks the nodes kwok plays; it manages no other.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// Options shape a control plane.
type Options struct {
	// Nodes is the number of fake nodes, named kwok-node-0, kwok-node-1, …; 0 means 1.
	Nodes int
	// Dir holds the certificates, kubeconfigs, etcd's data and each component's log. Empty: a
	// new temporary directory, removed by Stop.
	Dir string
}

// Cluster is a running control plane.
type Cluster struct {
	// Dir holds the cluster's files: <component>.log for each component.
	Dir string
	// Kubeconfig is the path of a cluster-admin kubeconfig.
	Kubeconfig string
	// Server is the API server's URL.
	Server string

	tools  Tools
	procs  []*proc
	ownDir bool
}

// The service network the API server allocates ClusterIPs from. Nothing routes to it: no
// traffic ever goes to these addresses.
const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
)

// Start starts a control plane and returns once it has a Ready node and every CRD of tools
// is established. On an error nothing is left running, and the error ends with the tail of
// each component's log.
func Start(ctx context.Context, tools Tools, opts Options) (*Cluster, error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	c := &Cluster{tools: tools, Dir: opts.Dir}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "kube-")
		if err != nil {
			return nil, fmt.Errorf("create cluster dir: %w", err)
		}
		c.Dir, c.ownDir = dir, true
	}
	if err := c.start(ctx, opts); err != nil {
		err = fmt.Errorf("%w\n%s", err, c.Logs(4096))
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	ports, err := servers.FreePorts(4)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kwokPort := ports[0], ports[1], ports[2], ports[3]
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)

	p, err := newPKI(c.Dir)
	if err != nil {
		return err
	}
	if err := p.serving("apiserver", net.ParseIP(serviceIP)); err != nil {
		return err
	}
	for _, id := range []identity{adminIdentity, controllerManagerIdentity, schedulerIdentity, kwokIdentity} {
		if err := p.client(id); err != nil {
			return err
		}
		if err := c.writeKubeconfig(p, id); err != nil {
			return err
		}
	}
	c.Kubeconfig = filepath.Join(c.Dir, adminIdentity.name+".kubeconfig")

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	if err := c.run("etcd", c.tools.Etcd,
		"--name=etcd0",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=etcd0="+peerURL,
		// The cluster's state is thrown away with it: no fsync is worth its time.
		"--unsafe-no-fsync",
		"--log-level=warn",
	); err != nil {
		return err
	}
	if err := c.await(ctx, "etcd health", time.Minute, func() (bool, error) {
		return httpOK(ctx, http.DefaultClient, etcdURL+"/health")
	}); err != nil {
		return err
	}

	if err := c.run("kube-apiserver", c.tools.APIServer,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--cert-dir="+filepath.Join(c.Dir, "apiserver"),
		"--tls-cert-file="+p.path("apiserver.crt"),
		"--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.path("sa.pub"),
		"--service-account-signing-key-file="+p.path("sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC",
		// The default admission plugins (PodSecurity, ServiceAccount, LimitRanger, …) stay on:
		// they are what a chart is admitted by.
		//
		// No reconciler writes the API server's own address into the kubernetes Service: it is
		// a loopback address, which endpoints may not hold.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	); err != nil {
		return err
	}
	admin, err := p.httpClient(adminIdentity)
	if err != nil {
		return err
	}
	if err := c.await(ctx, "kube-apiserver /readyz", 2*time.Minute, func() (bool, error) {
		return httpOK(ctx, admin, c.Server+"/readyz")
	}); err != nil {
		return err
	}

	if err := c.run("kube-controller-manager", c.tools.ControllerManager,
		"--kubeconfig="+filepath.Join(c.Dir, controllerManagerIdentity.name+".kubeconfig"),
		"--secure-port=0",
		"--service-account-private-key-file="+p.path("sa.key"),
		"--root-ca-file="+p.path("ca.crt"),
		// Each controller acts as its own service account, under the default RBAC roles, as
		// in a real cluster.
		"--use-service-account-credentials=true",
		"--profiling=false",
	); err != nil {
		return err
	}
	if err := c.run("kube-scheduler", c.tools.Scheduler,
		"--kubeconfig="+filepath.Join(c.Dir, schedulerIdentity.name+".kubeconfig"),
		"--secure-port=0",
		"--profiling=false",
	); err != nil {
		return err
	}
	if err := c.run("kwok", c.tools.Kwok,
		"--kubeconfig="+filepath.Join(c.Dir, kwokIdentity.name+".kubeconfig"),
		"--config="+c.tools.KwokStages,
		"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
		// A node's address is where the API server would reach its kubelet: keep it on
		// loopback. The pods' addresses are only status, never a destination.
		"--node-ip=127.0.0.1",
		// Each node renews a lease, as a kubelet does: without it the node lifecycle
		// controller finds the node silent after 50 s and marks it NotReady.
		"--node-lease-duration-seconds=40",
	); err != nil {
		return err
	}

	// Both hold a lease once they run (leader election is on, as in a real cluster), and the
	// controller-manager gives every namespace its default service account, which the
	// ServiceAccount admission waits for.
	if err := c.await(ctx, "the controller-manager and scheduler leases and the default service account", 2*time.Minute, func() (bool, error) {
		_, err := c.Kubectl(ctx, nil, "get", "-n", "kube-system", "lease/kube-controller-manager", "lease/kube-scheduler")
		if err != nil {
			return false, nil
		}
		_, err = c.Kubectl(ctx, nil, "get", "-n", "default", "serviceaccount/default")
		return err == nil, nil
	}); err != nil {
		return err
	}

	var nodes bytes.Buffer
	for i := range opts.Nodes {
		fmt.Fprintf(&nodes, nodeManifest, i, KwokNodeAnnotation)
	}
	if _, err := c.Kubectl(ctx, &nodes, "apply", "-f", "-"); err != nil {
		return err
	}
	if err := c.await(ctx, "a Ready node", 2*time.Minute, func() (bool, error) {
		_, err := c.Kubectl(ctx, nil, "wait", "--for=condition=Ready", "node", "--all", "--timeout=5s")
		return err == nil, nil
	}); err != nil {
		return err
	}

	if len(c.tools.CRDs) > 0 {
		args := []string{"apply", "--server-side"}
		for _, f := range c.tools.CRDs {
			args = append(args, "-f", f)
		}
		if _, err := c.Kubectl(ctx, nil, args...); err != nil {
			return err
		}
		args = []string{"wait", "--for=condition=Established", "--timeout=60s"}
		for _, f := range c.tools.CRDs {
			args = append(args, "-f", f)
		}
		if _, err := c.Kubectl(ctx, nil, args...); err != nil {
			return err
		}
	}
	return nil
}

// nodeManifest is a fake node: kwok manages it for its annotation. Its capacity and
// conditions are kwok's (node-initialize); it has no taint, so any pod may land on it.
const nodeManifest = `apiVersion: v1
kind: Node
metadata:
  name: kwok-node-%[1]d
  annotations:
    %[2]s: fake
  labels:
    kubernetes.io/hostname: kwok-node-%[1]d
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
---
`

// Stop kills every component and removes the cluster's directory if Start created it.
// It may be called more than once.
func (c *Cluster) Stop() {
	// The reverse of the start order: nothing is left to write to a stopped API server.
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.Dir)
	}
}

// Env is the environment for a kubectl or helm run against the cluster: this process's own,
// with KUBECONFIG naming the admin's kubeconfig.
func (c *Cluster) Env() []string {
	return append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
}

// Kubectl runs kubectl as the cluster's admin with stdin (nil for none) and returns its
// standard output; its error holds its standard error.
func (c *Cluster) Kubectl(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.tools.Kubectl, args...)
	cmd.Env = c.Env()
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// Check returns an error naming every component that has exited; a control plane whose
// component died mid-test explains a failure better than the failure's own message.
func (c *Cluster) Check() error {
	var errs []error
	for _, p := range c.procs {
		if err := p.exited(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Logs returns the last max bytes of every component's log, each under its name.
func (c *Cluster) Logs(max int64) string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.Name, p.LogPath, p.tail(max))
	}
	return b.String()
}

func (c *Cluster) run(name, bin string, args ...string) error {
	p, err := startProc(c.Dir, name, bin, args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

// await polls ready until it returns true, an error, a component exits or the timeout
// passes; it names what it waited for.
func (c *Cluster) await(ctx context.Context, what string, timeout time.Duration, ready func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := c.Check(); err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		ok, err := ready()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// httpOK reports whether a GET of url answers 200. A refused connection is not yet.
func httpOK(ctx context.Context, client *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, fmt.Errorf("request %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// httpClient is a client of the API server with id's certificate.
func (p *pki) httpClient(id identity) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(p.path(id.name+".crt"), p.path(id.name+".key"))
	if err != nil {
		return nil, fmt.Errorf("load %s certificate: %w", id.name, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs:      roots,
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS12,
		}},
	}, nil
}

// writeKubeconfig writes <id.name>.kubeconfig with the certificates inline, so it can be
// handed around alone.
func (c *Cluster) writeKubeconfig(p *pki, id identity) error {
	var data [3]string
	for i, f := range []string{"ca.crt", id.name + ".crt", id.name + ".key"} {
		b, err := os.ReadFile(p.path(f))
		if err != nil {
			return fmt.Errorf("read %s: %w", f, err)
		}
		data[i] = base64.StdEncoding.EncodeToString(b)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kube
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kube
  context:
    cluster: kube
    user: %s
current-context: kube
`, c.Server, data[0], id.name, data[1], data[2], id.name)
	path := filepath.Join(c.Dir, id.name+".kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		return fmt.Errorf("write %s kubeconfig: %w", id.name, err)
	}
	return nil
}
