package kvcm

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseKeyCount(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "42": 42, "-3": -3, "9223372036854775807": 1<<63 - 1} {
		v, err := ParseKeyCount(s)
		require.NoError(t, err, s)
		require.Equal(t, want, v, s)
	}
	// Each is either refused by KVCM's strtoll too ("", junk, overflow) or is not what
	// std::to_string writes (a sign, white space, a leading zero, "-0").
	for _, s := range []string{"", "+1", " 1", "1 ", "01", "-0", "1.0", "0x1", "9223372036854775808", "abc"} {
		_, err := ParseKeyCount(s)
		require.ErrorIs(t, err, ErrBadMetadata, "%q", s)
	}
}

func TestMetadataKeys(t *testing.T) {
	require.Equal(t, "kvcache:instance_inst:0:metadata", MetadataKey("inst:0"))
	require.Equal(t, []string{"kvcm_c1_lock:_TAIR_KVCM_LEADER_KEY", "kvcm_lock:_TAIR_KVCM_LEADER_KEY"}, LeaderLockKeys("c1"))
	require.Equal(t, []string{"kvcm_lock:_TAIR_KVCM_LEADER_KEY"}, LeaderLockKeys(""))
	_, err := ParseBlockKey("inst", MetadataKey("inst"))
	require.ErrorIs(t, err, ErrBadKey, "the metadata hash is no block key")
}

// kvcmUsage is __storage_usage_data__ as today's KVCM writes it (members in enum order,
// compact; the order a test of KVCM's usage ledger checks).
const kvcmUsage = `{"unknown":0,"hf3fs":0,"mooncake":0,"pace":0,"file":4096,"vcns_hf3fs":0,"dummy":0,"event_report_l1p5":0,"event_report_l2":0}`

func TestFormatStorageUsage(t *testing.T) {
	require.Equal(t, kvcmUsage, string(FormatStorageUsage(UsageMembersCurrent, map[StorageType]uint64{TypeFile: 4096})))
}

func TestDecodeStorageUsage(t *testing.T) {
	u, err := DecodeStorageUsage([]byte(kvcmUsage))
	require.NoError(t, err)
	require.Len(t, u.Members, 9)
	v, ok := u.Value(TypeFile)
	require.True(t, ok)
	require.Equal(t, uint64(4096), v)
	_, ok = u.Value(TypePaceSSD)
	require.False(t, ok, "a missing member reads as 0 in KVCM")

	// A "compatibility" KVCM: vineyard at 7, no event_report_l2, pace_ssd when not zero.
	u, err = DecodeStorageUsage([]byte(` {"unknown":0, "hf3fs":1,"vineyard":7,"pace_ssd":18446744073709551615}` + "\n"))
	require.NoError(t, err)
	v, _ = u.Value(TypeEventReportL1P5)
	require.Equal(t, uint64(7), v)
	v, _ = u.Value(TypePaceSSD)
	require.Equal(t, uint64(1<<64-1), v)

	// A name no KVCM version kvcm-gc knows: kept, not known.
	u, err = DecodeStorageUsage([]byte(`{"file":1,"future_tier_9":5}`))
	require.NoError(t, err)
	require.False(t, u.Members[1].Known)
	require.Equal(t, uint64(5), u.Members[1].Value)

	_, err = DecodeStorageUsage([]byte(`{}`))
	require.NoError(t, err, "KVCM reads every member as 0")

	for _, bad := range []string{"", "  ", "[]", "null", `"{}"`, `{"file":1.0}`, `{"file":1e3}`, `{"file":-1}`, `{"file":-0}`,
		`{"file":"1"}`, `{"file":null}`, `{"file":18446744073709551616}`, `{"file":1,"file":2}`,
		`{"vineyard":1,"event_report_l1p5":2}`, `{"fil\u0065":1}`, `{"File":1}`, `{"":1}`, `{"file":1}x`, "{\"file\":1}\x00",
		`{"file":1,}`, `{"file" 1}`, `{"file":01}`} {
		_, err := DecodeStorageUsage([]byte(bad))
		require.ErrorIs(t, err, ErrBadMetadata, "%q", bad)
	}
}

