// Package test holds kvcm-gc's integration tests: the stages against a real redis-server and
// an embedded NATS JetStream server.
package test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/natsembed"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

const cluster = "c1"

// env is one Redis, one JetStream server and a data root.
type env struct {
	t     *testing.T
	redis *testenv.Redis
	srv   *server.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	names subjects.Names
	root  string
	runs  int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, redis: testenv.StartRedis(t), root: t.TempDir()}
	srv, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(t.TempDir(), "js"), Host: "127.0.0.1", Port: -1})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	e.srv = srv
	e.nc, err = nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(e.nc.Close)
	e.js, err = jetstream.New(e.nc)
	require.NoError(t, err)
	e.names, err = subjects.NewNames("kvcmgc", cluster)
	require.NoError(t, err)
	return e
}

// options are fast settings for tests: short ticks, a one-hour round pause (one round per
// test), the stat probe for file storages.
func (e *env) options(reg prometheus.Registerer) app.Options {
	js := subjects.DefaultSettings()
	js.LeaseTTL = 2 * time.Second
	js.DeleterAckWait = 2 * time.Second
	js.ProberAckWait = 5 * time.Second
	sc := scanner.DefaultConfig()
	sc.ScanInterval = 5 * time.Millisecond
	sc.RoundPause = time.Hour
	sc.ScanBatchSize = 128
	sc.LeaseRenew = 200 * time.Millisecond
	// No KVCM persists its counters beside these tests (a test that runs one sets its own).
	sc.KVCMPersistGap = 50 * time.Millisecond
	pc := prober.DefaultConfig()
	pc.MaxTargets = 128
	dc := deleter.DefaultConfig()
	dc.AckWait = js.DeleterAckWait
	conn, err := redismeta.ParseURI(e.redis.URI())
	require.NoError(e.t, err)
	return app.Options{
		Cluster: cluster, Prefix: "kvcmgc", Registry: conn, Meta: conn,
		Storage: storageOptions(), Scanner: sc, Prober: pc, Deleter: dc, JetStream: js,
		ProberWorkers: 4, DeleterWorkers: 2, Reg: reg,
		Logger: slog.New(slog.NewTextHandler(testWriter(), &slog.HandlerOptions{Level: testLogLevel()})),
	}
}

func testWriter() io.Writer {
	if os.Getenv("KVCMGC_TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// run starts the stages in the background; the returned func stops them and waits.
func (e *env) run(o app.Options, which app.Stages) (stop func()) {
	if o.Reg != nil {
		// Several runs may share one registry: each gets its own label set.
		e.runs++
		o.Reg = prometheus.WrapRegistererWith(prometheus.Labels{"run": strconv.Itoa(e.runs)}, o.Reg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, e.nc, o, which) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(e.t, err)
		case <-time.After(30 * time.Second):
			e.t.Fatal("stages did not stop within 30s")
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// stateKV returns the stages' state bucket (nil before the stages created it).
func (e *env) stateKV() jetstream.KeyValue {
	kv, err := e.js.KeyValue(context.Background(), e.names.StateBucket())
	if err != nil {
		return nil
	}
	return kv
}

// waitRoundDone waits until round n has ended and both consumers are drained.
func (e *env) waitRoundDone(n uint64, timeout time.Duration) pipeline.Checkpoint {
	e.t.Helper()
	ctx := context.Background()
	var ck pipeline.Checkpoint
	require.Eventually(e.t, func() bool {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return false
		}
		ck, _, err = scanner.ReadCheckpoint(ctx, kv)
		if err != nil || ck.Round < n || (ck.Round == n && ck.InRound) {
			return false
		}
		return testenv.StagesDrained(ctx, e.js, e.names)
	}, timeout, 20*time.Millisecond)
	return ck
}

// events reads every event of the EVENTS stream (readEvents).
func (e *env) events() []subjects.Event {
	e.t.Helper()
	return readEvents(e.t, e.js, e.names)
}

// readEvents reads every event of the EVENTS stream, each of which must decode; a delete
// event of a whole request comes back as one event per target.
func readEvents(t *testing.T, js jetstream.JetStream, names subjects.Names) []subjects.Event {
	t.Helper()
	out, bad := readEventsCounting(t, js, names)
	require.Zero(t, bad, "events that do not decode")
	return out
}

func storageOptions() storage.Options { return storage.Options{DefaultProbe: storage.ProbeStat} }

func testLogLevel() slog.Level {
	if os.Getenv("KVCMGC_TEST_LOG") == "debug" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
