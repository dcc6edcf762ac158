package kvcm

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKVCMSpecSize: the size KVCM accounts fixture URIs at, and where that depends on which
// of its parsers a KVCM was built with. The five URIs ParseDataURI refuses though both
// parsers count their size (an empty host, port 99999, an '@' in the path or query) are
// counted here.
func TestKVCMSpecSize(t *testing.T) {
	want := map[string]SpecSize{
		"nfs_single":               {4096, SizeCounted},
		"nfs_batched_blkid":        {1024, SizeCounted},
		"size_leading_zero":        {1024, SizeCounted},
		"size_u64max":              {1<<64 - 1, SizeCounted},
		"duplicate_size":           {2, SizeCounted},
		"empty_params":             {3, SizeCounted},
		"empty_host":               {1, SizeCounted},
		"port_big":                 {1, SizeCounted},
		"at_in_path":               {1, SizeCounted}, // f6aa2b2 misreads the host, not the size
		"at_in_query":              {1, SizeCounted},
		"fragment":                 {1, SizeCounted},
		"no_size":                  {0, SizeUnparsed},
		"size_empty":               {0, SizeUnparsed},
		"size_junk_suffix":         {0, SizeUnparsed},
		"size_plus":                {0, SizeUnparsed},
		"size_negative":            {0, SizeUnparsed},
		"size_hex":                 {0, SizeUnparsed},
		"size_space":               {0, SizeUnparsed},
		"size_overflow":            {0, SizeUnparsed},
		"uppercase_scheme":         {0, SizeUnparsed}, // SIZE is not size
		"whitespace_around":        {0, SizeUnparsed}, // "1 "
		"scheme_only":              {0, SizeUnparsed},
		"mooncake_no_path_no_size": {0, SizeUnparsed},
		"question_in_path":         {0, SizeUnparsed},
		"no_scheme":                {0, SizeInvalid},
		"empty":                    {0, SizeInvalid},
		"port_junk":                {0, SizeVersionDependent}, // newer: not Valid; f6aa2b2: Valid, no size
		"ipv6_host_no_port":        {0, SizeVersionDependent},
		"query_without_path":       {1, SizeVersionDependent}, // f6aa2b2 reads the query as a path
		"port_plus":                {0, SizeVersionDependent}, // f6aa2b2 reads port 80 and size 1
		"port_negative":            {0, SizeVersionDependent},
	}
	for _, c := range readCases[uriFixture](t, "uris") {
		if w, ok := want[c.Name]; ok {
			require.Equal(t, w, KVCMSpecSize(c.Input), c.Name)
			delete(want, c.Name)
		}
	}
	require.Empty(t, want, "cases not in the fixtures")
}

// TestUsageOfKVCMLocations: every location KVCM serialized in the fixtures is accounted in
// the slot of its type (vcns_hf3fs in hf3fs) at the sum of its specs' sizes.
func TestUsageOfKVCMLocations(t *testing.T) {
	n := 0
	for _, c := range readFixtures(t, "location") {
		if c.Kind != "serialize" {
			continue
		}
		id, _ := LocationID(c.FieldName)
		loc, err := DecodeLocation(id, c.kvcm(t))
		require.NoError(t, err, c.Name)
		want := decodeKVCMLocation(t, c.Fields)
		var bytes uint64
		for _, s := range want.Specs {
			bytes += KVCMSpecSize(string(s.URI)).Bytes
		}
		slot := StorageType(want.Type)
		if slot == TypeVCNSHF3FS {
			slot = TypeHF3FS
		}
		u := UsageOf(&loc)
		require.Equal(t, slot, u.Slot, c.Name)
		require.Equal(t, bytes, u.Bytes, c.Name)
		n++
	}
	require.Greater(t, n, 10)
}

func TestKeyCounted(t *testing.T) {
	tests := []struct {
		name   string
		layout Layout
		uri    bool
		others []string
		want   bool
	}{
		{"location layout", LayoutLocation, false, []string{FieldPrevKey}, true},
		{"only tombstones", LayoutLocation, false, nil, true},
		{"ambiguous", LayoutAmbiguous, false, nil, true},
		{"legacy with locations", LayoutLegacy, true, []string{LegacyPropertyField}, true},
		{"legacy keep form {}", LayoutLegacy, true, nil, true},
		{"legacy, empty __uri__", LayoutLegacy, false, []string{LegacyPropertyField}, false},
		{"emptied by kvcm-gc: BP#prev_key alone", LayoutNone, false, []string{FieldPrevKey}, true},
		{"tier marks alone", LayoutNone, false, []string{"__mig_tier_target__"}, true},
		{"legacy properties alone", LayoutNone, false, []string{LegacyPropertyField}, false},
		{"__lru_time__ alone", LayoutNone, false, nil, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, KeyCounted(tt.layout, tt.uri, tt.others), tt.name)
	}
}

type fields [][2]string

func (f fields) LocationFieldCount() int { return len(f) }
func (f fields) LocationFieldAt(i int) (string, []byte) {
	return f[i][0], []byte(f[i][1])
}

