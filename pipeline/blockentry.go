package pipeline

import (
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// blockEntry is a scanned block as a batch carries it; ok is false for a key with no location
// field at all (nothing to judge).
func blockEntry(e *meta.Entry) (subjects.BlockEntry, bool) {
	be := subjects.BlockEntry{Key: e.BlockKey}
	switch e.Layout {
	case kvcm.LayoutLegacy:
		if len(e.URI) == 0 {
			return be, false // an empty __uri__ is an absent block, as in KVCM
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
