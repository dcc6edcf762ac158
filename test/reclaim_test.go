package test

import (
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// reclaimKey and reclaimSum are what the seeded garbage frees, by KVCM instance, storage and
// reason.
type reclaimKey struct{ instance, storage, reason string }

type reclaimSum struct {
	locations, files int
	bytes            uint64
}

// expectedReclaim is what deleting the manifest's garbage frees, read from the bytes seeded
// (before) with encoding/json and net/url, apart from the code under test: for each garbage
// location, every spec URI's host is a storage, with one file of its size= bytes.
func expectedReclaim(t *testing.T, m *seed.Manifest, before seed.Snapshot) map[reclaimKey]reclaimSum {
	t.Helper()
	type location struct {
		Specs []struct {
			URI string `json:"uri"`
		} `json:"location_specs"`
	}
	out := map[reclaimKey]reclaimSum{}
	for _, l := range m.Garbage() {
		var reason string
		switch l.Kind {
		case seed.KindOrphanWriting, seed.KindSharedOrphan:
			reason = subjects.ReasonOrphanWriting
		case seed.KindMissingServing:
			reason = subjects.ReasonStorageMissing
		case seed.KindStuckDeleting:
			reason = subjects.ReasonStuckDeleting
		default:
			t.Fatalf("garbage of kind %s: no reason known", l.Kind)
		}
		fields := before[kvcm.BlockKey(l.Instance, l.Key)]
		var loc location
		if f := l.FieldName(); f == kvcm.FieldURI {
			var block map[string]location
			require.NoError(t, json.Unmarshal([]byte(fields[f]), &block))
			loc = block[l.Location]
		} else {
			require.NoError(t, json.Unmarshal([]byte(fields[f]), &loc))
		}
		require.NotEmpty(t, loc.Specs, "%+v", l)
		seen := map[string]bool{}
		for _, s := range loc.Specs {
			u, err := url.Parse(s.URI)
			require.NoError(t, err)
			size, err := strconv.ParseUint(u.Query().Get("size"), 10, 64)
			require.NoError(t, err, s.URI)
			k := reclaimKey{l.Instance, u.Hostname(), reason}
			sum := out[k]
			if !seen[k.storage] {
				seen[k.storage] = true
				sum.locations++
			}
			sum.files++
			sum.bytes += size
			out[k] = sum
		}
	}
	return out
}

// TestReclaimedMetrics: a dry run counts what its deletes would free on
// kvcm_gc_would_reclaim_bytes_total, and kvcm_gc_dry_run says every stage runs dry; then a real
// round counts, by storage and reason, the bytes and the data
// objects of every garbage location it removes, as the seeded spec URIs' sizes give them —
// shared files and data already gone included, since the bytes are the locations' own.
func TestReclaimedMetrics(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		m, before := e.seed(seed.Spec{Layout: layout, Instances: []string{"inst1", "inst2"}, Blocks: 300,
			GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 23})
		wantBytes, wantFiles := map[[2]string]float64{}, map[[2]string]float64{}
		for k, s := range expectedReclaim(t, m, before) {
			wantBytes[[2]string{k.storage, k.reason}] += float64(s.bytes)
			wantFiles[[2]string{k.storage, k.reason}] += float64(s.files)
		}
		require.Len(t, wantBytes, 3, "garbage on two storages for two reasons: %v", wantBytes)
		dryRun := func(reg *prometheus.Registry) map[string]float64 {
			out := map[string]float64{}
			for _, s := range series(t, reg, "kvcm_gc_dry_run") {
				out[labels(s)["stage"]] = s.GetGauge().GetValue()
			}
			return out
		}
		every := func(v float64) map[string]float64 {
			return map[string]float64{pipeline.StageScanner: v, pipeline.StageProber: v, pipeline.StageDeleter: v,
				pipeline.StageWalker: v, pipeline.StageSweeper: v}
		}

		// A dry run counts what the deletes would free, and frees nothing.
		dry := prometheus.NewRegistry()
		o := e.options(dry)
		o.DryRun = true
		stop := e.run(o, app.All)
		e.waitRoundDone(1, time.Minute)
		stop()
		require.Equal(t, every(1), dryRun(dry))
		require.Equal(t, wantBytes, metricByLabels(t, dry, "kvcm_gc_would_reclaim_bytes_total", "storage", "reason"))
		require.Empty(t, metricByLabels(t, dry, "kvcm_gc_reclaimed_bytes_total", "storage", "reason"))

		// The live round of the same keyspace frees it.
		reg := prometheus.NewRegistry()
		e.skipRoundPause(t)
		e.run(e.options(reg), app.All)
		e.waitRoundDone(2, time.Minute)
		e.verify(before, m)
		require.Equal(t, every(0), dryRun(reg))
		require.Equal(t, wantBytes, metricByLabels(t, reg, "kvcm_gc_reclaimed_bytes_total", "storage", "reason"))
		require.Equal(t, wantFiles, metricByLabels(t, reg, "kvcm_gc_reclaimed_files_total", "storage", "reason"))
		require.Empty(t, metricByLabels(t, reg, "kvcm_gc_would_reclaim_bytes_total", "storage", "reason"))
	})
}
