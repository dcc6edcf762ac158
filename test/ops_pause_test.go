package test

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/jsmetrics"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/seed"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestOpsPauseDeleter pauses the deleter, runs a round and checks that delete requests pile
// up while nothing is deleted and that status and the metrics show the pause; after resume
// every garbage location goes.
func TestOpsPauseDeleter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := opsSeed(t, e, []string{"inst1", "inst2"}, 200, 5)
	o := e.options(prometheus.NewRegistry())
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	env := opsEnv(t, e, o)

	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("pause")(ctx, env, []string{"deleter", "--for", "1h"}, &out, &errOut))
	require.Contains(t, out.String(), "deleter paused until")
	until := time.Now().Add(time.Hour)

	metrics := prometheus.NewRegistry()
	require.NoError(t, metrics.Register(jsmetrics.New(e.js, e.names, []string{pipeline.StageDeleter})))

	stop := e.run(o, app.All)
	// The round ends and the prober drains; every delete request waits in DELETES while the
	// deleter keeps asking for work (its pull requests wait at the server).
	var requests uint64
	require.Eventually(t, func() bool {
		rep, err := ops.Status(ctx, e.js, e.names)
		if err != nil || rep.Scanner.Round == nil || rep.Scanner.Round.InProgress || len(rep.Consumers) != 2 {
			return false
		}
		prober, deleter := rep.Consumers[0], rep.Consumers[1]
		requests = rep.Streams[1].Messages
		return prober.Pending == 0 && prober.AckPending == 0 && requests > 0 &&
			deleter.Pending == requests && deleter.AckPending == 0 && deleter.Waiting > 0
	}, time.Minute, 20*time.Millisecond)

	require.Empty(t, opsEvents(t, e, subjects.EventDelete), "no delete while paused")
	now, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	require.True(t, reflect.DeepEqual(before, now), "Redis changed while the deleter was paused")

	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	deleter := rep.Consumers[1]
	require.Equal(t, pipeline.StageDeleter, deleter.Stage)
	require.True(t, deleter.Paused)
	require.WithinDuration(t, until, deleter.PausedUntil, 5*time.Second)
	require.False(t, rep.Consumers[0].Paused)
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Regexp(t, `deleter\s+\S+/deleter\s+\d+\s+0/2\s+0\s+\d+\s+0\s+until `, table.String())
	require.Equal(t, 1.0, metricValue(t, metrics, jsmetrics.MetricPaused))
	require.Equal(t, float64(requests), metricValue(t, metrics, jsmetrics.MetricPending))

	out.Reset()
	require.NoError(t, opsCommand("resume")(ctx, env, []string{"deleter"}, &out, &errOut))
	require.Contains(t, out.String(), "deleter resumed")
	e.waitRoundDone(1, time.Minute)
	stop()
	r := opsVerify(t, e, before, m)
	require.Equal(t, r.GarbageLocations, r.GarbageGone)
	require.NotEmpty(t, opsEvents(t, e, subjects.EventDelete))
	require.Zero(t, metricValue(t, metrics, jsmetrics.MetricPaused))
}

// TestOpsPauseScanner checks the scanner's pause value, how status and metrics show it, and
// that a running scanner starts no round until it is resumed.
func TestOpsPauseScanner(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	o := e.options(nil)
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	metrics := prometheus.NewRegistry()
	require.NoError(t, jsmetrics.Register(metrics, e.js, e.names, true, false, false))

	until := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("pause")(ctx, opsEnv(t, e, o), []string{"--until", until.Format(time.RFC3339), "scanner"}, &out, &errOut))
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(t, err)
	p, err := pipeline.ReadPause(ctx, kv, subjects.ScannerPauseKey)
	require.NoError(t, err)
	require.NotNil(t, p)
	require.True(t, p.Until().Equal(until))
	require.True(t, p.Active(time.Now()))
	require.False(t, p.Active(until))

	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.True(t, rep.Scanner.Paused)
	require.True(t, rep.Scanner.PausedUntil.Equal(until))
	require.Equal(t, 1.0, metricValue(t, metrics, jsmetrics.MetricPaused))
	require.Equal(t, float64(until.Unix()), metricValue(t, metrics, jsmetrics.MetricPauseEnd))

	// The running scanner leads but starts no round while paused, and does once resumed.
	opsSeed(t, e, []string{"inst1"}, 50, 3)
	reg := prometheus.NewRegistry()
	o.Reg = reg
	stop := e.run(o, app.Stages{Scanner: true})
	require.Eventually(t, func() bool { return metricValue(t, reg, "kvcm_gc_scanner_paused") == 1 }, time.Minute, 10*time.Millisecond)
	rep, err = ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.NotNil(t, rep.Scanner.Leader)
	require.Nil(t, rep.Scanner.Round, "no round while paused")

	_, err = ops.Resume(ctx, e.js, e.names, pipeline.StageScanner)
	require.NoError(t, err)
	rep, err = ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.False(t, rep.Scanner.Paused)
	require.Zero(t, metricValue(t, metrics, jsmetrics.MetricPaused))
	require.Eventually(t, func() bool {
		rep, err := ops.Status(ctx, e.js, e.names)
		return err == nil && rep.Scanner.Round != nil && rep.Scanner.Round.ID == 1
	}, time.Minute, 10*time.Millisecond)
	stop()

	// Argument errors.
	env := opsEnv(t, e, o)
	for _, args := range [][]string{{"deleter"}, {"--for", "1h"}, {"sweeper", "--for", "1h"}, {"deleter", "--for", "1h", "--until", until.Format(time.RFC3339)}} {
		err := opsCommand("pause")(ctx, env, args, &out, &errOut)
		require.Error(t, err, "%q", args)
	}
	_, err = ops.Pause(ctx, e.js, e.names, pipeline.StageDeleter, time.Now().Add(-time.Minute))
	require.Error(t, err)
}
