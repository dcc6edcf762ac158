package kvcm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadFileName is wrapped by ParseBlockFileName's errors: the name is not one KVCM gives
// the data file of a block.
var ErrBadFileName = errors.New("not a KVCM data file name")

// KVCM names the data of a block on a file or hf3fs storage after the block
// (CacheManager::CreateInSingleBatch and CreateBySpec, f6aa2b2 and today's main):
//
//	instance_id + "/" + spec_name + "/" + StringUtil::Uint64ToHex(uint64(block_key))
//
// Uint64ToHex is a std::stringstream with std::hex: lower-case digits, no "0x", no leading
// zeros ("0" for zero), and the int64 key is converted to uint64 first, so a negative key is
// its two's complement (-1 is "ffffffffffffffff"). Nothing is escaped: a '/' in an instance id
// or a spec name adds a directory level. The storage then prepends its root by plain string
// concatenation (nfs_backend.cc: root_path + name, root_path possibly without a trailing
// '/'), or joins it as a path (hf3fs: mountpoint/root_dir/name).
//
// With key_count_per_file > 1 a storage puts several blocks in one file named after the
// first of them, "<name of the first block>_<Uint64ToHex(Hash64(names joined by '|'))>", and
// gives each location the file's index in a blkid parameter. KVCM creates the blocks of all
// specs of the same size in one batch, so such a shared file named after …/tp0/… may hold
// blocks of tp1 too: its name says nothing certain about what it holds. A batch of one name
// (the last of a request) keeps the plain name.

// BlockObjectName is KVCM's object name of the data of block key in spec of instance: the
// path below the storage's root.
func BlockObjectName(instance, spec string, key int64) string {
	return instance + "/" + spec + "/" + strconv.FormatUint(uint64(key), 16)
}

// BlockFileName is an object name parsed back (ParseBlockFileName).
type BlockFileName struct {
	// Dir is everything before the last '/': "<instance id>/<spec name>", where either may
	// hold more '/' of its own (Splits lists the readings).
	Dir string
	// Key is the block key the name is made of (of the first block, for a shared file).
	Key int64
	// Shared is true for the name of a file several blocks share ("<hex>_<hex hash>").
	Shared bool
}

// ParseBlockFileName parses an object name as KVCM makes them (see BlockObjectName): a
// directory part of at least two non-empty components, then the file name. The file name is
// the block key in Uint64ToHex's exact form — lower-case, no leading zero, at most 16 digits —
// or, for a shared file, two such numbers joined by '_'. Anything else (upper-case hex, a
// leading zero, a suffix such as ".tmp", a name of a KVCM that wrote keys otherwise) wraps
// ErrBadFileName: no block of KVCM's names it that way, so it is nobody's data kvcm-gc may
// judge. Errors never hold more of the name than a short excerpt.
func ParseBlockFileName(name string) (BlockFileName, error) {
	slash := strings.LastIndexByte(name, '/')
	if slash < 0 {
		return BlockFileName{}, fmt.Errorf("parse file name %s: no directory: %w", excerpt(name), ErrBadFileName)
	}
	dir, base := name[:slash], name[slash+1:]
	if strings.IndexByte(dir, '/') <= 0 {
		return BlockFileName{}, fmt.Errorf("parse file name %s: want <instance>/<spec>/<key>: %w",
			excerpt(name), ErrBadFileName)
	}
	for c := range strings.SplitSeq(dir, "/") {
		if c == "" || c == "." || c == ".." {
			return BlockFileName{}, fmt.Errorf("parse file name %s: empty, . or .. component: %w", excerpt(name), ErrBadFileName)
		}
	}
	if strings.IndexByte(name, 0) >= 0 {
		return BlockFileName{}, fmt.Errorf("parse file name %s: NUL byte: %w", excerpt(name), ErrBadFileName)
	}
	first, hash, shared := strings.Cut(base, "_")
	key, ok := parseUint64Hex(first)
	if !ok || shared && !canonicalHex(hash) {
		return BlockFileName{}, fmt.Errorf("parse file name %s: %s is not a block key as KVCM writes it: %w",
			excerpt(name), excerpt(base), ErrBadFileName)
	}
	return BlockFileName{Dir: dir, Key: int64(key), Shared: shared}, nil
}

// NameSplit is one reading of a BlockFileName's Dir as an instance id and a spec name.
type NameSplit struct {
	Instance string
	Spec     string
}

// Splits returns every reading of Dir as "<instance>/<spec>": one per '/' in it, the
// shortest instance id first. KVCM escapes neither, so "a/b/c" is instance "a" with spec "b/c"
// or instance "a/b" with spec "c"; only the registry can tell, and a name two registered
// readings fit is nobody's to judge.
func (n BlockFileName) Splits() []NameSplit {
	var out []NameSplit
	for i := 0; i < len(n.Dir); i++ {
		if n.Dir[i] == '/' {
			out = append(out, NameSplit{Instance: n.Dir[:i], Spec: n.Dir[i+1:]})
		}
	}
	return out
}

// parseUint64Hex parses s as Uint64ToHex writes a number, and only that form.
func parseUint64Hex(s string) (uint64, bool) {
	if !canonicalHex(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil
}

// canonicalHex reports whether s is 1 to 16 lower-case hex digits without a leading zero
// (except "0" itself).
func canonicalHex(s string) bool {
	if s == "" || len(s) > 16 || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// excerpt quotes at most 64 bytes of s for an error message.
func excerpt(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}
