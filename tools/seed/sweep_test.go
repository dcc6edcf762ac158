package seed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// TestSweepFiles: the sweep's files are named as KVCM names a block's file (or, for the
// ones that must stay, as the reason says), dated as the grace needs, and the blocks that
// name some of them are live and verified like every other key.
func TestSweepFiles(t *testing.T) {
	for _, layout := range []kvcm.Layout{kvcm.LayoutLegacy, kvcm.LayoutLocation} {
		t.Run(layout.String(), func(t *testing.T) {
			s := generate(t, Spec{Layout: layout, Blocks: 200, LocationsPerBlock: 2, GarbageFraction: 0.1, TrickyFraction: 0.1,
				Seed: 5, SweepFiles: true})
			m := s.m
			require.NotEmpty(t, m.SweepFiles)
			require.Equal(t, 400+m.Counts[KindSweepServing]+m.Counts[KindSweepWriting]+m.Counts[KindSweepDeleting]+m.Counts[KindSweepHalf], m.Blocks)
			reasons := map[string]int{}
			for _, f := range m.SweepFiles {
				reasons[f.Fate+" "+f.Reason]++
				require.True(t, strings.HasPrefix(f.Path, m.SweepRoot), f.Path)
				fi, err := os.Stat(f.Path)
				require.NoError(t, err)
				require.Equal(t, int64(f.Size), fi.Size())
				if f.Reason == SweepReasonYoung {
					require.Less(t, testNow.Sub(fi.ModTime()), time.Hour, f.Path)
				} else {
					require.Equal(t, testNow.Add(-48*time.Hour), fi.ModTime().UTC(), f.Path)
				}
				name, err := kvcm.ParseBlockFileName(strings.TrimPrefix(f.Path, m.SweepRoot))
				switch f.Reason {
				case SweepReasonUnparsable:
					require.Error(t, err, f.Path)
				case SweepReasonShared:
					require.NoError(t, err)
					require.True(t, name.Shared, f.Path)
				default:
					require.NoError(t, err, f.Path)
					require.False(t, name.Shared, f.Path)
				}
			}
			for _, want := range []string{"orphan block_absent", "orphan no_location_names_it", "kept referenced", "kept young",
				"kept shared", "kept unparsable", "kept unknown_instance", "kept unknown_spec", "kept group_skipped", "kept corrupt"} {
				require.Positive(t, reasons[want], want)
			}
			if layout == kvcm.LayoutLocation {
				require.Positive(t, reasons["kept ambiguous_layout"])
				require.Positive(t, reasons["kept tombstone"])
			}

			// Untouched, every orphan is still there: the verification says so.
			r, err := VerifySweep(m)
			require.NoError(t, err)
			require.Equal(t, r.Orphans, r.Mismatch)
			require.Zero(t, r.OrphansGone)
			require.Equal(t, r.Kept, r.KeptIntact)

			// A correct sweep: exactly the orphans go.
			for _, f := range m.SweepFiles {
				if f.Fate == SweepOrphan {
					require.NoError(t, os.Remove(f.Path))
				}
			}
			r, err = VerifySweep(m)
			require.NoError(t, err)
			require.True(t, r.OK(), r.Problems)
			require.Equal(t, r.Orphans, r.OrphansGone)

			// The blocks that name the files are live: a collection leaves them as they are.
			collect(t, s, EmptyKeep)
			vr := s.verify(t, EmptyKeep)
			require.True(t, vr.OK(), vr.Problems)

			// A kept file changed, one removed, one left in quarantine: each is a mismatch.
			var kept []SweepFile
			for _, f := range m.SweepFiles {
				if f.Fate == SweepKept {
					kept = append(kept, f)
				}
			}
			require.NoError(t, os.WriteFile(kept[0].Path, []byte("other"), 0o644))
			require.NoError(t, os.Remove(kept[1].Path))
			q := filepath.Join(m.SweepRoot, QuarantineDir, "x", "inst0", "tp0", "1~1")
			require.NoError(t, os.MkdirAll(filepath.Dir(q), 0o755))
			require.NoError(t, os.WriteFile(q, nil, 0o644))
			r, err = VerifySweep(m)
			require.NoError(t, err)
			require.Equal(t, 3, r.Mismatch, r.Problems)
			require.Equal(t, 1, r.Quarantined)

		})
	}
}
