package test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// A store whose SCAN keeps failing (its Redis's ACL denies SCAN to the scanner's user, in the
// middle of a walk): its round ends failed once scan_failure_budget is spent, with nothing of
// a round's end decided from its part of a walk (no audit, no count of unregistered
// instances, no completed round), counted and shown; the other store's round goes on and
// completes. Once SCAN is allowed again, the failed store's next round starts over from the
// keyspace's beginning and walks it whole.
func TestScannerFailedRound(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ms := seedStores(t, cluster, 2, 1, 1000, filepath.Join(t.TempDir(), "data"))
	ms.register(t)
	o := ms.options(t, e, "scanner-a")
	reg := prometheus.NewRegistry()
	o.Reg = reg
	o.Scanner.HighWater = 1_000_000
	o.Scanner.MaxKeysPerSecond = 200 // a walk of about 5 s: time to break it in the middle
	o.Scanner.ScanFailureBudget = 2 * time.Second
	o.Scanner.FailedRoundPause = time.Hour
	_, state := e.buckets(t, o)
	good, bad := ms.storeName(0), ms.storeName(1)
	ckOf := func(store string) pipeline.Checkpoint {
		c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, store)
		require.NoError(t, err)
		return c
	}

	stop := e.run(o, app.Stages{Scanner: true})
	defer stop()
	require.Eventually(t, func() bool {
		c := ckOf(bad)
		return c.Round == 1 && c.InRound && c.KeysScanned > 0 && c.Cursor != 0
	}, time.Minute, 5*time.Millisecond, "the walk of the store to break did not get under way")
	require.NoError(t, ms.stores[1].Client().Do(ctx, "ACL", "SETUSER", "default", "-scan").Err())

	require.Eventually(t, func() bool {
		c := ckOf(bad)
		return !c.InRound && c.FailedRound != nil
	}, time.Minute, 20*time.Millisecond, "the round of the store whose SCAN is denied did not end failed")
	require.Eventually(t, func() bool {
		c := ckOf(good)
		return c.Round == 1 && !c.InRound && c.LastRoundEndUs > 0
	}, time.Minute, 20*time.Millisecond, "the other store's round did not complete")

	c := ckOf(bad)
	f := c.FailedRound
	require.Equal(t, uint64(1), f.Round)
	require.Equal(t, pipeline.RoundFailedScan, f.Reason)
	require.Contains(t, f.Error, "NOPERM")
	require.GreaterOrEqual(t, f.AtUs-f.FailingSinceUs, (2 * time.Second).Microseconds(), "retried for the budget")
	require.GreaterOrEqual(t, f.Attempts, 2)
	require.NotZero(t, f.Cursor, "it failed in the middle of the walk")
	require.NotZero(t, f.KeysScanned)
	require.Zero(t, c.Cursor, "the next round starts from the beginning")
	require.Zero(t, c.LastRoundEndUs, "no completed round")
	require.Empty(t, c.Audit, "no audit of KVCM's counters from a part of a walk")
	require.Empty(t, c.AuditRound)
	require.Empty(t, c.UnregisteredRound)
	require.Equal(t, f.AtUs+time.Hour.Microseconds(), c.NextRoundUs, "failed_round_pause")
	require.Equal(t, pipeline.WaitRoundPause, c.Waiting)
	require.NotEmpty(t, ckOf(good).Audit, "the completed round audited its instances")

	require.Eventually(t, func() bool {
		return metricByLabel(t, reg, "kvcm_gc_store_failed_rounds_total", "store")[bad] == 1 &&
			metricByLabel(t, reg, "kvcm_gc_store_round_failed", "store")[bad] == 1
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, map[string]float64{bad: 1}, metricByLabel(t, reg, "kvcm_gc_store_failed_rounds_total", "store"))
	require.Equal(t, map[string]float64{bad: 1}, metricByLabel(t, reg, "kvcm_gc_store_round_failed", "store"))
	require.Equal(t, 1.0, metricValue(t, reg, "kvcm_gc_scan_rounds_total"), "only the completed round counts")

	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	failed := map[string]*pipeline.RoundFailure{}
	for _, st := range rep.Scanner.Stores {
		failed[st.Store] = st.FailedRound
	}
	require.Nil(t, failed[good])
	require.NotNil(t, failed[bad])
	require.Equal(t, uint64(1), failed[bad].Round)

	// SCAN allowed again, and an operator's request cuts the failed round's pause short: the
	// next round walks the whole store from cursor 0.
	require.NoError(t, ms.stores[1].Client().Do(ctx, "ACL", "SETUSER", "default", "+scan").Err())
	_, err = ops.RoundStart(ctx, e.js, e.names, bad, time.Now())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c := ckOf(bad)
		return c.Round == 2 && !c.InRound && c.LastRoundEndUs > 0
	}, time.Minute, 20*time.Millisecond, "the round after the failed one did not complete")
	c = ckOf(bad)
	require.Nil(t, c.FailedRound, "a completed round clears the failure")
	full := ckOf(good).LastRoundKeys
	require.Equal(t, uint64(len(ms.blockKeys(1))), c.LastRoundKeys, "the whole store walked (the good one: %d)", full)
	require.Greater(t, c.LastRoundKeys, f.KeysScanned)
	require.Eventually(t, func() bool {
		return metricByLabel(t, reg, "kvcm_gc_store_round_failed", "store")[bad] == 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, map[string]float64{bad: 1}, metricByLabel(t, reg, "kvcm_gc_store_failed_rounds_total", "store"))
}
