package kvcm

import (
	"slices"
	"strings"
)

// KVCM's capacity accounting, recounted from what Redis holds. KVCM's leader keeps two
// counters per instance in memory, persists them to the instance's metadata hash (about every
// second) and restores them from it at every promotion; it never recounts them
// (meta/meta_indexer.cc@071bc9d RecoverMetaData, PersistMetaData). The rules below are the
// ones its code applies, each with where it does so; DESIGN §2.6 says what they mean for
// kvcm-gc.
//
// Usage (bytes, per storage slot):
//   - added when a location is written: BatchAddLocation sums, over the requested location's
//     specs whose URI is Valid(), GetParamAs<uint64_t>("size") into an *uninitialised*
//     spec_sz, so a valid URI whose size is absent or does not parse adds an indeterminate
//     number (manager/meta_searcher.cc, BatchAddLocation's size loop, the same at f6aa2b2
//     meta_searcher.cc:367);
//   - subtracted only by KVCM's own deletes (BatchCADLocationStatus, BatchDeleteLocations),
//     with the same loop initialised to 0: such a spec is subtracted as 0;
//   - never changed by a status change, so a location counts in any status;
//   - summed into the slot ToBaseType(location.type) (vcns_hf3fs folded into hf3fs,
//     data_storage/storage_config.cc@17d557c), where the type is the JSON number read
//     through a uint8; a slot at or above the version's DataStorageType::COUNT is not counted
//     (meta/storage_usage_data.cc@3b43b62 AddStorageUsageByType);
//   - added with wrap-around (a plain fetch_add, `sz += spec_sz`), subtracted clamped at 0.
//
// Keys: +1 when a write finds the key absent (EXISTS false), −1 when KVCM's own empty-key
// recycle or whole-key delete removes it (meta_indexer.cc@071bc9d ReadModifyWriteBlock,
// AdjustKeyCountMeta; meta_storage_backend_manager.cc MaybeReclaimEmptyKeys). In a steady
// state that is every existing block key of the instance, whatever it holds.

// UsageSlot is the slot of KVCM's usage a location of type t is counted in: ToBaseType(t),
// which folds vcns_hf3fs into hf3fs and keeps every other number.
func UsageSlot(t StorageType) StorageType {
	if t == TypeVCNSHF3FS {
		return TypeHF3FS
	}
	return t
}

// MaxUsageSlot is the highest slot any KVCM version counts: DataStorageType::COUNT is 10 with
// pace_ssd (#293), 9 before it, 8 before the EventReport kinds (#249). A location of a type
// above it is counted by no version.
const MaxUsageSlot = TypePaceSSD

// SizeKind says what KVCM makes of one spec URI's size.
type SizeKind uint8

const (
	// SizeCounted: a Valid() URI whose size parameter is a uint64; both parsers agree. KVCM
	// added exactly that and subtracts exactly that.
	SizeCounted SizeKind = iota
	// SizeInvalid: a URI that is not Valid() (no "://" or an empty scheme, or a port the
	// parser refuses) under both parsers: skipped on add and on delete, 0 either way.
	SizeInvalid
	// SizeUnparsed: a Valid() URI whose size is absent, empty or not a uint64: KVCM added an
	// indeterminate number for it (an uninitialised variable) and subtracts 0. What KVCM's
	// usage holds for it cannot be known; a recount counts it 0, which is what every later
	// delete of KVCM's subtracts.
	SizeUnparsed
	// SizeVersionDependent: KVCM's two parsers read the URI differently (validity or size):
	// the bytes depend on which one the running KVCM was built with. Bytes is the newer
	// parser's reading.
	SizeVersionDependent
)

// String returns counted, invalid, unparsed or version_dependent.
func (k SizeKind) String() string {
	switch k {
	case SizeCounted:
		return "counted"
	case SizeInvalid:
		return "invalid"
	case SizeUnparsed:
		return "unparsed"
	case SizeVersionDependent:
		return "version_dependent"
	}
	return "size_kind(?)"
}

// SpecSize is what KVCM counts for one spec URI.
type SpecSize struct {
	Bytes uint64
	Kind  SizeKind
}

