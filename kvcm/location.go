package kvcm

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Spec is one LocationSpec: {"name":…,"uri":…}.
type Spec struct {
	Name string
	URI  string
}

// Location is one value of the __uri__ object.
type Location struct {
	// ID is the map key (decoded JSON string).
	ID string
	// Raw is the exact bytes of the location's JSON value as stored (a sub-slice of the block's
	// raw bytes; callers must not modify it).
	Raw []byte
	// Err is non-nil (wrapping ErrBadLocation) when the location cannot be judged. The
	// fields below are then best effort and must not be used to decide anything.
	Err error

	InnerID  string // "id" member; "" when absent
	Status   Status // "status"; 0 when absent
	Type     StorageType
	SpecSize uint64
	Specs    []Spec
	// CreateTimeUs is the optional "create_time" member (µs since the epoch), newer KVCMs only.
	CreateTimeUs  int64
	HasCreateTime bool
	// Guard is the location's migration_copy_guard member, nil when it has none. A location
	// with a guard, valid or not, is kept by every rule, and so is the source it names.
	Guard *CopyGuard
}

// Block is a decoded __uri__ field. Locations keep the stored member order.
type Block struct {
	Raw       []byte
	Locations []Location

	// doc is the immutable copy of Raw the spans index: re-encoding reads it, so a caller that
	// (wrongly) modifies Raw cannot make kvcm-gc write bytes it never judged.
	doc string
	// spans[i] locates Locations[i] inside doc.
	spans []locSpans
}

// locSpans is where one location sits in the block.
type locSpans struct {
	key    span // the member name token, quotes included, as stored
	value  span // the location object
	status span // the "status" number token; zero when absent
	specs  span // indexes of the location's specs while decoding
}

// DecodeBlock decodes a __uri__ value. Invalid JSON, a non-object top level, a location value
// that is not an object, a duplicated id or trailing non-space bytes give an error wrapping
// ErrCorruptURI. An empty input is also ErrCorruptURI (callers treat a missing/empty field as
// "block absent" before calling). Per-location problems are in Location.Err instead.
//
// A location is bad (Location.Err) when a known member (id, status, type, spec_size,
// location_specs and its name/uri, create_time) has the wrong JSON type or range, when any
// member name appears twice (names compare after decoding escapes, so "st\u0061tus" is
// "status"), or when its inner id differs from its key. Missing members take KVCM's defaults,
// except the inner id: without one the location is bad even under the key "" (KVCM always
// writes it). Unknown members are skipped.
func DecodeBlock(raw []byte) (*Block, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("decode __uri__: empty: %w", ErrCorruptURI)
	}
	b := &Block{Raw: raw, doc: string(raw)}
	d := locationDecoder{s: jsonScanner{doc: b.doc}}
	s := &d.s
	s.ws()
	if s.peek() != '{' {
		return nil, fmt.Errorf("decode __uri__: top level is not an object: %w", ErrCorruptURI)
	}
	more, err := s.beginObject()
	if more {
		b.Locations = make([]Location, 0, 4)
		b.spans = make([]locSpans, 0, 4)
	}
	for more && err == nil {
		var k span
		var esc bool
		if k, esc, err = s.key(); err != nil {
			break
		}
		id := unquote(b.doc, k, esc)
		if s.peek() != '{' {
			return nil, fmt.Errorf("decode __uri__: location %q is not an object: %w", id, ErrCorruptURI)
		}
		start := s.pos
		loc := Location{ID: id}
		var r locResult
		if r, err = d.location(&loc); err != nil {
			break
		}
		if !r.hasID {
			r.setBad("no id member")
		}
		if r.bad == "" && loc.InnerID != id {
			r.bad = fmt.Sprintf("inner id %q differs from its key", loc.InnerID)
		}
		if strings.IndexByte(id, 0) >= 0 {
			// KVCM reads a map key as a C string: it cuts the key at the NUL, so two keys
			// can collapse into one and the inner id no longer equals it.
			r.setBad("key holds a NUL (KVCM cuts the key there)")
		}
		if r.bad != "" {
			loc.Err = fmt.Errorf("decode location %q: %s: %w", id, r.bad, ErrBadLocation)
		}
		loc.Raw = raw[start:s.pos:s.pos]
		b.Locations = append(b.Locations, loc)
		b.spans = append(b.spans, locSpans{key: k, value: span{start, s.pos}, status: r.status, specs: r.specs})
		more, err = s.nextMember()
	}
	if err != nil {
		return nil, fmt.Errorf("decode __uri__: %v: %w", err, ErrCorruptURI)
	}
	s.ws()
	if s.pos != len(b.doc) {
		return nil, fmt.Errorf("decode __uri__: offset %d: trailing bytes after the object: %w", s.pos, ErrCorruptURI)
	}
	if id, dup := duplicateID(b.Locations); dup {
		return nil, fmt.Errorf("decode __uri__: location %q appears twice: %w", id, ErrCorruptURI)
	}
	// Specs of all locations share one array; slice it only now that it no longer grows.
	for i, sp := range b.spans {
		if sp.specs.ok() {
			b.Locations[i].Specs = d.specs[sp.specs.start:sp.specs.end:sp.specs.end]
		}
	}
	return b, nil
}

