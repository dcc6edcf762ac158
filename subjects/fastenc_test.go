package subjects

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// stdEncode is Encode through encoding/json only.
func stdEncode(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

// oddStrings are the strings whose JSON form differs most between encoders: control bytes,
// invalid UTF-8, U+2028/U+2029, characters HTML escaping would touch, quotes, backslashes.
var oddStrings = []string{
	"", "a", "é\u2028x\u2029", "\x00\b\f\n\r\t\x1f\"\\<>&", "bad\xffutf8\xc3", "ü中文", "\x7f",
	"\xed\xa0\x80", "\xe2\x80", "\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xaa", "\ufffd", "\U0001F600", `{"a":"\"b\\"}`,
	"/</script>", "\u0085\u00a0",
}

// TestFastBatchEqualsEncodingJSON: the hand-written batch encoder writes exactly what
// encoding/json writes. The batch is wrapped in a struct so that encoding/json, not Encode's
// fast path, encodes the reference.
func TestFastBatchEqualsEncodingJSON(t *testing.T) {
	for _, s := range oddStrings {
		for _, blocks := range [][]BlockEntry{nil, {}, {
			{Key: -5, URI: RawText(s), LRUTime: s},
			{Key: 1 << 62, URI: RawText(`{"a":1}`)},
			{Key: -1 << 63, URI: nil, LRUTime: "1760000000000000"},
			{Key: 7, Layout: LayoutLocation, Locs: []LocField{{ID: RawText(s), V: RawText(`{"id":"x"}`)}, {ID: RawText("t"), V: nil}},
				Fields: []string{"BP#prev_key", s}},
			{Key: 8, Layout: s, URI: RawText(s), LRUTime: s, Locs: []LocField{{ID: RawText("a"), V: RawText(s)}}, Fields: []string{}},
		}} {
			for _, badKeys := range []int{0, len(s) + 1} {
				b := Batch{V: 1, Cluster: s, Instance: s + "i", Group: s, Store: s, Round: 1<<64 - 1, LeaseRev: 3,
					Cursor: 99, Next: 1, Part: 2, Parts: 3, ScannedAt: -1, BadKeys: badKeys, Blocks: blocks}
				want := stdEncode(t, struct{ Batch }{b})
				got, err := Encode(b)
				require.NoError(t, err)
				require.Equal(t, string(want), string(got), "%q", s)
				got, err = Encode(&b)
				require.NoError(t, err)
				require.Equal(t, string(want), string(got), "%q", s)
				for i := range blocks {
					require.Equal(t, string(stdEncode(t, struct{ BlockEntry }{blocks[i]})),
						string(blocks[i].appendJSON(nil)), "%q block %d", s, i)
				}
			}
		}
	}
	// A nil *Batch is encoding/json's business.
	got, err := Encode((*Batch)(nil))
	require.NoError(t, err)
	require.Equal(t, "null", string(got))
}
