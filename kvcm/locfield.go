package kvcm

import (
	"errors"
	"fmt"
)

// ErrCorruptLocation: the value of a location field (location layout) is not one JSON
// object: invalid JSON, another JSON type, or bytes after the object. KVCM fails every
// whole-key read of such a block (EC_CORRUPTION); kvcm-gc reports the field and never
// touches it.
var ErrCorruptLocation = errors.New("corrupt location field")

// DecodeLocation decodes the value of location field L#<id> of the location layout. The
// location's ID is id (the field name's suffix) and its Raw is raw itself.
//
// The value is held to the same rules as one location of a legacy __uri__ (DecodeBlock): a
// syntax error, a value that is not an object, or trailing bytes wrap ErrCorruptLocation; a
// member problem, a missing inner id or one that differs from id, or an empty id make the
// location bad (Location.Err wraps ErrBadLocation). That is stricter than KVCM wherever KVCM
// is lax (first duplicate wins, a leading BOM or a NUL after the object is accepted, numbers
// are truncated to int32/uint8): a value KVCM could read otherwise than kvcm-gc does is never
// judged.
//
// An empty value is KVCM's tombstone of a location field, which its reads skip: the caller
// must recognise it before calling (DecodeLocation reports it as corrupt).
func DecodeLocation(id string, raw []byte) (Location, error) {
	if len(raw) == 0 {
		return Location{}, fmt.Errorf("decode location field %q: empty value: %w", LocationField(id), ErrCorruptLocation)
	}
	d := locationDecoder{s: jsonScanner{doc: string(raw)}}
	s := &d.s
	s.ws()
	if s.peek() != '{' {
		return Location{}, fmt.Errorf("decode location field %q: not an object: %w", LocationField(id), ErrCorruptLocation)
	}
	loc := Location{ID: id, Raw: raw}
	r, err := d.location(&loc)
	if err == nil {
		s.ws()
		if s.pos != len(s.doc) {
			err = s.errorf("trailing bytes after the object")
		}
	}
	if err != nil {
		return Location{}, fmt.Errorf("decode location field %q: %v: %w", LocationField(id), err, ErrCorruptLocation)
	}
	switch {
	case id == "":
		r.setBad("empty location id")
	case !r.hasID:
		r.setBad("no id member")
	case loc.InnerID != id:
		r.setBad("inner id %q differs from its field", loc.InnerID)
	}
	if r.bad != "" {
		loc.Err = fmt.Errorf("decode location field %q: %s: %w", LocationField(id), r.bad, ErrBadLocation)
	}
	if r.specs.ok() {
		loc.Specs = d.specs[r.specs.start:r.specs.end:r.specs.end]
	}
	return loc, nil
}
