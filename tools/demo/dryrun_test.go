package demo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunDryRun: a dry-run demo changes no key and no file, and its report says what the
// deletes would free: every garbage location would be deleted, by storage and reason.
func TestRunDryRun(t *testing.T) {
	out, err := run(t, Options{DryRun: true})
	require.NoError(t, err)
	for _, want := range []string{"WOULD FREE (dry run: would_delete)", "BY STORAGE AND REASON", "nfs_01", "orphan_writing",
		"storage_missing", "(byte-identical to the seed)", "(0 pending)", "result              OK"} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "FREED (metadata removed")
	require.NotContains(t, out, "sweep of orphan data files", "a dry run sweeps nothing")
}
