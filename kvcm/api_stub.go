package kvcm

// THIS FILE IS THE API CONTRACT. Implementations replace the stub bodies; signatures are fixed.

import (
	"errors"
	"time"
)

// Status is a CacheLocationStatus (int32 in KVCM, Int64 in its JSON).
type Status int64

const (
	StatusNotFound Status = 0
	StatusNew      Status = 1
	StatusWriting  Status = 2
	StatusServing  Status = 3
	StatusDeleting Status = 4
)

// String returns KVCM's name (CLS_WRITING, …) or CLS_INVALID.
func (s Status) String() string { panic("stub") }

// StorageType is a DataStorageType (uint8 in KVCM, Uint64 in its JSON).
type StorageType uint64

const (
	TypeUnknown   StorageType = 0
	TypeHF3FS     StorageType = 1
	TypeMooncake  StorageType = 2
	TypePace      StorageType = 3 // TAIR_MEMPOOL
	TypeFile      StorageType = 4 // NFS
	TypeVCNSHF3FS StorageType = 5
)

// String returns KVCM's storage type string: unknown, hf3fs, mooncake, pace, file, vcns_hf3fs
// ("unknown" for any other number).
func (t StorageType) String() string { panic("stub") }

// ParseStorageType maps KVCM's type string (as in StorageConfig JSON "type") to a StorageType.
func ParseStorageType(s string) (StorageType, bool) { panic("stub") }

// Sentinel errors.
var (
	// ErrCorruptURI: the __uri__ field is not a JSON object of objects (invalid JSON, not an
	// object, a location value that is not an object, a duplicated location id, trailing bytes).
	// KVCM itself cannot parse such a block; kvcm-gc reports it and never touches it.
	ErrCorruptURI = errors.New("corrupt __uri__")
	// ErrBadLocation: one location decodes as an object but is not usable (inner id differs from
	// its map key, a known member has the wrong JSON type, …). Other locations are unaffected.
	ErrBadLocation = errors.New("bad location")
	// ErrNoLocation: the requested location id is not in the block.
	ErrNoLocation = errors.New("no such location")
	ErrBadKey     = errors.New("bad block key")
	ErrBadDataURI = errors.New("bad data storage uri")
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

// KeyPrefix returns "kvcache:instance_<id>:cache_".
func KeyPrefix(instanceID string) string { panic("stub") }

// BlockKey returns the Redis key of a block: KeyPrefix(instanceID) + decimal(blockKey).
func BlockKey(instanceID string, blockKey int64) string { panic("stub") }

// ParseBlockKey parses the Redis key of a block of instanceID. The rest after the prefix must
// be a canonical signed int64 decimal (what std::to_string writes: no '+', no leading zeros,
// no "-0", no spaces); anything else wraps ErrBadKey.
func ParseBlockKey(instanceID, key string) (int64, error) { panic("stub") }

// ScanPattern returns the SCAN MATCH pattern for an instance's blocks, the id glob-escaped.
func ScanPattern(instanceID string) string { panic("stub") }

// GlobEscape escapes Redis glob metacharacters (\ * ? [ ]) with a backslash.
func GlobEscape(s string) string { panic("stub") }

// EncodeToken encodes an arbitrary non-empty string into one NATS subject token, bijectively:
// bytes in [A-Za-z0-9_-] are kept, every other byte becomes %XX (upper-case hex).
// The empty string encodes to "%" (never produced otherwise).
func EncodeToken(s string) string { panic("stub") }

// DecodeToken inverts EncodeToken; it rejects any token EncodeToken cannot produce
// (lower-case hex, an escaped safe byte, a stray %), so the encoding is a bijection.
func DecodeToken(tok string) (string, error) { panic("stub") }

// DataURI is a data-storage URI as KVCM's StandardUri parses it:
// scheme://[userinfo@]host[:port][/path][?k=v&…]. No percent-decoding. The host is the
// storage's global unique name.
type DataURI struct {
	Scheme   string
	UserInfo string
	Host     string
	Port     uint16 // 0 when absent
	Path     string // starts with '/' when present
	Params   map[string]string
	// ParamOrder lists the parameter names in the order they appeared.
	ParamOrder []string
}

// ParseDataURI parses s; errors wrap ErrBadDataURI.
func ParseDataURI(s string) (DataURI, error) { panic("stub") }

// Uint returns a decimal uint64 parameter: ok=false when absent; err when present but not a
// fully consumed decimal (as std::from_chars + full-consumption check).
func (u DataURI) Uint(name string) (v uint64, ok bool, err error) { panic("stub") }

// Shared reports whether the data object behind this URI may hold other blocks too:
// a "blkid" parameter is present. (Callers also consult the storage's key_count_per_file.)
func (u DataURI) Shared() bool { panic("stub") }
