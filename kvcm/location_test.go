package kvcm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// KVCM's own example (the line break removed): SERVING on NFS with a shared file, DELETING on
// HF3FS. The URIs hold '&', which must stay raw.
const (
	exampleLocA = `{"id":"q0x7m2ab","status":3,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://nfs_01/tmp/nfs/inst0/tp0/499602d2_3c1a9f0e77d2b4a1?blkid=0&size=1024"}]}`
	exampleLocB = `{"id":"k3j9x0cd","status":4,"type":1,"spec_size":1,"location_specs":[{"name":"tp0","uri":"hf3fs://hf3fs_01/3fs/stage/kvcm/inst0/tp0/499602d2?size=1024"}]}`
	exampleURI  = `{"q0x7m2ab":` + exampleLocA + `,"k3j9x0cd":` + exampleLocB + `}`
)

func TestDecodeBlockExample(t *testing.T) {
	b, err := DecodeBlock([]byte(exampleURI))
	require.NoError(t, err)
	require.Len(t, b.Locations, 2)

	a := b.Locations[0]
	require.NoError(t, a.Err)
	require.Equal(t, "q0x7m2ab", a.ID)
	require.Equal(t, "q0x7m2ab", a.InnerID)
	require.Equal(t, StatusServing, a.Status)
	require.Equal(t, TypeFile, a.Type)
	require.Equal(t, uint64(1), a.SpecSize)
	require.Equal(t, []Spec{{Name: "tp0", URI: "file://nfs_01/tmp/nfs/inst0/tp0/499602d2_3c1a9f0e77d2b4a1?blkid=0&size=1024"}}, a.Specs)
	require.False(t, a.HasCreateTime)
	require.Equal(t, exampleLocA, string(a.Raw))

	d := b.Locations[1]
	require.NoError(t, d.Err)
	require.Equal(t, "k3j9x0cd", d.ID)
	require.Equal(t, StatusDeleting, d.Status)
	require.Equal(t, TypeHF3FS, d.Type)
	require.Equal(t, exampleLocB, string(d.Raw))

	loc, ok := b.Find("k3j9x0cd")
	require.True(t, ok)
	require.Same(t, &b.Locations[1], loc)
	_, ok = b.Find("nope")
	require.False(t, ok)

	out, err := b.WithStatus("q0x7m2ab", StatusDeleting)
	require.NoError(t, err)
	require.Equal(t, `{"q0x7m2ab":`+strings.Replace(exampleLocA, `"status":3`, `"status":4`, 1)+`,"k3j9x0cd":`+exampleLocB+`}`, string(out))

	// Re-encoding with the same status gives the input back: it was already compact.
	out, err = b.WithStatus("k3j9x0cd", StatusDeleting)
	require.NoError(t, err)
	require.Equal(t, exampleURI, string(out))

	out, empty, err := b.Without("k3j9x0cd")
	require.NoError(t, err)
	require.False(t, empty)
	require.Equal(t, `{"q0x7m2ab":`+exampleLocA+`}`, string(out))

	out, empty, err = b.Without("q0x7m2ab")
	require.NoError(t, err)
	require.False(t, empty)
	require.Equal(t, `{"k3j9x0cd":`+exampleLocB+`}`, string(out))

	one, err := DecodeBlock(out)
	require.NoError(t, err)
	out, empty, err = one.Without("k3j9x0cd")
	require.NoError(t, err)
	require.True(t, empty)
	require.Equal(t, `{}`, string(out))

	_, err = b.WithStatus("nope", StatusDeleting)
	require.ErrorIs(t, err, ErrNoLocation)
	_, _, err = b.Without("nope")
	require.ErrorIs(t, err, ErrNoLocation)
}

