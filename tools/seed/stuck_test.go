package seed

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
)

// TestStuckDeleting: with a deleting grace, each instance gets stuck DELETING of every form —
// per-block files (unlinked), other names, shared files, mooncake, a file another location
// names (data left) — and one not stuck yet; the seed's own DELETING stay younger than the
// grace. A collection that removes them, and their data only where the rule allows,
// verifies; one that unlinks data it must leave does not.
func TestStuckDeleting(t *testing.T) {
	// The reasons are the collector's own label values.
	require.Equal(t, []string{deleter.DataLeftReusable, deleter.DataLeftShared, deleter.DataLeftNotPerBlock, deleter.DataLeftReferenced},
		[]string{DataLeftReusable, DataLeftShared, DataLeftNotPerBlock, DataLeftReferenced})
	const grace = 36 * time.Hour
	for _, layout := range []kvcm.Layout{kvcm.LayoutLegacy, kvcm.LayoutLocation} {
		t.Run(layout.String(), func(t *testing.T) {
			s := generate(t, Spec{Layout: layout, Blocks: 300, GarbageFraction: 0.2, TrickyFraction: 0.3, Seed: 4,
				SweepFiles: true, DeletingGrace: grace})
			left := map[string]int{}
			young := 0
			for _, l := range s.m.Locations {
				fields := s.before[kvcm.BlockKey(l.Instance, l.Key)]
				switch l.Kind {
				case KindStuckDeleting:
					require.True(t, l.Garbage)
					left[l.DataLeft]++
					require.Equal(t, testNow.Add(-grace-stuckAgeOver).UnixMicro(), l.DeletingSinceUs)
					for _, f := range l.Files {
						_, err := os.Stat(f)
						require.NoError(t, err)
					}
				case KindDeleting, KindSweepDeleting:
					require.False(t, l.Garbage)
					young++
				default:
					continue
				}
				if layout == kvcm.LayoutLegacy {
					// The age of a legacy DELETING is its block's last write.
					lru, err := strconv.ParseInt(fields[kvcm.FieldLRUTime], 10, 64)
					require.NoError(t, err)
					age := testNow.Sub(time.UnixMicro(lru))
					if l.Kind == KindStuckDeleting {
						require.Equal(t, grace+stuckAgeOver, age)
					} else {
						require.Less(t, age, grace, l.Kind)
					}
				}
			}
			require.Equal(t, map[string]int{"": 2, DataLeftNotPerBlock: 2, DataLeftShared: 2, DataLeftReusable: 2, DataLeftReferenced: 2}, left)
			require.Positive(t, young)
			require.Equal(t, 2*len(stuckForms), s.m.Counts[KindStuckDeleting]+2, "one form per instance is not stuck yet")

			collect(t, s, EmptyKeep)
			r := s.verify(t, EmptyKeep)
			require.True(t, r.OK(), r.Problems)
			require.Equal(t, 10, r.StuckLocations)
			require.Equal(t, 10, r.StuckGone)
			require.Equal(t, map[string]int{"file": 8, "mooncake": 2}, r.StuckByType)
			require.Equal(t, map[string]int{DataLeftNotPerBlock: 2, DataLeftShared: 2, DataLeftReusable: 2, DataLeftReferenced: 2}, r.StuckLeftBy)
			require.Equal(t, 4, r.StuckFilesGone) // two blocks, tp0 and tp1
			require.Equal(t, 8, r.StuckFilesLeft)

			// Unlinking data the rule leaves is a mismatch.
			for _, l := range s.m.Locations {
				if l.Kind == KindStuckDeleting && l.DataLeft == DataLeftReferenced {
					require.NoError(t, os.Remove(l.Files[0]))
					break
				}
			}
			r = s.verify(t, EmptyKeep)
			require.False(t, r.OK())
		})
	}
	_, err := Generate(t.Context(), nil, Spec{Cluster: "c1", DeletingGrace: 25 * time.Hour})
	require.ErrorContains(t, err, "deleting grace")
}
