package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/natsembed"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// NATSOption configures StartNATS.
type NATSOption = servers.NATSOption

// WithNATSDir keeps the JetStream store in dir instead of a fresh t.TempDir(), for example to
// start a second server on the store of a stopped one.
func WithNATSDir(dir string) NATSOption { return servers.WithNATSDir(dir) }

// WithNATSMaxPayload sets the server's max payload (headers and payload, in bytes).
func WithNATSMaxPayload(n int32) NATSOption { return servers.WithNATSMaxPayload(n) }

// WithNATSAccounts configures accounts, users and permissions; clients must then log in
// (Conn(t, nats.UserInfo(user, password))).
func WithNATSAccounts(accts ...natsembed.Account) NATSOption {
	return servers.WithNATSAccounts(accts...)
}

// WithNATSTLS serves TLS only, with a certificate for 127.0.0.1 from a fresh CA; Conn trusts
// it, and CAFile gives the CA to other processes.
func WithNATSTLS() NATSOption { return servers.WithNATSTLS() }

// NATS is an embedded NATS server with JetStream for one test (servers.NATS), with
// connections that close when the test ends.
type NATS struct {
	*servers.NATS
}

// StartNATS starts a JetStream server listening on a free loopback port, with its file store
// in a temporary directory (or WithNATSDir). It is shut down when the test ends.
func StartNATS(t testing.TB, opts ...NATSOption) *NATS {
	t.Helper()
	n, err := servers.StartNATS(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	return &NATS{NATS: n}
}

// StartNATSDir is StartNATS for a server that outlives the test's cleanup: the store is kept
// in dir, and the caller shuts the server down.
func StartNATSDir(dir string) (*NATS, error) {
	n, err := servers.StartNATS(dir)
	if err != nil {
		return nil, err
	}
	return &NATS{NATS: n}, nil
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
	if err := n.NATS.Restart(); err != nil {
		t.Fatal(err)
	}
}