func TestDecodeBlockLocations(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Location // Raw and Err are checked separately
		bad  []bool
	}{
		{
			name: "empty object",
			in:   `{}`,
		},
		{
			name: "unknown members, create_time, order changed",
			in: `{"ab":{"future_field":{"x":[1,2]},"status":2,"create_time":1767225600000000,"id":"ab","type":5,` +
				`"location_specs":[{"uri":"vcns_hf3fs://v/x","extra":null,"name":"tp1"}],"spec_size":1}}`,
			want: []Location{{ID: "ab", InnerID: "ab", Status: StatusWriting, Type: TypeVCNSHF3FS, SpecSize: 1,
				Specs: []Spec{{Name: "tp1", URI: "vcns_hf3fs://v/x"}}, CreateTimeUs: 1767225600000000, HasCreateTime: true}},
			bad: []bool{false},
		},
		{
			name: "missing members take defaults; absent id is bad, even under the empty key",
			in:   `{"":{"status":3},"x":{"id":"x"},"y":{}}`,
			want: []Location{{ID: "", Status: StatusServing}, {ID: "x", InnerID: "x"}, {ID: "y"}},
			bad:  []bool{true, false, true},
		},
		{
			name: "empty key with empty id",
			in:   `{"":{"id":"","status":3}}`,
			want: []Location{{ID: "", Status: StatusServing}},
			bad:  []bool{false},
		},
		{
			name: "escaped keys and members compare decoded",
			in:   `{"a\u0062":{"\u0069d":"ab","st\u0061tus":3,"location_specs":[{"n\u0061me":"t\"p","uri":"file://h/a\/b"}]}}`,
			want: []Location{{ID: "ab", InnerID: "ab", Status: StatusServing, Specs: []Spec{{Name: `t"p`, URI: "file://h/a/b"}}}},
			bad:  []bool{false},
		},
		{
			name: "control characters escaped with upper-case hex, non-ASCII raw",
			in:   `{"a\u001Fb":{"id":"a\u001Fb","status":2,"location_specs":[{"name":"\b\f\n\r\t","uri":"file://h/é\uD83D\uDE00"}]}}`,
			want: []Location{{ID: "a\x1fb", InnerID: "a\x1fb", Status: StatusWriting,
				Specs: []Spec{{Name: "\b\f\n\r\t", URI: "file://h/é😀"}}}},
			bad: []bool{false},
		},
		{
			name: "invalid UTF-8 kept",
			in:   "{\"a\xff\":{\"id\":\"a\xff\",\"status\":3}}",
			want: []Location{{ID: "a\xff", InnerID: "a\xff", Status: StatusServing}},
			bad:  []bool{false},
		},
		{
			name: "negative and large numbers",
			in:   `{"a":{"id":"a","status":-1,"type":255,"spec_size":18446744073709551615,"create_time":-5}}`,
			want: []Location{{ID: "a", InnerID: "a", Status: -1, Type: 255, SpecSize: 18446744073709551615, CreateTimeUs: -5, HasCreateTime: true}},
			bad:  []bool{false},
		},
		{
			// KVCM reads status through an int and type through a uint8: where that would
			// truncate, KVCM and kvcm-gc would see different locations.
			name: "numbers KVCM would truncate are bad",
			in:   `{"a":{"id":"a","status":4294967299},"b":{"id":"b","status":3,"type":260},"c":{"id":"c","status":-2147483649}}`,
			want: []Location{{ID: "a", InnerID: "a", Status: 4294967299}, {ID: "b", InnerID: "b", Status: 3, Type: 260},
				{ID: "c", InnerID: "c", Status: -2147483649}},
			bad: []bool{true, true, true},
		},
		{
			name: "numeric and negative ids",
			in:   `{"-7262535415567954716":{"id":"-7262535415567954716","status":3},"0":{"id":"0","status":2}}`,
			want: []Location{{ID: "-7262535415567954716", InnerID: "-7262535415567954716", Status: StatusServing},
				{ID: "0", InnerID: "0", Status: StatusWriting}},
			bad: []bool{false, false},
		},
		{
			name: "id mismatch is bad, neighbour fine",
			in:   `{"a":{"id":"b","status":2},"c":{"id":"c","status":2}}`,
			want: []Location{{ID: "a", InnerID: "b", Status: StatusWriting}, {ID: "c", InnerID: "c", Status: StatusWriting}},
			bad:  []bool{true, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := DecodeBlock([]byte(tt.in))
			require.NoError(t, err)
			require.Len(t, b.Locations, len(tt.want))
			for i, want := range tt.want {
				got := b.Locations[i]
				if tt.bad[i] {
					require.ErrorIs(t, got.Err, ErrBadLocation)
				} else {
					require.NoError(t, got.Err)
				}
				got.Raw, got.Err = nil, nil
				require.Equal(t, want, got)
			}
		})
	}
}

