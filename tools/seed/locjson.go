package seed

import (
	"strconv"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// locationJSON is one CacheLocation as KVCM serializes it (CacheLocation::ToJsonString,
// rapidjson's compact Writer): the value of hash field L#<id> in the location layout, or one
// member of a legacy __uri__ map.
type locationJSON struct {
	ID       string
	Status   int32 // CacheLocationStatus is an int32 enum, written with Int
	Type     uint8 // DataStorageType is a uint8 enum, written with Uint
	SpecSize uint64
	// CreateTime is µs since the epoch. KVCM f6aa2b2 (legacy layout) has no such member:
	// NoCreateTime leaves it out, as that version writes.
	CreateTime   int64
	NoCreateTime bool
	Specs        []kvcm.Spec
	// Guard is the raw JSON of a migration_copy_guard member ("": none), written after
	// location_specs as CopyGA's KVCM writes it.
	Guard string
}

// appendTo appends the location's JSON, member for member as KVCM writes it:
// {"id":…,"status":…,"type":…,"spec_size":…,"create_time":…,"location_specs":[{"name":…,"uri":…}]},
// then migration_copy_guard when it has one.
// Like KVCM's writer it checks nothing (spec_size is written as given).
func (l *locationJSON) appendTo(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, l.ID)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.Status), 10)
	b = append(b, `,"type":`...)
	b = strconv.AppendUint(b, uint64(l.Type), 10)
	b = append(b, `,"spec_size":`...)
	b = strconv.AppendUint(b, l.SpecSize, 10)
	if !l.NoCreateTime {
		b = append(b, `,"create_time":`...)
		b = strconv.AppendInt(b, l.CreateTime, 10)
	}
	b = append(b, `,"location_specs":[`...)
	for i, s := range l.Specs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, s.Name)
		b = append(b, `,"uri":`...)
		b = appendJSONString(b, s.URI)
		b = append(b, '}')
	}
	b = append(b, ']')
	if l.Guard != "" {
		b = append(b, `,"migration_copy_guard":`...)
		b = append(b, l.Guard...)
	}
	return append(b, '}')
}

func (l *locationJSON) bytes() []byte { return l.appendTo(make([]byte, 0, 256)) }

// appendJSONString appends s as rapidjson 1.1's Writer does with KVCM's flags (no encoding
// validation, no transcoding): '"' and '\' escaped, bytes below 0x20 as \b \t \n \f \r or
// \u00XX with upper-case hex, every other byte raw — '/', DEL, '&', '<', UTF-8 and even
// invalid UTF-8. encoding/json differs (\u0026 for '&', U+FFFD for bad UTF-8, lower-case
// hex), and KVCM's exact-value compare would then see another value.
func appendJSONString(b []byte, s string) []byte {
	// short[k] is written as '\' and letter[k].
	const short, letter, hex = "\"\\\b\t\n\f\r", `"\btnfr`, "0123456789ABCDEF"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch k := strings.IndexByte(short, c); {
		case k >= 0:
			b = append(b, '\\', letter[k])
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendLegacyMap appends a legacy __uri__ value: a JSON object of locations, keys[i] naming
// locs[i], in the order given (KVCM writes its unordered_map's order; any order reads the
// same).
func appendLegacyMap(b []byte, keys []string, locs []locationJSON) []byte {
	b = append(b, '{')
	for i := range locs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, keys[i])
		b = append(b, ':')
		b = locs[i].appendTo(b)
	}
	return append(b, '}')
}
