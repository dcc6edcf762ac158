package test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// TestRoundStart is a promotion: a dry-run round, then the deployment restarted live, whose
// next round would start only at the end of round_pause (an hour here: it sits in the
// checkpoint, so the restart does not shorten it). kvcm-gc round start makes the scanner
// start it within RoundStartPoll, and the live round deletes the garbage the dry run found.
func TestRoundStart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := e.seed(seed.Spec{Layout: kvcm.LayoutLocation, Instances: []string{"inst1", "inst2"}, Blocks: 200,
		GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 31})
	o := e.options(prometheus.NewRegistry())
	require.Equal(t, time.Hour, o.Scanner.RoundPause)
	o.DryRun = true
	stop := e.run(o, app.All)
	first := e.waitRoundDone(1, time.Minute)
	stop()
	require.Greater(t, time.UnixMicro(first.NextRoundUs), time.Now().Add(50*time.Minute), "the next round is an hour away")

	o.DryRun = false
	e.run(o, app.All)
	env := opsEnv(t, e, o)

	// An unknown store is a usage error, and asks nothing.
	err := opsCommand("round")(ctx, env, []string{"start", "--store", "nosuch:6379"}, io.Discard, io.Discard)
	require.ErrorIs(t, err, errOpsUsage)
	require.Contains(t, err.Error(), "unknown store")

	var out bytes.Buffer
	asked := time.Now()
	require.NoError(t, opsCommand("round")(ctx, env, []string{"start", "--json"}, &out, io.Discard))
	var res ops.RoundStartResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	require.Len(t, res.Stores, 1)
	require.True(t, res.Stores[0].Starts, "%+v", res.Stores[0])
	require.Equal(t, uint64(1), res.Stores[0].Round)

	var started pipeline.Checkpoint
	require.Eventually(t, func() bool {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return false
		}
		started, _, err = scanner.ReadCheckpoint(ctx, kv)
		return err == nil && started.Round >= 2
	}, scanner.RoundStartPoll+10*time.Second, 20*time.Millisecond)
	t.Logf("round 2 started %v after round start", time.UnixMicro(started.RoundStartedUs).Sub(asked).Round(time.Millisecond))
	e.waitRoundDone(2, time.Minute)
	e.verify(before, m)

	// The table names the store and what it does.
	out.Reset()
	require.NoError(t, opsCommand("round")(ctx, env, []string{"start", "--store", res.Stores[0].Store}, &out, io.Discard))
	require.Contains(t, out.String(), res.Stores[0].Store)
	require.Contains(t, out.String(), "now (round 3;")
	require.Contains(t, out.String(), "starting now: 1 of 1 store;")
	t.Log("\n" + out.String())
}
