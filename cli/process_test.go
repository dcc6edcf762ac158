package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/internal/version"
	"github.com/kvcm-gc/kvcm-gc/natsembed"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// startProcess runs p in the background with cfg and returns its HTTP base URL and a stop
// function that cancels it and returns what Run returned.
func startProcess(t *testing.T, p *Process, cfg config.Config) (string, func() error) {
	t.Helper()
	return startProcessLog(t, p, cfg, slog.New(slog.DiscardHandler))
}

// startProcessLog is startProcess with the process logging to log.
func startProcessLog(t *testing.T, p *Process, cfg config.Config, log *slog.Logger) (string, func() error) {
	t.Helper()
	addr := make(chan net.Addr, 1)
	p.HTTPStarted = func(a net.Addr) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	e := &Env{Prog: "test", Name: "run", Config: cfg, Stdout: io.Discard, Stderr: io.Discard, Logger: log}
	go func() { done <- p.Run(ctx, e) }()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a.String()
	case err := <-done:
		cancel()
		t.Fatalf("process ended before serving http: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("process did not serve http within 30s")
	}
	var result error
	stopped := false
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("process did not stop within 30s")
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return base, stop
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestDisabledProcess: enabled false keeps the process up, observable, and doing nothing: it
// needs neither NATS nor Redis.
func TestDisabledProcess(t *testing.T) {
	cfg := config.Default()
	cfg.Enabled = false
	cfg.HTTP.Listen = "127.0.0.1:0"
	var logged testenv.Buffer
	base, stop := startProcessLog(t, &Process{Stages: app.All}, cfg, slog.New(slog.NewTextHandler(&logged, nil)))
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "disabled", "/metrics": "go_goroutines"} {
		code, body := get(t, base+path)
		require.Equal(t, http.StatusOK, code, path)
		require.Contains(t, body, want, path)
	}
	_, body := get(t, base+"/metrics")
	require.Contains(t, body, "kvcm_gc_scanned_keys_total 0")
	// Every process says which build it is, in its metrics and first in its log.
	v := version.Get()
	require.Contains(t, body, fmt.Sprintf("kvcm_gc_build_info{goversion=%q,revision=%q,version=%q} 1", v.GoVersion, v.Revision, v.Version))
	require.NoError(t, stop())
	first, _, _ := strings.Cut(logged.String(), "\n")
	require.Contains(t, first, fmt.Sprintf("msg=kvcm-gc version.version=%s version.revision=%s", v.Version, v.Revision))
}

func TestProcessRequires(t *testing.T) {
	cfg := config.Default()
	cfg.Cluster = "c1"
	cfg.HTTP.Listen = ""
	e := &Env{Config: cfg, Logger: slog.New(slog.DiscardHandler)}
	err := (&Process{Stages: app.Stages{Scanner: true}}).Run(context.Background(), e)
	require.ErrorIs(t, err, ErrUsage)
	require.ErrorContains(t, err, "registry.uri: required")
	require.ErrorContains(t, err, "nats.url: required")
	// The deleter needs no registry; run starts its own NATS server.
	err = (&Process{Stages: app.All, Embedded: true}).Run(context.Background(), e)
	require.ErrorContains(t, err, "registry.uri: required")
	require.NotContains(t, err.Error(), "nats.url")
}

