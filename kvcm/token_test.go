package kvcm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeToken(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "%"},
		{"inst0", "inst0"},
		{"Inst-0_a", "Inst-0_a"},
		{"a.b", "a%2Eb"},
		{"a b", "a%20b"},
		{"*>", "%2A%3E"},
		{"%", "%25"},
		{"é", "%C3%A9"},
		{"\x00\xff", "%00%FF"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, EncodeToken(tt.in), tt.in)
		got, err := DecodeToken(tt.want)
		require.NoError(t, err)
		require.Equal(t, tt.in, got)
	}
}

func TestDecodeTokenRejects(t *testing.T) {
	for _, tok := range []string{
		"",         // never produced
		"%2e",      // lower-case hex
		"%41",      // escaped safe byte 'A'
		"%5F",      // escaped safe byte '_'
		"%2",       // truncated
		"a%",       // stray %
		"%%",       // stray %
		"%G0",      // not hex
		"a.b",      // unsafe byte
		"a b",      // unsafe byte
		"a*",       // unsafe byte
		"\xc3\xa9", // raw non-ASCII
	} {
		_, err := DecodeToken(tok)
		require.ErrorIs(t, err, ErrBadToken, "%q", tok)
	}
}

func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "inst0", "a.b", "%", "%25", "%2e", "é", "\x00", "a%41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := EncodeToken(s)
		dec, err := DecodeToken(enc)
		require.NoError(t, err)
		require.Equal(t, s, dec)
		for i := 0; i < len(enc); i++ {
			require.True(t, TokenSafe(enc[i]) || enc[i] == '%', "unsafe byte in %q", enc)
		}
		// The other direction: every token that decodes is the encoding of what it decodes to.
		if d, err := DecodeToken(s); err == nil {
			require.Equal(t, s, EncodeToken(d))
		}
	})
}
