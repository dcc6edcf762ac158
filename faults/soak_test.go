package faults_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/faults"
)

// TestSoakShort runs the short soak: both runs of `make soak` (the location layout on one
// server, the legacy layout on a three-node JetStream cluster) on a small keyspace, 16 rounds
// each with a fault every 3 (kill -9 of a stage, a Redis restart, the NATS fault of the run),
// under KVCM's workload and, in the location run, upstream's GC. Every round is checked as in
// the long soak, and each stage's figures must be flat over the last 10 rounds. A failure
// prints the tables, with the seed (`go run ./faults/cmd/soak -short -seed N` repeats it).
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the short soak takes minutes")
	}
	ctx := context.Background()
	dir := t.TempDir()
	bins, err := faults.Build(ctx, dir+"/bin")
	require.NoError(t, err)
	cfg := faults.ShortSoakConfig()
	cfg.Seed, cfg.Bins, cfg.WorkDir = 20261203, bins, dir
	var progress strings.Builder
	cfg.Out = &progress
	results, err := faults.RunSoak(ctx, cfg)
	var tables strings.Builder
	for _, r := range results {
		require.NoError(t, faults.WriteSoakTable(&tables, r, cfg))
		tables.WriteString("\n")
	}
	t.Log("\n" + tables.String())
	require.NoError(t, err)
	require.Len(t, results, len(cfg.Runs))
	for _, r := range results {
		require.NoError(t, r.Err, "soak %s\n%s\n%s", r.Run, progress.String(), tables.String())
		require.GreaterOrEqual(t, len(r.Rows), cfg.Rounds, r.Run.String())
		made, collected, faultsSeen := 0, 0, 0
		for _, row := range r.Rows {
			made += row.GarbageMade
			collected += row.Collected
			if row.Fault != "" {
				faultsSeen++
			}
			require.Positive(t, row.Check.Live, "round %d of %s checked live locations", row.Round, r.Run)
		}
		require.Positive(t, made, r.Run.String())
		require.Positive(t, collected, r.Run.String())
		require.GreaterOrEqual(t, faultsSeen, cfg.Rounds/cfg.FaultEvery-1, r.Run.String())
		for _, st := range r.Steady {
			require.False(t, st.Fail, "%s %s of %s", st.Stage, st.Metric, r.Run)
		}
	}
}
