package app_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvcm-gc/kvcm-gc/app"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestRunFailedBuildLeavesNothingRunning: a stage that fails to build after another one was
// built leaves no goroutine behind. Run builds every stage before it starts any (dskit's
// services manager: all in New state before one starts), and joins what it started on every
// error path, so the callers that go on living (the benchmarks, the fault drills, the tests)
// keep no scanner walking stores whose pool Run has closed.
func TestRunFailedBuildLeavesNothingRunning(t *testing.T) {
	reg := testenv.StartRedis(t)
	nc := testenv.StartNATS(t).Conn(t)
	conn, err := redismeta.ParseURI(reg.URI())
	require.NoError(t, err)
	o := app.Options{Cluster: "c1", Prefix: "kvcmgc", Registry: conn, Scanner: scanner.DefaultConfig(),
		Prober: prober.DefaultConfig(), Deleter: deleter.DefaultConfig(), JetStream: subjects.DefaultSettings(),
		ProberWorkers: 1, DeleterWorkers: 1, Guard: "bogus", Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The servers and the test's connection run goroutines of their own, the server one per
	// stream: created here, before the count, so what Run leaves is what is new after it.
	names, err := subjects.NewNames(o.Prefix, o.Cluster)
	require.NoError(t, err)
	js, err := jetstreamOf(nc)
	require.NoError(t, err)
	require.NoError(t, subjects.Ensure(ctx, js, names, o.JetStream))
	before := goleak.IgnoreCurrent()
	err = app.Run(ctx, nc, o, app.Stages{Scanner: true, Prober: true})
	require.ErrorContains(t, err, `unknown kind "bogus"`)
	// VerifyNone retries until no new goroutine is left, for a few seconds at most: a
	// goroutine that outlives Run fails the test, one that is still ending does not.
	goleak.VerifyNone(t, before)
}
