package faults

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// sweepFixture writes one kept file (of an upgraded block) and one orphan under a fresh root.
func sweepFixture(t *testing.T) (*seed.Manifest, seed.SweepFile, string) {
	t.Helper()
	root := t.TempDir() + "/"
	m := &seed.Manifest{SweepRoot: root}
	const key = int64(-7350077971284490591)
	for _, f := range []seed.SweepFile{
		{Path: root + kvcm.BlockObjectName("inst1", "tp0", key), Fate: seed.SweepKept, Reason: seed.SweepReasonAmbiguous, Size: 2048},
		{Path: root + kvcm.BlockObjectName("inst1", "tp0", 42), Fate: seed.SweepOrphan, Reason: seed.SweepReasonAbsent, Size: 1024},
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(f.Path), 0o755))
		require.NoError(t, os.WriteFile(f.Path, make([]byte, f.Size), 0o644))
		m.SweepFiles = append(m.SweepFiles, f)
	}
	return m, m.SweepFiles[0], kvcm.BlockKey("inst1", key)
}

// TestCheckAfterRoundUpstreamRace replays what a soak found: upstream's GC deleted an upgraded
// block behind the key check (which had read the block still there), and the sweep then, and
// rightly, unlinked the block's file, all before the files were looked at. The checks must not
// call that file lost, and they must release it once a check has seen the block go.
func TestCheckAfterRoundUpstreamRace(t *testing.T) {
	m, kept, block := sweepFixture(t)
	changed := map[string]bool{}
	blockThere := true
	checkKeys := func() (checkReport, error) {
		if !blockThere {
			changed[block] = true // the key check sees the block gone
		}
		// Behind the check: upstream's GC deletes the block, and the sweep unlinks its file.
		blockThere = false
		_ = os.Remove(kept.Path)
		return checkReport{}, nil
	}
	isChanged := func(k string) bool { return changed[k] }

	_, c, err := checkAfterRound(m, checkKeys, isChanged)
	require.NoError(t, err)
	require.Empty(t, c.Problems, "the file was there when the files were looked at")
	require.Equal(t, 1, c.KeptIntact)

	_, c, err = checkAfterRound(m, checkKeys, isChanged)
	require.NoError(t, err)
	require.Empty(t, c.Problems, "a check after the stat saw its block go")
	require.Equal(t, 1, c.Released)
	require.Equal(t, 0, c.KeptIntact)
}

// TestCheckAfterRoundKeptFileLost: a kept file gone while its block stands as seeded, or
// changed in size, is a problem; an orphan gone is counted.
func TestCheckAfterRoundKeptFileLost(t *testing.T) {
	m, kept, _ := sweepFixture(t)
	unchanged := func(string) bool { return false }
	require.NoError(t, os.Remove(m.SweepFiles[1].Path))
	require.NoError(t, os.WriteFile(kept.Path, []byte("x"), 0o644))
	_, c, err := checkAfterRound(m, func() (checkReport, error) { return checkReport{}, nil }, unchanged)
	require.NoError(t, err)
	require.Equal(t, 1, c.OrphansGone)
	require.Len(t, c.Problems, 1)
	require.Contains(t, c.Problems[0], "changed size: 1, was 2048")

	require.NoError(t, os.Remove(kept.Path))
	_, c, err = checkAfterRound(m, func() (checkReport, error) { return checkReport{}, nil }, unchanged)
	require.NoError(t, err)
	require.Len(t, c.Problems, 1)
	require.Contains(t, c.Problems[0], "(ambiguous_layout) is gone")
}
