package subjects

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// RawText carries exact bytes in JSON: as a JSON string when they are valid UTF-8 (readable in
// `nats stream view`), else as {"base64":"…"}. Decoding gives back the same bytes either way.
//
// Exactness matters because a deleter compares these bytes with Redis byte for byte (DESIGN
// §8.1): a JSON string cannot carry invalid UTF-8 (encoding/json would replace it with U+FFFD),
// hence the base64 form. The string form escapes only what JSON requires plus U+2028/U+2029;
// '<', '>' and '&' stay as they are. Decoding is strict: a string that is not valid UTF-8 or
// holds a lone surrogate escape, or an object with a member other than "base64", is an error
// rather than a guess at what the bytes were.
type RawText []byte

// MarshalJSON encodes r as a JSON string, or as {"base64":"…"} when r is not valid UTF-8.
// A nil or empty RawText is "".
func (r RawText) MarshalJSON() ([]byte, error) {
	return r.appendJSON(make([]byte, 0, len(r)+2)), nil
}

func (r RawText) appendJSON(dst []byte) []byte {
	if !utf8.Valid(r) {
		dst = append(dst, `{"base64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, r)
		return append(dst, `"}`...)
	}
	return appendQuoted(dst, r)
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

const hexDigits = "0123456789abcdef"

// appendQuoted appends s, valid UTF-8, as a JSON string literal.
func appendQuoted(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but end a line in JavaScript; escape them as
		// encoding/json does so the text is safe to paste anywhere.
		if c == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xA8 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[s[i+2]&0xF])
			i += 3
			start = i
			continue
		}
		i++
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendUnquoted appends the bytes of the JSON string literal lit (quotes included). It accepts
// exactly the literals RFC 8259 allows whose content is valid UTF-8 and rejects lone surrogate
// escapes, which have no UTF-8 form.
func appendUnquoted(dst, lit []byte) ([]byte, error) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return nil, errors.New("not a JSON string")
	}
	s := lit[1 : len(lit)-1]
	dst, n, err := unquote(dst, s)
	switch {
	case err != nil:
		return nil, err
	case n < len(s):
		return nil, fmt.Errorf("unescaped quote at byte %d", n)
	}
	return dst, nil
}

// unquote appends the bytes of the content of a JSON string literal, read from s up to its
// first unescaped quote, whose index is n (len(s) when there is none). It refuses what
// appendUnquoted refuses.
func unquote(dst, s []byte) (_ []byte, n int, err error) {
	for i := 0; i < len(s); {
		// A run of printable ASCII other than '"' and '\\' is copied as it is, in one append.
		j := i
		for j < len(s) {
			if c := s[j]; c-0x20 >= utf8.RuneSelf-0x20 || c == '"' || c == '\\' {
				break
			}
			j++
		}
		dst = append(dst, s[i:j]...)
		if i = j; i == len(s) {
			break
		}
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return nil, 0, fmt.Errorf("truncated escape at byte %d", i)
			}
			switch e := s[i+1]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(s[i+2:])
				if !ok {
					return nil, 0, fmt.Errorf("bad \\u escape at byte %d", i)
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2, ok = hex4(s[i+2:])
					}
					dec := utf16.DecodeRune(r, r2)
					if !ok || dec == utf8.RuneError {
						return nil, 0, fmt.Errorf("lone surrogate escape at byte %d", i-6)
					}
					r = dec
					i += 6
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default:
				return nil, 0, fmt.Errorf("bad escape %q at byte %d", e, i)
			}
			i += 2
		case c == '"':
			return dst, i, nil
		case c < 0x20:
			return nil, 0, fmt.Errorf("unescaped control byte %#x at byte %d", c, i)
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, 0, fmt.Errorf("invalid UTF-8 at byte %d", i)
			}
			dst = append(dst, s[i:i+size]...)
			i += size
		}
	}
	return dst, len(s), nil
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
