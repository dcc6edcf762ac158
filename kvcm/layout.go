package kvcm

import (
	"fmt"
	"strings"
)

// Layout is how a block hash holds its locations. KVCM changed it in May 2026 (#138, #187):
// before, one field __uri__ held a JSON object of every location; since, each location is a
// field of its own, L#<location id>. Deployments of both versions exist, and a block written
// by both (a key touched before and after an upgrade) holds both kinds of field.
type Layout uint8

const (
	// LayoutNone: the key holds no location field at all (only properties such as
	// BP#prev_key, or a legacy __lru_time__ without __uri__). Nothing to judge.
	LayoutNone Layout = iota
	// LayoutLegacy: __uri__ and no L# field (KVCM f6aa2b2 and earlier).
	LayoutLegacy
	// LayoutLocation: L# fields and no __uri__ (KVCM since #138/#187).
	LayoutLocation
	// LayoutAmbiguous: both __uri__ and L# fields. KVCM of either version reads only its own
	// kind and ignores the other, so which locations are live cannot be told from Redis:
	// such a key is judged by nothing and written by nothing (DESIGN §8.9).
	LayoutAmbiguous
)

// Field names of a KVCM block hash.
const (
	// FieldURI is the legacy layout's location map.
	FieldURI = "__uri__"
	// FieldLRUTime is the legacy layout's last-write time (µs, decimal).
	FieldLRUTime = "__lru_time__"
	// LocationFieldPrefix starts the name of every location field of the location layout:
	// L#<location id> holds that location's JSON.
	LocationFieldPrefix = "L#"
	// InterimLocationPrefix starts the location fields KVCM wrote between #138 and #187
	// (__loc__<id>); today's KVCM no longer reads them.
	InterimLocationPrefix = "__loc__"
	// FieldPrevKey is the location layout's link to the previous block of a write request
	// (decimal, or "" for the first). KVCM writes it only when it creates the key.
	FieldPrevKey = "BP#prev_key"
)

// String returns "none", "legacy", "location" or "ambiguous".
func (l Layout) String() string {
	switch l {
	case LayoutNone:
		return "none"
	case LayoutLegacy:
		return "legacy"
	case LayoutLocation:
		return "location"
	case LayoutAmbiguous:
		return "ambiguous"
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// ParseLayout is String's inverse.
func ParseLayout(s string) (Layout, bool) {
	for l := LayoutNone; l <= LayoutAmbiguous; l++ {
		if l.String() == s {
			return l, true
		}
	}
	return LayoutNone, false
}

// LayoutOf decides a key's layout from its field names: whether it has a __uri__ field
// (empty or not), how many L# fields (tombstones included), and whether it has a field of
// KVCM's interim location layout (__loc__<id>, between #138 and #187). Presence decides, not
// content: an empty __uri__ beside L# fields is still ambiguous, and so is any key with an
// interim field, since the KVCM that wrote it may still read it.
func LayoutOf(hasURI bool, locationFields int, interim bool) Layout {
	switch {
	case interim || hasURI && locationFields > 0:
		return LayoutAmbiguous
	case hasURI:
		return LayoutLegacy
	case locationFields > 0:
		return LayoutLocation
	}
	return LayoutNone
}

// LayoutOfFields is LayoutOf for a key read whole, its fields by name.
func LayoutOfFields(fields map[string]string) Layout {
	_, hasURI := fields[FieldURI]
	n, interim := 0, false
	for f := range fields {
		if _, ok := LocationID(f); ok {
			n++
		}
		interim = interim || strings.HasPrefix(f, InterimLocationPrefix)
	}
	return LayoutOf(hasURI, n, interim)
}

// LocationField returns the name of location id's field, L#<id>.
func LocationField(id string) string { return LocationFieldPrefix + id }

// LocationID returns the location id of a location field name; ok is false for any other
// field.
func LocationID(field string) (id string, ok bool) {
	return strings.CutPrefix(field, LocationFieldPrefix)
}
