package bench

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestRawDutyWalk: the raw duty walk reads the keyspace through the store, each round trip
// timed on Redis's clock (TIME before and after) and gated by the pacer, which keeps its own
// measure of the walk's share within the duty.
func TestRawDutyWalk(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	k := seedMetadataKeyspace(t, srv, kvcm.LayoutLocation, 3000)
	st, err := k.openStore(ctx, true)
	require.NoError(t, err)
	defer st.Close()
	for _, rt := range []bool{false, true} {
		before := srv.CommandStats(t)
		r, err := rawDutyWalk(ctx, k, st, 0.25, 32, rt, time.Second)
		require.NoError(t, err)
		after := srv.CommandStats(t)
		require.Positive(t, r.Keys)
		require.Positive(t, r.Trips)
		require.Positive(t, r.Work.Main)
		require.Greater(t, r.HeldShare(), 0.0)
		require.LessOrEqual(t, r.HeldShare(), 0.25*1.05, "round trip %v", rt)
		held, roundTrip, _, cycle := r.PerTrip()
		require.Positive(t, held)
		require.GreaterOrEqual(t, roundTrip, held, "Redis's time is a part of the round trip")
		require.Greater(t, cycle, roundTrip, "the cycle holds the round trip and its wait")
		// TIME before and after every pipeline of reads; each round's first SCAN goes alone.
		require.Equal(t, int64(2*(r.Trips-r.Rounds)), after["time"]-before["time"], "round trip %v", rt)
	}
	var b strings.Builder
	dutyReport(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, kvcm.LayoutLocation, []DutyRun{{Duty: 0.1, Depth: 64},
		{Duty: 0.2, Depth: 64, Trips: 4, Floor: 2, Held: 800 * time.Microsecond, RoundTrips: 2400 * time.Microsecond, Work: RedisWork{Wall: 8 * time.Millisecond}}})
	require.NotContains(t, b.String(), "%!")
	require.Contains(t, b.String(), "| 200 µs | 600 µs | 0 µs | 2000 µs (1000 µs) | 50% |")
}

// TestDeleterDutyReport: the deleter-duty section renders every run, its share against the
// duty and a failed verification.
func TestDeleterDutyReport(t *testing.T) {
	var b strings.Builder
	runs := []DeleterDutyRun{
		{Duty: 0, Rep: 1, Deleter: StageRun{Items: 1000, Dur: time.Second, CPU: CPUShare{Wall: time.Second, RedisMain: 300 * time.Millisecond}}},
		{Duty: 0.1, Rep: 1, Deleter: StageRun{Items: 1000, Dur: 4 * time.Second, CPU: CPUShare{Wall: 4 * time.Second, RedisMain: 320 * time.Millisecond}},
			Verification: Verification{GarbageLeft: 2}},
	}
	require.InDelta(t, 0.08, runs[1].MainShare(), 1e-9)
	deleterDutyReport(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, Config{Unpaced: UnpacedProfile()}, kvcm.LayoutLocation, runs)
	out := b.String()
	require.NotContains(t, out, "%!")
	require.Contains(t, out, "| 0 (off) | 1 | 1,000 | 1s | 1,000 | 0.300 |")
	require.Contains(t, out, "| 0.10 | 1 | 1,000 | 4s | 250 | 0.080 |")
	require.Contains(t, out, "**failed**: 2 garbage left")
}

// seedMetadataKeyspace seeds on srv a metadata-only keyspace (no data files) of two
// instances, two locations a block and a tenth of them garbage, closed when the test ends.
func seedMetadataKeyspace(t *testing.T, srv *testenv.Redis, layout kvcm.Layout, blocks int) *Keyspace {
	t.Helper()
	k, err := SeedKeyspace(context.Background(), srv.Client(), srv.URI(), KeyspaceSpec{Cluster: "t", Layout: layout,
		DB: keyspaceDB, Instances: 2, Blocks: blocks, Locations: 2, Garbage: 0.1, Seed: 5,
		Root: filepath.Join(t.TempDir(), "data"), NoFiles: true}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.Close() })
	return k
}
