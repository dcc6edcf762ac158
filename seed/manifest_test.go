package seed

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestManifestFileRoundTrip(t *testing.T) {
	m := &Manifest{Cluster: "c1", Instances: []string{"a", "b c"}, Blocks: 2,
		Locations: []Loc{{Instance: "a", Key: -9223372036854775808, Location: "x", Kind: KindOrphanWriting, Garbage: true, Files: []string{"/d/f"}},
			{Instance: "b c", Key: 42, Location: "y", Kind: KindLiveServing}},
		Corrupt: []string{"kvcache:instance_a:cache_1"}, BadKeys: []string{"kvcache:instance_a:cache_abc"},
		Counts: map[string]int{KindOrphanWriting: 1, KindLiveServing: 1}}
	path := filepath.Join(t.TempDir(), "manifest.json")
	require.NoError(t, m.WriteFile(path))
	back, err := ReadManifest(path)
	require.NoError(t, err)
	require.Equal(t, m, back)
	require.Len(t, back.Garbage(), 1)

	_, err = ReadManifest(filepath.Join(t.TempDir(), "missing.json"))
	require.ErrorContains(t, err, "read manifest")
}
