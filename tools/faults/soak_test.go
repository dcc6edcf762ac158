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
// keyspace, 12 rounds each with a fault every 2 until the last 5 (the schedule's first three:
// a kill -9 of a stage, a Redis restart, the run's first NATS fault), under KVCM's workload,
// with its crashed writers, and upstream's GC. Every round is checked as in the long soak,
// before the next one ends, and each stage's figures are judged over the last 6 rounds. A
// failure prints the table, with the seed (`go run ./tools/faults/cmd/soak -short -seed N
// -runs <run>` repeats it). With a leak planted (TestSoakShortLeak), the location run fails.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the short soak takes a minute")
	}
	ctx := context.Background()
	bins, err := faults.Build(ctx, t.TempDir(), "scanner", "prober", "deleter", "walker", "sweeper", "nats-server", faults.LeakyStageBin)
	require.NoError(t, err)
	for _, run := range faults.ShortSoakConfig().Runs {
		t.Run(strings.ReplaceAll(run.String(), "/", "-"), func(t *testing.T) {
			// Its rounds mostly wait out round_pause: the runs fit side by side.
			t.Parallel()
			cfg := faults.ShortSoakConfig()
			cfg.Runs = []faults.SoakRun{run}
			r := shortSoak(t, ctx, cfg, bins)
			// Six rounds of a short run, with a stage killed and servers restarted in them,
			// cannot show a process's memory flat on a loaded machine: there a steadiness
			// verdict is reported, not failed. The leak below shows the rule fails on a leak,
			// and make soak judges an hour of rounds. Every other check fails the run.
			require.Empty(t, r.Problems, "soak %s", r.Run)
			if r.Err != nil {
				for _, line := range strings.Split(r.Err.Error(), "\n") {
					if !strings.HasPrefix(line, "not steady: ") && !strings.HasPrefix(line, "cannot tell whether ") {
						require.NoError(t, r.Err, "soak %s", r.Run)
					}
				}
				t.Logf("soak %s: %v", r.Run, r.Err)
			}
			require.GreaterOrEqual(t, len(r.Rows), cfg.Rounds)
			made, collected, steps := 0, 0, 0
			for _, row := range r.Rows {
				made += row.GarbageMade
				collected += row.Outcomes.Collected
				steps += row.Steps
				require.Positive(t, row.Check.Keys, "round %d checked", row.Round)
				require.Positive(t, row.Check.Live, "round %d checked live locations", row.Round)
				require.Equal(t, row.CheckedIn > row.Round+1, row.Lagged, "round %d", row.Round)
			}
			require.Positive(t, made)
			require.Positive(t, collected)
			require.Positive(t, steps)
			// The schedule's first three faults: a stage's kill, a Redis restart, the NATS fault.
			kills := 0
			for kind, rounds := range r.FaultsHit {
				if strings.HasPrefix(kind, "kill ") {
					kills += len(rounds)
				}
			}
			require.Equal(t, 1, kills, "%v", r.FaultsHit)
			require.Len(t, r.FaultsHit["redis"], 1, "%v", r.FaultsHit)
			nats := "nats"
			if run.Cluster {
				nats = "node"
			}
			require.Len(t, r.FaultsHit[nats], 1, "%v", r.FaultsHit)
			for _, st := range r.Steady {
				require.Positive(t, st.Fit.Samples, "%s %s", st.Stage, st.Metric)
			}
		})
	}
	// The soak's test of itself: the location run of TestSoakShort, its faults left out, with a
	// leak planted in the walker — it keeps 512 KiB more every 250 ms, about 2 MiB a second.
	// In one run the walker's resident set grew by 8.7 MiB a round on a mean of 71.5 MiB:
	// +12.2% a round, 95%: +9.5% to +15.0%, against the 3% rule. (Its live heap stayed flat:
	// at the stages' GOGC of 400 no collection ran in the run's 23 s.) A leak of a quarter of
	// that was read in another run, whose rounds came fast, as +6.2%, 95%: +2.7% to +9.7%:
	// "cannot tell", and the test failed on a sound rule. The soak must fail on the walker's
	// memory, whichever of its figures shows it first, and on nothing else; without the leak,
	// the location run above passes.
	t.Run("leak", func(t *testing.T) {
		t.Parallel()
		cfg := faults.ShortSoakConfig()
		cfg.Runs = cfg.Runs[:1]
		cfg.FaultEvery, cfg.Rounds = 0, cfg.Steady.Window+cfg.Steady.WarmRounds
		cfg.Leak = faults.Leak{Stage: "walker", Bytes: 512 << 10, Every: 250 * time.Millisecond}
		r := shortSoak(t, ctx, cfg, bins)
		require.Error(t, r.Err)
		require.Empty(t, r.Problems, "only the leak fails the run")
		var grows []string
		for _, st := range r.Steady {
			if st.Fail {
				require.Equal(t, "walker", st.Stage, "%+v", st)
				require.Equal(t, faults.VerdictGrows, st.Verdict, "%+v", st)
				require.Contains(t, []string{"rss", "heap_live", "heap_inuse"}, st.Metric, "%+v", st)
				grows = append(grows, st.Metric)
			}
		}
		require.NotEmpty(t, grows)
		require.Contains(t, r.Err.Error(), "not steady: walker "+grows[0]+" grows")
	})
}

// shortSoak runs cfg's one run and logs its table.
func shortSoak(t *testing.T, ctx context.Context, cfg faults.SoakConfig, bins map[string]string) faults.SoakResult {
	t.Helper()
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
	if r.Err != nil {
		t.Log("progress:\n" + progress.String())
	}
	// The table file written at the run's end gives its duration.
	file, err := os.ReadFile(r.TablePath)
	require.NoError(t, err)
	status := "ok"
	if r.Err != nil {
		status = "FAILED"
	}
	require.Contains(t, string(file), fmt.Sprintf("\nresult: %s", status))
	require.Contains(t, string(file), fmt.Sprintf("(%s)\n", r.Duration.Round(time.Second)))
	return r
}