func TestDecodeBlockWhitespace(t *testing.T) {
	in := " \t\r\n{ \"a\" : { \"id\" : \"a\" ,\n \"status\" :\t2 , \"x\" : [ 1 , { } ] } ,\n\"b\":{\"id\":\"b\",\"status\":3} } \n"
	b, err := DecodeBlock([]byte(in))
	require.NoError(t, err)
	require.Len(t, b.Locations, 2)
	require.Equal(t, "{ \"id\" : \"a\" ,\n \"status\" :\t2 , \"x\" : [ 1 , { } ] }", string(b.Locations[0].Raw))
	require.Equal(t, StatusWriting, b.Locations[0].Status)

	out, err := b.WithStatus("a", StatusDeleting)
	require.NoError(t, err)
	require.Equal(t, "{\"a\":{ \"id\" : \"a\" ,\n \"status\" :\t4 , \"x\" : [ 1 , { } ] },\"b\":{\"id\":\"b\",\"status\":3}}", string(out))

	out, empty, err := b.Without("b")
	require.NoError(t, err)
	require.False(t, empty)
	require.Equal(t, "{\"a\":{ \"id\" : \"a\" ,\n \"status\" :\t2 , \"x\" : [ 1 , { } ] }}", string(out))
}

func TestWithStatusPreservesBytes(t *testing.T) {
	const (
		locA = `{"id":"a\u0026b","future_field":{"x":[1,2]},"status":2,"type":4,"create_time":1767225600000000,` +
			`"location_specs":[{"name":"tp0","uri":"file://nfs_01/p?blkid=0&size=1024","z":1e3}],"spec_size":1,"w":"<&>"}`
		locB = `{"id":"c","status":3,"uri_bytes":"\u003c\u0026\u003e","n":-0.5E+2}`
	)
	in := `{"a\u0026b":` + locA + `,"c":` + locB + `}`
	b, err := DecodeBlock([]byte(in))
	require.NoError(t, err)
	require.NoError(t, b.Locations[0].Err)
	require.Equal(t, "a&b", b.Locations[0].ID)

	out, err := b.WithStatus("a&b", StatusDeleting)
	require.NoError(t, err)
	wantA := strings.Replace(locA, `"status":2`, `"status":4`, 1)
	require.Equal(t, `{"a\u0026b":`+wantA+`,"c":`+locB+`}`, string(out))

	lws, err := LocationWithStatus(b.Locations[0].Raw, StatusDeleting)
	require.NoError(t, err)
	require.Equal(t, wantA, string(lws))

	out, err = b.WithStatus("c", -9223372036854775808)
	require.NoError(t, err)
	require.Equal(t, `{"a\u0026b":`+locA+`,"c":{"id":"c","status":-9223372036854775808,"uri_bytes":"\u003c\u0026\u003e","n":-0.5E+2}}`, string(out))

	out, empty, err := b.Without("a&b")
	require.NoError(t, err)
	require.False(t, empty)
	require.Equal(t, `{"c":`+locB+`}`, string(out))

	// Without writes what it has: a bad location can be removed, not edited.
	bad, err := DecodeBlock([]byte(`{"a":{"id":"x","status":2},"c":{"id":"c","status":3}}`))
	require.NoError(t, err)
	_, err = bad.WithStatus("a", StatusDeleting)
	require.ErrorIs(t, err, ErrBadLocation)
	out, _, err = bad.Without("a")
	require.NoError(t, err)
	require.Equal(t, `{"c":{"id":"c","status":3}}`, string(out))

	// A good location without a status member cannot be given one.
	nostatus, err := DecodeBlock([]byte(`{"a":{"id":"a"}}`))
	require.NoError(t, err)
	require.NoError(t, nostatus.Locations[0].Err)
	_, err = nostatus.WithStatus("a", StatusDeleting)
	require.ErrorIs(t, err, ErrBadLocation)
}

