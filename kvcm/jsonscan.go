package kvcm

import (
	"fmt"
	"math"
	"strconv"

	"github.com/kvcm-gc/kvcm-gc/internal/jsonstr"
)

// This file is a small strict JSON scanner (RFC 8259) that reports where things are instead of
// building values. kvcm-gc must write every location it did not target back byte for byte,
// and in its target change only the status number (DESIGN §8.1 and §8.5), which
// no decode-and-re-encode through encoding/json can promise. The scanner works on a string so
// that decoded names and ids without escapes are substrings of the one copy of the document.

// maxJSONDepth bounds nesting so a hostile value cannot exhaust the stack (encoding/json uses
// the same limit).
const maxJSONDepth = 10000

// span is a half-open byte range [start, end) of the scanned document.
type span struct{ start, end int }

// ok reports whether the span is set: a scanned token is never empty, so the zero span
// means "absent".
func (s span) ok() bool { return s.end > s.start }

// syntaxError is a JSON syntax error at a byte offset.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("offset %d: %s", e.off, e.msg) }

// jsonScanner walks doc from pos. Its methods expect pos at the first byte of what they scan
// (never at whitespace) and leave pos just after it.
type jsonScanner struct {
	doc   string
	pos   int
	depth int
}

func (s *jsonScanner) errorf(format string, args ...any) error {
	return &syntaxError{off: s.pos, msg: fmt.Sprintf(format, args...)}
}

// peek returns the byte at pos, or 0 at the end (0 never starts a JSON token).
func (s *jsonScanner) peek() byte {
	if s.pos < len(s.doc) {
		return s.doc[s.pos]
	}
	return 0
}

