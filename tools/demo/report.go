package demo

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// Report is the demo's outcome: what the pipeline counted, and what the verification found.
type Report struct {
	Instances, Blocks int
	Layout            string
	Locations         int
	Garbage           int
	BadKeys, Corrupt  int
	ByLayout          []string // the seed's keys by layout (seed.Manifest.LayoutLines)

	Round       uint64
	KeysScanned float64
	BadScanned  float64
	Candidates  map[string]float64 // by reason
	Outcomes    map[string]float64 // deleter outcome per target
	ProberSkips map[string]float64 // locations kept by the prober, by reason
	PhysSkips   map[string]float64 // spec files not unlinked, by reason
	Messages    map[string]float64 // consumed messages by stage/result
	// Stuck DELETING (collect_deleting): the candidates, and the spec URIs whose data was
	// left in place by "storage type/reason".
	StuckNominated float64
	StuckDataLeft  map[string]float64
	// Unregistered are the keys of instances the registry does not list (the removed
	// instance), as the round counted them.
	Unregistered []unregisteredRow

	SeedTime, CollectTime, Total time.Duration
	MetricsURL                   string

	Verify seed.Report
	// Sweep is the sweep of orphan data files (On false when the demo left it out).
	Sweep sweepReport
}

func newReport(o Options, m *seed.Manifest, res result, vr seed.Report) Report {
	g := res.Gathered
	locations := 0 // of the collected instances (the skipped groups' are counted apart)
	for _, c := range m.Layouts {
		locations += c.Locations
	}
	return Report{
		Instances: o.Instances, Blocks: o.Blocks, Layout: m.Layout, Locations: locations, Garbage: len(m.Garbage()),
		BadKeys: len(m.BadKeys), Corrupt: len(m.Corrupt), ByLayout: m.LayoutLines(),
		Unregistered:   unregisteredRows(g),
		Round:          res.Round.Round,
		KeysScanned:    g.sum("kvcm_gc_scanned_keys_total"),
		BadScanned:     g.sum("kvcm_gc_scan_bad_keys_total"),
		Candidates:     g.by("kvcm_gc_candidates_total", "reason"),
		Outcomes:       g.by("kvcm_gc_delete_results_total", "outcome"),
		ProberSkips:    g.by("kvcm_gc_prober_skips_total", "reason"),
		PhysSkips:      g.by("kvcm_gc_physical_delete_skips_total", "reason"),
		StuckNominated: g.by("kvcm_gc_candidates_total", "reason")[subjects.ReasonStuckDeleting],
		StuckDataLeft:  g.by2("kvcm_gc_stuck_deleting_data_left_total", "storage_type", "reason"),
		MetricsURL:     res.Metrics,
		Verify:         vr,
	}
}

