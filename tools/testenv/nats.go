package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/natsembed"
)

// NATSOption configures StartNATS.
type NATSOption func(*natsConfig)

type natsConfig struct {
	embed natsembed.Config
	tls   bool
}

// WithNATSDir keeps the JetStream store in dir instead of a fresh t.TempDir(), for example to
// start a second server on the store of a stopped one.
func WithNATSDir(dir string) NATSOption {
	return func(c *natsConfig) { c.embed.StoreDir = dir }
}

// WithNATSMaxPayload sets the server's max payload (headers and payload, in bytes).
func WithNATSMaxPayload(n int32) NATSOption {
	return func(c *natsConfig) { c.embed.MaxPayload = n }
}

// WithNATSAccounts configures accounts, users and permissions; clients must then log in
// (Conn(t, nats.UserInfo(user, password))).
func WithNATSAccounts(accts ...natsembed.Account) NATSOption {
	return func(c *natsConfig) { c.embed.Accounts = append(c.embed.Accounts, accts...) }
}

// WithNATSTLS serves TLS only, with a certificate for 127.0.0.1 from a fresh CA; Conn trusts
// it, and CAFile gives the CA to other processes.
func WithNATSTLS() NATSOption {
	return func(c *natsConfig) { c.tls = true }
}

// NATS is an embedded NATS server with JetStream for one test.
type NATS struct {
	mu     sync.Mutex
	cfg    natsembed.Config
	srv    *server.Server
	url    string
	caFile string
	caPool *x509.CertPool
}

// StartNATS starts a JetStream server listening on a free loopback port, with its file store
// in a temporary directory (or WithNATSDir). It is shut down when the test ends.
func StartNATS(t testing.TB, opts ...NATSOption) *NATS {
	t.Helper()
	var c natsConfig
	for _, o := range opts {
		o(&c)
	}
	if c.embed.StoreDir == "" {
		c.embed.StoreDir = t.TempDir()
	}
	n := &NATS{cfg: c.embed}
	if c.tls {
		dir := t.TempDir()
		tlsCfg, pool, err := natsTLS(dir)
		if err != nil {
			t.Fatalf("start nats: %v", err)
		}
		n.cfg.TLS, n.caPool, n.caFile = tlsCfg, pool, filepath.Join(dir, "ca.pem")
	}
	if err := n.start(); err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(n.Shutdown)
	return n
}

// StartNATSDir is StartNATS for programs that are not tests (the fault suite): the store is
// kept in dir, and the caller shuts the server down.
func StartNATSDir(dir string) (*NATS, error) {
	n := &NATS{cfg: natsembed.Config{StoreDir: dir}}
	if err := n.start(); err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	return n, nil
}

func (n *NATS) start() error {
	s, err := natsembed.Start(n.cfg)
	if err != nil {
		return err
	}
	addr, err := natsembed.Addr(s)
	if err != nil {
		s.Shutdown()
		s.WaitForShutdown()
		return err
	}
	// A restart must come back on the same port, so clients reconnect to it.
	n.cfg.Port = addr.Port
	scheme := "nats"
	if n.cfg.TLS != nil {
		scheme = "tls"
	}
	n.srv, n.url = s, fmt.Sprintf("%s://%s", scheme, addr)
	return nil
}

// Start starts a server that was shut down again, on the same port and store, keeping every
// stream, consumer and bucket; a running server is left as it is.
func (n *NATS) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return nil
	}
	return n.start()
}

// URL is the client URL, e.g. nats://127.0.0.1:41234 (tls:// with WithNATSTLS).
func (n *NATS) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.url
}

// Server returns the running server (a new one after Restart).
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// StoreDir is the JetStream store directory.
func (n *NATS) StoreDir() string { return n.cfg.StoreDir }

// CAFile is the PEM file of the CA that signed the server certificate ("" without TLS).
func (n *NATS) CAFile() string { return n.caFile }

// ClientTLSConfig trusts the server certificate (nil without TLS).
func (n *NATS) ClientTLSConfig() *tls.Config {
	if n.caPool == nil {
		return nil
	}
	return &tls.Config{RootCAs: n.caPool, MinVersion: tls.VersionTLS12}
}

// Conn connects to the server; the connection is closed when the test ends. It reconnects
// for ever, every 20 ms, so it survives Restart. opts come after those defaults.
func (n *NATS) Conn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	if tc := n.ClientTLSConfig(); tc != nil {
		opts = append([]nats.Option{nats.Secure(tc)}, opts...)
	}
	return natsConn(t, n.URL(), opts)
}

// JetStream returns a JetStream context on a new connection (see Conn).
func (n *NATS) JetStream(t testing.TB, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	return jetStreamOn(t, n.Conn(t, opts...))
}

// natsConn connects a test to url, reconnecting for ever every 20 ms; opts come after those
// defaults. The connection is closed when the test ends.
func natsConn(t testing.TB, url string, opts []nats.Option) *nats.Conn {
	t.Helper()
	all := []nats.Option{
		nats.Name(t.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
	}
	nc, err := nats.Connect(url, append(all, opts...)...)
	if err != nil {
		t.Fatalf("connect to nats %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func jetStreamOn(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// Restart shuts the server down and starts it again on the same port and store, keeping
// every stream, consumer and bucket.
func (n *NATS) Restart(t testing.TB) {
	t.Helper()
	n.Shutdown()
	if err := n.Start(); err != nil {
		t.Fatalf("restart nats: %v", err)
	}
}

// Shutdown stops the server and waits for it; calling it again is a no-op.
func (n *NATS) Shutdown() { withLock(&n.mu, n.shutdownLocked) }

func (n *NATS) shutdownLocked() {
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// natsTLS writes a fresh CA to dir/ca.pem and returns a server config with a certificate it
// signed for 127.0.0.1 and localhost, and a pool trusting the CA.
func natsTLS(dir string) (*tls.Config, *x509.CertPool, error) {
	ca, err := newTestCA("testenv nats ca")
	if err != nil {
		return nil, nil, err
	}
	der, key, err := ca.sign(2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.der); err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}
	return cfg, pool, nil
}
