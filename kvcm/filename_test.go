package kvcm

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBlockObjectName pins KVCM's naming: instance_id + "/" + spec name + "/" +
// Uint64ToHex(uint64(key)), a std::hex stream of the key converted to uint64.
func TestBlockObjectName(t *testing.T) {
	for _, tc := range []struct {
		inst, spec string
		key        int64
		want       string
	}{
		{"inst0", "tp0", 0, "inst0/tp0/0"},
		{"inst0", "tp0", 1, "inst0/tp0/1"},
		{"inst0", "tp0", 255, "inst0/tp0/ff"},
		{"inst0", "tp0", 4096, "inst0/tp0/1000"},
		{"inst0", "tp1", 0x1f3a, "inst0/tp1/1f3a"},
		{"inst0", "tp0", math.MaxInt64, "inst0/tp0/7fffffffffffffff"},
		// Negative keys: the two's complement, as the C++ conversion to uint64 gives it.
		{"inst0", "tp0", -1, "inst0/tp0/ffffffffffffffff"},
		{"inst0", "tp0", -2, "inst0/tp0/fffffffffffffffe"},
		{"inst0", "tp0", math.MinInt64, "inst0/tp0/8000000000000000"},
		{"inst0", "tp0", -7262535415567954716, "inst0/tp0/9b364a84a260cce4"},
		// Nothing is escaped.
		{"实例", "tp0", 10, "实例/tp0/a"},
		{"a/b", "tp0", 10, "a/b/tp0/a"},
		{"i-1_x.y", "spec name", 16, "i-1_x.y/spec name/10"},
	} {
		require.Equal(t, tc.want, BlockObjectName(tc.inst, tc.spec, tc.key))
	}
}

func TestParseBlockFileName(t *testing.T) {
	type want struct {
		dir    string
		key    int64
		shared bool
		splits []NameSplit
	}
	ok := func(dir string, key int64, shared bool, splits ...NameSplit) *want {
		return &want{dir, key, shared, splits}
	}
	for _, tc := range []struct {
		name string
		in   string
		want *want // nil: refused
	}{
		{"zero", "inst0/tp0/0", ok("inst0/tp0", 0, false, NameSplit{"inst0", "tp0"})},
		{"small", "inst0/tp0/1f", ok("inst0/tp0", 0x1f, false, NameSplit{"inst0", "tp0"})},
		{"max int64", "inst0/tp0/7fffffffffffffff", ok("inst0/tp0", math.MaxInt64, false, NameSplit{"inst0", "tp0"})},
		{"negative one", "inst0/tp0/ffffffffffffffff", ok("inst0/tp0", -1, false, NameSplit{"inst0", "tp0"})},
		{"min int64", "inst0/tp0/8000000000000000", ok("inst0/tp0", math.MinInt64, false, NameSplit{"inst0", "tp0"})},
		{"negative", "inst0/tp1/9b364a84a260cce4", ok("inst0/tp1", -7262535415567954716, false, NameSplit{"inst0", "tp1"})},
		{"unicode ids", "实例/张量0/abc", ok("实例/张量0", 0xabc, false, NameSplit{"实例", "张量0"})},
		{"unicode with spaces", "inst é/tp 0/1", ok("inst é/tp 0", 1, false, NameSplit{"inst é", "tp 0"})},
		{"slash in an id", "a/b/c/ff", ok("a/b/c", 0xff, false, NameSplit{"a", "b/c"}, NameSplit{"a/b", "c"})},
		{"dots inside components", "a.b/..c/1", ok("a.b/..c", 1, false, NameSplit{"a.b", "..c"})},
		// A shared file: the first block's name, '_' and the hash, both as Uint64ToHex writes.
		{"shared", "inst0/tp0/1f3a_9c0e77d2b4a1e2f0", ok("inst0/tp0", 0x1f3a, true, NameSplit{"inst0", "tp0"})},
		{"shared negative first key", "inst0/tp0/ffffffffffffffff_0", ok("inst0/tp0", -1, true, NameSplit{"inst0", "tp0"})},

		{"upper-case hex", "inst0/tp0/1F", nil},
		{"mixed case", "inst0/tp0/aBc", nil},
		{"leading zero", "inst0/tp0/01f", nil},
		{"zero padded", "inst0/tp0/000000000000001f", nil},
		{"double zero", "inst0/tp0/00", nil},
		{"0x prefix", "inst0/tp0/0x1f", nil},
		{"17 digits", "inst0/tp0/1ffffffffffffffff", nil},
		{"sign", "inst0/tp0/-1", nil},
		{"plus", "inst0/tp0/+1", nil},
		{"decimal looking", "inst0/tp0/12345678901234567890", nil},
		{"not hex", "inst0/tp0/1g", nil},
		{"suffix", "inst0/tp0/1f.tmp", nil},
		{"prefix", "inst0/tp0/.1f", nil},
		{"space", "inst0/tp0/1f ", nil},
		{"empty file name", "inst0/tp0/", nil},
		{"no spec", "inst0/1f", nil},
		{"no directory", "1f", nil},
		{"empty", "", nil},
		{"leading slash", "/tp0/1f", nil},
		{"empty component", "inst0//1f", nil},
		{"dot component", "inst0/./1f", nil},
		{"dotdot component", "../tp0/1f", nil},
		{"shared without hash", "inst0/tp0/1f_", nil},
		{"shared without key", "inst0/tp0/_1f", nil},
		{"shared upper-case hash", "inst0/tp0/1f_ABC", nil},
		{"shared padded hash", "inst0/tp0/1f_0abc", nil},
		{"two underscores", "inst0/tp0/1f_2_3", nil},
		{"quarantine name", "inst0/tp0/1f~1767225600123456", nil},
		{"NUL", "inst0/tp\x000/1f", nil},
		// KVMeta exact objects (kvmeta/<instance>/<key>/<32-character nonce>) share a storage's
		// root with block files in newer KVCMs; their nonce, even one of hex digits only, is
		// longer than any block key, so no such object is ever read as a block's file.
		{"KVMeta object", "kvmeta/inst0/tp0/0123456789abcdefghijklmnopqrstuv", nil},
		{"KVMeta object of hex digits", "kvmeta/inst0/tp0/123456789abcdef0123456789abcdef0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseBlockFileName(tc.in)
			if tc.want == nil {
				require.Error(t, err)
				require.ErrorIs(t, err, ErrBadFileName)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want.dir, got.Dir)
			require.Equal(t, tc.want.key, got.Key)
			require.Equal(t, tc.want.shared, got.Shared)
			require.Equal(t, tc.want.splits, got.Splits())
			if !got.Shared {
				for _, s := range got.Splits() {
					require.Equal(t, tc.in, BlockObjectName(s.Instance, s.Spec, got.Key), "KVCM's name of the parsed block")
				}
			}
		})
	}
}