// duplicateID reports a location id that appears twice (ids compare decoded). Which of the
// two KVCM keeps depends on how it fills its map, so acting on either would be a guess.
func duplicateID(locs []Location) (string, bool) {
	if len(locs) <= 32 {
		for i := range locs {
			for j := i + 1; j < len(locs); j++ {
				if locs[i].ID == locs[j].ID {
					return locs[i].ID, true
				}
			}
		}
		return "", false
	}
	seen := make(map[string]struct{}, len(locs))
	for i := range locs {
		if _, dup := seen[locs[i].ID]; dup {
			return locs[i].ID, true
		}
		seen[locs[i].ID] = struct{}{}
	}
	return "", false
}

// Find returns the location with map key id.
func (b *Block) Find(id string) (*Location, bool) {
	if i := b.index(id); i >= 0 {
		return &b.Locations[i], true
	}
	return nil, false
}

func (b *Block) index(id string) int {
	for i := range b.Locations {
		if b.Locations[i].ID == id {
			return i
		}
	}
	return -1
}

// WithStatus re-encodes the block with location id's "status" value replaced by s. Every other
// location's key and value bytes are written back unchanged; in the changed location only the
// status number token differs (all other members, known or not, keep their bytes and order).
// The output is compact: {"<key bytes>":<value bytes>,…} in stored order. Errors: ErrNoLocation,
// or ErrBadLocation when the location has no top-level "status" member or is not an object.
//
// A location with Err set is refused too (its Err is returned): kvcm-gc never edits what it
// could not judge.
func (b *Block) WithStatus(id string, s Status) ([]byte, error) {
	i := b.index(id)
	if i < 0 {
		return nil, fmt.Errorf("set status of location %q: %w", id, ErrNoLocation)
	}
	if err := b.Locations[i].Err; err != nil {
		return nil, fmt.Errorf("set status: %w", err)
	}
	if i >= len(b.spans) {
		return nil, fmt.Errorf("set status of location %q: block was not built by DecodeBlock: %w", id, ErrBadLocation)
	}
	if !b.spans[i].status.ok() {
		return nil, fmt.Errorf("set status of location %q: no status member: %w", id, ErrBadLocation)
	}
	return b.encode(-1, i, s), nil
}

// Without re-encodes the block without location id (others byte-for-byte, stored order).
// empty is true when no location remains (the caller then deletes the key). Error: ErrNoLocation.
//
// A bad location can be removed: the bytes that were judged are the caller's business.
func (b *Block) Without(id string) (out []byte, empty bool, err error) {
	i := b.index(id)
	if i < 0 {
		return nil, false, fmt.Errorf("remove location %q: %w", id, ErrNoLocation)
	}
	if len(b.spans) != len(b.Locations) {
		return nil, false, fmt.Errorf("remove location %q: block was not built by DecodeBlock: %w", id, ErrBadLocation)
	}
	return b.encode(i, -1, 0), len(b.Locations) == 1, nil
}

