package redismeta_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestConformanceTLS runs the suite over TLS, with a CA generated for the test and the
// read-only store as an ACL user over TLS too.
func TestConformanceTLS(t *testing.T) {
	files := testenv.NewRedisTLSFiles(t)
	srv := testenv.StartRedis(t, testenv.WithRedisTLS(files))
	srv.AddUser(t, "scanner", "scan-pw", scannerRules...)
	base := redismeta.ConnOptions{TLS: redismeta.TLSOptions{CAFile: files.CAFile}}
	metatest.Run(t, harness(srv,
		func(t *testing.T) redismeta.ConnOptions {
			c, err := base.ApplyURI(srv.URI())
			require.NoError(t, err)
			require.True(t, c.TLS.Enabled)
			return c
		},
		func(t *testing.T) redismeta.ConnOptions {
			c := base
			c.Addr, c.TLS.Enabled, c.Username, c.Password = srv.Addr(), true, "scanner", "scan-pw"
			return c
		}))
}

func TestTLSOptions(t *testing.T) {
	files := testenv.NewRedisTLSFiles(t)
	other := testenv.NewRedisTLSFiles(t) // a CA the server's certificate does not chain to
	srv := testenv.StartRedis(t, testenv.WithRedisTLS(files))
	mtls := testenv.StartRedis(t, testenv.WithRedisTLS(files), testenv.WithRedisArgs("--tls-auth-clients", "yes"))

	tests := []struct {
		name    string
		srv     *testenv.Redis
		tls     redismeta.TLSOptions
		uri     string // default: the server's rediss:// URI
		wantErr string
	}{
		{"trusted CA", srv, redismeta.TLSOptions{CAFile: files.CAFile}, "", ""},
		{"server name from options", srv, redismeta.TLSOptions{CAFile: files.CAFile, ServerName: "localhost"}, "", ""},
		{"wrong server name", srv, redismeta.TLSOptions{CAFile: files.CAFile, ServerName: "example.org"}, "", "certificate"},
		{"untrusted CA", srv, redismeta.TLSOptions{CAFile: other.CAFile}, "", "certificate"},
		{"system roots", srv, redismeta.TLSOptions{}, "", "certificate"},
		{"insecure skip verify", srv, redismeta.TLSOptions{InsecureSkipVerify: true}, "", ""},
		{"plain text to a TLS port", srv, redismeta.TLSOptions{CAFile: files.CAFile}, "redis://" + srv.Addr(), "scan"},
		{"client certificate", mtls, redismeta.TLSOptions{CAFile: files.CAFile, CertFile: files.ClientCertFile, KeyFile: files.ClientKeyFile}, "", ""},
		{"client certificate missing", mtls, redismeta.TLSOptions{CAFile: files.CAFile}, "", "scan"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			uri := tc.uri
			if uri == "" {
				uri = tc.srv.URI()
			}
			conn, err := redismeta.ConnOptions{TLS: tc.tls, RetryCount: 1}.ApplyURI(uri)
			require.NoError(t, err)
			st, err := redismeta.OpenStore(testenv.Context(t), conn, redismeta.StoreOptions{})
			require.NoError(t, err)
			defer st.Close()
			_, err = metatest.ScanInstance(testenv.Context(t), st, "i", 0, 10)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}

	t.Run("bad files", func(t *testing.T) {
		for _, o := range []redismeta.TLSOptions{
			{Enabled: true, CAFile: files.CAFile + ".missing"},
			{Enabled: true, CAFile: files.KeyFile}, // PEM, but no certificate
			{Enabled: true, CertFile: files.ClientCertFile, KeyFile: files.KeyFile},
		} {
			_, err := redismeta.NewClient(redismeta.ConnOptions{Addr: srv.Addr(), TLS: o})
			require.Error(t, err)
		}
	})
}
