// Package jsonstr is kvcm-gc's one JSON string quoter and unquoter, shared by the decoder of
// KVCM's location JSON (kvcm) and the hand-written message codecs (subjects).
//
// The escaping rule is encoding/json's with HTML escaping off, so hand-encoded messages are
// byte for byte what encoding/json writes: '"' and '\' escaped, \b \f \n \r \t for those
// control bytes and \u00XX (lower-case hex) for the other bytes below 0x20, U+2028 and U+2029
// escaped (they end a line in JavaScript), everything else as it is ('<', '>', '&' and '/'
// included); a byte that is not valid UTF-8 becomes \ufffd, as encoding/json does — callers
// that must carry such bytes exactly do not quote them (RawText takes its base64 form).
package jsonstr

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// Append appends s quoted as a JSON string literal (see the package comment).
func Append[T ~string | ~[]byte](dst []byte, s T) []byte {
	dst, _ = appendQuoted(dst, s, false)
	return dst
}

// AppendExact is Append for bytes that must come back exactly: it reports false, with dst as
// it was, when s is not valid UTF-8 (Append would replace such bytes), in the same pass.
func AppendExact[T ~string | ~[]byte](dst []byte, s T) ([]byte, bool) {
	return appendQuoted(dst, s, true)
}

// plain marks the bytes written as they are: printable ASCII but '"' and '\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func appendQuoted[T ~string | ~[]byte](dst []byte, s T, exact bool) ([]byte, bool) {
	orig := len(dst)
	// Every byte but a control byte or one that is not UTF-8 takes at most two output bytes:
	// the output is written in place into room for that, and grown only for the rare others.
	// (Written byte by byte into the room, this is twice as fast as appending runs between
	// escapes: a location's JSON has an escaped quote every few bytes.)
	dst = slices.Grow(dst, 2*len(s)+2)
	w := len(dst)
	dst = dst[:cap(dst)]
	dst[w] = '"'
	w++
	for i := 0; i < len(s); {
		c := s[i]
		if plain[c] {
			dst[w] = c
			w++
			i++
			continue
		}
		if c < utf8.RuneSelf {
			switch c {
			case '"', '\\':
				dst[w], dst[w+1] = '\\', c
			case '\b':
				dst[w], dst[w+1] = '\\', 'b'
			case '\f':
				dst[w], dst[w+1] = '\\', 'f'
			case '\n':
				dst[w], dst[w+1] = '\\', 'n'
			case '\r':
				dst[w], dst[w+1] = '\\', 'r'
			case '\t':
				dst[w], dst[w+1] = '\\', 't'
			default:
				dst = append(dst[:w], '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
				w = len(dst)
				i++
				dst = grown(dst, 2*(len(s)-i)+2)
				continue
			}
			w += 2
			i++
			continue
		}
		r, size := decodeRune(s, i)
		switch {
		case r == utf8.RuneError && size == 1:
			if exact {
				return dst[:orig], false
			}
			dst = append(dst[:w], `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst[:w], '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			dst = append(dst[:w], s[i:i+size]...)
		}
		w = len(dst)
		i += size
		dst = grown(dst, 2*(len(s)-i)+2)
	}
	dst[w] = '"'
	return dst[:w+1], true
}

// grown is dst with room for n more bytes past its length, resliced to its capacity.
func grown(dst []byte, n int) []byte {
	dst = slices.Grow(dst, n)
	return dst[:cap(dst)]
}

// decodeRune decodes the rune at s[i:]. The few bytes converted to a string stay on the
// stack: decoding does not allocate.
func decodeRune[T ~string | ~[]byte](s T, i int) (rune, int) {
	return utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
}

// Mode says what Unquote accepts besides RFC 8259's strings.
type Mode int

const (
	// Strict refuses a string whose content is not valid UTF-8: encoding/json would replace
	// such bytes, so a decoder meant to agree with it must refuse them.
	Strict Mode = iota
	// RawBytes accepts bytes that are not valid UTF-8 and keeps them as they are (KVCM's
	// rapidjson does, and kvcm-gc never rewrites them).
	RawBytes
)

// Unquote appends the content of a JSON string literal, read from s (just after its opening
// quote) up to its first unescaped quote, whose index is n (len(s) when there is none). It
// refuses an unescaped control byte, a bad or truncated escape, a \u escape of a lone UTF-16
// surrogate (no UTF-8 form: rapidjson refuses a lone high surrogate, and accepting a lone low
// one would make two ids decode alike) and, in Strict mode, invalid UTF-8.
func Unquote[T ~string | ~[]byte](dst []byte, s T, mode Mode) (_ []byte, n int, err error) {
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
		switch c := s[i]; {
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
				r, ok := hex4(s, i+2)
				if !ok {
					return nil, 0, fmt.Errorf("bad \\u escape at byte %d", i)
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2, ok = hex4(s, i+2)
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
			r, size := decodeRune(s, i)
			if r == utf8.RuneError && size == 1 && mode == Strict {
				return nil, 0, fmt.Errorf("invalid UTF-8 at byte %d", i)
			}
			dst = append(dst, s[i:i+size]...)
			i += size
		}
	}
	return dst, len(s), nil
}

// ErrNotString: the literal is not a JSON string.
var ErrNotString = errors.New("not a JSON string")

// AppendUnquoted appends the content of the whole JSON string literal lit (quotes included);
// anything after its closing quote is an error.
func AppendUnquoted[T ~string | ~[]byte](dst []byte, lit T, mode Mode) ([]byte, error) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return nil, ErrNotString
	}
	s := lit[1 : len(lit)-1]
	dst, n, err := Unquote(dst, s, mode)
	switch {
	case err != nil:
		return nil, err
	case n < len(s):
		return nil, fmt.Errorf("unescaped quote at byte %d", n)
	}
	return dst, nil
}

// hex4 reads 4 hex digits (either case, as JSON allows) at s[i:].
func hex4[T ~string | ~[]byte](s T, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for k := i; k < i+4; k++ {
		c := s[k]
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

// Hex4 is hex4 for callers that validate escapes themselves (the scanner of KVCM's JSON).
func Hex4[T ~string | ~[]byte](s T, i int) (rune, bool) { return hex4(s, i) }