func TestDecodeBlockCorrupt(t *testing.T) {
	for name, in := range map[string]string{
		"empty":                    ``,
		"only whitespace":          "  \n",
		"not json":                 `not json`,
		"array":                    `[{"id":"a"}]`,
		"string":                   `"x"`,
		"null":                     `null`,
		"number":                   `3`,
		"location is a string":     `{"a":"x"}`,
		"location is an array":     `{"a":[]}`,
		"location is null":         `{"a":null}`,
		"duplicated id":            `{"a":{"id":"a"},"a":{"id":"a"}}`,
		"duplicated id, escaped":   `{"a":{"id":"a"},"\u0061":{"id":"a"}}`,
		"trailing garbage":         `{"a":{"id":"a"}}x`,
		"second value":             `{} {}`,
		"trailing comma":           `{"a":{"id":"a"},}`,
		"trailing comma inside":    `{"a":{"id":"a",}}`,
		"trailing comma in array":  `{"a":{"x":[1,]}}`,
		"missing colon":            `{"a" {"id":"a"}}`,
		"unquoted key":             `{a:{"id":"a"}}`,
		"single quotes":            `{'a':{}}`,
		"unterminated":             `{"a":{"id":"a"}`,
		"unterminated string":      `{"a":{"id":"a`,
		"raw control char":         "{\"a\":{\"id\":\"a\tb\"}}",
		"raw newline in key":       "{\"a\nb\":{}}",
		"bad escape":               `{"a":{"id":"\x"}}`,
		"short unicode escape":     `{"a":{"id":"\u12"}}`,
		"lone high surrogate":      `{"a":{"id":"\uD800"}}`,
		"lone low surrogate":       `{"a":{"id":"\uDC00"}}`,
		"high surrogate then text": `{"a":{"id":"\uD800\u0041"}}`,
		"leading zero":             `{"a":{"status":02}}`,
		"plus sign":                `{"a":{"status":+2}}`,
		"bare minus":               `{"a":{"status":-}}`,
		"dot without digits":       `{"a":{"x":1.}}`,
		"exponent without digits":  `{"a":{"x":1e}}`,
		"hex number":               `{"a":{"x":0x10}}`,
		"NaN":                      `{"a":{"x":NaN}}`,
		"bad literal":              `{"a":{"x":tru}}`,
		"capital literal":          `{"a":{"x":True}}`,
		"comment":                  `{"a":{}/*c*/}`,
		"BOM":                      "\xef\xbb\xbf{}",
		"NUL after":                "{}\x00",
		"deep nesting":             `{"a":{"x":` + strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth) + `}}`,
	} {
		t.Run(name, func(t *testing.T) {
			b, err := DecodeBlock([]byte(in))
			require.ErrorIs(t, err, ErrCorruptURI)
			require.Nil(t, b)
		})
	}
}

func TestDecodeBlockBadLocation(t *testing.T) {
	for name, loc := range map[string]string{
		"id mismatch":             `{"id":"b","status":2}`,
		"id absent":               `{"status":2}`,
		"id not a string":         `{"id":1,"status":2}`,
		"id null":                 `{"id":null,"status":2}`,
		"status string":           `{"id":"a","status":"2"}`,
		"status float":            `{"id":"a","status":2.0}`,
		"status exponent":         `{"id":"a","status":2e0}`,
		"status overflow":         `{"id":"a","status":9223372036854775808}`,
		"status null":             `{"id":"a","status":null}`,
		"type negative":           `{"id":"a","status":2,"type":-1}`,
		"type minus zero":         `{"id":"a","status":2,"type":-0}`,
		"type overflow":           `{"id":"a","status":2,"type":18446744073709551616}`,
		"type string":             `{"id":"a","status":2,"type":"file"}`,
		"spec_size float":         `{"id":"a","status":2,"spec_size":1.5}`,
		"create_time string":      `{"id":"a","status":2,"create_time":"1767225600000000"}`,
		"create_time float":       `{"id":"a","status":2,"create_time":1.7e15}`,
		"specs not array":         `{"id":"a","status":2,"location_specs":{}}`,
		"specs null":              `{"id":"a","status":2,"location_specs":null}`,
		"spec not object":         `{"id":"a","status":2,"location_specs":["file://h/x"]}`,
		"spec uri not string":     `{"id":"a","status":2,"location_specs":[{"name":"tp0","uri":1}]}`,
		"spec name not string":    `{"id":"a","status":2,"location_specs":[{"name":[],"uri":"file://h/x"}]}`,
		"spec uri twice":          `{"id":"a","status":2,"location_specs":[{"uri":"file://h/x","uri":"file://h/y"}]}`,
		"spec name twice escaped": `{"id":"a","status":2,"location_specs":[{"name":"a","n\u0061me":"b"}]}`,
		"status twice":            `{"id":"a","status":2,"status":3}`,
		"status twice escaped":    `{"id":"a","status":2,"st\u0061tus":3}`,
		"id twice":                `{"id":"a","id":"a","status":2}`,
		"unknown member twice":    `{"id":"a","status":2,"x":1,"x":2}`,
	} {
		t.Run(name, func(t *testing.T) {
			in := `{"a":` + loc + `,"z":{"id":"z","status":3}}`
			b, err := DecodeBlock([]byte(in))
			require.NoError(t, err)
			require.Len(t, b.Locations, 2)
			require.ErrorIs(t, b.Locations[0].Err, ErrBadLocation)
			require.Equal(t, loc, string(b.Locations[0].Raw))
			require.NoError(t, b.Locations[1].Err)

			_, err = b.WithStatus("a", StatusDeleting)
			require.ErrorIs(t, err, ErrBadLocation)
			// The neighbour can still be edited, the bad one written back unchanged.
			out, err := b.WithStatus("z", StatusDeleting)
			require.NoError(t, err)
			require.Equal(t, `{"a":`+loc+`,"z":{"id":"z","status":4}}`, string(out))
		})
	}
}