// KVCMSpecSize reads uri's size as KVCM's accounting does, with both of its parsers.
func KVCMSpecSize(uri string) SpecSize {
	nb, nk := specSizeWith(uri, ParserNewer)
	ob, ok := specSizeWith(uri, ParserF6aa2b2)
	if nb != ob || nk != ok {
		return SpecSize{Bytes: nb, Kind: SizeVersionDependent}
	}
	return SpecSize{Bytes: nb, Kind: nk}
}

func specSizeWith(uri string, p URIParser) (uint64, SizeKind) {
	u := ParseStandardURI(uri, p)
	if !u.Valid() {
		return 0, SizeInvalid
	}
	v, ok := u.Uint64("size")
	if !ok {
		return 0, SizeUnparsed
	}
	return v, SizeCounted
}

// LocationUsage is what KVCM counts for one location: its slot and the wrap-around sum of its
// specs' sizes, with the specs whose size KVCM cannot tell (SizeUnparsed) and those its
// versions read differently (SizeVersionDependent) counted apart.
type LocationUsage struct {
	Slot             StorageType
	Bytes            uint64
	Unparsed         int
	VersionDependent int
}

// UsageOf is LocationUsage for a decoded location. Its fields are KVCM's only when l.Err is
// nil; for a bad location they are the best reading kvcm-gc has.
func UsageOf(l *Location) LocationUsage {
	u := LocationUsage{Slot: UsageSlot(l.Type)}
	for _, s := range l.Specs {
		sz := KVCMSpecSize(s.URI)
		u.Bytes += sz.Bytes // wraps, as KVCM's sum does
		switch sz.Kind {
		case SizeUnparsed:
			u.Unparsed++
		case SizeVersionDependent:
			u.VersionDependent++
		}
	}
	return u
}

// LegacyPropertyField is the legacy layout's link to the previous block (KVCM f6aa2b2).
const LegacyPropertyField = "_prev_key_"

// KeyCounted reports whether KVCM's key count counts a block key, from the key's layout,
// whether its __uri__ holds anything, and its fields other than __uri__, __lru_time__ and
// L#…:
//
//   - the location layout (tombstones included), an ambiguous key: KVCM of the location
//     layout counts a key by EXISTS (GetLocationIds answers EC_NOENT only for an absent
//     key), whatever the key holds;
//   - the legacy layout: f6aa2b2 counts a key while its __uri__ is not empty (an empty
//     __uri__ reads as EC_NOENT, and the next write counts it again; meta_indexer.cc:321-363),
//     and a KVCM of the location layout inherits that count (it restores __key_count__ and
//     never reads __uri__);
//   - no location field: counted unless every field is a legacy one (__lru_time__,
//     _prev_key_, an empty __uri__): a key with BP#prev_key or tier marks was created by a
//     KVCM of the location layout, which counted it.
func KeyCounted(layout Layout, uriNonEmpty bool, others []string) bool {
	switch layout {
	case LayoutLocation, LayoutAmbiguous:
		return true
	case LayoutLegacy:
		return uriNonEmpty
	}
	return slices.ContainsFunc(others, func(f string) bool { return f != LegacyPropertyField })
}

// Recount is KVCM's accounting of one instance recounted from its block keys: what the
// persisted counters would hold if every change since KVCM's first write had been counted
// and nothing else had changed Redis. Add every block key of the instance once.
type Recount struct {
	// Keys are the block keys KVCM counts (KeyCounted).
	Keys int64
	// Usage is the bytes by slot (UsageSlot) of every location of the location layout, in
	// any status, summed with wrap-around. Legacy __uri__ locations are not in it: a legacy
	// KVCM kept usage in memory only, and a KVCM of the location layout never reads them.
	Usage map[StorageType]uint64
	// Locations counts the locations whose bytes are in Usage.
	Locations int64
	// Unparsed counts, by slot, the specs whose size KVCM added an indeterminate number for
	// (SizeUnparsed); they are 0 in Usage, which is what KVCM subtracts for them.
	Unparsed map[StorageType]int64
	// VersionDependent counts the specs KVCM's two URI parsers read differently; Usage holds
	// the newer parser's reading.
	VersionDependent int64
	// Bad counts the locations kvcm-gc decodes only best effort (ErrBadLocation: a duplicate
	// member, a number out of KVCM's range, an inner id that differs): KVCM may read them
	// otherwise. Their best-effort bytes are in Usage.
	Bad int64
	// Corrupt counts the location values that are not one JSON object: KVCM's own reads
	// fail on them, so its deletes subtract nothing for them; 0 in Usage.
	Corrupt int64
	// Uncounted counts the locations of a slot above MaxUsageSlot: no KVCM version counts
	// them.
	Uncounted int64
	// Legacy counts the legacy (__uri__) locations, none of them in Usage.
	Legacy int64
}

