package subjects

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kvcm-gc/kvcm-gc/internal/jsonstr"
)

// RawText carries exact bytes in JSON: as a JSON string when they are valid UTF-8 (readable in
// `nats stream view`), else as {"base64":"…"}. Decoding gives back the same bytes either way.
//
// Exactness matters because a deleter compares these bytes with Redis byte for byte (DESIGN
// §8.1): a JSON string cannot carry invalid UTF-8 (encoding/json would replace it with U+FFFD),
// hence the base64 form. The string form is quoted by jsonstr.Append, encoding/json's rule
// with HTML escaping off: '<', '>' and '&' stay as they are. Decoding is strict: a string that is not valid UTF-8 or
// holds a lone surrogate escape, or an object with a member other than "base64", is an error
// rather than a guess at what the bytes were.
type RawText []byte

// MarshalJSON encodes r as a JSON string, or as {"base64":"…"} when r is not valid UTF-8.
// A nil or empty RawText is "".
func (r RawText) MarshalJSON() ([]byte, error) {
	return r.appendJSON(make([]byte, 0, 2*len(r)+2)), nil
}

func (r RawText) appendJSON(dst []byte) []byte {
	if out, ok := jsonstr.AppendExact(dst, r); ok {
		return out // valid UTF-8: the quoting is exact
	}
	dst = append(dst, `{"base64":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, r)
	return append(dst, `"}`...)
}

// UnmarshalJSON accepts both forms MarshalJSON writes; null leaves r nil.
func (r *RawText) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case string(data) == "null":
		*r = nil
		return nil
	case len(data) > 0 && data[0] == '"':
		out, err := appendUnquoted(make([]byte, 0, max(len(data)-2, 0)), data)
		if err != nil {
			return fmt.Errorf("decode raw text: %w", err)
		}
		*r = out
		return nil
	case len(data) > 0 && data[0] == '{':
		var obj struct {
			Base64 *string `json:"base64"`
		}
		// An unknown member could mean another encoding: refuse instead of returning bytes
		// that may not be the ones meant.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&obj); err != nil {
			return fmt.Errorf("decode raw text object: %w", err)
		}
		if obj.Base64 == nil {
			return errors.New(`decode raw text object: no "base64" member`)
		}
		out, err := base64.StdEncoding.Strict().DecodeString(*obj.Base64)
		if err != nil {
			return fmt.Errorf("decode raw text base64: %w", err)
		}
		*r = out
		return nil
	default:
		return fmt.Errorf("decode raw text: want a JSON string or {\"base64\":…}, got %.20q", data)
	}
}

// appendUnquoted appends the bytes of the JSON string literal lit (quotes included). It accepts
// exactly the literals RFC 8259 allows whose content is valid UTF-8 and rejects lone surrogate
// escapes, which have no UTF-8 form.
func appendUnquoted(dst, lit []byte) ([]byte, error) {
	return jsonstr.AppendUnquoted(dst, lit, jsonstr.Strict)
}
