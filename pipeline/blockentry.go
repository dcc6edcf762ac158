package pipeline

import (
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Layouts of a block key, as the scanner counts them per store and round (Checkpoint.Layouts):
// the legacy layout (__uri__ and __lru_time__), the location layout (one L#<id> field per
// location) and a key with both (judged and written by nothing, only reported).
const (
	LayoutLegacy    = "legacy"
	LayoutLocation  = "location"
	LayoutAmbiguous = "ambiguous"
)

// blockEntry is the one conversion of a scanned entry into what a batch carries. ok is false
// when there is nothing to judge (an absent or empty block): the entry is not published.
func blockEntry(e *meta.Entry) (subjects.BlockEntry, bool) {
	if len(e.URI) == 0 {
		return subjects.BlockEntry{}, false
	}
	return subjects.BlockEntry{Key: e.BlockKey, URI: subjects.RawText(e.URI), LRUTime: e.LRUTime}, true
}

// entryLayout names the layout a scanned entry was read in (one of the Layout* names).
func entryLayout(*meta.Entry) string { return LayoutLegacy }
