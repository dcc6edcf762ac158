package seed

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestManifestFileRoundTrip(t *testing.T) {
	m := &Manifest{Cluster: "c1", Layout: "location", Instances: []string{"a", "b c"}, Blocks: 2,
		Locations: []Loc{{Instance: "a", Key: -9223372036854775808, Location: "x", Kind: KindOrphanWriting, Garbage: true,
			Layout: "location", Field: "L#x", Files: []string{"/d/f"}},
			{Instance: "b c", Key: 42, Location: "y", Kind: KindAmbiguous, Layout: "ambiguous", Field: "__uri__"}},
		Corrupt: []string{"kvcache:instance_a:cache_1"}, BadKeys: []string{"kvcache:instance_a:cache_abc"},
		Ambiguous: []string{"kvcache:instance_b c:cache_42"}, Tombstones: []string{"t"}, TierMarked: []string{"m"},
		Layouts: map[string]LayoutCount{"location": {Keys: 1, Locations: 1, Garbage: 1, AllGarbage: 1}, "ambiguous": {Keys: 1, Locations: 1}},
		Skipped: map[string]LayoutCount{GroupCached: {Keys: 3, Locations: 6}},
		Counts:  map[string]int{KindOrphanWriting: 1, KindAmbiguous: 1}}
	path := filepath.Join(t.TempDir(), "manifest.json")
	require.NoError(t, m.WriteFile(path))
	back, err := ReadManifest(path)
	require.NoError(t, err)
	require.Equal(t, m, back)
	require.Len(t, back.Garbage(), 1)
	require.Equal(t, "L#x", back.Locations[0].FieldName())
	require.Equal(t, "__uri__", Loc{}.FieldName(), "a manifest of before the location layout names no field")

	_, err = ReadManifest(filepath.Join(t.TempDir(), "missing.json"))
	require.ErrorContains(t, err, "read manifest")
}
