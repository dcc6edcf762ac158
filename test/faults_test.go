package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/faults"
)

// TestFaults runs every scenario of the fault suite in a bounded form: fewer kills, a small
// keyspace, short outages. `make faults` runs the full form (every scenario in the location
// layout, the layout-sensitive ones in the legacy layout too). Here each scenario runs once,
// the faults that act on processes and servers as wholes alternating between the layouts, and
// those whose faults meet what differs between them — a KVCM-like writer, block ages, stuck
// DELETING — in both; kill-deleter (CAS and CAD cut short) in the legacy layout, as TestE2E's
// DeleterKilled kills a deleter holding location-layout DELETING marks. A failure prints the
// table, with the seed that reproduces the schedule
// (`go run ./tools/faults/cmd/faults -seed N`).
// Since empty_block: keep is the default, a block that loses its last location is expected to
// stay in KVCM's "exists, no location" form, no longer to be deleted.
func TestFaults(t *testing.T) {
	ctx := context.Background()
	bins, err := faults.Build(ctx, t.TempDir())
	require.NoError(t, err)
	const seed = 20260601
	cfg := faults.Config{Seed: seed, Kills: 2, Instances: 2, Blocks: 150, RoundPause: time.Second,
		Outage: 2 * time.Second, WriterFor: 3 * time.Second, ScenarioTimeout: 2 * time.Minute,
		Bins: bins, WorkDir: t.TempDir(), Out: testWriter(),
		Scenarios: []string{
			"kill-scanner:location", "kill-prober:legacy", "kill-deleter:legacy", "kill-any:location",
			"redis-restart:legacy", "redis-outage:location", "nats-restart:legacy", "scanner-failover:location",
			"concurrent-writer:location", "concurrent-writer:legacy", "clock-skew:location", "clock-skew:legacy",
			"cluster-leaders:location", "stuck-deleting:location", "stuck-deleting:legacy", "sweep-kills:location",
			"beside-upstream:location", "beside-upstream:legacy",
		}}
	if testing.Short() {
		cfg.Scenarios = []string{"kill-deleter:location", "concurrent-writer:location", "stuck-deleting:legacy"}
	}
	results, err := faults.Run(ctx, cfg)
	require.NoError(t, err)
	var table strings.Builder
	require.NoError(t, faults.WriteTable(&table, seed, results))
	t.Log("\n" + table.String())
	require.Len(t, results, len(cfg.Scenarios))
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Scenario] = true
		require.NoError(t, r.Err, "scenario %s (%s layout)\n%s", r.Scenario, r.Layout, table.String())
		require.Equal(t, r.Report.Garbage, r.Report.GarbageGone, r.Scenario)
		require.Equal(t, r.Report.Live, r.Report.LiveIntact, r.Scenario)
		require.Zero(t, r.Report.Stranded, r.Scenario)
		require.LessOrEqual(t, r.Rounds, 2, r.Scenario)
	}
	if !testing.Short() {
		for _, name := range faults.ScenarioNames() {
			require.True(t, seen[name], "scenario %s not run", name)
		}
	}
}
