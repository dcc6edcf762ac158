package faults_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/faults"
)

// TestSoakShort runs the short soak: both runs of `make soak` (the location layout on one
// server, the legacy layout on a three-node JetStream cluster), side by side, on a small
// keyspace, 12 rounds each with a fault every 2 until the last 5 (kill -9 of a stage, a Redis
// restart, the NATS fault of the run), under KVCM's workload and upstream's GC. Every round is
// checked as in the long soak, and each stage's figures must be flat over the last 6 rounds.
// A failure prints the table, with the seed (`go run ./tools/faults/cmd/soak -short -seed N
// -runs <run>` repeats it).
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the short soak takes a minute")
	}
	ctx := context.Background()
	bins, err := faults.Build(ctx, t.TempDir())
	require.NoError(t, err)
	for _, run := range faults.ShortSoakConfig().Runs {
		t.Run(strings.ReplaceAll(run.String(), "/", "-"), func(t *testing.T) {
			// Its rounds mostly wait out round_pause: the two runs fit side by side.
			t.Parallel()
			cfg := faults.ShortSoakConfig()
			cfg.Runs = []faults.SoakRun{run}
			cfg.Seed, cfg.Bins, cfg.WorkDir = 20261203, bins, t.TempDir()
			var progress strings.Builder
			cfg.Out = &progress
			results, err := faults.RunSoak(ctx, cfg)
			require.NoError(t, err)
			require.Len(t, results, 1)
			r := results[0]
			var table strings.Builder
			require.NoError(t, faults.WriteSoakTable(&table, r, cfg))
			t.Log("\n" + table.String())
			require.NoError(t, r.Err, "soak %s\n%s", r.Run, progress.String())
			require.GreaterOrEqual(t, len(r.Rows), cfg.Rounds)
			made, collected, faultsSeen := 0, 0, 0
			for _, row := range r.Rows {
				made += row.GarbageMade
				collected += row.Collected
				if row.Fault != "" {
					faultsSeen++
				}
				require.Positive(t, row.Check.Live, "round %d checked live locations", row.Round)
			}
			require.Positive(t, made)
			require.Positive(t, collected)
			// A fault every FaultEvery rounds from the second until the last 5: each kind once.
			require.GreaterOrEqual(t, faultsSeen, (cfg.Rounds-5)/cfg.FaultEvery)
			judged := 0
			for _, st := range r.Steady {
				require.False(t, st.Fail, "%s %s", st.Stage, st.Metric)
				if !st.Unknown {
					judged++
				}
			}
			// Only the stage killed may lack the samples to be judged.
			require.GreaterOrEqual(t, judged, len(r.Steady)-5)
			// The table file written at the run's end gives its duration.
			file, err := os.ReadFile(r.TablePath)
			require.NoError(t, err)
			require.Contains(t, string(file), fmt.Sprintf("\nresult: ok (%s)\n", r.Duration.Round(time.Second)))
			require.NotContains(t, string(file), "result: ok (0s)")
		})
	}
}
