package subjects

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// checkDecoders decodes data by hand and through encoding/json and fails on any difference:
// what the hand-written decoder accepts must be what encoding/json gives, and DecodeBatch must
// give the same batch or the same error as encoding/json alone.
func checkDecoders(t testing.TB, data []byte) (fast bool) {
	t.Helper()
	return checkBoth(t, data, decodeBatchFast, DecodeBatch, decodeBatchJSON)
}

// checkDeleteDecoders is checkDecoders for delete requests.
func checkDeleteDecoders(t testing.TB, data []byte) (fast bool) {
	t.Helper()
	return checkBoth(t, data, decodeDeleteRequestFast, DecodeDeleteRequest, decodeDeleteRequestJSON)
}

func checkBoth[T any](t testing.TB, data []byte, fast func([]byte) (T, bool), decode, decodeJSON func([]byte) (T, error)) bool {
	t.Helper()
	got, ok := fast(data)
	if ok {
		var want T
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%q: accepted by hand, refused by encoding/json: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nby hand        %#v\nencoding/json  %#v", data, got, want)
		}
	}
	v1, err1 := decode(data)
	v2, err2 := decodeJSON(data)
	if fmt.Sprint(err1) != fmt.Sprint(err2) {
		t.Fatalf("%q: error %v, through encoding/json %v", data, err1, err2)
	}
	if !reflect.DeepEqual(v1, v2) {
		t.Fatalf("%q:\ndecoded              %#v\nthrough encoding/json %#v", data, v1, v2)
	}
	return ok
}

func testBatch(s string) Batch {
	return Batch{V: 1, Cluster: "c1" + s, Instance: "inst-0" + s, Group: s, Store: "meta", Round: 1<<64 - 1,
		LeaseRev: 7, Cursor: 1234, Next: 0, Part: 1, Parts: 2, ScannedAt: -1_760_000_000_000_000, BadKeys: 3,
		Blocks: []BlockEntry{
			{Key: -1 << 63, URI: RawText(`{"l1":{"id":"l1","status":3,"location_specs":[{"uri":"file://n/a?size=1"}]}}` + s), LRUTime: "1760000000000000"},
			{Key: 1<<63 - 1, URI: RawText(s)},
			{Key: 0, URI: RawText(""), LRUTime: s},
			{Key: 5},
			{Key: 6, Layout: LayoutLocation, Locs: []LocField{{ID: RawText("a1b2c3d4"), V: RawText(`{"id":"a1b2c3d4","status":2}` + s)},
				{ID: RawText(s), V: RawText("")}}, Fields: []string{"BP#prev_key", "__mig_tier_target__" + s}},
			{Key: 9, Layout: LayoutAmbiguous, URI: RawText(`{}`), Locs: []LocField{{ID: RawText("z"), V: RawText(`{"id":"z"}`)}}},
		}}
}