// encode writes the block compactly in stored order, leaving out location skip and giving
// location target the status st (-1: none). Whitespace between the block's members is
// dropped; everything inside each member's key and value is copied as stored.
func (b *Block) encode(skip, target int, st Status) []byte {
	n := 2
	for i, sp := range b.spans {
		if i != skip {
			n += sp.key.end - sp.key.start + sp.value.end - sp.value.start + 2
		}
	}
	if target >= 0 {
		n += 20 // the longest int64 decimal, "-9223372036854775808"
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	first := true
	for i, sp := range b.spans {
		if i == skip {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, b.doc[sp.key.start:sp.key.end]...)
		out = append(out, ':')
		if i == target {
			out = append(out, b.doc[sp.value.start:sp.status.start]...)
			out = strconv.AppendInt(out, int64(st), 10)
			out = append(out, b.doc[sp.status.end:sp.value.end]...)
			continue
		}
		out = append(out, b.doc[sp.value.start:sp.value.end]...)
	}
	return append(out, '}')
}

// LocationWithStatus returns loc.Raw with its top-level "status" number token replaced by s
// (the same edit WithStatus makes), so a deleter can recognise its own earlier CAS.
//
// raw must be one location object as DecodeBlock accepts it (whitespace around it is kept);
// a location with a member problem gives ErrBadLocation, as WithStatus would refuse it. The
// inner id cannot be checked against a key here.
func LocationWithStatus(raw []byte, s Status) ([]byte, error) {
	d := locationDecoder{s: jsonScanner{doc: string(raw)}}
	d.s.ws()
	if d.s.peek() != '{' {
		return nil, fmt.Errorf("set status: location is not an object: %w", ErrBadLocation)
	}
	var loc Location
	r, err := d.location(&loc)
	if err != nil {
		return nil, fmt.Errorf("set status: %v: %w", err, ErrBadLocation)
	}
	d.s.ws()
	if d.s.pos != len(d.s.doc) {
		return nil, fmt.Errorf("set status: offset %d: trailing bytes after the location: %w", d.s.pos, ErrBadLocation)
	}
	if r.bad != "" {
		return nil, fmt.Errorf("set status of location %q: %s: %w", loc.InnerID, r.bad, ErrBadLocation)
	}
	if !r.status.ok() {
		return nil, fmt.Errorf("set status of location %q: no status member: %w", loc.InnerID, ErrBadLocation)
	}
	doc := d.s.doc
	out := make([]byte, 0, len(doc)+20)
	out = append(out, doc[:r.status.start]...)
	out = strconv.AppendInt(out, int64(s), 10)
	return append(out, doc[r.status.end:]...), nil
}

// locationDecoder decodes location objects; its scratch space is reused across the
// locations of one block.
type locationDecoder struct {
	s jsonScanner
	// names and nameSet hold the member names seen in the current object.
	names   []string
	nameSet map[string]struct{}
	// specs holds the specs of every location decoded so far, in order.
	specs []Spec
}

// locResult is what location reports besides the decoded fields.
type locResult struct {
	status span   // the status token, zero when absent
	specs  span   // the location's specs: indexes into locationDecoder.specs
	bad    string // why the location cannot be judged; "" when it can
	hasID  bool   // an "id" member was present
}

// setBad keeps the first reason.
func (r *locResult) setBad(format string, args ...any) {
	if r.bad == "" {
		r.bad = fmt.Sprintf(format, args...)
	}
}

// location decodes the object at s.pos into loc (all but ID, Raw and Err). err is a syntax
// error (the whole block is corrupt); a member problem only makes the location bad.
func (d *locationDecoder) location(loc *Location) (r locResult, err error) {
	s := &d.s
	if d.names == nil {
		d.names = make([]string, 0, 8) // KVCM writes 5 members
	}
	d.names, d.nameSet = d.names[:0], nil
	nspecs := len(d.specs)
	more, err := s.beginObject()
	for more && err == nil {
		var k span
		var esc bool
		if k, esc, err = s.key(); err != nil {
			return r, err
		}
		name := unquote(s.doc, k, esc)
		if d.seen(name) {
			r.setBad("member %q appears twice", name)
		}
		switch name {
		case "id":
			r.hasID = true
			var isStr bool
			if loc.InnerID, isStr, err = d.stringValue(); err == nil && !isStr {
				r.setBad("member id is not a string")
			}
		case "status":
			start := s.pos
			var v int64
			var ok bool
			if v, ok, err = d.intValue(&r, name); err != nil || !ok {
				break
			}
			if v < math.MinInt32 || v > math.MaxInt32 {
				// KVCM reads status through an int: 4294967299 would be SERVING there.
				r.setBad("member status %d is outside int32 (KVCM would truncate it)", v)
			}
			loc.Status = Status(v)
			r.status = span{start, s.pos}
		case "type":
			var v uint64
			v, err = d.uintValue(&r, name)
			if err == nil && v > math.MaxUint8 {
				// KVCM reads type through a uint8: 260 would be type 4 (file) there.
				r.setBad("member type %d is outside uint8 (KVCM would truncate it)", v)
			}
			loc.Type = StorageType(v)
		case "spec_size":
			loc.SpecSize, err = d.uintValue(&r, name)
		case "create_time":
			if loc.CreateTimeUs, _, err = d.intValue(&r, name); err == nil {
				loc.HasCreateTime = true
			}
		case "location_specs":
			err = d.locationSpecs(&r)
		case FieldCopyGuard:
			loc.Guard, err = d.copyGuard()
		default:
			err = s.skipValue()
		}
		if err != nil {
			return r, err
		}
		more, err = s.nextMember()
	}
	r.specs = span{nspecs, len(d.specs)}
	return r, err
}

// seen records a member name of the current object and reports whether it was already there.
func (d *locationDecoder) seen(name string) bool {
	if d.nameSet != nil {
		_, dup := d.nameSet[name]
		d.nameSet[name] = struct{}{}
		return dup
	}
	for _, n := range d.names {
		if n == name {
			return true
		}
	}
	d.names = append(d.names, name)
	if len(d.names) > 32 { // a hostile object with many members must not cost O(n²)
		d.nameSet = make(map[string]struct{}, 2*len(d.names))
		for _, n := range d.names {
			d.nameSet[n] = struct{}{}
		}
	}
	return false
}

// stringValue scans the value at pos; isStr is false (and the value skipped) when it is not
// a string.
func (d *locationDecoder) stringValue() (v string, isStr bool, err error) {
	s := &d.s
	if s.peek() != '"' {
		return "", false, s.skipValue()
	}
	start := s.pos
	esc, err := s.str()
	if err != nil {
		return "", true, err
	}
	return unquote(s.doc, span{start, s.pos}, esc), true, nil
}

// numberToken scans the value at pos and returns its text when it is a number ("" and the
// value skipped otherwise).
func (d *locationDecoder) numberToken() (string, error) {
	s := &d.s
	if c := s.peek(); c != '-' && (c < '0' || c > '9') {
		return "", s.skipValue()
	}
	start := s.pos
	_, err := s.number()
	return s.doc[start:s.pos], err
}

// uintValue scans an unsigned integer member; anything else makes the location bad.
func (d *locationDecoder) uintValue(r *locResult, name string) (uint64, error) {
	tok, err := d.numberToken()
	if err != nil {
		return 0, err
	}
	v, ok := uintToken(tok)
	if !ok {
		r.setBad("member %s is not a uint64", name)
	}
	return v, nil
}

// intValue reads the number of member name as an int64; ok false (the location bad) when it
// is not one.
func (d *locationDecoder) intValue(r *locResult, name string) (v int64, ok bool, err error) {
	tok, err := d.numberToken()
	if err != nil {
		return 0, false, err
	}
	if v, ok = intToken(tok); !ok {
		r.setBad("member %s is not an int64", name)
	}
	return v, ok, nil
}

// locationSpecs scans the location_specs array, appending to d.specs.
func (d *locationDecoder) locationSpecs(r *locResult) error {
	s := &d.s
	if s.peek() != '[' {
		r.setBad("member location_specs is not an array")
		return s.skipValue()
	}
	more, err := s.beginArray()
	for more && err == nil {
		if s.peek() == '{' {
			err = d.spec(r)
		} else {
			r.setBad("a location spec is not an object")
			err = s.skipValue()
		}
		if err != nil {
			return err
		}
		more, err = s.nextElement()
	}
	return err
}

// spec scans one {name, uri} object. Unknown members are tolerated; a repeated name or uri
// makes the location bad.
func (d *locationDecoder) spec(r *locResult) error {
	s := &d.s
	var sp Spec
	var hasName, hasURI bool
	more, err := s.beginObject()
	for more && err == nil {
		var k span
		var esc bool
		if k, esc, err = s.key(); err != nil {
			return err
		}
		switch name := unquote(s.doc, k, esc); name {
		case "name":
			err = d.specString(r, name, &sp.Name, &hasName)
		case "uri":
			err = d.specString(r, name, &sp.URI, &hasURI)
		default:
			err = s.skipValue()
		}
		if err != nil {
			return err
		}
		more, err = s.nextMember()
	}
	if err == nil {
		if d.specs == nil {
			d.specs = make([]Spec, 0, 4)
		}
		d.specs = append(d.specs, sp)
	}
	return err
}

// specString reads the string of spec member name into v; had says whether the spec had the
// member already (a repeated one makes the location bad) and is set.
func (d *locationDecoder) specString(r *locResult, name string, v *string, had *bool) error {
	if *had {
		r.setBad("spec member %s appears twice", name)
	}
	*had = true
	var isStr bool
	var err error
	if *v, isStr, err = d.stringValue(); err == nil && !isStr {
		r.setBad("spec member %s is not a string", name)
	}
	return err
}
