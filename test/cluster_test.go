package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// clusterTrials is how many fresh clusters TestClusterStartTogether starts stages on; every
// trial must start every stage.
const clusterTrials = 10

// TestClusterStartTogether starts two scanners, two probers and two deleters at the same
// instant against a fresh three-node JetStream cluster (streams and buckets at replicas 3),
// through the stage binaries' own startup path, ten times in a row on a new cluster each time.
// Every stage must become ready: creating the topology races the other processes and the
// cluster's own leader elections, and none of that may end a process.
func TestClusterStartTogether(t *testing.T) {
	rs := testenv.StartRedis(t)
	_, err := seed.Generate(context.Background(), rs.Client(), seed.Spec{Cluster: cluster, Instances: []string{"inst1"},
		Blocks: 20, Root: t.TempDir(), MetaURI: rs.URI(), Seed: 5})
	require.NoError(t, err)
	trials := clusterTrials
	if n, err := strconv.Atoi(os.Getenv("KVCMGC_CLUSTER_TRIALS")); err == nil && n > 0 {
		trials = n
	}
	failed := 0
	for i := range trials {
		// Every other trial starts the stages as soon as the nodes accept connections, before
		// they have elected a meta leader (a deployment started all at once); the others once
		// the cluster has formed.
		settled := i%2 == 1
		errs := clusterTrial(t, rs, settled)
		for _, err := range errs {
			t.Logf("trial %d (settled %v): %v", i+1, settled, err)
		}
		failed += len(errs)
	}
	t.Logf("%d failed starts of %d in %d trials", failed, 6*trials, trials)
	require.Zero(t, failed, "failed starts")
}

// clusterTrial starts the six stages on a fresh cluster, settled or not, and returns the error
// of every stage that did not become ready.
func clusterTrial(t *testing.T, rs *testenv.Redis, settled bool) []error {
	c := testenv.StartNATSCluster(t, 3)
	defer c.Shutdown()
	if settled {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, c.WaitJetStream(ctx))
		cancel()
	}
	cfg := config.Default()
	cfg.Cluster = cluster
	cfg.Registry.URI = rs.URI()
	cfg.NATS.URL = c.URLs()
	cfg.NATS.ConnectTimeout = 30 * time.Second
	cfg.JS.Replicas = 3
	cfg.JS.LeaseTTL = 2 * time.Second
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Scanner.RoundPause = time.Hour
	require.NoError(t, cfg.Validate())

	stages := []struct {
		name  string
		which app.Stages
	}{
		{"scanner", app.Stages{Scanner: true}}, {"scanner", app.Stages{Scanner: true}},
		{"prober", app.Stages{Prober: true}}, {"prober", app.Stages{Prober: true}},
		{"deleter", app.Stages{Deleter: true}}, {"deleter", app.Stages{Deleter: true}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go0 := make(chan struct{})
	errs := make([]error, len(stages))
	var running, waiting sync.WaitGroup
	for i, st := range stages {
		addr := make(chan net.Addr, 1)
		done := make(chan error, 1)
		p := &cli.Process{Stages: st.which, HTTPStarted: func(a net.Addr) { addr <- a }}
		e := &cli.Env{Prog: st.name, Name: st.name, Config: cfg, Stdout: io.Discard, Stderr: io.Discard,
			Logger: slog.New(slog.NewTextHandler(testWriter(), nil)).With("process", fmt.Sprintf("%s-%d", st.name, i))}
		running.Go(func() {
			<-go0
			done <- p.Run(ctx, e)
		})
		waiting.Go(func() { errs[i] = waitReady(ctx, st.name, addr, done) })
	}
	close(go0)
	waiting.Wait()
	cancel()
	running.Wait()
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// waitReady waits until a stage's /readyz answers 200, or its Run returns (a failed start).
func waitReady(ctx context.Context, name string, addr <-chan net.Addr, done <-chan error) error {
	deadline := time.After(60 * time.Second)
	var base string
	select {
	case a := <-addr:
		base = "http://" + a.String()
	case err := <-done:
		return fmt.Errorf("%s ended before serving http: %w", name, err)
	case <-deadline:
		return fmt.Errorf("%s served no http within 60s", name)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("stopped")
			}
			return fmt.Errorf("%s ended before it was ready: %w", name, err)
		case <-deadline:
			return fmt.Errorf("%s not ready within 60s", name)
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
}
