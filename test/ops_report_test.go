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
	"github.com/kvcm-gc/kvcm-gc/seed"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// reportRows are a report's rows as the seeded garbage says them, by instance, storage and
// reason, for one mode.
func reportRows(t *testing.T, r ops.DeleteReport, dry bool) map[reclaimKey]reclaimSum {
	t.Helper()
	out := map[reclaimKey]reclaimSum{}
	for _, row := range r.Rows {
		if row.DryRun != dry {
			continue
		}
		k := reclaimKey{row.Instance, row.Storage, row.Reason}
		require.NotContains(t, out, k, "one row per instance, storage and reason")
		out[k] = reclaimSum{locations: row.Locations, files: row.Files, bytes: row.Bytes}
	}
	return out
}

// TestReportDryRun: after a dry-run round, report (the function and the command) says what the
// deletes would free, location by location the seeded garbage: its locations, data objects
// and bytes by instance, storage and reason, and the totals by storage and reason. After a
// real round of the same keyspace it says the same of what was freed.
func TestReportDryRun(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		m, before := e.seed(seed.Spec{Layout: layout, Instances: []string{"inst1", "inst2"}, Blocks: 300,
			GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 29})
		want := expectedReclaim(t, m, before)
		require.NotEmpty(t, want)
		wantTotals := map[[2]string]reclaimSum{}
		for k, s := range want {
			tk := [2]string{k.storage, k.reason}
			sum := wantTotals[tk]
			sum.locations += s.locations
			sum.files += s.files
			sum.bytes += s.bytes
			wantTotals[tk] = sum
		}

		o := e.options(prometheus.NewRegistry())
		o.DryRun = true
		stop := e.run(o, app.All)
		e.waitRoundDone(1, time.Minute)
		stop()

		r, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{})
		require.NoError(t, err)
		require.Equal(t, []ops.ReportRound{{Store: r.Rounds[0].Store, Round: 1}}, r.Rounds)
		require.Equal(t, want, reportRows(t, r, true))
		require.Empty(t, reportRows(t, r, false), "a dry run frees nothing")
		gotTotals := map[[2]string]reclaimSum{}
		for _, row := range r.Totals {
			require.True(t, row.DryRun)
			gotTotals[[2]string{row.Storage, row.Reason}] = reclaimSum{locations: row.Locations, files: row.Files, bytes: row.Bytes}
		}
		require.Equal(t, wantTotals, gotTotals)
		require.Equal(t, map[string]int{subjects.OutcomeWouldDelete: len(m.Garbage())}, r.Targets)
		require.Positive(t, r.Requests)

		// The command prints the same, as JSON, and as a table naming every storage.
		env := opsEnv(t, e, o)
		var out bytes.Buffer
		require.NoError(t, opsCommand("report")(ctx, env, []string{"--json"}, &out, io.Discard))
		var viaCLI ops.DeleteReport
		require.NoError(t, json.Unmarshal(out.Bytes(), &viaCLI))
		require.Equal(t, r.Rows, viaCLI.Rows)
		require.Equal(t, r.Totals, viaCLI.Totals)
		out.Reset()
		require.NoError(t, opsCommand("report")(ctx, env, []string{"--no-progress"}, &out, io.Discard))
		require.Contains(t, out.String(), "WOULD FREE (dry run: would_delete)")
		for k := range wantTotals {
			require.Contains(t, out.String(), k[0])
		}
		t.Log("\n" + out.String())

		// Only one instance; another round (none walked: nothing).
		ri, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{Instance: "inst2"})
		require.NoError(t, err)
		for k, s := range reportRows(t, ri, true) {
			require.Equal(t, "inst2", k.instance)
			require.Equal(t, want[k], s)
		}
		require.NotEmpty(t, ri.Rows)
		r2, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{Round: 2})
		require.NoError(t, err)
		require.Empty(t, r2.Rows)
		require.Zero(t, r2.Requests)

		// A real round of the same keyspace (round 2) frees what the dry run said.
		o.DryRun = false
		e.skipRoundPause(t)
		e.run(o, app.All)
		e.waitRoundDone(2, time.Minute)
		e.verify(before, m)
		real, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{})
		require.NoError(t, err)
		require.Equal(t, uint64(2), real.Rounds[0].Round)
		require.Equal(t, want, reportRows(t, real, false))
		require.Empty(t, reportRows(t, real, true))
		again, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{Round: 1})
		require.NoError(t, err)
		require.Equal(t, want, reportRows(t, again, true), "round 1 is still the dry run's")
	})
}
