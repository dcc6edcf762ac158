package test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/jsmetrics"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
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
	require.NoError(t, jsmetrics.Register(metrics, e.js, e.names, []string{pipeline.StageScanner}))

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
	for _, args := range [][]string{{"deleter"}, {"--for", "1h"}, {"sweep", "--for", "1h"}, {"deleter", "--for", "1h", "--until", until.Format(time.RFC3339)}} {
		err := opsCommand("pause")(ctx, env, args, &out, &errOut)
		require.Error(t, err, "%q", args)
	}
	_, err = ops.Pause(ctx, e.js, e.names, pipeline.StageDeleter, time.Now().Add(-time.Minute))
	require.Error(t, err)
}

// TestOpsPauseAll: `pause all` stops every stage that writes or unlinks, the sweep's walker
// and sweeper with the others. While paused, the walker holds its storage's lease and walks
// nothing, and no Redis key, data file or quarantine changes. Resumed on its own, the walker
// walks the storage and its batches wait in SWEEP for the still-paused sweeper. Resumed
// all, the garbage and the orphan files go.
func TestOpsPauseAll(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := e.seed(seed.Spec{Layout: kvcm.LayoutLocation, Instances: []string{"inst0", "inst1"}, Blocks: 120,
		GarbageFraction: 0.2, Seed: 23, SweepFiles: true})
	reg := prometheus.NewRegistry()
	o := e.sweepOptions(reg)
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	env := opsEnv(t, e, o)
	files := opsTree(t, m.SweepRoot)

	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("pause")(ctx, env, []string{"all", "--for", "1h"}, &out, &errOut))
	for _, st := range pipeline.Stages() {
		require.Contains(t, out.String(), st+" paused until", st)
	}
	metrics := prometheus.NewRegistry()
	require.NoError(t, jsmetrics.Register(metrics, e.js, e.names, pipeline.Stages()))
	paused := opsGauges(t, metrics, jsmetrics.MetricPaused, "stage")
	for _, st := range pipeline.Stages() {
		require.Equal(t, 1.0, paused[st], st)
	}

	stop := e.run(o, app.All)
	// The walker leads the storage and knows it is paused; it holds while its lease is renewed
	// three times (every 200ms).
	leases, err := e.js.KeyValue(ctx, e.names.LeaseBucket())
	require.NoError(t, err)
	var first uint64
	require.Eventually(t, func() bool {
		rec, rev, err := sweep.ReadLease(ctx, leases, seed.StorageNFS)
		first = rev
		return err == nil && rec != nil && metricValue(t, reg, "kvcm_gc_sweep_walker_paused") == 1 &&
			metricValue(t, reg, "kvcm_gc_scanner_paused") == 1
	}, time.Minute, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		_, rev, err := sweep.ReadLease(ctx, leases, seed.StorageNFS)
		return err == nil && rev >= first+3
	}, time.Minute, 10*time.Millisecond)
	ck := e.sweepCheckpoint()
	require.Zero(t, ck.Round, "no walk while paused")
	require.Zero(t, ck.QPass, "no look into the quarantine while paused")
	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.NotNil(t, rep.Sweep)
	require.True(t, rep.Sweep.WalkerPaused)
	require.True(t, rep.Sweep.Consumer.Paused)
	require.Zero(t, rep.Sweep.Stream.Messages, "nothing published to SWEEP")
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Regexp(t, `walker\s+paused until `, table.String())
	require.Regexp(t, `sweeper\s+\S+: 0 pending, 0/\d+ in flight, 0 redelivered, paused until `, table.String())

	// The walker alone resumed: its batches wait for the sweeper, which touches nothing.
	out.Reset()
	require.NoError(t, opsCommand("resume")(ctx, env, []string{"walker"}, &out, &errOut))
	require.Contains(t, out.String(), "walker resumed")
	var batches uint64
	require.Eventually(t, func() bool {
		ck := e.sweepCheckpoint()
		rep, err := ops.Status(ctx, e.js, e.names)
		if err != nil || rep.Sweep == nil || rep.Sweep.Consumer == nil || ck.Round < 1 || ck.InRound {
			return false
		}
		c := rep.Sweep.Consumer
		batches = rep.Sweep.Stream.Messages
		return batches > 0 && c.Pending == batches && c.AckPending == 0
	}, time.Minute, 20*time.Millisecond)
	require.Empty(t, quarantined(t, m.SweepRoot), "a paused sweeper quarantines nothing")
	require.Equal(t, files, opsTree(t, m.SweepRoot), "a paused sweeper changes no file")
	require.Empty(t, opsEvents(t, e, subjects.EventDelete), "a paused deleter deletes nothing")
	now, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	require.True(t, reflect.DeepEqual(before, now), "Redis changed while paused")

	out.Reset()
	require.NoError(t, opsCommand("resume")(ctx, env, []string{"all"}, &out, &errOut))
	for _, st := range pipeline.Stages() {
		require.Contains(t, out.String(), st+" resumed", st)
	}
	e.waitRoundDone(1, time.Minute)
	e.waitSwept(1, m.SweepRoot, time.Minute)
	stop()
	r := e.verify(before, m)
	require.Equal(t, r.GarbageLocations, r.GarbageGone)
	sr, err := seed.VerifySweep(m)
	require.NoError(t, err)
	require.True(t, sr.OK(), sr.Problems)
	require.Positive(t, sr.Orphans)
	paused = opsGauges(t, metrics, jsmetrics.MetricPaused, "stage")
	for _, st := range pipeline.Stages() {
		require.Zero(t, paused[st], st)
	}
}

// opsTree lists the files under root with their size and modification time.
func opsTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
		return nil
	}))
	return out
}

// opsGauges returns a gauge's values by one label.
func opsGauges(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					out[lp.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}