// fastCorpus is the inputs of TestDecodeBatchFastCorpus and the seeds of FuzzDecodeBatchFast.
func fastCorpus(t testing.TB) [][]byte {
	var corpus [][]byte
	for _, s := range oddStrings {
		enc, err := Encode(testBatch(s))
		require.NoError(t, err)
		corpus = append(corpus, enc)
	}
	for _, blocks := range [][]BlockEntry{nil, {}} {
		b := testBatch("")
		b.Blocks = blocks
		enc, err := Encode(b)
		require.NoError(t, err)
		corpus = append(corpus, enc)
	}
	valid := `{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":"{\"a\":\"\\u00e9\"}","lru":"5"}]}`
	for _, s := range []string{
		valid,
		" \t\r\n" + valid + " \n",
		`{"v":1,"cluster":"c","instance":"i","parts":1}`,
		`{ "v" : 1 , "cluster" : "c" , "instance" : "i" , "parts" : 1 , "blocks" : [ { "key" : "1" , "uri" : "x" } , { } ] }`,
		`{}`, `{ }`, `[]`, `null`, ``, ` `, `"x"`, `{"v":1}{}`, `{"v":1}x`, `{"v":1`, `{"v":1,}`, `{,"v":1}`,
		"\v" + valid, valid + "\u00a0", "\u00a0" + valid,
		// Members encoding/json matches case-insensitively, repeated members, unknown members.
		`{"V":1,"cluster":"c","instance":"i","parts":1}`,
		`{"v":1,"Cluster":"c","instance":"i","parts":1}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"PARTS":2}`,
		`{"v":1,"cluster":"c","cluster":"d","instance":"i","parts":1}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","lru":"x"}],"blocks":[{"key":"2"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"x":{"y":[1,2,{"z":null}]}}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":"u","Key":"2"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":"u","x":true}]}`,
		`{"\u0076":1,"cluster":"c","instance":"i","parts":1}`,
		// null values.
		`{"v":null,"cluster":"c","instance":"i","parts":1}`,
		`{"v":1,"cluster":null,"instance":"i","parts":1}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":null}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[null]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":null,"uri":null,"lru":null}]}`,
		// Numbers.
		`{"v":01,"cluster":"c","instance":"i","parts":1}`,
		`{"v":1.0,"cluster":"c","instance":"i","parts":1}`,
		`{"v":1e0,"cluster":"c","instance":"i","parts":1}`,
		`{"v":-0,"cluster":"c","instance":"i","parts":1}`,
		`{"v":+1,"cluster":"c","instance":"i","parts":1}`,
		`{"v":-,"cluster":"c","instance":"i","parts":1}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"round":-0}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"round":-1}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"round":18446744073709551615}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"round":18446744073709551616}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"round":99999999999999999999999}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"scanned_at_us":-9223372036854775808}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"scanned_at_us":-9223372036854775809}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"scanned_at_us":9223372036854775808}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"bad_keys":-1}`,
		`{"v":1,"cluster":"c","instance":"i","parts":"1"}`,
		`{"v":1,"cluster":"c","instance":"i","parts":true}`,
		// Block keys (",string").
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"-0"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"01"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":" 1"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1 "}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"\u0031"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":""}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"-"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"null"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1.5"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":1}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"9223372036854775808"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"-9223372036854775808"}]}`,
		// Strings and __uri__ values.
		`{"v":1,"cluster":"c\u00e9\n\"\\\/\b\f\r\t","instance":"i","parts":1}`,
		`{"v":1,"cluster":"\ud83d\ude00","instance":"i","parts":1}`,
		`{"v":1,"cluster":"\ud83d","instance":"i","parts":1}`,
		`{"v":1,"cluster":"\ude00x","instance":"i","parts":1}`,
		"{\"v\":1,\"cluster\":\"\xff\",\"instance\":\"i\",\"parts\":1}",
		"{\"v\":1,\"cluster\":\"\xed\xa0\x80\",\"instance\":\"i\",\"parts\":1}",
		"{\"v\":1,\"cluster\":\"a\x01\",\"instance\":\"i\",\"parts\":1}",
		"{\"v\":1,\"cluster\":\"a\x7f\u2028\",\"instance\":\"i\",\"parts\":1}",
		`{"v":1,"cluster":"\x","instance":"i","parts":1}`,
		`{"v":1,"cluster":"\u12","instance":"i","parts":1}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":"\ud800"}]}`,
		"{\"v\":1,\"cluster\":\"c\",\"instance\":\"i\",\"parts\":1,\"blocks\":[{\"key\":\"1\",\"uri\":\"\xff\"}]}",
		"{\"v\":1,\"cluster\":\"c\",\"instance\":\"i\",\"parts\":1,\"blocks\":[{\"key\":\"1\",\"uri\":\"\\\xc3\xa9\"}]}",
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":{"base64":"/w=="}}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":{"base64":"/w==","x":1}}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":5}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":"a\\"}]}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"1","uri":"a\"}]}`,
		// Valid JSON that fails validation.
		`{"v":2,"cluster":"c","instance":"i","parts":1}`,
		`{"v":1,"cluster":"","instance":"i","parts":1}`,
		`{"v":1,"cluster":"c","instance":"i","parts":1,"part":1}`,
		`{"v":2,"cluster":5}`,
	} {
		corpus = append(corpus, []byte(s))
	}
	return corpus
}

