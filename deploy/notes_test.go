package deploy_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNotesNameWhatRuns: the notes a release prints point at the ops pod only when the values
// run it (it is off by default): otherwise status is `helm test`. They name round start, which
// starts the next round after the promotion instead of round_pause later.
func TestNotesNameWhatRuns(t *testing.T) {
	helm := tool(t, "helm")
	notes := func(set ...string) string {
		args := []string{"install", "kvcm-gc", chartDir, "--dry-run=client", "-n", "gc"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out := string(run(t, helm, args...))
		_, n, ok := strings.Cut(out, "\nNOTES:\n")
		require.True(t, ok, out)
		return n
	}
	def := notes()
	require.NotContains(t, def, "-ops", "the ops pod is off by default")
	require.Contains(t, def, "Status: helm -n gc test kvcm-gc --logs")
	require.Contains(t, def, "kvcm-gc round start")
	live := notes("admin.ops.enabled=true", "dryRun=false")
	require.Contains(t, live, "Status: kubectl -n gc exec deploy/kvcm-gc-ops -- kvcm-gc status")
	require.Contains(t, live, "kvcm-gc round start")
}
