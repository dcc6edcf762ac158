package subjects_test

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

func TestRawTextRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string // exact encoding
	}{
		{"empty", "", `""`},
		{"plain", "abc", `"abc"`},
		{"html", "&<>", `"&<>"`},
		{"quote backslash", `a"b\c`, `"a\"b\\c"`},
		{"controls", "\x00\x01\n\r\t\x1f\x7f", `"\u0000\u0001\n\r\t\u001f` + "\x7f" + `"`},
		{"line separators", "a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"unicode", "实例 😀", `"实例 😀"`},
		{"replacement char", "\uFFFD", "\"\uFFFD\""},
		{"invalid utf-8", "\xff", `{"base64":"/w=="}`},
		{"truncated rune", "ab\xe2\x80", `{"base64":"YWLigA=="}`},
		{"surrogate bytes", "\xed\xa0\x80", `{"base64":"7aCA"}`},
		{"nul and invalid", "\x00\xfe&", `{"base64":"AP4m"}`},
		{"uri json", `{"q0x7m2ab":{"id":"q0x7m2ab","status":3,"uri":"file://n/p?blkid=0&size=1024"}}`,
			`"{\"q0x7m2ab\":{\"id\":\"q0x7m2ab\",\"status\":3,\"uri\":\"file://n/p?blkid=0&size=1024\"}}"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := subjects.RawText(tc.in).MarshalJSON()
			require.NoError(t, err)
			require.Equal(t, tc.want, string(enc))
			require.True(t, json.Valid(enc))

			var got subjects.RawText
			require.NoError(t, got.UnmarshalJSON(enc))
			require.Equal(t, tc.in, string(got))

			// Inside a message, through Encode and encoding/json.
			msg, err := subjects.Encode(subjects.Target{Location: "l", Expected: subjects.RawText(tc.in)})
			require.NoError(t, err)
			require.Contains(t, string(msg), `"expected":`+tc.want)
			var back subjects.Target
			require.NoError(t, json.Unmarshal(msg, &back))
			require.Equal(t, tc.in, string(back.Expected))

			if utf8.ValidString(tc.in) {
				var s string
				require.NoError(t, json.Unmarshal(enc, &s), "the string form is plain JSON")
				require.Equal(t, tc.in, s)
			}
		})
	}
}

func TestRawTextDecodeForms(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{`"\u0026\u003c\u003e"`, "&<>"}, // encoding/json's HTML-escaped form
		{`"\/\b\f"`, "/\b\f"},
		{`"\ud83d\ude00"`, "😀"},
		{`"\uFFFD"`, "\uFFFD"},
		{`{"base64":"YWJj"}`, "abc"}, // base64 of valid UTF-8 is accepted too
		{`{"base64":""}`, ""},
		{` {"base64" : "/w==" } `, "\xff"},
		{`null`, ""},
	} {
		var got subjects.RawText
		require.NoError(t, got.UnmarshalJSON([]byte(tc.in)), tc.in)
		require.Equal(t, tc.want, string(got), tc.in)
	}
}

func TestRawTextDecodeRejects(t *testing.T) {
	for _, in := range []string{
		``, `"`, `1`, `[]`, `true`, `"abc`, `abc"`,
		"\"\xff\"",       // invalid UTF-8 inside a string: bytes would be lost
		`"\ud800"`,       // lone high surrogate
		`"\udc00"`,       // lone low surrogate
		`"\ud800\u0041"`, // high surrogate without a low one
		`"\ud800x"`,      //
		`"\x"`, `"\u12"`, `"\u12g4"`, `"a\"`,
		"\"a\nb\"", // raw control character
		`"a"b"`,
		`{}`, `{"base64":1}`, `{"base64":"/w"}`, `{"base64":"!!!!"}`, `{"base64":"/x=="}`,
		`{"base64":"YQ==","gzip":true}`, `{"b64":"YQ=="}`,
	} {
		var got subjects.RawText
		require.Error(t, got.UnmarshalJSON([]byte(in)), "%q", in)
	}
}
