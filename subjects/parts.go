package subjects

import "github.com/kvcm-gc/kvcm-gc/kvcm"

// BlockLayout is the kvcm.Layout a batch's block entry was read in: legacy when the layout is
// absent (a batch of a scanner that read __uri__ only), ambiguous for any name this version
// does not know (judged by nothing).
func (be *BlockEntry) BlockLayout() kvcm.Layout {
	switch be.Layout {
	case "", LayoutLegacy:
		return kvcm.LayoutLegacy
	case LayoutLocation:
		return kvcm.LayoutLocation
	}
	return kvcm.LayoutAmbiguous
}

// Parts reads the entry's locations in either layout, as the batch carries them
// (kvcm.ReadParts).
func (be *BlockEntry) Parts() kvcm.Parts { return kvcm.ReadParts(be.BlockLayout(), be.URI, be) }

// LocationFieldCount is the number of the entry's L# fields (kvcm.LocationFields).
func (be *BlockEntry) LocationFieldCount() int { return len(be.Locs) }

// LocationFieldAt is the entry's i-th L# field (kvcm.LocationFields).
func (be *BlockEntry) LocationFieldAt(i int) (string, []byte) {
	return string(be.Locs[i].ID), be.Locs[i].V
}
