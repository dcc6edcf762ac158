package kvcm

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	blockKeyPrefix = "kvcache:instance_"
	blockKeyInfix  = ":cache_"
)

// KeyPrefix returns "kvcache:instance_<id>:cache_".
func KeyPrefix(instanceID string) string {
	return blockKeyPrefix + instanceID + blockKeyInfix
}

// BlockKey returns the Redis key of a block: KeyPrefix(instanceID) + decimal(blockKey).
func BlockKey(instanceID string, blockKey int64) string {
	return KeyPrefix(instanceID) + strconv.FormatInt(blockKey, 10)
}

// ParseBlockKey parses the Redis key of a block of instanceID. The rest after the prefix must
// be a canonical signed int64 decimal (what std::to_string writes: no '+', no leading zeros,
// no "-0", no spaces); anything else wraps ErrBadKey.
//
// KVCM itself parses with strtoll and so would accept "+5" or "05"; it never writes such keys,
// so a non-canonical key was written by someone else and is not ours to judge. Because the whole
// prefix (including ":cache_") is matched, instance "inst1" never claims keys of "inst10", and
// the ":metadata" key of an instance never parses.
func ParseBlockKey(instanceID, key string) (int64, error) {
	// Compare the prefix piecewise so the hot scan path does not build a string per key.
	rest, ok := strings.CutPrefix(key, blockKeyPrefix)
	if ok {
		rest, ok = strings.CutPrefix(rest, instanceID)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, blockKeyInfix)
	}
	if !ok {
		return 0, fmt.Errorf("parse block key %q of instance %q: wrong prefix: %w", key, instanceID, ErrBadKey)
	}
	v, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || !canonicalInt(rest) {
		return 0, fmt.Errorf("parse block key %q: %q is not a canonical int64: %w", key, rest, ErrBadKey)
	}
	return v, nil
}

// canonicalInt reports whether s (already known to parse as an int64) is exactly what
// strconv.FormatInt would write: no '+', no leading zero, no "-0".
func canonicalInt(s string) bool {
	digits := s
	if digits != "" && digits[0] == '-' {
		digits = digits[1:]
		if digits == "0" {
			return false
		}
	}
	if digits == "" || digits[0] < '0' || digits[0] > '9' {
		return false // empty, "-", or a leading '+'
	}
	return digits == "0" || digits[0] != '0'
}

// StoreScanPattern is the SCAN MATCH pattern of every instance's block keys in a metadata store.
const StoreScanPattern = blockKeyPrefix + "*"

// OwnerOf returns the instance that key belongs to, among the ids known accepts: the one whose
// KeyPrefix key starts with. Ids may themselves contain ":cache_", so every occurrence is a
// candidate; the longest accepted id wins, since only the last occurrence can be followed by
// a block number. ok is false when no accepted id owns the key (another instance's key, or
// not a block key at all). The key still has to pass ParseBlockKey for that id.
func OwnerOf(key string, known func(id string) bool) (id string, ok bool) {
	rest, ok := strings.CutPrefix(key, blockKeyPrefix)
	if !ok {
		return "", false
	}
	for end := len(rest); ; {
		i := strings.LastIndex(rest[:end], blockKeyInfix)
		if i < 0 {
			return "", false
		}
		if known(rest[:i]) {
			return rest[:i], true
		}
		end = i
	}
}

// ScanPattern returns the SCAN MATCH pattern for an instance's blocks, the id glob-escaped.
// KVCM itself does not escape the id, so an id with glob characters makes its own scans match
// other instances' keys; kvcm-gc escapes and still checks every key with ParseBlockKey.
func ScanPattern(instanceID string) string {
	return GlobEscape(KeyPrefix(instanceID)) + "*"
}

// GlobEscape escapes Redis glob metacharacters (\ * ? [ ]) with a backslash.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `\*?[]`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '*', '?', '[', ']':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// KeyInstance reads the instance id and block number out of a block key without knowing which
// instances exist (for keys of instances no longer registered): the id is everything between
// the prefix and the last ":cache_", which must be followed by a canonical int64 decimal (as
// ParseBlockKey wants). An id holding ":cache_" itself reads as KVCM reads it: KVCM's own scan
// of the shorter id finds the key but cannot parse it, so only the longest reading can be a
// block of anyone. ok is false for anything that is no block key.
func KeyInstance(key string) (id string, block int64, ok bool) {
	rest, found := strings.CutPrefix(key, blockKeyPrefix)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndex(rest, blockKeyInfix)
	if i < 0 {
		return "", 0, false
	}
	num := rest[i+len(blockKeyInfix):]
	if !canonicalInt(num) {
		return "", 0, false
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], v, true
}