// NewRecount returns an empty recount.
func NewRecount() *Recount {
	return &Recount{Usage: map[StorageType]uint64{}, Unparsed: map[StorageType]int64{}}
}

// AddBlock counts one block key: its layout, its raw __uri__ (nil when absent or empty), its
// L# fields, and the names of its other fields (not __uri__, __lru_time__ or L#…).
func (r *Recount) AddBlock(layout Layout, uri []byte, fields LocationFields, others []string) {
	if KeyCounted(layout, len(uri) > 0, others) {
		r.Keys++
	}
	ps := ReadParts(layout, uri, fields)
	for p := range ps.All() {
		r.addPart(p)
	}
}

// AddFields counts one block key from its whole hash, field name to value (an HGETALL),
// read as a scan reads it.
func (r *Recount) AddFields(fields map[string]string) {
	var uri []byte
	var locs hashLocations
	var others []string
	hasURI, interim := false, false
	for name, value := range fields {
		switch id, isLoc := LocationID(name); {
		case name == FieldURI:
			hasURI = true
			if value != "" {
				uri = []byte(value)
			}
		case name == FieldLRUTime:
		case isLoc:
			locs = append(locs, [2]string{id, value})
		default:
			interim = interim || strings.HasPrefix(name, InterimLocationPrefix)
			others = append(others, name)
		}
	}
	r.AddBlock(LayoutOf(hasURI, len(locs), interim), uri, locs, others)
}

// hashLocations are a hash's L# fields as (id, value) pairs.
type hashLocations [][2]string

func (l hashLocations) LocationFieldCount() int { return len(l) }
func (l hashLocations) LocationFieldAt(i int) (string, []byte) {
	return l[i][0], []byte(l[i][1])
}

func (r *Recount) addPart(p Part) {
	if p.Layout == LayoutLegacy {
		if p.Kind == PartLocation {
			r.Legacy++
		}
		return
	}
	switch p.Kind {
	case PartTombstone:
		return
	case PartCorrupt:
		r.Corrupt++
		return
	}
	if p.Loc.Err != nil {
		r.Bad++
	}
	u := UsageOf(&p.Loc)
	if u.Slot > MaxUsageSlot {
		r.Uncounted++
		return
	}
	r.Locations++
	r.Usage[u.Slot] += u.Bytes // wraps, as KVCM's fetch_add does
	if u.Unparsed > 0 {
		r.Unparsed[u.Slot] += int64(u.Unparsed)
	}
	r.VersionDependent += int64(u.VersionDependent)
}

// Merge adds o's counts into r.
func (r *Recount) Merge(o *Recount) {
	r.Keys += o.Keys
	r.Locations += o.Locations
	for s, v := range o.Usage {
		r.Usage[s] += v
	}
	for s, v := range o.Unparsed {
		r.Unparsed[s] += v
	}
	r.VersionDependent += o.VersionDependent
	r.Bad += o.Bad
	r.Corrupt += o.Corrupt
	r.Uncounted += o.Uncounted
	r.Legacy += o.Legacy
}

// Exact reports whether nothing in the recount is uncertain: no spec of unknowable size,
// none read differently by KVCM's versions, no location decoded best effort.
func (r *Recount) Exact() bool {
	for _, n := range r.Unparsed {
		if n > 0 {
			return false
		}
	}
	return r.VersionDependent == 0 && r.Bad == 0
}
