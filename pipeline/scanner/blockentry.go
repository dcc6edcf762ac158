package scanner

import (
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Layouts of a block key, as the scanner counts them per store and round (Checkpoint.Layouts):
// the legacy layout (__uri__ and __lru_time__), the location layout (one L#<id> field per
// location), a key with both (judged and written by nothing, only reported), and a key with
// no location field at all.
const (
	LayoutLegacy    = subjects.LayoutLegacy
	LayoutLocation  = subjects.LayoutLocation
	LayoutAmbiguous = subjects.LayoutAmbiguous
	LayoutNone      = "none"
)

// BlockEntry is the one conversion of a scanned entry into what a batch carries; ok is false
// for a key with nothing to judge (no location field, or an empty __uri__: an absent block, as
// in KVCM): the entry is not published.
func BlockEntry(e *meta.Entry) (subjects.BlockEntry, bool) {
	be := subjects.BlockEntry{Key: e.BlockKey}
	switch e.Layout {
	case kvcm.LayoutLegacy:
		if len(e.URI) == 0 {
			return be, false
		}
		be.Layout = subjects.LayoutLegacy
	case kvcm.LayoutLocation:
		be.Layout = subjects.LayoutLocation
	case kvcm.LayoutAmbiguous:
		be.Layout = subjects.LayoutAmbiguous
	default:
		return be, false
	}
	be.URI, be.LRUTime = subjects.RawText(e.URI), e.LRUTime
	if len(e.Locations) > 0 {
		be.Locs = make([]subjects.LocField, len(e.Locations))
		for i, l := range e.Locations {
			be.Locs[i] = subjects.LocField{ID: subjects.RawText(l.ID), V: subjects.RawText(l.Value)}
		}
	}
	be.Fields = e.Others
	return be, true
}

// entryLayout names the layout a scanned entry was read in (one of the Layout* names).
func entryLayout(e *meta.Entry) string { return e.Layout.String() }