// TestDecodeBatchFastCorpus compares the two decoders on a corpus of odd inputs and on every
// truncation of a real batch, and checks that what Encode writes takes the hand-written path.
func TestDecodeBatchFastCorpus(t *testing.T) {
	for _, data := range fastCorpus(t) {
		checkDecoders(t, data)
	}
	for _, s := range oddStrings {
		b := testBatch(s)
		enc, err := Encode(b)
		require.NoError(t, err)
		if utf8.ValidString(s) { // else the __uri__ takes its base64 form
			require.True(t, checkDecoders(t, enc), "%q: Encode's output must not need encoding/json", s)
		}
		got, err := DecodeBatch(enc)
		require.NoError(t, err)
		want, err := decodeBatchJSON(enc)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	enc, err := Encode(testBatch(`"\`))
	require.NoError(t, err)
	for i := range enc {
		checkDecoders(t, enc[:i])
	}
}

// FuzzDecodeBatchFast compares the hand-written decoder with encoding/json on any input, and
// on a valid batch with the input pasted raw into its strings, number and key (so that the
// mutations exercise the value decoders rather than break the object around them).
func FuzzDecodeBatchFast(f *testing.F) {
	for _, data := range fastCorpus(f) {
		f.Add(data)
	}
	for _, s := range []string{`a"b\u00e9\ud83d\ude00`, `\u2028`, "\xff", `-0`, `18446744073709551615`, `\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecoders(t, data)
		s := string(data)
		checkDecoders(t, []byte(`{"v":1,"cluster":"`+s+`","instance":"i","parts":1,"blocks":[{"key":"1","uri":"`+s+`","lru":"`+s+`"}]}`))
		checkDecoders(t, []byte(`{"v":1,"cluster":"c","instance":"i","parts":1,"round":`+s+`,"blocks":[{"key":"`+s+`","uri":"x"}]}`))
	})
}

// BenchmarkDecodeBatchPaths compares the two decoders on a 256-block page as Encode writes it.
func BenchmarkDecodeBatchPaths(b *testing.B) {
	page := testBatch("")
	for range 252 {
		page.Blocks = append(page.Blocks, page.Blocks[0])
	}
	data, err := Encode(page)
	require.NoError(b, err)
	for _, p := range []struct {
		name   string
		decode func([]byte) (Batch, error)
	}{{"fast", DecodeBatch}, {"encoding_json", decodeBatchJSON}} {
		b.Run(p.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func testDeleteRequest(s string) DeleteRequest {
	return DeleteRequest{
		V: 1, Cluster: "c1" + s, Instance: "inst-0" + s, Group: s, Store: "meta", Round: 1<<64 - 1,
		Source: Source{Stream: "S" + s, Seq: 17, MsgID: s}, JudgedAt: -1,
		Sources: []Source{{Stream: "S" + s, Seq: 18}, {Stream: "S", Seq: 19, MsgID: "m" + s}},
		Targets: []Target{
			{Key: -1 << 63, Location: "l1" + s, Reason: ReasonOrphanWriting, Expected: RawText(`{"id":"l1","status":2}` + s)},
			{Key: 3, Location: "l3", Layout: LayoutLocation, Reason: ReasonStuckDeleting, Expected: RawText(`{"id":"l3","status":4}`)},
			{Key: 1<<63 - 1, Location: "l2", Reason: ReasonStorageMissing, Expected: RawText(s + "x")},
		},
		Storages: map[string]StorageInfo{
			"nfs_01" + s: {Type: "file", RootPath: "/tmp/nfs/" + s, KeyCountPerFile: 1<<64 - 1},
			"hf3fs_01":   {Type: "hf3fs", Mountpoint: "/3fs", RootDir: s},
		},
	}
}

func fastDeleteCorpus(t testing.TB) [][]byte {
	var corpus [][]byte
	for _, s := range oddStrings {
		enc, err := Encode(testDeleteRequest(s))
		require.NoError(t, err)
		corpus = append(corpus, enc)
	}
	head := `{"v":1,"cluster":"c","instance":"i","source":{"msg_id":"m"},`
	tgt := `"targets":[{"key":"1","location":"l","reason":"orphan_writing","expected":"x"}]`
	for _, s := range []string{
		head + tgt + `}`,
		head + tgt + `,"storages":null}`,
		head + tgt + `,"storages":{}}`,
		head + tgt + `,"storages":{"a":{},"b":{"type":"file","key_count_per_file":0}}}`,
		head + tgt + `,"storages":{"a":{},"a":{"type":"file"}}}`,
		head + tgt + `,"storages":{"a":{"type":"file"},"A":{"type":"hf3fs"}}}`,
		head + tgt + `,"storages":{"\u0061":{}}}`,
		head + tgt + "," + `"storages":{"\xff":{}}}`,
		head + "\"storages\":{\"\xff\":{}}," + tgt + `}`,
		head + tgt + `,"storages":{"a":{"type":"file","Type":"x"}}}`,
		head + tgt + `,"storages":{"a":{"type":"file","x":1}}}`,
		head + tgt + `,"storages":{"a":null}}`,
		head + tgt + `,"storages":[]}`,
		head + tgt + `,"storages":{"a":{"key_count_per_file":-1}}}`,
		head + `"targets":null}`,
		head + `"targets":[]}`,
		head + `"targets":[null]}`,
		head + `"targets":[{"key":"1","location":"l","reason":"orphan_writing","expected":{"base64":"/w=="}}]}`,
		head + `"targets":[{"key":"1","location":"l","reason":"orphan_writing","expected":"x","key":"2"}]}`,
		head + `"targets":[{"key":"1","location":"l","reason":"orphan_writing","expected":"x"},{"key":"1","location":"l","reason":"orphan_writing","expected":"x"}]}`,
		`{"v":1,"cluster":"c","instance":"i","source":{"stream":"s","seq":1,"seq":2},` + tgt + `}`,
		`{"v":1,"cluster":"c","instance":"i","source":{"stream":"s","seq":0},` + tgt + `}`,
		`{"v":1,"cluster":"c","instance":"i","source":null,` + tgt + `}`,
		`{"v":1,"cluster":"c","instance":"i","source":{},` + tgt + `}`,
		`{"v":1,"cluster":"c","instance":"i","source":{"msg_id":"m","other":1},` + tgt + `}`,
		`{"v":1,"cluster":"c","instance":"i","source":{"msg_id":"m"},"judged_at_us":1.5,` + tgt + `}`,
		`{"v":2,"cluster":"c"}`, `{}`, `[]`, `null`,
	} {
		corpus = append(corpus, []byte(s))
	}
	return corpus
}

// TestDecodeDeleteRequestFastCorpus is TestDecodeBatchFastCorpus for delete requests.
func TestDecodeDeleteRequestFastCorpus(t *testing.T) {
	for _, data := range fastDeleteCorpus(t) {
		checkDeleteDecoders(t, data)
	}
	for _, s := range oddStrings {
		enc, err := Encode(testDeleteRequest(s))
		require.NoError(t, err)
		// Escapes in a storage name (a map key) are left to encoding/json.
		if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == '"' || r == '\\' || r == '\u2028' || r == '\u2029' }) {
			require.True(t, checkDeleteDecoders(t, enc), "%q: Encode's output must not need encoding/json", s)
		}
	}
	enc, err := Encode(testDeleteRequest(`"\`))
	require.NoError(t, err)
	for i := range enc {
		checkDeleteDecoders(t, enc[:i])
	}
}

// FuzzDecodeDeleteRequestFast is FuzzDecodeBatchFast for delete requests.
func FuzzDecodeDeleteRequestFast(f *testing.F) {
	for _, data := range fastDeleteCorpus(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDeleteDecoders(t, data)
		s := string(data)
		checkDeleteDecoders(t, []byte(`{"v":1,"cluster":"c","instance":"i","source":{"msg_id":"`+s+`"},`+
			`"targets":[{"key":"1","location":"`+s+`","reason":"orphan_writing","expected":"`+s+`"}],"storages":{"`+s+`":{"type":"`+s+`"}}}`))
	})
}
