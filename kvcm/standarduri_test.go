package kvcm

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStandardURIFixtures: the two ports of StandardUri::Parse read every fixture URI as
// KVCM's own compiled parsers did (f6aa2b2's and the newer one): whether Parse succeeds, what
// the object holds afterwards (which the string constructor keeps, success or not), whether
// it is Valid(), and what GetParamAs<uint64_t> reads of size and blkid (nil in the fixtures:
// the target left unchanged).
func TestStandardURIFixtures(t *testing.T) {
	cases := readCases[uriFixture](t, "uris")
	require.Len(t, cases, 50)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			check := func(t *testing.T, want uriDecoded, got StandardURI, ok bool) {
				t.Helper()
				require.Equal(t, want.ParseOK, ok)
				require.Equal(t, want.Valid, got.Valid())
				require.Equal(t, want.Scheme, got.Scheme)
				require.Equal(t, want.UserInfo, got.UserInfo)
				require.Equal(t, want.Host, got.Host)
				require.Equal(t, want.Port, got.Port)
				require.Equal(t, want.Path, got.Path)
				params := map[string]string{}
				for _, p := range want.Params {
					params[p[0]] = p[1]
				}
				if got.Params == nil {
					got.Params = map[string]string{}
				}
				require.Equal(t, params, got.Params)
				for name, w := range map[string]*uint64{"size": want.Size, "blkid": want.BlkID} {
					v, ok := got.Uint64(name)
					if w == nil {
						require.False(t, ok, "%s: KVCM leaves the target unchanged", name)
						continue
					}
					require.True(t, ok, name)
					require.Equal(t, *w, v, name)
				}
			}
			old, why := parseStandardURIf6aa2b2(c.Input)
			check(t, c.Old.Decoded, old, why == "")
			require.Equal(t, old, ParseStandardURI(c.Input, ParserF6aa2b2))
			nu, ok := parseStandardURINewer(c.Input)
			check(t, c.Decoded, nu, ok)
			require.Equal(t, nu, ParseStandardURI(c.Input, ParserNewer))
		})
	}
}

// FuzzStandardURI: both parsers read any bytes without panicking; Valid is a non-empty
// scheme; a size that reads is its parameter's decimal (leading zeros aside); the newer
// parser's host never runs past the authority, and a failed newer parse leaves nothing.
func FuzzStandardURI(f *testing.F) {
	for _, c := range []string{"file://nfs_01/p?size=1", "file://u@h:80/a@b?x=/y&size=01", "a://:1", "://", "x://h:+1/p?size=1&size=2",
		"x://h/p?&&=&a", "x://@@h", "x://h:99999999999999999999/p", "vineyard://[::1]:8080/mem", "f://u:p/w@h: 1"} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range []URIParser{ParserNewer, ParserF6aa2b2} {
			u := ParseStandardURI(s, p)
			require.Equal(t, u.Scheme != "", u.Valid())
			if v, ok := u.Uint64("size"); ok {
				raw := u.Params["size"]
				n, err := strconv.ParseUint(raw, 10, 64)
				require.NoError(t, err, raw)
				require.Equal(t, n, v)
			}
		}
		u, ok := parseStandardURINewer(s)
		if !ok {
			require.Equal(t, StandardURI{}, u)
			return
		}
		require.NotContains(t, u.Host, "/")
		require.NotContains(t, u.Host, "?")
	})
}