func TestDecodeBlockManyMembers(t *testing.T) {
	// More members than the linear duplicate check handles, with a duplicate at the end.
	var sb strings.Builder
	sb.WriteString(`{"a":{"id":"a","status":2`)
	for i := range 100 {
		sb.WriteString(`,"m` + strings.Repeat("x", i) + `":0`)
	}
	good := sb.String() + `}}`
	b, err := DecodeBlock([]byte(good))
	require.NoError(t, err)
	require.NoError(t, b.Locations[0].Err)

	b, err = DecodeBlock([]byte(sb.String() + `,"mxx":1}}`))
	require.NoError(t, err)
	require.ErrorIs(t, b.Locations[0].Err, ErrBadLocation)

	// Many locations, with a duplicated id at the end.
	sb.Reset()
	sb.WriteString(`{`)
	for i := range 100 {
		id := "l" + strings.Repeat("x", i)
		sb.WriteString(`"` + id + `":{"id":"` + id + `","status":3},`)
	}
	b, err = DecodeBlock([]byte(sb.String() + `"z":{}}`))
	require.NoError(t, err)
	require.Len(t, b.Locations, 101)
	_, err = DecodeBlock([]byte(sb.String() + `"lxx":{}}`))
	require.ErrorIs(t, err, ErrCorruptURI)
}

func TestLocationWithStatus(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "example", in: exampleLocA, want: strings.Replace(exampleLocA, `"status":3`, `"status":4`, 1)},
		{name: "whitespace kept", in: " { \"status\" : 2 , \"id\":\"a\" } ", want: " { \"status\" : 4 , \"id\":\"a\" } "},
		{name: "escaped member name", in: `{"id":"a","st\u0061tus":2}`, want: `{"id":"a","st\u0061tus":4}`},
		{name: "nested status untouched", in: `{"x":{"status":2},"status":2}`, want: `{"x":{"status":2},"status":4}`},
		{name: "no status", in: `{"id":"a"}`, wantErr: true},
		{name: "not an object", in: `[1]`, wantErr: true},
		{name: "empty", in: ``, wantErr: true},
		{name: "invalid json", in: `{"status":2`, wantErr: true},
		{name: "trailing", in: `{"status":2}}`, wantErr: true},
		{name: "status string", in: `{"status":"2"}`, wantErr: true},
		{name: "status twice", in: `{"status":2,"status":2}`, wantErr: true},
		{name: "bad type member", in: `{"status":2,"type":-1}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LocationWithStatus([]byte(tt.in), StatusDeleting)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrBadLocation)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

func TestBlockDoesNotFollowRawMutation(t *testing.T) {
	raw := []byte(exampleURI)
	b, err := DecodeBlock(raw)
	require.NoError(t, err)
	copy(raw, strings.Repeat("#", len(raw)))
	out, err := b.WithStatus("q0x7m2ab", StatusServing)
	require.NoError(t, err)
	require.Equal(t, exampleURI, string(out))
}
