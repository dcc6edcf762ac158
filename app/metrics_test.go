package app

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.txt with the series a process exports now")

// describing registers collectors on a registry and keeps their descriptors: those of a vector
// without pre-initialised values, which Gather does not show.
type describing struct {
	*prometheus.Registry
	descs []string
}

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		d.descs = append(d.descs, "desc "+desc.String())
	}
	return d.Registry.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// TestMetricSeries: the metrics a process registers (every stage's, the sweep's too), with
// their help, labels and the label values pre-initialised before anything is counted, are
// those of testdata/metrics.txt. Dashboards, alerts and the deploy tests name them, so a change
// here is one operators see; go test ./app -run TestMetricSeries -update rewrites the file.
func TestMetricSeries(t *testing.T) {
	reg := &describing{Registry: prometheus.NewRegistry()}
	NewMetrics(reg)
	sweep.NewMetrics(reg)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	lines := reg.descs
	for _, mf := range mfs {
		lines = append(lines, fmt.Sprintf("# %s %s %q", mf.GetName(), mf.GetType(), mf.GetHelp()))
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			lines = append(lines, mf.GetName()+"{"+strings.Join(ls, ",")+"}")
		}
	}
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "metrics.txt")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), got)
}
