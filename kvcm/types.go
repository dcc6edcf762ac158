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

// StorageType is a DataStorageType (uint8 in KVCM, Uint64 in its JSON), numbered as today's
// KVCM numbers it (data_storage/storage_config.h, meta_service.proto after #249 and #293).
//
// The numbers were not always these: before #249, 7 was vineyard (ST_VINEYARD); a stored
// snapshot of unknown lineage numbered 8 and 9 RTP_LLM and VLLM. A number alone therefore
// never decides anything that deletes: a location is probed only where its type equals the
// type its storage is registered with (the registry's type string), and a URI's scheme is
// never read as a type (pace_ssd's URIs say pace://).
type StorageType uint64

const (
	TypeUnknown   StorageType = 0
	TypeHF3FS     StorageType = 1
	TypeMooncake  StorageType = 2
	TypePace      StorageType = 3 // TAIR_MEMPOOL (DRAM)
	TypeFile      StorageType = 4 // NFS
	TypeVCNSHF3FS StorageType = 5
	TypeDummy     StorageType = 6
	// TypeEventReportL1P5 is ST_EVENT_REPORT_L1P5 (#249), which took over the number of
	// ST_VINEYARD: a location of type 7 is an EventReport (or, from a KVCM before #249, a
	// Vineyard) observation, metadata KVCM keeps for data the engines own.
	TypeEventReportL1P5 StorageType = 7
	TypeEventReportL2   StorageType = 8 // ST_EVENT_REPORT_L2 (#249)
	// TypePaceSSD is ST_TAIRMEMPOOL_SSD (#293): TairMempool's LocalSSD tier, a physical store
	// accounted apart from pace, whose data URIs keep the pace:// scheme.
	TypePaceSSD StorageType = 9

	// TypeVineyard is the number vineyard had before #249: TypeEventReportL1P5 today.
	TypeVineyard = TypeEventReportL1P5
)

// KnownTypes lists every type kvcm-gc knows, in number order (closed label sets).
func KnownTypes() []StorageType {
	return []StorageType{TypeUnknown, TypeHF3FS, TypeMooncake, TypePace, TypeFile, TypeVCNSHF3FS, TypeDummy,
		TypeEventReportL1P5, TypeEventReportL2, TypePaceSSD}
}

// TypeRule is what kvcm-gc may do with the locations of a storage type. A type kvcm-gc does
// not know gets none of it.
type TypeRule struct {
	// StorageMissing: a SERVING location of this type may be judged storage-missing (rule 2),
	// when its storage answers a definitive Missing.
	StorageMissing bool
	// PhysicalDelete: the data its specs name may be physically deleted when the location
	// goes (where the storage has a client; else the skip is counted).
	PhysicalDelete bool
	// Sweep: the type's storages hold per-block files an orphan-file sweep may reclaim.
	Sweep bool
}

// Rule returns t's rule:
//
//   - hf3fs, file, vcns_hf3fs: files kvcm-gc can stat and unlink: all three;
//   - mooncake, pace, pace_ssd: remote memory or SSD pools: probed and deleted through a
//     client (kvcm-gc has none: probes are Unknown, deletes counted as unsupported), never swept;
//   - unknown, dummy, event_report_l1p5 (and vineyard before it), event_report_l2, and every
//     number kvcm-gc does not know: nothing. Dummy keeps no data; EventReport locations are
//     observations of data the inference engines own, which only KVCM's memory can judge.
func (t StorageType) Rule() TypeRule {
	switch t {
	case TypeHF3FS, TypeFile, TypeVCNSHF3FS:
		return TypeRule{StorageMissing: true, PhysicalDelete: true, Sweep: true}
	case TypeMooncake, TypePace, TypePaceSSD:
		return TypeRule{StorageMissing: true, PhysicalDelete: true}
	}
	return TypeRule{}
}

// Probed reports whether locations of type t may enter the storage-missing rule at all
// (Rule().StorageMissing).
func (t StorageType) Probed() bool { return t.Rule().StorageMissing }

// EventReport reports whether t is one of KVCM's EventReport kinds (7, 8).
func (t StorageType) EventReport() bool { return t == TypeEventReportL1P5 || t == TypeEventReportL2 }

// String returns today's KVCM storage type string: unknown, hf3fs, mooncake, pace, file,
// vcns_hf3fs, dummy, event_report_l1p5, event_report_l2, pace_ssd ("unknown" for any other
// number).
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
	case TypeEventReportL1P5:
		return "event_report_l1p5"
	case TypeEventReportL2:
		return "event_report_l2"
	case TypePaceSSD:
		return "pace_ssd"
	}
	return "unknown"
}

// ParseStorageType maps KVCM's type string (as in StorageConfig JSON "type") to a StorageType.
// The match is exact (KVCM compares case-sensitively); "unknown" maps to TypeUnknown with
// ok=true, any other unrecognised string to TypeUnknown with ok=false. "vineyard", the string
// of a KVCM before #249, maps to 7, the number it had (TypeEventReportL1P5 now, whose rule is
// the same: nothing).
func ParseStorageType(s string) (StorageType, bool) {
	switch s {
	case "unknown":
		return TypeUnknown, true
	case "vineyard":
		return TypeEventReportL1P5, true
	}
	for _, t := range KnownTypes()[1:] {
		if t.String() == s {
			return t, true
		}
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
