package kvcm

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatusString(t *testing.T) {
	for s, want := range map[Status]string{
		StatusNotFound: "CLS_NOT_FOUND", StatusNew: "CLS_NEW", StatusWriting: "CLS_WRITING",
		StatusServing: "CLS_SERVING", StatusDeleting: "CLS_DELETING", 5: "CLS_INVALID", -1: "CLS_INVALID",
	} {
		require.Equal(t, want, s.String())
	}
}

// TestStorageTypes pins today's KVCM numbering (#249, #293) and each type's rule: a type
// kvcm-gc does not know, or one whose data only KVCM's memory can judge, gets none of the three.
func TestStorageTypes(t *testing.T) {
	all, none := TypeRule{StorageMissing: true, PhysicalDelete: true, Sweep: true}, TypeRule{}
	pool := TypeRule{StorageMissing: true, PhysicalDelete: true}
	for _, c := range []struct {
		n    uint64
		name string
		rule TypeRule
	}{
		{0, "unknown", none},
		{1, "hf3fs", all},
		{2, "mooncake", pool},
		{3, "pace", pool},
		{4, "file", all},
		{5, "vcns_hf3fs", all},
		{6, "dummy", none},
		{7, "event_report_l1p5", none},
		{8, "event_report_l2", none},
		{9, "pace_ssd", pool},
		{10, "unknown", none},
		{255, "unknown", none},
		{math.MaxUint64, "unknown", none},
	} {
		st := StorageType(c.n)
		require.Equal(t, c.name, st.String(), c.n)
		require.Equal(t, c.rule, st.Rule(), c.n)
		require.Equal(t, c.rule.StorageMissing, st.Probed(), c.n)
		require.Equal(t, c.n == 7 || c.n == 8, st.EventReport(), c.n)
		if c.name != "unknown" || c.n == 0 {
			got, ok := ParseStorageType(c.name)
			require.True(t, ok, c.name)
			require.Equal(t, st, got)
		}
	}
	// A KVCM before #249 registers Vineyard storages as "vineyard", type 7.
	got, ok := ParseStorageType("vineyard")
	require.True(t, ok)
	require.Equal(t, TypeEventReportL1P5, got)
	require.Equal(t, TypeRule{}, got.Rule())
	for _, bad := range []string{"", "FILE", "nfs", "hf3fs ", "3fs", "pace-ssd", "PACE_SSD", "event_report", "v6d", "rtp_llm", "vllm"} {
		got, ok := ParseStorageType(bad)
		require.False(t, ok, bad)
		require.Equal(t, TypeUnknown, got)
	}
	require.Len(t, KnownTypes(), 10)
	for i, st := range KnownTypes() {
		require.Equal(t, StorageType(i), st)
	}
}

func TestBlockKey(t *testing.T) {
	require.Equal(t, "kvcache:instance_inst0:cache_", KeyPrefix("inst0"))
	require.Equal(t, "kvcache:instance_inst0:cache_1", BlockKey("inst0", 1))
	require.Equal(t, "kvcache:instance_inst0:cache_-7262535415567954716", BlockKey("inst0", -7262535415567954716))
	require.Equal(t, "kvcache:instance_:cache_0", BlockKey("", 0))
}

