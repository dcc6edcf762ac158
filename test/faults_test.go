package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/faults"
)

// TestFaults runs every scenario of the fault suite in a bounded form: fewer kills, a small
// keyspace, short outages. `make faults` runs the full form. A failure prints the table,
// with the seed that reproduces the schedule (`go run ./faults/cmd/faults -seed N`).
func TestFaults(t *testing.T) {
	ctx := context.Background()
	bins, err := faults.Build(ctx, t.TempDir())
	require.NoError(t, err)
	const seed = 20260601
	cfg := faults.Config{Seed: seed, Kills: 2, Instances: 2, Blocks: 150, RoundPause: time.Second,
		Outage: 2 * time.Second, WriterFor: 3 * time.Second, ScenarioTimeout: 2 * time.Minute,
		Bins: bins, WorkDir: t.TempDir(), Out: testWriter()}
	if testing.Short() {
		cfg.Scenarios = []string{"kill-deleter", "concurrent-writer"}
	}
	results, err := faults.Run(ctx, cfg)
	require.NoError(t, err)
	var table strings.Builder
	require.NoError(t, faults.WriteTable(&table, seed, results))
	t.Log("\n" + table.String())
	require.NotEmpty(t, results)
	for _, r := range results {
		require.NoError(t, r.Err, "scenario %s\n%s", r.Scenario, table.String())
		require.Equal(t, r.Report.Garbage, r.Report.GarbageGone, r.Scenario)
		require.Equal(t, r.Report.Live, r.Report.LiveIntact, r.Scenario)
		require.Zero(t, r.Report.Stranded, r.Scenario)
		require.LessOrEqual(t, r.Rounds, 2, r.Scenario)
	}
}
