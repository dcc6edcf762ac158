package demo

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// TestRunSweep: the demo's sweep removes exactly the seeded orphan files, keeps every other
// file byte for byte, leaves nothing in quarantine, and reports the bytes freed and the kept
// files by reason.
func TestRunSweep(t *testing.T) {
	out, err := run(t, Options{Layout: kvcm.LayoutLegacy})
	require.NoError(t, err)
	for _, want := range []string{"sweep of orphan data files", "unlinked ", "freed", "kept ", "referenced", "young",
		"shared", "unparsable", "unknown_instance", "unknown_spec", "group_skipped", "corrupt", "left in quarantine 0",
		"sweep result        OK"} {
		require.Contains(t, out, want)
	}
}

func TestRunNoSweep(t *testing.T) {
	out, err := run(t, Options{Layout: kvcm.LayoutLegacy, NoSweep: true})
	require.NoError(t, err)
	require.NotContains(t, out, "sweep of orphan data files")
	require.Contains(t, out, "result              OK")
}
