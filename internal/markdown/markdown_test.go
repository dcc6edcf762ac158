package markdown

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeadings(t *testing.T) {
	text := "# Title\n\n## 8. Safety invariants\ntext # not a heading\n### 8.1 Exact bytes\n" +
		"```sh\n# a shell comment\n~~~\n# still code\n```\n####### seven\n#no space\n##\n" +
		"~~~\n```\n# code in a tilde fence\n~~~\n## KvcmGcStoreStuck\n"
	got := Headings(text)
	want := []Heading{
		{Level: 1, Title: "Title", Anchor: "title", Line: 1},
		{Level: 2, Title: "8. Safety invariants", Anchor: "8-safety-invariants", Line: 3},
		{Level: 3, Title: "8.1 Exact bytes", Anchor: "81-exact-bytes", Line: 5},
		{Level: 2, Title: "KvcmGcStoreStuck", Anchor: "kvcmgcstorestuck", Line: 18},
	}
	require.Equal(t, want, got)
	require.Equal(t, map[string]bool{"title": true, "8-safety-invariants": true, "81-exact-bytes": true, "kvcmgcstorestuck": true},
		Anchors(text))
}

func TestAnchor(t *testing.T) {
	for title, want := range map[string]string{
		"4.2 The walk: `scan_interval`":       "42-the-walk-scan_interval",
		"2.6 Registry, and KVCM's accounting": "26-registry-and-kvcms-accounting",
		"6.3 Step 3: delete_delay":            "63-step-3-delete_delay",
		"Größe — Überblick":                   "größe--überblick",
	} {
		require.Equal(t, want, Anchor(title), title)
	}
}
