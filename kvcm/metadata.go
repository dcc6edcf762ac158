package kvcm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The persisted form of KVCM's counters: the hash kvcache:instance_<id>:metadata, which the
// leader rewrites whole (DEL, then HSET of both fields, no MULTI) at most every
// persist_metadata_interval_time_ms (1000 ms by default) and reads back at every promotion
// (meta/meta_indexer.cc@071bc9d PersistMetaData, RecoverMetaData; common/redis/redis_client.cc
// Set; config/meta_indexer_config.h@5d8c046).

// Fields of the metadata hash.
const (
	// FieldKeyCount holds std::to_string(key_count_), an int64 in decimal.
	FieldKeyCount = "__key_count__"
	// FieldStorageUsage holds StorageUsageData::Serialize(): a compact JSON object of one
	// member per slot, named by ToString(type), valued a uint64.
	FieldStorageUsage = "__storage_usage_data__"
)

// MetadataKey returns the key of instance id's metadata hash.
func MetadataKey(instanceID string) string { return blockKeyPrefix + instanceID + ":metadata" }

// ErrBadMetadata: a field of the metadata hash is not what KVCM writes. KVCM's own
// recovery fails on most such values (MetaIndexer::Init returns the error); kvcm-gc reads
// nothing from them and writes nothing over them.
var ErrBadMetadata = errors.New("bad kvcm metadata")

// ParseKeyCount reads __key_count__. KVCM reads it with strtoll requiring the whole text
// (StringUtil::StrToInt64), which also takes leading white space, a '+' and a negative
// number; kvcm-gc takes only what std::to_string writes, a canonical int64 decimal, so it
// accepts nothing KVCM refuses. A negative count is returned as it is: KVCM restores it and
// then reads it as a huge size_t (every new key is refused against max_key_count), which the
// caller must report.
func ParseKeyCount(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || !canonicalInt(s) {
		return 0, fmt.Errorf("parse %s %q: not a canonical int64 decimal: %w", FieldKeyCount, s, ErrBadMetadata)
	}
	return v, nil
}

// UsageMemberSlot maps a member name of __storage_usage_data__ to its slot. Which names a
// KVCM accepts depends on its version: every KVCM refuses a name it does not know, and fails
// its recovery on it (storage_usage_data.cc@3b43b62 FromRapidValue: "unrecognized storage
// type"):
//
//	0 unknown, 1 hf3fs, 2 mooncake, 3 pace, 4 file, 5 vcns_hf3fs, 6 dummy,
//	7 event_report_l1p5 (#249; before it vineyard, kept under that name in "compatibility"
//	  versions), 8 event_report_l2 (#249), 9 pace_ssd (#293, written only when non-zero by
//	  the compatibility versions: older binaries reject it).
//
// ok is false for a name no KVCM version kvcm-gc knows writes.
func UsageMemberSlot(name string) (StorageType, bool) {
	if name == "vineyard" {
		return TypeEventReportL1P5, true
	}
	t, ok := ParseStorageType(name)
	return t, ok
}

// UsageMember is one member of __storage_usage_data__.
type UsageMember struct {
	Name  string
	Value uint64
	// Slot is the member's slot; Known is false for a name no KVCM version kvcm-gc knows
	// writes (a newer KVCM's storage type, or a name no KVCM accepts).
	Slot  StorageType
	Known bool

	value span // the value token in the document
}

// StorageUsage is a decoded __storage_usage_data__, members in stored order.
type StorageUsage struct {
	Members []UsageMember
	doc     string
}

// Value returns the value of the member of slot s, and whether the hash has one. A missing
// member reads as 0 in KVCM (its values are parsed into a zeroed buffer).
func (u *StorageUsage) Value(s StorageType) (uint64, bool) {
	for _, m := range u.Members {
		if m.Known && m.Slot == s {
			return m.Value, true
		}
	}
	return 0, false
}

