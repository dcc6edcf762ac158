package deploy_test

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/jsmetrics"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

var stages = []string{pipeline.StageScanner, pipeline.StageProber, pipeline.StageDeleter}

// TestKubernetes checks the manifests against the code: every stage has a Deployment running
// its binary with the ConfigMap's configuration, environment variables that are configuration
// keys, secrets that the example Secret provides, the HTTP port of http.listen with /healthz
// and /readyz probes, resources, and the volumes the configuration points at.
func TestKubernetes(t *testing.T) {
	objs := parseAll(t)
	c := deployConfig(t, objs)
	_, port, err := net.SplitHostPort(c.HTTP.Listen)
	require.NoError(t, err)
	httpPort, err := strconv.Atoi(port)
	require.NoError(t, err)

	envKeys := map[string]bool{}
	for _, k := range config.Keys() {
		envKeys[k.Env] = true
	}
	secret := find(t, objs, "Secret", "kvcm-gc-credentials")

	// The kustomization lists files that exist and every manifest but the examples.
	var kustomization object
	for _, o := range objs {
		if str(o.doc, "kind") == "Kustomization" {
			kustomization = o
		}
	}
	require.NotNil(t, kustomization.doc, "kubernetes/kustomization.yaml")
	var resources []string
	for _, r := range list(kustomization.doc, "resources") {
		resources = append(resources, r.(string))
		_, err := os.Stat(filepath.Join("kubernetes", r.(string)))
		require.NoError(t, err)
	}
	manifests, err := filepath.Glob("kubernetes/*.yaml")
	require.NoError(t, err)
	for _, m := range manifests {
		base := filepath.Base(m)
		if base == "kustomization.yaml" || strings.HasSuffix(base, ".example.yaml") {
			continue
		}
		require.Contains(t, resources, base, "kustomization.yaml misses %s", base)
	}

	for _, stage := range stages {
		d := find(t, objs, "Deployment", "kvcm-gc-"+stage)
		spec := get(d.doc, "spec")
		if stage == pipeline.StageScanner {
			require.Equal(t, 2, num(spec, "replicas"), "two scanner replicas share the lease")
		} else {
			require.GreaterOrEqual(t, num(spec, "replicas"), 1)
		}
		podLabels := get(spec, "template", "metadata", "labels").(map[string]any)
		for k, v := range get(spec, "selector", "matchLabels").(map[string]any) {
			require.Equal(t, v, podLabels[k], "%s: selector %s", stage, k)
		}
		require.Equal(t, stage, podLabels["app.kubernetes.io/component"])
		require.Equal(t, strconv.Itoa(httpPort), str(spec, "template", "metadata", "annotations", "prometheus.io/port"))

		pod := get(spec, "template", "spec")
		containers := list(pod, "containers")
		require.Len(t, containers, 1)
		ct := containers[0]
		// The stage's own binary, from cmd/.
		cmd := list(ct, "command")
		require.Len(t, cmd, 1)
		require.Equal(t, "/usr/local/bin/"+stage, cmd[0])
		_, err := os.Stat(filepath.Join("..", "cmd", stage, "main.go"))
		require.NoError(t, err, "no cmd/%s for the %s Deployment", stage, stage)
		args := list(ct, "args")
		require.Equal(t, []any{"--config", "/etc/kvcm-gc/config.yaml"}, args)

		// Environment: configuration keys only; secrets the Secret has.
		for _, e := range list(ct, "env") {
			name := str(e, "name")
			require.True(t, envKeys[name], "%s: env %s is no configuration key", stage, name)
			if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
				require.Equal(t, "kvcm-gc-credentials", str(ref, "name"))
				require.NotNil(t, get(secret.doc, "stringData", str(ref, "key")), "%s: secret key %s", stage, str(ref, "key"))
			}
		}

		// HTTP port and probes.
		ports := list(ct, "ports")
		require.Len(t, ports, 1)
		require.Equal(t, "http", str(ports[0], "name"))
		require.Equal(t, httpPort, num(ports[0], "containerPort"))
		require.Equal(t, "/healthz", str(ct, "livenessProbe", "httpGet", "path"))
		require.Equal(t, "http", str(ct, "livenessProbe", "httpGet", "port"))
		require.Equal(t, "/readyz", str(ct, "readinessProbe", "httpGet", "path"))
		require.Equal(t, "http", str(ct, "readinessProbe", "httpGet", "port"))
		for _, r := range []string{"requests", "limits"} {
			for _, k := range []string{"cpu", "memory"} {
				require.NotNil(t, get(ct, "resources", r, k), "%s: resources.%s.%s", stage, r, k)
			}
		}

		// Volumes: the ConfigMap at the config path, the NATS credentials from the Secret, and
		// for the prober and the deleter every local path the storage overrides map to.
		volumes := map[string]any{}
		for _, v := range list(pod, "volumes") {
			volumes[str(v, "name")] = v
		}
		mounts := map[string]string{} // mount path -> volume
		for _, m := range list(ct, "volumeMounts") {
			require.Contains(t, volumes, str(m, "name"), "%s: mount of an undeclared volume", stage)
			mounts[str(m, "mountPath")] = str(m, "name")
		}
		volumeAt := func(path string) any {
			best := ""
			for mp := range mounts {
				if hasPrefixDir(path, mp) && len(mp) > len(best) {
					best = mp
				}
			}
			require.NotEmpty(t, best, "%s: nothing mounted at %s", stage, path)
			return volumes[mounts[best]]
		}
		require.Equal(t, "kvcm-gc-config", str(volumeAt("/etc/kvcm-gc/config.yaml"), "configMap", "name"))
		if c.NATS.CredentialsFile != "" {
			v := volumeAt(c.NATS.CredentialsFile)
			require.Equal(t, "kvcm-gc-credentials", str(v, "secret", "secretName"))
			require.NotNil(t, get(secret.doc, "stringData", filepath.Base(c.NATS.CredentialsFile)))
		}
		if stage != pipeline.StageScanner {
			for name, o := range c.Storage.Overrides {
				for _, pm := range o.PathMap {
					require.NotNil(t, volumeAt(pm.To), "%s: storage %s path %s", stage, name, pm.To)
				}
			}
		}
	}

	svc := find(t, objs, "Service", "kvcm-gc-metrics")
	require.Equal(t, "http", str(list(svc.doc, "spec", "ports")[0], "targetPort"))
	require.Equal(t, httpPort, num(list(svc.doc, "spec", "ports")[0], "port"))
	require.Equal(t, "kvcm-gc", str(svc.doc, "spec", "selector", "app.kubernetes.io/name"))
	find(t, objs, "PodDisruptionBudget", "kvcm-gc-scanner")
}

// metric is a metric name a process exports, with its label names and, for a closed label
// set, the values it pre-initialises (STYLE: every label value pre-initialised).
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
	pipeline.NewMetrics(collect)
	sweep.NewMetrics(collect)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	add(jsmetrics.New(nil, names, stages), false)
	require.Contains(t, out, jsmetrics.MetricAckPending)
	require.Contains(t, out, "kvcm_gc_last_round_end_timestamp_seconds")
	// The values of closed label sets: what a fresh process exports before it counted anything.
	reg := prometheus.NewRegistry()
	pipeline.NewMetrics(reg)
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
	require.Contains(t, out["kvcm_gc_prober_skips_total"].values["reason"], pipeline.SkipDeletingLease)
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
	var queries int
	var namespaced bool
	for _, o := range parseAll(t) {
		if !strings.HasPrefix(o.file, "grafana"+string(filepath.Separator)) {
			continue
		}
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
		"kvcm_gc_reclaimed_bytes_total", "kvcm_gc_deleted_keys_total"} {
		require.True(t, used[want], "dashboard does not show %s", want)
	}
}
