package test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// series returns the series of metric name in reg (nil while it is not registered yet).
func series(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// labels returns a series' label values by label name.
func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// metricValue returns a registered counter or gauge by name, summed over its label sets
// (0 while it is not registered yet).
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return metricLabeled(t, reg, name, nil)
}

// metricByLabel returns a counter's or gauge's non-zero values by one label, summed over the
// other labels.
func metricByLabel(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range series(t, reg, name) {
		x := m.GetCounter().GetValue() + m.GetGauge().GetValue()
		if v, ok := labels(m)[label]; ok && x != 0 {
			out[v] += x
		}
	}
	return out
}

// metricByLabels sums a counter's series by the values of two labels.
func metricByLabels(t *testing.T, reg *prometheus.Registry, name, a, b string) map[[2]string]float64 {
	t.Helper()
	out := map[[2]string]float64{}
	for _, m := range series(t, reg, name) {
		l := labels(m)
		out[[2]string{l[a], l[b]}] += m.GetCounter().GetValue()
	}
	return out
}

// metricLabeled sums the counters and gauges of name whose labels include want.
func metricLabeled(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	var sum float64
next:
	for _, m := range series(t, reg, name) {
		have := labels(m)
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// gaugeLabelOne returns the value of label of the gauge's series at 1 ("" when none).
func gaugeLabelOne(t *testing.T, reg *prometheus.Registry, name, label string) string {
	t.Helper()
	for _, m := range series(t, reg, name) {
		if v, ok := labels(m)[label]; ok && m.GetGauge().GetValue() == 1 {
			return v
		}
	}
	return ""
}
