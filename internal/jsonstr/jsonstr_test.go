package jsonstr

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func stdQuote(t testing.TB, s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(s))
	return string(bytes.TrimSuffix(b.Bytes(), []byte{'\n'}))
}

var cases = []string{"", "plain", `q"b\s/`, "\b\f\n\r\t\x00\x1f\x7f", "<&>", "é漢😀", "\u2028\u2029", "a\xffb", "\xed\xa0\x80"}

func TestAppendIsEncodingJSON(t *testing.T) {
	for _, s := range cases {
		require.Equal(t, stdQuote(t, s), string(Append(nil, s)), "%q", s)
		require.Equal(t, stdQuote(t, s), string(Append(nil, []byte(s))), "%q", s)
	}
}

func TestUnquote(t *testing.T) {
	for _, s := range cases {
		got, err := AppendUnquoted(nil, Append(nil, s), Strict)
		require.NoError(t, err)
		if utf8.ValidString(s) {
			require.Equal(t, s, string(got))
		}
	}
	for _, bad := range []string{`"\x"`, `"\u12"`, `"\ud800"`, `"\udc00"`, `"a"b"`, "\"\x01\"", "\"\xff\"", `x`} {
		_, err := AppendUnquoted(nil, bad, Strict)
		require.Error(t, err, "%q", bad)
	}
	raw, err := AppendUnquoted(nil, "\"a\xff\\n\"", RawBytes)
	require.NoError(t, err)
	require.Equal(t, "a\xff\n", string(raw))
	_, n, err := Unquote(nil, `ab"cd`, Strict)
	require.NoError(t, err)
	require.Equal(t, 2, n, "stops at the first unescaped quote")
}

// FuzzQuote: Append is encoding/json's quoting, and Unquote inverts it on valid UTF-8.
func FuzzQuote(f *testing.F) {
	for _, s := range cases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Append(nil, s)
		require.Equal(t, stdQuote(t, s), string(q))
		var want string
		require.NoError(t, json.Unmarshal(q, &want))
		got, err := AppendUnquoted(nil, q, Strict)
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	})
}

// FuzzUnquote: on any literal, Strict Unquote accepts exactly what encoding/json decodes
// without changing bytes, and agrees with it.
func FuzzUnquote(f *testing.F) {
	for _, s := range cases {
		f.Add(string(Append(nil, s)))
	}
	f.Add(`"\ud83d\ude00"`)
	f.Fuzz(func(t *testing.T, lit string) {
		got, err := AppendUnquoted(nil, lit, Strict)
		if err != nil {
			return
		}
		var want string
		require.NoError(t, json.Unmarshal([]byte(lit), &want), "%q", lit)
		require.Equal(t, want, string(got))
	})
}

// TestAppendExact: AppendExact quotes exactly what Append does when s is valid UTF-8, and
// otherwise reports false leaving dst as it was.
func TestAppendExact(t *testing.T) {
	for _, s := range cases {
		got, ok := AppendExact([]byte("x"), s)
		require.Equal(t, utf8.ValidString(s), ok, "%q", s)
		if ok {
			require.Equal(t, "x"+stdQuote(t, s), string(got), "%q", s)
		} else {
			require.Equal(t, "x", string(got), "%q", s)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	v := []byte(`{"id":"q0x7m2ab","status":3,"type":4,"spec_size":1,"create_time":1760000000000000,"location_specs":[` +
		`{"name":"tp0","uri":"file://nfs_01/tmp/nfs/inst0/tp0/1f_3c1a9f0e77d2b4a1?blkid=0&size=1024"}]}`)
	buf := make([]byte, 0, 4*len(v))
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		buf, _ = AppendExact(buf[:0], v)
	}
}