// ws skips JSON whitespace: space, tab, LF, CR only.
func (s *jsonScanner) ws() {
	for s.pos < len(s.doc) {
		switch s.doc[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// skipValue skips any one JSON value, validating it.
func (s *jsonScanner) skipValue() error {
	switch c := s.peek(); {
	case c == '{':
		more, err := s.beginObject()
		for more && err == nil {
			if _, _, err = s.key(); err != nil {
				return err
			}
			if err = s.skipValue(); err != nil {
				return err
			}
			more, err = s.nextMember()
		}
		return err
	case c == '[':
		more, err := s.beginArray()
		for more && err == nil {
			if err = s.skipValue(); err != nil {
				return err
			}
			more, err = s.nextElement()
		}
		return err
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		_, err := s.number()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == 0 && s.pos >= len(s.doc):
		return s.errorf("unexpected end of input")
	}
	return s.errorf("invalid character %q looking for a value", s.peek())
}

func (s *jsonScanner) literal(lit string) error {
	if len(s.doc)-s.pos < len(lit) || s.doc[s.pos:s.pos+len(lit)] != lit {
		return s.errorf("invalid literal, expected %s", lit)
	}
	s.pos += len(lit)
	return nil
}

// beginObject consumes '{' and the whitespace after it. more is false for an empty object,
// whose '}' is then consumed too; otherwise pos is at the first key.
func (s *jsonScanner) beginObject() (more bool, err error) {
	if s.peek() != '{' {
		return false, s.errorf("expected '{'")
	}
	return s.open('}')
}

// beginArray is beginObject for '['.
func (s *jsonScanner) beginArray() (more bool, err error) {
	if s.peek() != '[' {
		return false, s.errorf("expected '['")
	}
	return s.open(']')
}

func (s *jsonScanner) open(closer byte) (bool, error) {
	if s.depth >= maxJSONDepth {
		return false, s.errorf("nesting deeper than %d", maxJSONDepth)
	}
	s.depth++
	s.pos++
	s.ws()
	if s.peek() == closer {
		s.pos++
		s.depth--
		return false, nil
	}
	return true, nil
}

// key scans a member name and the ':' after it; pos is then at the value. esc reports
// whether the name token has escapes (so it must be decoded before comparing).
func (s *jsonScanner) key() (k span, esc bool, err error) {
	if s.peek() != '"' {
		return span{}, false, s.errorf("expected a string key")
	}
	k.start = s.pos
	if esc, err = s.str(); err != nil {
		return span{}, false, err
	}
	k.end = s.pos
	s.ws()
	if s.peek() != ':' {
		return span{}, false, s.errorf("expected ':' after object key")
	}
	s.pos++
	s.ws()
	return k, esc, nil
}

// nextMember consumes the whitespace and the ',' or '}' after a member value. more is true
// when another member follows (pos is then at its key).
func (s *jsonScanner) nextMember() (more bool, err error) { return s.next('}') }

// nextElement is nextMember for arrays.
func (s *jsonScanner) nextElement() (more bool, err error) { return s.next(']') }

func (s *jsonScanner) next(closer byte) (bool, error) {
	s.ws()
	switch s.peek() {
	case ',':
		s.pos++
		s.ws()
		if closer == '}' && s.peek() != '"' {
			return false, s.errorf("expected a string key after ','")
		}
		return true, nil
	case closer:
		s.pos++
		s.depth--
		return false, nil
	}
	return false, s.errorf("expected ',' or %q", closer)
}

// str scans a string token. Control characters must be escaped and escapes must be valid;
// bytes that are not valid UTF-8 are accepted (and kept: they are never rewritten).
// A \u escape of a lone UTF-16 surrogate is rejected, as rapidjson (KVCM's parser) rejects
// it; this also keeps decoding one-to-one, so two distinct ids never decode alike.
func (s *jsonScanner) str() (esc bool, err error) {
	i := s.pos + 1
	for i < len(s.doc) {
		c := s.doc[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(s.doc) {
				s.pos = i
				return esc, s.errorf("unterminated escape")
			}
			switch s.doc[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := jsonstr.Hex4(s.doc, i+2)
				if !ok {
					s.pos = i
					return esc, s.errorf(`invalid \u escape`)
				}
				i += 6
				switch {
				case r >= 0xDC00 && r <= 0xDFFF:
					s.pos = i - 6
					return esc, s.errorf("lone low surrogate")
				case r >= 0xD800 && r <= 0xDBFF:
					lo, ok := jsonstr.Hex4(s.doc, i+2)
					if !ok || s.doc[i] != '\\' || s.doc[i+1] != 'u' || lo < 0xDC00 || lo > 0xDFFF {
						s.pos = i - 6
						return esc, s.errorf("lone high surrogate")
					}
					i += 6
				}
			default:
				s.pos = i
				return esc, s.errorf("invalid escape %q", s.doc[i+1])
			}
		case c < 0x20:
			s.pos = i
			return esc, s.errorf("control character %#x in string", c)
		default:
			i++
		}
	}
	s.pos = i
	return esc, s.errorf("unterminated string")
}

// number scans a number token; isInt is true when it has no fraction and no exponent.
func (s *jsonScanner) number() (isInt bool, err error) {
	i := s.pos
	if i < len(s.doc) && s.doc[i] == '-' {
		i++
	}
	switch {
	case i < len(s.doc) && s.doc[i] == '0':
		i++
	case i < len(s.doc) && s.doc[i] >= '1' && s.doc[i] <= '9':
		i = skipDigits(s.doc, i)
	default:
		s.pos = i
		return false, s.errorf("invalid number")
	}
	isInt = true
	if i < len(s.doc) && s.doc[i] == '.' {
		isInt = false
		j := skipDigits(s.doc, i+1)
		if j == i+1 {
			s.pos = j
			return false, s.errorf("invalid number: no digit after '.'")
		}
		i = j
	}
	if i < len(s.doc) && (s.doc[i] == 'e' || s.doc[i] == 'E') {
		isInt = false
		i++
		if i < len(s.doc) && (s.doc[i] == '+' || s.doc[i] == '-') {
			i++
		}
		j := skipDigits(s.doc, i)
		if j == i {
			s.pos = j
			return false, s.errorf("invalid number: no digit in exponent")
		}
		i = j
	}
	// rapidjson (KVCM's parser) reads a number that fits no integer type as a double and
	// fails the whole document when that overflows ("Number too big"), even in a member
	// nobody reads: such a value is corrupt for KVCM, so it is for kvcm-gc too.
	if tok := s.doc[s.pos:i]; !isInt || len(tok) > 20 {
		if f, err := strconv.ParseFloat(tok, 64); err != nil && math.IsInf(f, 0) {
			s.pos = i
			return false, s.errorf("number too big")
		}
	}
	s.pos = i
	return isInt, nil
}

func skipDigits(doc string, i int) int {
	for i < len(doc) && doc[i] >= '0' && doc[i] <= '9' {
		i++
	}
	return i
}

// unquote returns the decoded content of the string token doc[t.start:t.end]. Without
// escapes it is a substring of doc (no copy). The token must have been validated by str.
// Bytes that are not valid UTF-8 are kept as they are, as rapidjson keeps them.
func unquote(doc string, t span, esc bool) string {
	body := doc[t.start+1 : t.end-1]
	if !esc {
		return body
	}
	out, _, _ := jsonstr.Unquote(make([]byte, 0, len(body)), body, jsonstr.RawBytes)
	return string(out)
}

// intToken parses the integer number token doc[t.start:t.end] as an int64. ok is false for
// a fraction, an exponent or an out-of-range value (JSON has one number type; KVCM reads
// these members as integers and rejects the rest).
func intToken(tok string) (int64, bool) {
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(tok, 10, 64)
	return v, err == nil
}

// uintToken is intToken for uint64; a leading '-' (even "-0") is rejected.
func uintToken(tok string) (uint64, bool) {
	if tok == "" || tok[0] == '-' {
		return 0, false
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(tok, 10, 64)
	return v, err == nil
}
