package kvcm

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadToken is wrapped by DecodeToken's errors: the subject token is not one EncodeToken
// produces (so the message was not published by kvcm-gc, or the subject was typed by hand).
var ErrBadToken = errors.New("bad subject token")

const upperHex = "0123456789ABCDEF"

// TokenSafe reports whether c is kept as is in a subject token. NATS tokens may not contain
// '.', '*', '>' or whitespace; the safe set is kept small so the encoding stays obviously
// bijective and ids like "inst-01_a" stay readable.
func TokenSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// EncodeToken encodes an arbitrary non-empty string into one NATS subject token, bijectively:
// bytes in [A-Za-z0-9_-] are kept, every other byte becomes %XX (upper-case hex).
// The empty string encodes to "%" (never produced otherwise).
func EncodeToken(s string) string {
	if s == "" {
		return "%"
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !TokenSafe(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	return Escape(s, '%', 2*n, func(i int) bool { return TokenSafe(s[i]) })
}

// Escape returns s with every byte s[i] for which keep(i) is false written as mark and two
// upper-case hex digits; grow is the room made for the escapes up front.
func Escape(s string, mark byte, grow int, keep func(i int) bool) string {
	var b strings.Builder
	b.Grow(len(s) + grow)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keep(i) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(mark)
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0xF])
	}
	return b.String()
}

// DecodeToken inverts EncodeToken; it rejects any token EncodeToken cannot produce
// (lower-case hex, an escaped safe byte, a stray %), so the encoding is a bijection.
func DecodeToken(tok string) (string, error) {
	if tok == "%" {
		return "", nil
	}
	if tok == "" {
		return "", fmt.Errorf("decode token: empty: %w", ErrBadToken)
	}
	if !strings.Contains(tok, "%") {
		for i := 0; i < len(tok); i++ {
			if !TokenSafe(tok[i]) {
				return "", fmt.Errorf("decode token %q: byte %#x at %d: %w", tok, tok[i], i, ErrBadToken)
			}
		}
		return tok, nil
	}
	out := make([]byte, 0, len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if TokenSafe(c) {
			out = append(out, c)
			continue
		}
		if c != '%' || i+2 >= len(tok) {
			return "", fmt.Errorf("decode token %q: bad byte or truncated escape at %d: %w", tok, i, ErrBadToken)
		}
		hi, lo := unhexUpper(tok[i+1]), unhexUpper(tok[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("decode token %q: escape at %d is not upper-case hex: %w", tok, i, ErrBadToken)
		}
		v := byte(hi<<4 | lo)
		if TokenSafe(v) {
			return "", fmt.Errorf("decode token %q: escaped safe byte at %d: %w", tok, i, ErrBadToken)
		}
		out = append(out, v)
		i += 2
	}
	return string(out), nil
}

func unhexUpper(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
