package kvcm

import "iter"

// What a block names. Every reader of a block's locations (the prober's rules, the deleter's
// search for data another location still names, the sweeper's file judge, the guards' pins,
// the unregistered-instance count and collect, replay) starts from the same question: which
// locations does this block hold, in either layout, and what could not be read. ReadParts is the
// one answer; each caller keeps its own policy for what it cannot read.

// PartKind says what one part of a block is.
type PartKind uint8

const (
	// PartLocation is a location whose JSON decodes. Its Err may still say it cannot be
	// judged (ErrBadLocation: a bad member, an inner id that differs); what it names is then
	// best effort.
	PartLocation PartKind = iota
	// PartTombstone is an L# field with an empty value: KVCM's tombstone of a location, which
	// its reads skip. It names nothing, and nothing writes it.
	PartTombstone
	// PartCorrupt is stored bytes that do not decode: a location field's value
	// (ErrCorruptLocation), or, in the legacy layout, the whole __uri__ (ErrCorruptURI, ID
	// ""). What they name is unknown. Tell the two apart by Layout, never by ID: a field
	// "L#" has an empty id too.
	PartCorrupt
)

// String returns "location", "tombstone" or "corrupt".
func (k PartKind) String() string {
	switch k {
	case PartLocation:
		return "location"
	case PartTombstone:
		return "tombstone"
	case PartCorrupt:
		return "corrupt"
	}
	return "part(?)"
}

// Part is one part of a block as Parts reads it.
type Part struct {
	Kind PartKind
	// Layout is the kind of field the part came from: LayoutLegacy (__uri__) or
	// LayoutLocation (an L# field). An ambiguous block yields parts of both.
	Layout Layout
	// ID is the location id; "" for a corrupt __uri__ (and for a field named "L#").
	ID string
	// Raw is the exact stored bytes: the location's JSON (a sub-slice of __uri__ in the
	// legacy layout), the whole __uri__ when it is corrupt, empty for a tombstone.
	Raw []byte
	// Loc is the decoded location (PartLocation only).
	Loc Location
	// Err says why the bytes do not decode (PartCorrupt only).
	Err error
}

// LocationFields are a block's L# fields as (location id, value) pairs, in stored order.
type LocationFields interface {
	LocationFieldCount() int
	LocationFieldAt(i int) (id string, value []byte)
}

// Parts reads what a block holds, part by part (ReadParts).
type Parts struct {
	layout Layout
	uri    []byte
	fields LocationFields
	// legacy is the decoded __uri__ (nil until read); next the index of the next part: a
	// legacy location, then (ambiguous) a field.
	legacy      *Block
	legacyParts int
	next        int
	// except are location ids Next passes over (Except).
	except map[string]bool
}

// ReadParts reads what a block holds from its layout (LayoutOf), its raw __uri__ and its L#
// fields (nil for none). Layout gives the block's effective layout, and Next its parts in
// stored order:
//
//   - LayoutNone: no location at all (no location field, or an empty __uri__, which KVCM
//     reads as an absent block); no part.
//   - LayoutLegacy: the locations of __uri__, or one PartCorrupt (ID "") when it does not
//     decode.
//   - LayoutLocation: one part per L# field: a location, a tombstone or a corrupt value.
//   - LayoutAmbiguous (both kinds of field, or a layout this version does not know): the
//     legacy parts, then the location parts. Which of them KVCM reads depends on its
//     version, so such a block is judged and written by nothing (DESIGN §8.9); the parts are
//     for counting and explaining only.
//
// Nothing is decoded until Next asks for it: a caller that stops early decodes nothing
// further. Reading parts allocates nothing beyond what the decoders do.
func ReadParts(layout Layout, uri []byte, fields LocationFields) Parts {
	switch {
	case layout == LayoutNone, layout == LayoutLegacy && len(uri) == 0:
		return Parts{layout: LayoutNone, legacyParts: -1}
	case layout == LayoutLegacy:
		fields = nil
	case layout == LayoutLocation:
		uri = nil
	default:
		layout = LayoutAmbiguous
	}
	return Parts{layout: layout, uri: uri, fields: fields, legacyParts: -1}
}

// Except makes Next pass over the locations whose id is in ids, without decoding those of
// the location layout: a caller that knows them already (the deleter, the locations it
// clears) reads only the others. A corrupt __uri__ is never passed over.
func (ps *Parts) Except(ids map[string]bool) *Parts {
	ps.except = ids
	return ps
}

// Layout is the block's effective layout (see ReadParts).
func (ps *Parts) Layout() Layout { return ps.layout }

// Next returns the next part, or false when there is none left.
func (ps *Parts) Next() (Part, bool) {
	if ps.legacyParts < 0 {
		ps.legacyParts = 0
		if len(ps.uri) > 0 {
			blk, err := DecodeBlock(ps.uri)
			if err != nil {
				ps.legacyParts = 1
				ps.next++
				return Part{Kind: PartCorrupt, Layout: LayoutLegacy, Raw: ps.uri, Err: err}, true
			}
			ps.legacy, ps.legacyParts = blk, len(blk.Locations)
		}
	}
	for ps.next < ps.legacyParts {
		l := &ps.legacy.Locations[ps.next]
		ps.next++
		if !ps.except[l.ID] {
			return Part{Kind: PartLocation, Layout: LayoutLegacy, ID: l.ID, Raw: l.Raw, Loc: *l}, true
		}
	}
	var id string
	var v []byte
	for {
		i := ps.next - ps.legacyParts
		if ps.fields == nil || i >= ps.fields.LocationFieldCount() {
			return Part{}, false
		}
		ps.next++
		if id, v = ps.fields.LocationFieldAt(i); !ps.except[id] {
			break
		}
	}
	p := Part{Kind: PartTombstone, Layout: LayoutLocation, ID: id, Raw: v}
	if len(v) > 0 {
		if loc, err := DecodeLocation(id, v); err != nil {
			p.Kind, p.Err = PartCorrupt, err
		} else {
			p.Kind, p.Loc = PartLocation, loc
		}
	}
	return p, true
}

// All ranges over the parts Next has not returned yet.
func (ps *Parts) All() iter.Seq[Part] {
	return func(yield func(Part) bool) {
		for p, ok := ps.Next(); ok; p, ok = ps.Next() {
			if !yield(p) {
				return
			}
		}
	}
}
