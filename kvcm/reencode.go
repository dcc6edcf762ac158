package kvcm

import "strconv"

// What KVCM writes back when it rewrites a location it read. kvcm-gc never does this (a CAS
// changes only the status token, DESIGN §2.5); the fault suite's emulator of KVCM does, to
// play KVCM's own writes faithfully. KVCM's status writes decode the stored value, change the
// copy and write its ToJsonString(): members in KVCM's order, unknown ones (a checksum, a
// migration_copy_guard, anything newer) dropped (fixtures location/cases.jsonl,
// dec_unknown_members; meta/cache_location.cc ToRapidWriter).

// ReencodeLocation returns l as today's KVCM serializes it (CacheLocation::ToJsonString):
// {"id","status","type","spec_size","create_time","location_specs":[{"name","uri"},…]},
// create_time always written (0 when absent), strings escaped as rapidjson's writer does.
// Only for a location whose Err is nil: a bad one is read otherwise by KVCM.
func ReencodeLocation(l *Location) []byte {
	return appendKVCMLocation(make([]byte, 0, len(l.Raw)+16), l, true)
}

// ReencodeLegacyBlock returns a decoded __uri__ as KVCM f6aa2b2 writes it back after
// decoding it (BlockCacheLocationsMeta::ToJsonString), each location without create_time,
// which f6aa2b2 does not know, and without unknown members. The order is its
// std::unordered_map's: for a map KVCM itself wrote, the reverse of the stored order
// (fixtures legacy/cases.jsonl, 2 to 12 locations); for another order, its hash table's,
// which this does not compute (it reverses that too).
func ReencodeLegacyBlock(b *Block) []byte {
	out := make([]byte, 0, len(b.Raw)+16)
	out = append(out, '{')
	for i := len(b.Locations) - 1; i >= 0; i-- {
		if i < len(b.Locations)-1 {
			out = append(out, ',')
		}
		out = appendKVCMString(out, b.Locations[i].ID)
		out = append(out, ':')
		out = appendKVCMLocation(out, &b.Locations[i], false)
	}
	return append(out, '}')
}

func appendKVCMLocation(out []byte, l *Location, createTime bool) []byte {
	out = append(out, `{"id":`...)
	out = appendKVCMString(out, l.InnerID)
	out = append(out, `,"status":`...)
	out = strconv.AppendInt(out, int64(l.Status), 10)
	out = append(out, `,"type":`...)
	out = strconv.AppendUint(out, uint64(l.Type), 10)
	out = append(out, `,"spec_size":`...)
	out = strconv.AppendUint(out, l.SpecSize, 10)
	if createTime {
		out = append(out, `,"create_time":`...)
		out = strconv.AppendInt(out, l.CreateTimeUs, 10)
	}
	out = append(out, `,"location_specs":[`...)
	for i, s := range l.Specs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"name":`...)
		out = appendKVCMString(out, s.Name)
		out = append(out, `,"uri":`...)
		out = appendKVCMString(out, s.URI)
		out = append(out, '}')
	}
	return append(out, "]}"...)
}

// appendKVCMString writes s as rapidjson's writer does: only '"', '\\' and bytes below 0x20
// are escaped (\b \f \n \r \t, else \u00XX in upper-case hex); '/', DEL, UTF-8 and invalid
// UTF-8 stay raw.
func appendKVCMString(out []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			if c < 0x20 {
				out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
				continue
			}
			out = append(out, c)
		}
	}
	return append(out, '"')
}