// TestParseBlockFileNameRoundTrip: every name KVCM makes parses back to its block, over keys
// spread across the whole int64 range.
func TestParseBlockFileNameRoundTrip(t *testing.T) {
	keys := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	for i := int64(1); i < 1<<62 && i > 0; i *= 3 {
		keys = append(keys, i, -i, i+1, -i-1)
	}
	for _, k := range keys {
		name := BlockObjectName("inst-7", "tp3", k)
		got, err := ParseBlockFileName(name)
		require.NoError(t, err, name)
		require.Equal(t, k, got.Key, name)
		require.False(t, got.Shared)
		require.Equal(t, []NameSplit{{"inst-7", "tp3"}}, got.Splits())
	}
}

func FuzzParseBlockFileName(f *testing.F) {
	for _, s := range []string{"inst0/tp0/1f", "a/b/c/ffffffffffffffff", "inst0/tp0/1f3a_9c0e77d2b4a1e2f0",
		"inst0/tp0/01", "实例/tp0/0", "x/y/1F", "/a/b", "a//b/1", "a/b/_", "a/b/1_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := ParseBlockFileName(name)
		if err != nil {
			if !errors.Is(err, ErrBadFileName) {
				t.Fatalf("error does not wrap ErrBadFileName: %v", err)
			}
			return
		}
		splits := got.Splits()
		if len(splits) == 0 {
			t.Fatalf("%q: accepted without an instance/spec reading", name)
		}
		base := name[strings.LastIndexByte(name, '/')+1:]
		hexKey := strconv.FormatUint(uint64(got.Key), 16)
		if got.Shared {
			if !strings.HasPrefix(base, hexKey+"_") {
				t.Fatalf("%q: shared name does not start with its key %s", name, hexKey)
			}
			return
		}
		for _, s := range splits {
			if s.Instance == "" || s.Spec == "" {
				t.Fatalf("%q: empty reading %+v", name, s)
			}
			if back := BlockObjectName(s.Instance, s.Spec, got.Key); back != name {
				t.Fatalf("%q: parses to a block whose KVCM name is %q", name, back)
			}
		}
	})
}
