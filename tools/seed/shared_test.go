package seed

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// decoded returns location l as its key holds it.
func (s seeded) decoded(t *testing.T, l Loc) kvcm.Location {
	t.Helper()
	fields := s.before[kvcm.BlockKey(l.Instance, l.Key)]
	if l.FieldName() != kvcm.FieldURI {
		loc, err := kvcm.DecodeLocation(l.Location, []byte(fields[l.FieldName()]))
		require.NoError(t, err)
		return loc
	}
	blk, err := kvcm.DecodeBlock([]byte(fields[kvcm.FieldURI]))
	require.NoError(t, err)
	for _, loc := range blk.Locations {
		if loc.ID == l.Location {
			return loc
		}
	}
	t.Fatalf("location %s is not in block %d", l.Location, l.Key)
	return kvcm.Location{}
}

// TestSharedFilesStaySharedWhenRelabelled: a location whose data is on the shared storage
// says so, whatever its kind: a shared orphan that a young legacy block makes live
// (recent_block_writing) ripens later and goes, and its file, shared with other blocks, must
// stay.
func TestSharedFilesStaySharedWhenRelabelled(t *testing.T) {
	for _, layout := range []kvcm.Layout{kvcm.LayoutLegacy, kvcm.LayoutLocation} {
		t.Run(layout.String(), func(t *testing.T) {
			s := generate(t, Spec{Layout: layout, Blocks: 3000, GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 5, NoFiles: true})
			kinds := map[string]int{}
			for _, l := range s.m.Locations {
				if l.Kind == KindAmbiguous || l.Kind == KindCachedStore {
					continue
				}
				loc := s.decoded(t, l)
				onShared := len(loc.Specs) > 0 && strings.HasPrefix(loc.Specs[0].URI, "file://"+StorageShared+"/")
				require.Equal(t, onShared, l.Shared(), "%d/%s (%s)", l.Key, l.Location, l.Kind)
				if onShared {
					require.True(t, l.KeepsFiles())
					kinds[l.Kind]++
				}
			}
			want := []string{KindSharedOrphan, KindSharedServing}
			if layout == kvcm.LayoutLegacy {
				want = append(want, KindRecentBlockWriting)
			}
			require.ElementsMatch(t, want, slices.Collect(maps.Keys(kinds)), "%v", kinds)
		})
	}
}
