package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// startStages runs the stages of which on a fresh NATS server against the registry in reg,
// and returns their Health and connection once Run has started them.
func startStages(t *testing.T, reg *testenv.Redis, cluster string, which app.Stages) (*app.Health, *nats.Conn) {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc := srv.Conn(t)
	conn, err := redismeta.ParseURI(reg.URI())
	require.NoError(t, err)
	js := subjects.DefaultSettings()
	js.LeaseTTL = 2 * time.Second
	sc := scanner.DefaultConfig()
	sc.RoundPause = time.Hour
	sc.LeaseRenew = 200 * time.Millisecond
	dc := deleter.DefaultConfig()
	dc.AckWait = js.DeleterAckWait
	h := &app.Health{}
	o := app.Options{Cluster: cluster, Prefix: "kvcmgc", Registry: conn, Scanner: sc, Prober: prober.DefaultConfig(),
		Deleter: dc, JetStream: js, ProberWorkers: 1, DeleterWorkers: 1, Health: h, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, nc, o, which) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return h, nc
}

// waitReport waits until Ready's report contains every want and its error is as ready says.
func waitReport(t *testing.T, h *app.Health, ready bool, wants ...string) string {
	t.Helper()
	var report string
	var err error
	ok := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		report, err = h.Ready(ctx)
		if (err == nil) != ready {
			return false
		}
		text := report
		if err != nil {
			text += err.Error()
		}
		for _, w := range wants {
			if !strings.Contains(text, w) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("readiness never had %q (ready %v); last report %q, err %v", wants, ready, report, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a report; there is nothing to await
	}
	return report
}

// TestReadyStoresOfTheRegistry: a scanner and a deleter are ready only while the metadata
// store the registry names for their instances answers, not just the registry connection.
func TestReadyStoresOfTheRegistry(t *testing.T) {
	reg, store := testenv.StartRedis(t), testenv.StartRedis(t)
	_, err := seed.Generate(context.Background(), reg.Client(), seed.Spec{Cluster: "c1", Instances: []string{"inst1"},
		Blocks: 5, Root: t.TempDir(), MetaURI: store.URI(), Seed: 1})
	require.NoError(t, err)
	h, _ := startStages(t, reg, "c1", app.All)
	line := "store " + store.Addr() + ": ping ok"
	waitReport(t, h, true, "registry: cluster \"c1\": 2 instance groups", line, "scanner: lease held", "prober: running", "deleter: running")

	store.Stop()
	waitReport(t, h, false, "store "+store.Addr()+": NOT READY")
	store.Restart(t)
	waitReport(t, h, true, line)
}

// TestReadyNoGroups: a cluster name the registry knows nothing of is not ready, and says
// which cluster it looked for.
func TestReadyNoGroups(t *testing.T) {
	reg := testenv.StartRedis(t)
	_, err := seed.Generate(context.Background(), reg.Client(), seed.Spec{Cluster: "c1", Instances: []string{"inst1"},
		Blocks: 5, Root: t.TempDir(), MetaURI: reg.URI(), Seed: 1})
	require.NoError(t, err)
	for name, which := range map[string]app.Stages{"scanner": {Scanner: true}, "prober": {Prober: true}} {
		t.Run(name, func(t *testing.T) {
			h, _ := startStages(t, reg, "nosuch", which)
			waitReport(t, h, false, `registry: NOT READY: cluster "nosuch": no instance groups in the registry`)
		})
	}
}

// TestReadyPaused: a paused stage is ready and says it is paused.
func TestReadyPaused(t *testing.T) {
	reg := testenv.StartRedis(t)
	_, err := seed.Generate(context.Background(), reg.Client(), seed.Spec{Cluster: "c1", Instances: []string{"inst1"},
		Blocks: 5, Root: t.TempDir(), MetaURI: reg.URI(), Seed: 1})
	require.NoError(t, err)
	h, nc := startStages(t, reg, "c1", app.All)
	waitReport(t, h, true, "deleter: running", "scanner: lease held")
	js, err := jetstreamOf(nc)
	require.NoError(t, err)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	until := time.Now().Add(time.Hour)
	_, err = ops.Pause(context.Background(), js, names, ops.StageAll, until)
	require.NoError(t, err)
	stamp := until.UTC().Format(time.RFC3339)
	report := waitReport(t, h, true, "deleter: ready, paused until "+stamp, "prober: ready, paused until "+stamp,
		"scanner: ready, paused until "+stamp)
	require.Contains(t, report, "; lease held", "the scanner still says which stores it holds")
	_, err = ops.Resume(context.Background(), js, names, ops.StageAll)
	require.NoError(t, err)
	waitReport(t, h, true, "deleter: running", "prober: running")
}

func jetstreamOf(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) }

// TestReadyDeleterStores: a deleter, which reads no registry, pings the stores it is sent to.
func TestReadyDeleterStores(t *testing.T) {
	store := testenv.StartRedis(t)
	h, nc := startStages(t, testenv.StartRedis(t), "c1", app.Stages{Deleter: true})
	report := waitReport(t, h, true, "deleter: running")
	require.NotContains(t, report, "registry", "the deleter reads no registry")
	require.NotContains(t, report, "store ")

	js, err := jetstreamOf(nc)
	require.NoError(t, err)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	// A request for a block that is not there: the deleter opens the store and finds nothing.
	data, err := subjects.Encode(subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: "c1", Instance: "inst1", Store: store.Addr(),
		Source: subjects.Source{MsgID: "test"}, Targets: []subjects.Target{{Key: 1, Location: "l1", Reason: subjects.ReasonOrphanWriting,
			Expected: subjects.RawText(`{"id":"l1","status":2}`)}}})
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), names.DeleteSubject("inst1"), data)
	require.NoError(t, err)
	waitReport(t, h, true, "store "+store.Addr()+": ping ok")
	store.Stop()
	waitReport(t, h, false, "store "+store.Addr()+": NOT READY")
}

// TestRunSkipEnsureMissingConsumer: with skip_ensure, a consumer nobody created is a
// configuration problem: Run says so at once instead of waiting for it.
func TestRunSkipEnsureMissingConsumer(t *testing.T) {
	nc := testenv.StartNATS(t).Conn(t)
	o := app.Options{Cluster: "c1", Prefix: "kvcmgc", Deleter: deleter.DefaultConfig(), JetStream: subjects.DefaultSettings(),
		SkipEnsure: true, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := app.Run(ctx, nc, o, app.Stages{Deleter: true})
	require.ErrorContains(t, err, "open consumer KVCMGC_kvcmgc_c1_DELETES/deleter")
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	require.Less(t, time.Since(start), 10*time.Second)
}