// TestRecount: one instance's keys, recounted as KVCM counts them.
func TestRecount(t *testing.T) {
	loc := func(id string, status, typ int, uris ...string) [2]string {
		s := `{"id":"` + id + `","status":` + strconv.Itoa(status) + `,"type":` + strconv.Itoa(typ) + `,"spec_size":` + strconv.Itoa(len(uris)) + `,"create_time":1,"location_specs":[`
		for i, u := range uris {
			if i > 0 {
				s += ","
			}
			s += `{"name":"tp` + strconv.Itoa(i) + `","uri":"` + u + `"}`
		}
		return [2]string{id, s + "]}"}
	}
	r := NewRecount()
	// Every status counts: usage is added at write and removed only by a delete.
	r.AddBlock(LayoutLocation, nil, fields{
		loc("w", 2, 4, "file://nfs/a?size=100", "file://nfs/b?size=28"),
		loc("s", 3, 4, "file://nfs/c?size=1000"),
		loc("d", 4, 1, "hf3fs://h/d?size=7"),
		loc("v", 1, 5, "hf3fs://h/e?size=3"), // vcns_hf3fs is counted as hf3fs
		loc("z", 0, 2, "mooncake://m/?key=k&size=5"),
		{"t", ""}, // KVCM's tombstone
	}, []string{FieldPrevKey})
	// A spec whose size does not parse, one the parsers read differently, an invalid URI.
	r.AddBlock(LayoutLocation, nil, fields{
		loc("u", 3, 4, "file://nfs/f?size=abc", "file://nfs/g?size=10", "nfs/no-scheme?size=99"),
		loc("q", 3, 4, "file://nfs_01?x=/y&size=4"),
	}, nil)
	// A corrupt value and a bad location (a member twice), a type no KVCM counts.
	r.AddBlock(LayoutLocation, nil, fields{
		{"c", `{"id":`},
		{"b", `{"id":"b","id":"b","status":3,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://n/x?size=2"}]}`},
		loc("x", 3, 200, "file://n/y?size=9"),
	}, nil)
	// Legacy locations count no bytes; a legacy key with an empty __uri__ is no key.
	r.AddBlock(LayoutLegacy, []byte(`{"l":{"id":"l","status":3,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://n/z?size=50"}]}}`), nil, nil)
	r.AddBlock(LayoutLegacy, nil, nil, []string{LegacyPropertyField})
	// An emptied key kvcm-gc kept; the wrap-around of a sum.
	r.AddBlock(LayoutNone, nil, nil, []string{FieldPrevKey})
	r.AddBlock(LayoutLocation, nil, fields{loc("m", 3, 3, "pace://p/1?size=18446744073709551615", "pace://p/2?size=2")}, nil)

	require.Equal(t, int64(6), r.Keys)
	require.Equal(t, map[StorageType]uint64{TypeFile: 128 + 1000 + 10 + 4 + 2, TypeHF3FS: 10, TypeMooncake: 5, TypePace: 1}, r.Usage)
	require.Equal(t, int64(9), r.Locations)
	require.Equal(t, map[StorageType]int64{TypeFile: 1}, r.Unparsed)
	require.Equal(t, int64(1), r.VersionDependent)
	require.Equal(t, int64(1), r.Bad)
	require.Equal(t, int64(1), r.Corrupt)
	require.Equal(t, int64(1), r.Uncounted)
	require.Equal(t, int64(1), r.Legacy)
	require.False(t, r.Exact())

	m := NewRecount()
	m.Merge(r)
	m.Merge(r)
	require.Equal(t, 2*r.Keys, m.Keys)
	require.Equal(t, 2*r.Usage[TypeFile], m.Usage[TypeFile])
	exact := NewRecount()
	exact.AddBlock(LayoutLocation, nil, fields{loc("s", 3, 4, "file://nfs/c?size=1000")}, nil)
	require.True(t, exact.Exact())
}

// TestRecountAddFields: a whole hash counts as its parts do.
func TestRecountAddFields(t *testing.T) {
	a, b := NewRecount(), NewRecount()
	loc := `{"id":"x","status":3,"type":4,"spec_size":1,"create_time":1,"location_specs":[{"name":"tp0","uri":"file://n/p?size=5"}]}`
	a.AddFields(map[string]string{FieldPrevKey: "", "L#x": loc, "L#t": ""})
	b.AddBlock(LayoutLocation, nil, fields{{"x", loc}, {"t", ""}}, []string{FieldPrevKey})
	a.AddFields(map[string]string{FieldURI: "", FieldLRUTime: "1", LegacyPropertyField: ""})
	b.AddBlock(LayoutLegacy, nil, nil, []string{LegacyPropertyField})
	a.AddFields(map[string]string{FieldURI: "{}", "__loc__y": "{}"})
	b.AddBlock(LayoutAmbiguous, []byte("{}"), nil, []string{"__loc__y"})
	require.Equal(t, b, a)
	require.Equal(t, int64(2), a.Keys)
}
