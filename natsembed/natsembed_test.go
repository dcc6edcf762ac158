package natsembed_test

import (
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/natsembed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func TestStart(t *testing.T) {
	dir := t.TempDir()
	s, err := natsembed.Start(natsembed.Config{StoreDir: dir, MaxPayload: 4096})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	addr, err := natsembed.Addr(s)
	require.NoError(t, err)
	require.True(t, addr.IP.IsLoopback(), addr.String())
	require.NotZero(t, addr.Port)

	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	require.Equal(t, int64(4096), nc.MaxPayload())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(testenv.Context(t), jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "the store is in the given directory")
}

func TestStartErrors(t *testing.T) {
	_, err := natsembed.Start(natsembed.Config{})
	require.ErrorContains(t, err, "store dir is empty")

	// A port already taken: the failure is reported at once, not after the ready timeout.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	start := time.Now()
	_, err = natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: l.Addr().(*net.TCPAddr).Port, ReadyTimeout: 20 * time.Second})
	require.ErrorContains(t, err, "start nats server")
	require.Less(t, time.Since(start), 10*time.Second)

	_, err = natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Accounts: []natsembed.Account{{Name: ""}}})
	require.ErrorContains(t, err, "account without a name")
}

func TestRestartKeepsData(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartNATS(t)
	url := srv.URL()
	js := srv.JetStream(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "s.1", []byte("kept"))
	require.NoError(t, err)

	srv.Restart(t)
	require.Equal(t, url, srv.URL(), "same port after a restart")
	// The old connection reconnects by itself.
	st, err := js.Stream(ctx, "S")
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.CachedInfo().State.Msgs)
	msg, err := st.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "kept", string(msg.Data))

	// A second server on the store of a stopped one sees the same data.
	dir := srv.StoreDir()
	srv.Shutdown()
	srv.Shutdown() // idempotent
	other := testenv.StartNATS(t, testenv.WithNATSDir(dir))
	st, err = other.JetStream(t).Stream(ctx, "S")
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.CachedInfo().State.Msgs)
}

func TestAccountsAndPermissions(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartNATS(t, testenv.WithNATSAccounts(
		natsembed.Account{Name: "GC", JetStream: true, Users: []natsembed.User{
			{Name: "admin", Password: "a"},
			{Name: "odd \"user\"", Password: "p\\$x\"\t{}[]#;"},
			{
				Name: "reader", Password: "r",
				Publish:   &natsembed.Permission{Allow: []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.>"}},
				Subscribe: &natsembed.Permission{Allow: []string{"_INBOX.>"}},
			},
		}},
		natsembed.Account{Name: "OTHER", Users: []natsembed.User{{Name: "other", Password: "o"}}},
	))

	_, err := nats.Connect(srv.URL(), nats.MaxReconnects(0))
	require.Error(t, err, "anonymous clients are refused")
	_, err = nats.Connect(srv.URL(), nats.UserInfo("admin", "wrong"), nats.MaxReconnects(0))
	require.Error(t, err)

	odd := srv.Conn(t, nats.UserInfo("odd \"user\"", "p\\$x\"\t{}[]#;"))
	require.True(t, odd.IsConnected(), "names and passwords are quoted verbatim")

	admin := srv.JetStream(t, nats.UserInfo("admin", "a"))
	_, err = admin.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
	require.NoError(t, err)

	// A denied publish is answered by the server with an asynchronous permissions error.
	denied := make(chan error, 10)
	readerConn := srv.Conn(t, nats.UserInfo("reader", "r"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	reader, err := jetstream.New(readerConn)
	require.NoError(t, err)
	_, err = reader.Stream(ctx, "S")
	require.NoError(t, err, "stream info is allowed")
	for _, subj := range []string{"$JS.API.STREAM.CREATE.T", "s"} {
		require.NoError(t, readerConn.Publish(subj, []byte("{}")))
		select {
		case err := <-denied:
			require.ErrorIs(t, err, nats.ErrPermissionViolation)
			require.ErrorContains(t, err, subj)
		case <-ctx.Done():
			t.Fatalf("no permissions error for %s", subj)
		}
	}

	// Another account does not see the stream, and has no JetStream.
	other := srv.JetStream(t, nats.UserInfo("other", "o"))
	_, err = other.Stream(ctx, "S")
	require.Error(t, err)
}

func TestTLS(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartNATS(t, testenv.WithNATSTLS())
	require.Regexp(t, `^tls://127\.0\.0\.1:\d+$`, srv.URL())
	require.FileExists(t, srv.CAFile())

	js := srv.JetStream(t)
	_, err := js.AccountInfo(ctx)
	require.NoError(t, err)
	nc := srv.Conn(t)
	require.True(t, nc.TLSRequired())

	_, err = nats.Connect(srv.URL(), nats.MaxReconnects(0))
	require.Error(t, err, "without the CA the certificate is not trusted")
	nc2, err := nats.Connect(srv.URL(), nats.RootCAs(srv.CAFile()), nats.MaxReconnects(0))
	require.NoError(t, err, "the CA file works for other clients")
	nc2.Close()

	srv.Restart(t)
	_, err = js.AccountInfo(ctx)
	require.NoError(t, err)
}

func TestLogger(t *testing.T) {
	h := &testenv.Messages{}
	s, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Logger: slog.New(h)})
	require.NoError(t, err)
	s.Shutdown()
	s.WaitForShutdown()
	require.NotEmpty(t, h.All())
}

// TestMaxStore: the streams' reservations are counted against MaxStore, not against the disk
// free: a 2 MiB stream is refused under a 1 MiB limit, and a 512 GiB one (more than this disk
// holds) is taken under a 1 TiB limit. Nothing is allocated by a reservation.
func TestMaxStore(t *testing.T) {
	for _, c := range []struct {
		limit, stream int64
		ok            bool
	}{{1 << 20, 2 << 20, false}, {1 << 40, 512 << 30, true}} {
		s, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), MaxStore: c.limit})
		require.NoError(t, err)
		nc, err := nats.Connect(s.ClientURL())
		require.NoError(t, err)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		_, err = js.CreateStream(testenv.Context(t), jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, MaxBytes: c.stream})
		if c.ok {
			require.NoError(t, err, "limit %d, stream %d", c.limit, c.stream)
		} else {
			require.ErrorContains(t, err, "insufficient storage", "limit %d, stream %d", c.limit, c.stream)
		}
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func TestOptions(t *testing.T) {
	opts, err := natsembed.Options(natsembed.Config{StoreDir: "/x"})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", opts.Host)
	require.Equal(t, -1, opts.Port)
	require.True(t, opts.JetStream)
	require.True(t, opts.NoSigs)

	_, err = natsembed.Options(natsembed.Config{StoreDir: "/x", Accounts: []natsembed.Account{{Name: "A"}, {Name: "A"}}})
	require.ErrorContains(t, err, `account "A" twice`)
}
