package deploy_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/deploy/privileges"
)

var update = flag.Bool("update", false, "rewrite the generated files of deploy/")

// chartDir is the Helm chart, relative to this package.
const chartDir = "helm/kvcm-gc"

// TestGenerated fails when a file generated from the code differs from what the code
// generates now; `go generate ./deploy` (this test with -update) rewrites them.
func TestGenerated(t *testing.T) {
	tpl, err := privileges.Template()
	require.NoError(t, err)
	// The chart's copy of the dashboard, which its ConfigMap for Grafana's sidecar holds (a
	// chart cannot read files outside its directory).
	dashboard, err := os.ReadFile(filepath.Join("grafana", "kvcm-gc.json"))
	require.NoError(t, err)
	for path, want := range map[string][]byte{
		filepath.Join(chartDir, "files", "privileges.json"):            tpl,
		filepath.Join(chartDir, "files", "dashboards", "kvcm-gc.json"): dashboard,
	} {
		if *update {
			require.NoError(t, os.WriteFile(path, want, 0o644))
		}
		have, err := os.ReadFile(path)
		require.NoError(t, err, "run go generate ./deploy")
		require.Equal(t, string(want), string(have), "%s drifted from the code: run go generate ./deploy", path)
	}
}
