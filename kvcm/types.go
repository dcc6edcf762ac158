package kvcm

import "errors"

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
func (s Status) String() string {
	switch s {
	case StatusNotFound:
		return "CLS_NOT_FOUND"
	case StatusNew:
		return "CLS_NEW"
	case StatusWriting:
		return "CLS_WRITING"
	case StatusServing:
		return "CLS_SERVING"
	case StatusDeleting:
		return "CLS_DELETING"
	}
	return "CLS_INVALID"
}

// StorageType is a DataStorageType (uint8 in KVCM, Uint64 in its JSON).
type StorageType uint64

const (
	TypeUnknown   StorageType = 0
	TypeHF3FS     StorageType = 1
	TypeMooncake  StorageType = 2
	TypePace      StorageType = 3 // TAIR_MEMPOOL
	TypeFile      StorageType = 4 // NFS
	TypeVCNSHF3FS StorageType = 5
	TypeDummy     StorageType = 6
	TypeVineyard  StorageType = 7
	// Values from 8 on are KVCM's EventReport kinds (not settled upstream: RTP_LLM, VLLM,
	// …). kvcm-gc accepts any uint8 and judges none of them storage-missing.
)

// Probed reports whether locations of type t may enter the storage-missing rule at all:
// only the storages whose data kvcm-gc can look at (hf3fs, mooncake, pace, file,
// vcns_hf3fs). Unknown, dummy, vineyard and every EventReport kind never do.
func (t StorageType) Probed() bool { return t >= TypeHF3FS && t <= TypeVCNSHF3FS }

// String returns KVCM's storage type string: unknown, hf3fs, mooncake, pace, file, vcns_hf3fs,
// dummy, vineyard ("unknown" for any other number).
func (t StorageType) String() string {
	switch t {
	case TypeHF3FS:
		return "hf3fs"
	case TypeMooncake:
		return "mooncake"
	case TypePace:
		return "pace"
	case TypeFile:
		return "file"
	case TypeVCNSHF3FS:
		return "vcns_hf3fs"
	case TypeDummy:
		return "dummy"
	case TypeVineyard:
		return "vineyard"
	}
	return "unknown"
}

// ParseStorageType maps KVCM's type string (as in StorageConfig JSON "type") to a StorageType.
// The match is exact (KVCM compares case-sensitively); "unknown" maps to TypeUnknown with
// ok=true, any other unrecognised string to TypeUnknown with ok=false.
func ParseStorageType(s string) (StorageType, bool) {
	switch s {
	case "unknown":
		return TypeUnknown, true
	case "hf3fs":
		return TypeHF3FS, true
	case "mooncake":
		return TypeMooncake, true
	case "pace":
		return TypePace, true
	case "file":
		return TypeFile, true
	case "vcns_hf3fs":
		return TypeVCNSHF3FS, true
	case "dummy":
		return TypeDummy, true
	case "vineyard":
		return TypeVineyard, true
	}
	return TypeUnknown, false
}

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
	// ErrBadKey: a Redis key is not a block key of the instance (wrong prefix, or a rest that is
	// not a canonical int64 decimal). Scanners skip and count such keys.
	ErrBadKey = errors.New("bad block key")
	// ErrBadDataURI: a location spec's URI does not parse as KVCM's StandardUri does.
	ErrBadDataURI = errors.New("bad data storage uri")
)
