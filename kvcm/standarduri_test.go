package kvcm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStandardURIFixtures: the two ports of StandardUri::Parse read every fixture URI as
// KVCM's own compiled parsers did (f6aa2b2's and the newer one).
func TestStandardURIFixtures(t *testing.T) {
	for _, c := range readCases[uriFixture](t, "uris") {
		t.Run(c.Name, func(t *testing.T) {
			check := func(t *testing.T, want uriDecoded, got standardURI, ok bool) {
				t.Helper()
				require.Equal(t, want.ParseOK, ok)
				if !ok {
					return
				}
				require.Equal(t, want.Scheme, got.scheme)
				require.Equal(t, want.UserInfo, got.userInfo)
				require.Equal(t, want.Host, got.host)
				require.Equal(t, want.Port, got.port)
				params := map[string]string{}
				for _, p := range want.Params {
					params[p[0]] = p[1]
				}
				if got.params == nil {
					got.params = map[string]string{}
				}
				require.Equal(t, params, got.params)
			}
			old, why := parseStandardURIf6aa2b2(c.Input)
			check(t, c.Old.Decoded, old, why == "")
			nu, ok := parseStandardURINewer(c.Input)
			check(t, c.Decoded, nu, ok)
		})
	}
}
