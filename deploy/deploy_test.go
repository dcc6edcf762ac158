package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/internal/version"
	"github.com/kvcm-gc/kvcm-gc/jsmetrics"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

var stages = []string{pipeline.StageScanner, pipeline.StageProber, pipeline.StageDeleter}

// metric is a metric name a process exports, with its label names and, for a closed label
// set, the values it pre-initialises (every label value is pre-initialised).
type metric struct {
	labels []string
	values map[string][]string // label -> its values; absent for an open label (store, instance)
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// exported lists every series name a kvcm-gc process can export: the pipeline's metrics
// (with the _bucket, _sum and _count series of histograms) and the JetStream collector's.
func exported(t *testing.T) map[string]metric {
	t.Helper()
	out := map[string]metric{}
	add := func(c prometheus.Collector, histogram bool) {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			require.NotNil(t, m, d.String())
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			if histogram {
				out[m[1]+"_bucket"] = metric{labels: append(slices.Clone(labels), "le")}
				out[m[1]+"_sum"] = metric{labels: labels}
				out[m[1]+"_count"] = metric{labels: labels}
				continue
			}
			out[m[1]] = metric{labels: labels}
		}
	}
	collect := collectRegisterer(func(c prometheus.Collector) {
		switch c.(type) {
		case prometheus.Histogram, *prometheus.HistogramVec, prometheus.Summary, *prometheus.SummaryVec:
			add(c, true)
		default:
			add(c, false)
		}
	})
	app.NewMetrics(collect)
	sweep.NewMetrics(collect)
	add(version.NewCollector(), false)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	add(jsmetrics.New(nil, names, stages), false)
	require.Contains(t, out, jsmetrics.MetricAckPending)
	require.Contains(t, out, "kvcm_gc_last_round_end_timestamp_seconds")
	// The values of closed label sets: what a fresh process exports before it counted anything.
	reg := prometheus.NewRegistry()
	app.NewMetrics(reg)
	sweep.NewMetrics(reg)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		m, ok := out[mf.GetName()]
		require.True(t, ok, mf.GetName())
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if m.values == nil {
					m.values = map[string][]string{}
				}
				if !slices.Contains(m.values[l.GetName()], l.GetValue()) {
					m.values[l.GetName()] = append(m.values[l.GetName()], l.GetValue())
				}
			}
		}
		out[mf.GetName()] = m
	}
	require.Contains(t, out["kvcm_gc_prober_skips_total"].values["reason"], prober.SkipDeletingLease)
	return out
}

// collectRegisterer hands every registered collector to a function.
type collectRegisterer func(prometheus.Collector)

func (f collectRegisterer) Register(c prometheus.Collector) error { f(c); return nil }
func (f collectRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		f(c)
	}
}
func (f collectRegisterer) Unregister(prometheus.Collector) bool { return true }

var (
	metricRE   = regexp.MustCompile(`\b(kvcm_gc_[a-zA-Z0-9_:]*)\s*(\{[^}]*\})?`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	literalRE  = regexp.MustCompile(`^[a-zA-Z0-9_]+$`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// targetLabels are the labels a Kubernetes scrape adds to every series: the namespace keeps
// the deployments of several KVCM clusters apart.
var targetLabels = map[string]bool{"namespace": true, "pod": true, "job": true}

// checkExpr checks that a PromQL expression uses only exported metrics, label matchers on
// labels those metrics have — matching, on a closed label set, only values the metric exports
// (a misspelt reason would match nothing and the alert would never fire) — and grouping labels
// some metric of the expression has.
func checkExpr(t *testing.T, where, expr string, known map[string]metric) {
	t.Helper()
	uses := metricRE.FindAllStringSubmatch(expr, -1)
	require.NotEmpty(t, uses, "%s: no kvcm-gc metric in %q", where, expr)
	all := map[string]bool{}
	for _, u := range uses {
		m, ok := known[u[1]]
		require.True(t, ok, "%s: metric %s is not exported by kvcm-gc", where, u[1])
		for _, l := range m.labels {
			all[l] = true
		}
		for _, lm := range matcherRE.FindAllStringSubmatch(u[2], -1) {
			if targetLabels[lm[1]] {
				continue
			}
			require.Contains(t, m.labels, lm[1], "%s: %s has no label %s", where, u[1], lm[1])
			closed, ok := m.values[lm[1]]
			if !ok || lm[2] == "!~" || lm[2] == "!=" {
				continue
			}
			alts := []string{lm[3]}
			if lm[2] == "=~" {
				alts = strings.Split(lm[3], "|")
			}
			for _, v := range alts {
				if literalRE.MatchString(v) {
					require.Contains(t, closed, v, "%s: %s{%s} is never %q", where, u[1], lm[1], v)
				}
			}
		}
	}
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				require.True(t, all[l] || targetLabels[l], "%s: grouping by %s, which no metric of the expression has", where, l)
			}
		}
	}
}