func TestParseBlockKey(t *testing.T) {
	tests := []struct {
		name, id, key string
		want          int64
		wantErr       bool
	}{
		{name: "positive", id: "inst0", key: "kvcache:instance_inst0:cache_1", want: 1},
		{name: "zero", id: "inst0", key: "kvcache:instance_inst0:cache_0", want: 0},
		{name: "negative", id: "inst0", key: "kvcache:instance_inst0:cache_-7262535415567954716", want: -7262535415567954716},
		{name: "max", id: "a", key: "kvcache:instance_a:cache_9223372036854775807", want: math.MaxInt64},
		{name: "min", id: "a", key: "kvcache:instance_a:cache_-9223372036854775808", want: math.MinInt64},
		{name: "id with colon", id: "a:cache_1", key: "kvcache:instance_a:cache_1:cache_5", want: 5},
		{name: "id with glob chars", id: "a*[?]\\", key: "kvcache:instance_a*[?]\\:cache_-2", want: -2},
		{name: "empty id", id: "", key: "kvcache:instance_:cache_7", want: 7},

		{name: "overflow", id: "a", key: "kvcache:instance_a:cache_9223372036854775808", wantErr: true},
		{name: "underflow", id: "a", key: "kvcache:instance_a:cache_-9223372036854775809", wantErr: true},
		{name: "plus", id: "a", key: "kvcache:instance_a:cache_+5", wantErr: true},
		{name: "leading zero", id: "a", key: "kvcache:instance_a:cache_05", wantErr: true},
		{name: "negative leading zero", id: "a", key: "kvcache:instance_a:cache_-05", wantErr: true},
		{name: "minus zero", id: "a", key: "kvcache:instance_a:cache_-0", wantErr: true},
		{name: "minus only", id: "a", key: "kvcache:instance_a:cache_-", wantErr: true},
		{name: "space", id: "a", key: "kvcache:instance_a:cache_ 5", wantErr: true},
		{name: "trailing space", id: "a", key: "kvcache:instance_a:cache_5 ", wantErr: true},
		{name: "empty rest", id: "a", key: "kvcache:instance_a:cache_", wantErr: true},
		{name: "hex", id: "a", key: "kvcache:instance_a:cache_0x1f", wantErr: true},
		{name: "underscore", id: "a", key: "kvcache:instance_a:cache_1_000", wantErr: true},
		{name: "metadata key", id: "a", key: "kvcache:instance_a:metadata", wantErr: true},
		{name: "other instance with longer id", id: "inst1", key: "kvcache:instance_inst10:cache_5", wantErr: true},
		{name: "other instance with shorter id", id: "inst10", key: "kvcache:instance_inst1:cache_5", wantErr: true},
		{name: "registry key", id: "a", key: "kvcache_registry:c1:instance", wantErr: true},
		{name: "empty", id: "a", key: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBlockKey(tt.id, tt.key)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrBadKey)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.key, BlockKey(tt.id, got))
		})
	}
}

func TestGlobEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"inst0", "inst0"},
		{"a*b", `a\*b`},
		{"a?b", `a\?b`},
		{"[x]", `\[x\]`},
		{`a\b`, `a\\b`},
		{`*?[]\`, `\*\?\[\]\\`},
		{"a-b^c", "a-b^c"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, GlobEscape(tt.in), tt.in)
	}
	require.Equal(t, "kvcache:instance_inst0:cache_*", ScanPattern("inst0"))
	require.Equal(t, `kvcache:instance_a\*\[1\]:cache_*`, ScanPattern("a*[1]"))
}

func FuzzParseBlockKey(f *testing.F) {
	f.Add("inst0", "kvcache:instance_inst0:cache_1")
	f.Add("inst0", "kvcache:instance_inst0:cache_-7262535415567954716")
	f.Add("inst1", "kvcache:instance_inst10:cache_5")
	f.Add("a", "kvcache:instance_a:cache_-0")
	f.Add("a", "kvcache:instance_a:cache_+05")
	f.Add("a", "kvcache:instance_a:metadata")
	f.Fuzz(func(t *testing.T, id, key string) {
		v, err := ParseBlockKey(id, key)
		if err != nil {
			require.ErrorIs(t, err, ErrBadKey)
			return
		}
		// A key that parses is exactly the key BlockKey writes: canonical, one-to-one.
		require.Equal(t, key, BlockKey(id, v))
	})
}

func BenchmarkParseBlockKey(b *testing.B) {
	b.ReportAllocs()
	key := BlockKey("inst0", -7262535415567954716)
	for b.Loop() {
		if _, err := ParseBlockKey("inst0", key); err != nil {
			b.Fatal(err)
		}
	}
}

func TestOwnerOf(t *testing.T) {
	known := map[string]bool{"inst1": true, "inst10": true, "a:cache_1": true, "a": true, "x y[*]ü": true}
	in := func(id string) bool { return known[id] }
	for _, tc := range []struct {
		key, id string
		ok      bool
	}{
		{"kvcache:instance_inst1:cache_5", "inst1", true},
		{"kvcache:instance_inst10:cache_-5", "inst10", true},
		{"kvcache:instance_inst100:cache_5", "", false}, // not registered here
		{"kvcache:instance_inst1:metadata", "", false},  // not a block key of anyone
		{"kvcache:instance_a:cache_1:cache_7", "a:cache_1", true},
		{"kvcache:instance_a:cache_2:cache_7", "a", true}, // a's key, and a bad one: ParseBlockKey says so
		{"kvcache:instance_x y[*]ü:cache_0", "x y[*]ü", true},
		{"kvcache:instance_inst1:cache_05", "inst1", true}, // owned, not canonical
		{"other:instance_inst1:cache_5", "", false},
		{"kvcache:instance_", "", false},
	} {
		id, ok := OwnerOf(tc.key, in)
		require.Equal(t, tc.ok, ok, tc.key)
		require.Equal(t, tc.id, id, tc.key)
	}
	_, err := ParseBlockKey("a", "kvcache:instance_a:cache_2:cache_7")
	require.ErrorIs(t, err, ErrBadKey)
}

// FuzzOwnerOf checks OwnerOf against its definition: the longest known id whose block-key
// prefix starts the key.
func FuzzOwnerOf(f *testing.F) {
	f.Add("kvcache:instance_a:cache_1:cache_7", "a", "a:cache_1")
	f.Add("kvcache:instance_inst1:cache_5", "inst1", "inst10")
	f.Fuzz(func(t *testing.T, key, id1, id2 string) {
		known := func(id string) bool { return id == id1 || id == id2 }
		want, wantOK := "", false
		for _, id := range []string{id1, id2} {
			if strings.HasPrefix(key, KeyPrefix(id)) && (!wantOK || len(id) > len(want)) {
				want, wantOK = id, true
			}
		}
		got, ok := OwnerOf(key, known)
		if ok != wantOK || got != want {
			t.Fatalf("OwnerOf(%q) = %q, %v; want %q, %v", key, got, ok, want, wantOK)
		}
	})
}

func FuzzKeyInstance(f *testing.F) {
	f.Add("kvcache:instance_a:cache_1:cache_7")
	f.Add("kvcache:instance_inst0:cache_-9223372036854775808")
	f.Add("kvcache:instance_x:metadata")
	f.Fuzz(func(t *testing.T, key string) {
		id, block, ok := KeyInstance(key)
		if !ok {
			return
		}
		// Whatever it reads is the reading ParseBlockKey agrees with, and only that one.
		require.Equal(t, key, BlockKey(id, block))
		got, err := ParseBlockKey(id, key)
		require.NoError(t, err)
		require.Equal(t, block, got)
	})
}

func TestKeyInstance(t *testing.T) {
	for _, c := range []struct {
		key   string
		id    string
		block int64
		ok    bool
	}{
		{"kvcache:instance_inst0:cache_1", "inst0", 1, true},
		{"kvcache:instance_inst0:cache_-7262535415567954716", "inst0", -7262535415567954716, true},
		{"kvcache:instance_a:b c:cache_0", "a:b c", 0, true},
		{"kvcache:instance_a:cache_x:cache_5", "a:cache_x", 5, true},
		{"kvcache:instance_:cache_9", "", 9, true},
		{"kvcache:instance_é:cache_3", "é", 3, true},
		{"kvcache:instance_inst0:metadata", "", 0, false},
		{"kvcache:instance_inst0:cache_05", "", 0, false},
		{"kvcache:instance_inst0:cache_+5", "", 0, false},
		{"kvcache:instance_inst0:cache_99999999999999999999", "", 0, false},
		{"kvcache_registry:c:instance", "", 0, false},
		{"other", "", 0, false},
	} {
		id, block, ok := KeyInstance(c.key)
		require.Equal(t, c.ok, ok, c.key)
		require.Equal(t, c.id, id, c.key)
		require.Equal(t, c.block, block, c.key)
		if ok {
			require.Equal(t, c.key, BlockKey(id, block))
		}
	}
}