// Write prints the report.
func (r Report) Write(w io.Writer) {
	line := func(format string, a ...any) {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf(format, a...), " "))
	}
	v := r.Verify
	noop := pick(r.Outcomes, subjects.OutcomeNoopMismatch, subjects.OutcomeNoopGone, subjects.OutcomeError)
	line("")
	line("kvcm-gc demo report")
	line("  keyspace            %d instances × %d blocks in the %s layout: %d locations, %d of them garbage;",
		r.Instances, r.Blocks, r.Layout, r.Locations, r.Garbage)
	line("                      %d corrupt blocks, %d keys that are not block keys", r.Corrupt, r.BadKeys)
	for i, l := range r.ByLayout {
		label := ""
		if i == 0 {
			label = "by layout"
		}
		line("  %-19s %s", label, l)
	}
	line("  rounds              %d", r.Round)
	line("  keys scanned        %.0f (and %.0f non-block keys skipped)", r.KeysScanned, r.BadScanned)
	line("  candidates          %.0f %s", sum(r.Candidates), breakdown(r.Candidates))
	line("  deleted             %.0f %s", sum(pick(r.Outcomes, subjects.OutcomeDeleted, subjects.OutcomePartial)),
		breakdown(pick(r.Outcomes, subjects.OutcomeDeleted, subjects.OutcomePartial)))
	line("  no-op deletes       %.0f %s", sum(noop), breakdown(noop))
	line("  kept by the prober  %.0f %s", sum(r.ProberSkips), breakdown(r.ProberSkips))
	line("  files not unlinked  %.0f %s", sum(r.PhysSkips), breakdown(r.PhysSkips))
	if v.GuardedLocations > 0 {
		line("  kept by guard       %d copy targets and sources (prober: migration_guard %.0f, migration_source %.0f)",
			v.GuardedLocations, r.ProberSkips[pipeline.SkipMigrationGuard], r.ProberSkips[pipeline.SkipMigrationSource])
	}
	line("  stuck DELETING      %.0f nominated; data left in place for %.0f spec URIs %s", r.StuckNominated,
		sum(r.StuckDataLeft), breakdown(r.StuckDataLeft))
	line("  unregistered        %s", r.removedLine())
	line("  elapsed             %s (seed %s, collection %s)",
		r.Total.Round(time.Millisecond), r.SeedTime.Round(time.Millisecond), r.CollectTime.Round(time.Millisecond))
	line("")
	line("verification (empty_block: %s)", v.EmptyBlock)
	line("  garbage gone        %d/%d locations, %d files removed", v.GarbageGone, v.GarbageLocations, v.GarbageFilesGone)
	line("  live intact         %d/%d locations, %d/%d files present", v.LiveIntact, v.LiveLocations, v.LiveFilesPresent, v.LiveFiles)
	line("  keys as expected    %d/%d (byte-identical to the seed minus the garbage)", v.KeysIntact, v.KeysChecked)
	switch v.EmptyBlock {
	case seed.EmptyDelete:
		line("  emptied keys        %d/%d deleted (%d left)", v.EmptyDeleted, v.EmptyKeys, v.EmptyKept)
	default:
		line("  emptied keys        %d/%d kept as KVCM's \"exists, no location\" (%d deleted)", v.EmptyKept, v.EmptyKeys, v.EmptyDeleted)
	}
	if v.AmbiguousKeys+v.TierKeys+v.TombstoneKeys > 0 {
		line("  left byte for byte  ambiguous keys %d/%d, tier-marked keys %d/%d, tombstones %d/%d",
			v.AmbiguousIntact, v.AmbiguousKeys, v.TierIntact, v.TierKeys, v.TombstonesIntact, v.TombstoneKeys)
	}
	line("  stuck DELETING      %d/%d gone %s, %d files unlinked, %d files left in place",
		v.StuckGone, v.StuckLocations, breakdown(floats(v.StuckByType)), v.StuckFilesGone, v.StuckFilesLeft)
	line("    data left         %d locations %s", total(v.StuckLeftBy), breakdown(floats(v.StuckLeftBy)))
	if v.GuardedLocations > 0 {
		line("  kept by guard       %d/%d copy targets and sources byte-identical, %d/%d files present",
			v.GuardedIntact, v.GuardedLocations, v.GuardedFilesPresent, v.GuardedFiles)
	}
	line("  stranded DELETING   %d", v.StrandedDeleting)
	if v.OK() {
		line("  result              OK")
	} else {
		line("  result              MISMATCH (%d)", v.Mismatch)
		for _, p := range v.Problems {
			line("    %s", p)
		}
	}
	r.Sweep.write(line)
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

func floats(m map[string]int) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func pick(m map[string]float64, keys ...string) map[string]float64 {
	out := map[string]float64{}
	for _, k := range keys {
		if m[k] != 0 {
			out[k] = m[k]
		}
	}
	return out
}

// breakdown formats the non-zero entries, largest first: "(a 12, b 3)".
func breakdown(m map[string]float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// gathered are the metric families of a registry by name.
type gathered map[string]*dto.MetricFamily

func gather(reg *prometheus.Registry) gathered {
	g := gathered{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		g[mf.GetName()] = mf
	}
	return g
}

func value(m *dto.Metric) float64 {
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

func (g gathered) sum(name string) float64 {
	var s float64
	for _, m := range g[name].GetMetric() {
		s += value(m)
	}
	return s
}

func (g gathered) by(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range g[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += value(m)
			}
		}
	}
	return out
}

// by2 sums a metric by two labels, keyed "<label1 value>/<label2 value>".
func (g gathered) by2(name, label1, label2 string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range g[name].GetMetric() {
		var a, b string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case label1:
				a = l.GetValue()
			case label2:
				b = l.GetValue()
			}
		}
		out[a+"/"+b] += value(m)
	}
	return out
}

// counter reads one counter.
func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// sumVec adds up every series of a counter vector.
func sumVec(v *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { v.Collect(ch); close(ch) }()
	var s float64
	for c := range ch {
		var m dto.Metric
		if c.Write(&m) == nil {
			s += m.GetCounter().GetValue()
		}
	}
	return s
}