// TestDashboard checks the Grafana dashboard's queries against the exported metrics.
func TestDashboard(t *testing.T) {
	known := exported(t)
	used := map[string]bool{}
	groupedBy := map[string]map[string]bool{} // metric -> the labels a query of it groups by
	var queries int
	var namespaced bool
	files, err := filepath.Glob(filepath.Join("grafana", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		o := object{file: f}
		require.NoError(t, json.Unmarshal(data, &o.doc), f)
		require.NotEmpty(t, str(o.doc, "uid"), o.file)
		require.NotEmpty(t, str(o.doc, "title"), o.file)
		for _, v := range list(o.doc, "templating", "list") {
			namespaced = namespaced || str(v, "name") == "namespace"
		}
		ids := map[int]bool{}
		for _, p := range list(o.doc, "panels") {
			id := num(p, "id")
			require.False(t, ids[id], "%s: panel id %d repeats", o.file, id)
			ids[id] = true
			for _, tg := range list(p, "targets") {
				expr := str(tg, "expr")
				checkExpr(t, str(p, "title"), expr, known)
				for _, u := range metricRE.FindAllStringSubmatch(expr, -1) {
					used[u[1]] = true
					if groupedBy[u[1]] == nil {
						groupedBy[u[1]] = map[string]bool{}
					}
					for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
						for _, l := range strings.Split(g[1], ",") {
							groupedBy[u[1]][strings.TrimSpace(l)] = true
						}
					}
				}
				queries++
			}
		}
	}
	require.Greater(t, queries, 10)
	require.True(t, namespaced, "the dashboard selects a namespace")
	// The flow-control signals every operator looks at first are on the dashboard.
	for _, want := range []string{jsmetrics.MetricPending, jsmetrics.MetricAckPending, jsmetrics.MetricMaxAckPending,
		jsmetrics.MetricRedelivered, jsmetrics.MetricPaused, "kvcm_gc_scanner_lease_held", "kvcm_gc_delete_results_total",
		// The per-store row: every store's holder, state and progress.
		"kvcm_gc_store_lease_held", "kvcm_gc_store_walk_state", "kvcm_gc_store_round_progress_ratio",
		// What the deletes freed.
		"kvcm_gc_reclaimed_bytes_total", "kvcm_gc_deleted_keys_total",
		// A dry run: whether it is one, and what it would free.
		"kvcm_gc_dry_run", "kvcm_gc_would_reclaim_bytes_total"} {
		require.True(t, used[want], "dashboard does not show %s", want)
	}
	// Each metadata store and each swept storage on its own: one stuck is never hidden by the
	// others.
	for metric, label := range map[string]string{"kvcm_gc_store_lease_held": "store", "kvcm_gc_store_walk_state": "store",
		"kvcm_gc_sweep_last_round_end_timestamp_seconds": "storage", "kvcm_gc_sweep_quarantine_files": "storage",
		"kvcm_gc_sweep_quarantine_conflicts": "storage", "kvcm_gc_sweep_quarantine_oldest_timestamp_seconds": "storage"} {
		require.True(t, groupedBy[metric][label], "the dashboard shows %s by no %s", metric, label)
	}
}
