package servers

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/kvcm-gc/kvcm-gc/natsembed"
)

// NATSOption configures StartNATS.
type NATSOption func(*natsConfig)

type natsConfig struct {
	embed natsembed.Config
	tls   bool
}

// WithNATSDir keeps the JetStream store in dir instead of the directory StartNATS is given,
// for example to start a second server on the store of a stopped one.
func WithNATSDir(dir string) NATSOption {
	return func(c *natsConfig) { c.embed.StoreDir = dir }
}

// WithNATSMaxPayload sets the server's max payload (headers and payload, in bytes).
func WithNATSMaxPayload(n int32) NATSOption {
	return func(c *natsConfig) { c.embed.MaxPayload = n }
}

// WithNATSAccounts configures accounts, users and permissions; clients must then log in
// (nats.UserInfo(user, password)).
func WithNATSAccounts(accts ...natsembed.Account) NATSOption {
	return func(c *natsConfig) { c.embed.Accounts = append(c.embed.Accounts, accts...) }
}

// WithNATSTLS serves TLS only, with a certificate for 127.0.0.1 from a fresh CA;
// ClientTLSConfig trusts it, and CAFile gives the CA to other processes.
func WithNATSTLS() NATSOption {
	return func(c *natsConfig) { c.tls = true }
}

// NATS is an embedded NATS server with JetStream, for a test or a harness program.
type NATS struct {
	mu     sync.Mutex
	cfg    natsembed.Config
	srv    *server.Server
	url    string
	caFile string
	caPool *x509.CertPool
}

// TestMaxStore is the file store limit of the servers started here: 1 TiB, which the streams'
// reservations are counted against, whatever the disk holds. With the server's default (three
// quarters of the disk free at its start) a test that raises the streams' max_bytes to 2 GiB
// was refused with "insufficient storage resources" on a disk with 11 GiB free. The streams
// write little; a reservation is not an allocation.
const TestMaxStore = 1 << 40

// StartNATS starts a JetStream server listening on a free loopback port, with its file store
// in dir (or WithNATSDir); with WithNATSTLS the CA's ca.pem goes into dir/tls. The caller
// shuts the server down; dir is left as it is.
func StartNATS(dir string, opts ...NATSOption) (*NATS, error) {
	var c natsConfig
	for _, o := range opts {
		o(&c)
	}
	if c.embed.StoreDir == "" {
		c.embed.StoreDir = dir
	}
	if c.embed.MaxStore == 0 {
		c.embed.MaxStore = TestMaxStore
	}
	n := &NATS{cfg: c.embed}
	if c.tls {
		tlsDir := filepath.Join(dir, "tls")
		if err := os.MkdirAll(tlsDir, 0o700); err != nil {
			return nil, fmt.Errorf("start nats: create TLS directory: %w", err)
		}
		tlsCfg, pool, err := natsTLS(tlsDir)
		if err != nil {
			return nil, fmt.Errorf("start nats: %w", err)
		}
		n.cfg.TLS, n.caPool, n.caFile = tlsCfg, pool, filepath.Join(tlsDir, "ca.pem")
	}
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

// Restart shuts the server down and starts it again on the same port and store, keeping
// every stream, consumer and bucket.
func (n *NATS) Restart() error {
	n.Shutdown()
	if err := n.Start(); err != nil {
		return fmt.Errorf("restart nats: %w", err)
	}
	return nil
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
	ca, err := NewCA("testenv nats ca")
	if err != nil {
		return nil, nil, err
	}
	der, key, err := ca.sign(2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.DER); err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}
	return cfg, pool, nil
}