// DecodeStorageUsage decodes __storage_usage_data__. It accepts nothing KVCM's
// StorageUsageData::Deserialize refuses, and more is refused:
//
//   - KVCM: empty (after trimming white space), not JSON, not an object, a value that is not
//     IsUint64() → error. Here too, and also: a fraction or an exponent even when integral,
//     "-0" (rapidjson takes it as 0), a member name with an escape or of any byte but
//     [a-z0-9_] (KVCM's ToString names are all of that form, so any other name fails
//     every version), a name twice or two names of one slot (KVCM keeps the later; which of
//     two writers meant it cannot be told), and trailing bytes (rapidjson stops at a NUL).
//   - A name of the right form that no KVCM version kvcm-gc knows is kept, with Known false:
//     a KVCM newer than kvcm-gc may count a storage type kvcm-gc has never heard of, and a
//     repair must leave such a member as it is.
func DecodeStorageUsage(raw []byte) (*StorageUsage, error) {
	if len(strings.Trim(string(raw), " \t\n\r")) == 0 {
		return nil, fmt.Errorf("decode %s: empty: %w", FieldStorageUsage, ErrBadMetadata)
	}
	u := &StorageUsage{doc: string(raw)}
	s := &jsonScanner{doc: u.doc}
	fail := func(format string, args ...any) (*StorageUsage, error) {
		return nil, fmt.Errorf("decode %s: %s: %w", FieldStorageUsage, fmt.Sprintf(format, args...), ErrBadMetadata)
	}
	s.ws()
	if s.peek() != '{' {
		return fail("not a JSON object")
	}
	more, err := s.beginObject()
	for more && err == nil {
		var k span
		var esc bool
		if k, esc, err = s.key(); err != nil {
			break
		}
		name := u.doc[k.start+1 : k.end-1]
		if esc || !usageName(name) {
			return fail("member name %q is not a storage type name", u.doc[k.start:k.end])
		}
		start := s.pos
		var isInt bool
		if s.peek() != '-' && (s.peek() < '0' || s.peek() > '9') {
			return fail("member %s: value is not a number", name)
		}
		if isInt, err = s.number(); err != nil {
			break
		}
		tok := u.doc[start:s.pos]
		v, ok := uintToken(tok)
		if !isInt || !ok {
			return fail("member %s: value %s is not a uint64", name, tok)
		}
		slot, known := UsageMemberSlot(name)
		for _, m := range u.Members {
			if m.Name == name || known && m.Known && m.Slot == slot {
				return fail("members %s and %s both name slot %d", m.Name, name, slot)
			}
		}
		u.Members = append(u.Members, UsageMember{Name: name, Value: v, Slot: slot, Known: known, value: span{start, s.pos}})
		more, err = s.nextMember()
	}
	if err != nil {
		return fail("%v", err)
	}
	s.ws()
	if s.pos != len(u.doc) {
		return fail("offset %d: trailing bytes after the object", s.pos)
	}
	return u, nil
}

// usageName reports whether name has the form of KVCM's storage type strings.
func usageName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// WithValues returns the stored bytes with the values of the named members replaced by the
// given ones, in canonical decimal; every other byte (member order, white space, the members
// not named, unknown ones included) is kept. It refuses a name the hash does not have: a
// repair never adds a member, since a KVCM that does not know it fails its recovery.
func (u *StorageUsage) WithValues(values map[string]uint64) ([]byte, error) {
	for name := range values {
		found := false
		for _, m := range u.Members {
			found = found || m.Name == name
		}
		if !found {
			return nil, fmt.Errorf("set %s member %q: not in the stored value (a member is never added): %w",
				FieldStorageUsage, name, ErrBadMetadata)
		}
	}
	out := make([]byte, 0, len(u.doc)+16)
	last := 0
	for _, m := range u.Members {
		v, ok := values[m.Name]
		if !ok {
			continue
		}
		out = append(out, u.doc[last:m.value.start]...)
		out = strconv.AppendUint(out, v, 10)
		last = m.value.end
	}
	return append(out, u.doc[last:]...), nil
}

// UsageMembersCurrent are the members today's KVCM writes, in its order (every slot of
// DataStorageType below COUNT, storage_usage_data.cc@3b43b62 ToRapidWriter).
var UsageMembersCurrent = []string{
	"unknown",
	"hf3fs",
	"mooncake",
	"pace",
	"file",
	"vcns_hf3fs",
	"dummy",
	"event_report_l1p5",
	"event_report_l2",
}

// FormatStorageUsage writes __storage_usage_data__ as KVCM writes it: the named members in
// the given order, compact, each valued its slot's usage (0 when absent).
func FormatStorageUsage(members []string, usage map[StorageType]uint64) []byte {
	out := []byte{'{'}
	for i, name := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendQuote(out, name)
		out = append(out, ':')
		slot, _ := UsageMemberSlot(name)
		out = strconv.AppendUint(out, usage[slot], 10)
	}
	return append(out, '}')
}

// LeaderLockKeys are the keys KVCM's Redis leader lock may be held under, for a KVCM cluster:
// kvcm_<cluster>_lock:_TAIR_KVCM_LEADER_KEY when the coordination URI names a cluster_name,
// kvcm_lock:_TAIR_KVCM_LEADER_KEY when it does not and in older KVCMs
// (config/coordination_redis_backend.cc@b4692a6 Init; f6aa2b2
// config/distributed_lock_redis_backend.cc:45; service/server.h kLeaderLockKey). An empty
// cluster gives the second alone. A KVCM with an empty coordination URI (an in-memory lock),
// or a file or raft elector, holds no key at all.
func LeaderLockKeys(cluster string) []string {
	const leader = "_TAIR_KVCM_LEADER_KEY"
	if cluster == "" {
		return []string{"kvcm_lock:" + leader}
	}
	return []string{"kvcm_" + cluster + "_lock:" + leader, "kvcm_lock:" + leader}
}