// TestRunProcess runs every stage with the embedded JetStream server against a real Redis:
// it becomes ready, collects a round, reports not ready while Redis is down, and stops cleanly.
func TestRunProcess(t *testing.T) {
	rs := testenv.StartRedis(t, testenv.WithRedisPersistence()) // the registry survives the restart
	root := t.TempDir()
	m, err := seed.Generate(context.Background(), rs.Client(), seed.Spec{Cluster: "c1", Instances: []string{"i1"}, Blocks: 300,
		GarbageFraction: 0.2, Root: root, MetaURI: rs.URI(), Seed: 3})
	require.NoError(t, err)
	cfg := config.Default()
	cfg.Cluster = "c1"
	cfg.Registry.URI = rs.URI()
	cfg.Scanner.ScanInterval = 2 * time.Millisecond
	cfg.Storage.DefaultProbe = "stat"
	cfg.NATS.Embedded = config.EmbeddedJS{StoreDir: filepath.Join(t.TempDir(), "js"), Listen: "127.0.0.1:0"}
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.JS.LeaseTTL = 2 * time.Second
	require.NoError(t, cfg.Validate())

	var metrics *app.Metrics
	started := make(chan struct{})
	p := &Process{Stages: app.All, Embedded: true, Started: func(_ string, m *app.Metrics) { metrics = m; close(started) }}
	base, stop := startProcess(t, p, cfg)
	<-started

	// Each stage reports itself when it has started: wait for all of them.
	wants := []string{"nats: connected", "registry: cluster \"c1\"", "store " + rs.Addr() + ": ping ok", "scanner: lease held", "prober: running", "deleter: running",
		"walker: running", "sweeper: running"}
	require.Eventually(t, func() bool {
		code, body := get(t, base+"/readyz")
		for _, want := range wants {
			if !strings.Contains(body, want) {
				return false
			}
		}
		return code == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "readyz never listed every stage")
	require.Eventually(t, func() bool {
		_, body := get(t, base+"/metrics")
		return strings.Contains(body, "kvcm_gc_scan_rounds_total 1") &&
			strings.Contains(body, `kvcm_gc_consumer_pending_messages{consumer="deleter",stage="deleter"`)
	}, 30*time.Second, 20*time.Millisecond)
	require.NotNil(t, metrics)

	rs.Stop()
	code, body := get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, "registry: NOT READY")
	rs.Restart(t)
	require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK },
		10*time.Second, 20*time.Millisecond)

	require.NoError(t, stop())
	require.NotEmpty(t, m.Garbage())
}

func TestConnectNATS(t *testing.T) {
	acct := natsembed.Account{Name: "gc", JetStream: true, Users: []natsembed.User{{Name: "gc", Password: "pw"}}}
	srv := testenv.StartNATS(t, testenv.WithNATSAccounts(acct), testenv.WithNATSTLS())
	base := config.Default().NATS
	base.TLS.CAFile = srv.CAFile()
	base.ConnectTimeout = 5 * time.Second

	c := base
	c.User, c.Password = "gc", "pw"
	nc, err := ConnectNATS(context.Background(), c, srv.URL(), "kvcm-gc-test", nil)
	require.NoError(t, err)
	require.True(t, nc.IsConnected())
	nc.Close()

	// A wrong password fails at once rather than after the connect timeout.
	c.Password = "wrong"
	c.ConnectTimeout = time.Minute
	start := time.Now()
	_, err = ConnectNATS(context.Background(), c, srv.URL(), "kvcm-gc-test", nil)
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second)

	// Without the CA the server certificate is not trusted.
	c = base
	c.User, c.Password, c.TLS.CAFile, c.ConnectTimeout = "gc", "pw", "", 300*time.Millisecond
	_, err = ConnectNATS(context.Background(), c, srv.URL(), "kvcm-gc-test", nil)
	require.Error(t, err)

	// A server that is not up yet is waited for, within the connect timeout.
	c = base
	c.ConnectTimeout = 300 * time.Millisecond
	_, err = ConnectNATS(context.Background(), c, "nats://127.0.0.1:1", "kvcm-gc-test", nil)
	require.Error(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.ConnectTimeout = time.Minute
	_, err = ConnectNATS(ctx, c, "nats://127.0.0.1:1", "kvcm-gc-test", nil)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}

// TestConnectNATSToken: nats.token_file signs in to a server that takes a token, and a wrong
// token fails at once.
func TestConnectNATSToken(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, Authorization: "tok-s3cret", NoLog: true, NoSigs: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second))

	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("tok-s3cret\n"), 0o600))
	cfg := config.Default()
	cfg.NATS.TokenFile, cfg.NATS.ConnectTimeout = file, time.Minute
	require.NoError(t, cfg.ReadSecretFiles())
	nc, err := ConnectNATS(context.Background(), cfg.NATS, srv.ClientURL(), "kvcm-gc-test", nil)
	require.NoError(t, err)
	require.True(t, nc.IsConnected())
	nc.Close()

	cfg.NATS.Token = "wrong"
	start := time.Now()
	_, err = ConnectNATS(context.Background(), cfg.NATS, srv.ClientURL(), "kvcm-gc-test", nil)
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "an authorization error is not waited out")
}
