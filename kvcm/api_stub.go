package kvcm

// THIS FILE IS THE API CONTRACT. Implementations replace the stub bodies; signatures are fixed.

import "time"

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
}

// Block is a decoded __uri__ field. Locations keep the stored member order.
type Block struct {
	Raw       []byte
	Locations []Location
	// unexported: spans of each member's key and value inside Raw, for re-encoding.
}

// DecodeBlock decodes a __uri__ value. Invalid JSON, a non-object top level, a location value
// that is not an object, a duplicated id or trailing non-space bytes give an error wrapping
// ErrCorruptURI. An empty input is also ErrCorruptURI (callers treat a missing/empty field as
// "block absent" before calling). Per-location problems are in Location.Err instead.
func DecodeBlock(raw []byte) (*Block, error) { panic("stub") }

// Find returns the location with map key id.
func (b *Block) Find(id string) (*Location, bool) { panic("stub") }

// WithStatus re-encodes the block with location id's "status" value replaced by s. Every other
// location's key and value bytes are written back unchanged; in the changed location only the
// status number token differs (all other members, known or not, keep their bytes and order).
// The output is compact: {"<key bytes>":<value bytes>,…} in stored order. Errors: ErrNoLocation,
// or ErrBadLocation when the location has no top-level "status" member or is not an object.
func (b *Block) WithStatus(id string, s Status) ([]byte, error) { panic("stub") }

// Without re-encodes the block without location id (others byte-for-byte, stored order).
// empty is true when no location remains (the caller then deletes the key). Error: ErrNoLocation.
func (b *Block) Without(id string) (out []byte, empty bool, err error) { panic("stub") }

// LocationWithStatus returns loc.Raw with its top-level "status" number token replaced by s
// (the same edit WithStatus makes), so a deleter can recognise its own earlier CAS.
func LocationWithStatus(raw []byte, s Status) ([]byte, error) { panic("stub") }

// Age returns the age of a location at now: from CreateTimeUs when present, else from the
// block's __lru_time__ (lruTime is the raw field, decimal µs). ok is false when the time is
// absent, unparsable, non-positive, or in the future (callers then skip: fail closed).
func Age(loc *Location, lruTime string, now time.Time) (age time.Duration, ok bool) { panic("stub") }