func TestStorageUsageWithValues(t *testing.T) {
	raw := `{ "unknown":0,"hf3fs" : 12 ,"future":3,"file":4096}`
	u, err := DecodeStorageUsage([]byte(raw))
	require.NoError(t, err)
	out, err := u.WithValues(map[string]uint64{"hf3fs": 0, "file": 18446744073709551615})
	require.NoError(t, err)
	require.Equal(t, `{ "unknown":0,"hf3fs" : 0 ,"future":3,"file":18446744073709551615}`, string(out))
	same, err := u.WithValues(nil)
	require.NoError(t, err)
	require.Equal(t, raw, string(same))
	_, err = u.WithValues(map[string]uint64{"pace": 1})
	require.ErrorIs(t, err, ErrBadMetadata, "a member is never added")
}

// FuzzDecodeStorageUsage: what the decoder accepts, encoding/json reads as an object of the
// same members (distinct names, each a uint64), so it accepts nothing that is not such an
// object; and WithValues changes exactly the value tokens.
func FuzzDecodeStorageUsage(f *testing.F) {
	for _, s := range []string{kvcmUsage, `{}`, `{"a":1,"b":2}`, ` {"file" : 0 } `, `{"file":18446744073709551615}`, `{"x":1e2}`, `{"x":-0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		u, err := DecodeStorageUsage(raw)
		if err != nil {
			require.ErrorIs(t, err, ErrBadMetadata)
			return
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var m map[string]json.Number
		require.NoError(t, d.Decode(&m))
		require.False(t, d.More())
		require.Len(t, m, len(u.Members), "no name twice")
		values := map[string]uint64{}
		for _, mem := range u.Members {
			n, err := strconv.ParseUint(string(m[mem.Name]), 10, 64)
			require.NoError(t, err)
			require.Equal(t, n, mem.Value)
			values[mem.Name] = mem.Value ^ 0x5a5a
		}
		out, err := u.WithValues(values)
		require.NoError(t, err)
		again, err := DecodeStorageUsage(out)
		require.NoError(t, err)
		require.Len(t, again.Members, len(u.Members))
		for i, mem := range again.Members {
			require.Equal(t, u.Members[i].Name, mem.Name)
			require.Equal(t, values[mem.Name], mem.Value)
			// Everything but the value tokens is kept, byte for byte.
			require.Equal(t, string(raw[u.Members[i].value.start-1:u.Members[i].value.start]), string(out[mem.value.start-1:mem.value.start]))
		}
		back, err := again.WithValues(func() map[string]uint64 {
			orig := map[string]uint64{}
			for _, mem := range u.Members {
				orig[mem.Name] = mem.Value
			}
			return orig
		}())
		require.NoError(t, err)
		if canonicalValues(u) {
			require.Equal(t, string(raw), string(back), "an undo gives the stored bytes back")
		}
	})
}

// canonicalValues reports whether every value token is as strconv writes it (no leading
// zero in "0": JSON allows none anyway, so always, but said for the undo's sake).
func canonicalValues(u *StorageUsage) bool {
	for _, m := range u.Members {
		if u.doc[m.value.start:m.value.end] != strconv.FormatUint(m.Value, 10) {
			return false
		}
	}
	return true
}

// FuzzParseKeyCount: what it accepts is exactly std::to_string of the value.
func FuzzParseKeyCount(f *testing.F) {
	for _, s := range []string{"0", "-1", "+1", " 1", "01", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseKeyCount(s)
		if err != nil {
			require.ErrorIs(t, err, ErrBadMetadata)
			return
		}
		require.Equal(t, s, strconv.FormatInt(v, 10))
	})
}
