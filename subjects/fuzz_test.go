package subjects_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

func mustEncode(f *testing.F, v any) []byte {
	data, err := subjects.Encode(v)
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// fuzzDecode checks a decoder never panics, fails only with ErrPoison, and that what it
// accepts re-encodes to a canonical form that decodes and re-encodes to itself.
func fuzzDecode[T any](t *testing.T, data []byte, decode func([]byte) (T, error)) {
	msg, err := decode(data)
	if err != nil {
		if !errors.Is(err, subjects.ErrPoison) {
			t.Fatalf("error does not wrap ErrPoison: %v", err)
		}
		return
	}
	enc, err := subjects.Encode(msg)
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	again, err := decode(enc)
	if err != nil {
		t.Fatalf("re-decode %q: %v", enc, err)
	}
	enc2, err := subjects.Encode(again)
	if err != nil {
		t.Fatalf("re-encode twice: %v", err)
	}
	if !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding not stable:\n%s\n%s", enc, enc2)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(mustEncode(f, sampleBatch(2)))
	f.Add(mustEncode(f, sampleBatch(0)))
	b := sampleBatch(1)
	b.Blocks[0].URI = subjects.RawText("\xff\x00\u2028&")
	f.Add(mustEncode(f, b))
	f.Add([]byte(`{"v":1,"cluster":"c","instance":"i","parts":1,"blocks":[{"key":"-9223372036854775808","uri":{"base64":"/w=="}}]}`))
	f.Add([]byte(`{"v":1,"cluster":"c","instance":"i","parts":2,"part":1,"blocks":null,"x":{}} `))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`{"v":1}{}`))
	b.V = subjects.BatchSchemaVersion
	f.Add(mustEncode(f, b))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, data, subjects.DecodeBatch) })
}

func FuzzDecodeDeleteRequest(f *testing.F) {
	f.Add(mustEncode(f, sampleDelete()))
	f.Add([]byte(`{"v":1,"cluster":"c","instance":"i","source":{"msg_id":"m"},"targets":[{"key":"1","location":"l","reason":"orphan_writing","expected":"\ud83d\ude00"}]}`))
	f.Add([]byte(`{"v":1,"cluster":"c","instance":"i","source":{"stream":"s","seq":1},"targets":[{"key":"1","location":"l","reason":"storage_missing","expected":{"base64":"AA=="}},{"key":"1","location":"l","reason":"storage_missing","expected":"x"}]}`))
	sealed, err := subjects.EncodeDeleteRequest(sampleDelete())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, data, subjects.DecodeDeleteRequest) })
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(mustEncode(f, sampleEvent()))
	f.Add([]byte(`{"v":1,"kind":"round","stage":"scanner","cluster":"c","at_us":1,"counts":{"keys":5}}`))
	f.Add([]byte(`{"v":1,"kind":"poison","stage":"prober","cluster":"c","at_us":1,"key":"-1","source":{"stream":"s","seq":9}}`))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, data, subjects.DecodeEvent) })
}

// FuzzRawText checks that any bytes round-trip exactly, that the string form is what
// encoding/json reads, and, using the input as a JSON text, that the strict decoder agrees
// with encoding/json whenever both accept it and refuses only what encoding/json would alter.
func FuzzRawText(f *testing.F) {
	for _, s := range []string{
		"", "abc", "\xff", "\x00", "&<>", "\u2028\u2029", `"\`, "实例", "\xed\xa0\x80", "a\xe2\x80",
		`"\ud800"`, `"\ud83d\ude00"`, `{"base64":"/w=="}`, `"\u0000"`, "null", `{"base64":"YQ==","x":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		enc, err := subjects.RawText(data).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(enc) {
			t.Fatalf("invalid JSON %q", enc)
		}
		var back subjects.RawText
		if err := back.UnmarshalJSON(enc); err != nil {
			t.Fatalf("decode %q: %v", enc, err)
		}
		if !bytes.Equal(back, data) {
			t.Fatalf("round trip %q -> %q -> %q", data, enc, back)
		}
		if utf8.Valid(data) {
			var s string
			if err := json.Unmarshal(enc, &s); err != nil || s != string(data) {
				t.Fatalf("encoding/json reads %q as %q (%v)", enc, s, err)
			}
		}

		// The input as JSON text.
		var ours subjects.RawText
		oursErr := ours.UnmarshalJSON(data)
		trimmed := bytes.TrimSpace(data)
		if len(trimmed) == 0 || trimmed[0] != '"' || !json.Valid(data) {
			return
		}
		var theirs string
		if err := json.Unmarshal(data, &theirs); err != nil {
			t.Fatalf("encoding/json rejects valid %q: %v", data, err)
		}
		if oursErr == nil {
			if string(ours) != theirs {
				t.Fatalf("%q: strict decoder gives %q, encoding/json %q", data, ours, theirs)
			}
			return
		}
		// Refused: only when encoding/json would have replaced something with U+FFFD.
		if !strings.ContainsRune(theirs, utf8.RuneError) {
			t.Fatalf("%q refused (%v) though encoding/json reads it exactly as %q", data, oursErr, theirs)
		}
	})
}
