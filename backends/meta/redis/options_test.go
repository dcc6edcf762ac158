package redismeta_test

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
)

func TestParseURI(t *testing.T) {
	tests := []struct {
		uri  string
		want redismeta.ConnOptions
	}{
		{"redis://h:6379", redismeta.ConnOptions{Addr: "h:6379"}},
		{"redis://h:6379/", redismeta.ConnOptions{Addr: "h:6379"}},
		{"redis://h", redismeta.ConnOptions{Addr: "h:6379"}},
		{"redis://10.0.0.1:7000/ignored/path?timeout_ms=500&retry_count=5&client_max_pool_size=32&client_min_pool_size=4",
			redismeta.ConnOptions{Addr: "10.0.0.1:7000", Timeout: 500 * time.Millisecond, RetryCount: 5, MaxPoolSize: 32, MinPoolSize: 4}},
		{"redis://test_redis_user:test_redis_password@localhost:6379/",
			redismeta.ConnOptions{Addr: "localhost:6379", UserInfo: "test_redis_user:test_redis_password"}},
		// KVCM takes userinfo up to the first '@' and does no percent-decoding.
		{"redis://u:p%40ss:w@h:1", redismeta.ConnOptions{Addr: "h:1", UserInfo: "u:p%40ss:w"}},
		{"redis://onlypass@h:1", redismeta.ConnOptions{Addr: "h:1", UserInfo: "onlypass"}},
		{"redis://@h:1", redismeta.ConnOptions{Addr: "h:1"}},
		// Registry URIs carry cluster_name; unknown parameters are ignored.
		{"redis://h:1?cluster_name=c1&x", redismeta.ConnOptions{Addr: "h:1"}},
		// Zero and negative values keep the defaults, as in KVCM.
		{"redis://h:1?timeout_ms=0&retry_count=-3", redismeta.ConnOptions{Addr: "h:1"}},
		{"redis://h:1?db=3", redismeta.ConnOptions{Addr: "h:1", DB: 3}},
		{"rediss://h:1", redismeta.ConnOptions{Addr: "h:1", TLS: redismeta.TLSOptions{Enabled: true}}},
		{"redis://[::1]:1", redismeta.ConnOptions{Addr: "[::1]:1"}},
	}
	for _, tc := range tests {
		requireResolves(t, tc.uri, redismeta.ParseURI, tc.uri, tc.want)
	}
}

// requireResolves checks in a subtest named name that resolve(in) gives want.
func requireResolves(t *testing.T, name string, resolve func(string) (redismeta.ConnOptions, error), in string, want redismeta.ConnOptions) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		got, err := resolve(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}

func TestParseURIErrors(t *testing.T) {
	tests := []string{
		"",
		"h:6379",
		"http://h:1",
		"redis://",
		"redis://:1",
		"redis://h:",
		"redis://h:0",
		"redis://h:65536",
		"redis://h:port",
		"redis://h:1?timeout_ms=abc",
		"redis://h:1?retry_count=1.5",
		"redis://h:1?client_max_pool_size=",
		"redis://s3cr3t:PASSW0RD@h:notaport",
		"redis://s3cr3t:PASSW0RD@:1",
		"redis://s3cr3t:PASSW0RD@h:1?timeout_ms=x",
		"mysql://s3cr3t:PASSW0RD@h:1",
		"redis://s3cr3t:PASS/W0RD@h:1", // '/' in userinfo: KVCM cannot parse it either
		"redis://s3cr3t:PASS?W0RD@h:1",
	}
	for _, uri := range tests {
		t.Run(uri, func(t *testing.T) {
			_, err := redismeta.ParseURI(uri)
			require.ErrorIs(t, err, redismeta.ErrBadURI)
			for _, secret := range []string{"s3cr3t", "PASSW0RD", "PASS", "W0RD"} {
				require.NotContains(t, err.Error(), secret)
			}
		})
	}
}

func TestApplyURI(t *testing.T) {
	base := redismeta.ConnOptions{
		Username: "gc", Password: "gc-pw", Timeout: time.Second, MaxPoolSize: 4,
		TLS: redismeta.TLSOptions{CAFile: "ca.pem"},
	}
	tests := []struct {
		name string
		uri  string
		want redismeta.ConnOptions
	}{
		{"no userinfo keeps the ACL user", "redis://h:1?timeout_ms=300",
			redismeta.ConnOptions{Addr: "h:1", Username: "gc", Password: "gc-pw", Timeout: 300 * time.Millisecond, MaxPoolSize: 4,
				TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}},
		{"userinfo replaces it", "redis://u:p@h:1",
			redismeta.ConnOptions{Addr: "h:1", UserInfo: "u:p", Timeout: time.Second, MaxPoolSize: 4,
				TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}},
		{"rediss keeps the TLS material", "rediss://h:1",
			redismeta.ConnOptions{Addr: "h:1", Username: "gc", Password: "gc-pw", Timeout: time.Second, MaxPoolSize: 4,
				TLS: redismeta.TLSOptions{Enabled: true, CAFile: "ca.pem"}}},
	}
	for _, tc := range tests {
		requireResolves(t, tc.name, base.ApplyURI, tc.uri, tc.want)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis://h:1", "redis://h:1"},
		{"redis://u:pw@h:1/x?timeout_ms=1", "redis://***@h:1/x?timeout_ms=1"},
		{"redis://pw@h:1", "redis://***@h:1"},
		{"redis://u:p@w@h:1", "redis://***@h:1"},
		{"u:pw@h:1", "***@h:1"},
		{"pw@redis://h:1", "***@redis://h:1"},
		{"redis://h:1?password=x&a=b&auth_token=y", "redis://h:1?password=***&a=b&auth_token=***"},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			require.Equal(t, tc.want, redismeta.Redact(tc.in))
		})
	}
}

func TestConnOptionsNeverPrintCredentials(t *testing.T) {
	for _, o := range []redismeta.ConnOptions{
		{Addr: "h:1", UserInfo: "u:s3cr3t"},
		{Addr: "h:1", Username: "gc", Password: "s3cr3t"},
		{Addr: "h:1", Password: "s3cr3t", DB: 2},
	} {
		var logs strings.Builder
		slog.New(slog.NewJSONHandler(&logs, nil)).Info("m", "conn", o)
		slog.New(slog.NewTextHandler(&logs, nil)).Info("m", "conn", o)
		nested := struct{ Conn redismeta.ConnOptions }{o}
		for _, s := range []string{o.String(), fmt.Sprintf("%v", o), fmt.Sprintf("%+v", o), fmt.Sprintf("%#v", o), fmt.Sprint(o),
			fmt.Sprintf("%+v", nested), fmt.Sprintf("%#v", nested), logs.String()} {
			require.NotContains(t, s, "s3cr3t")
			require.Contains(t, s, "h:1")
		}
	}
	require.Equal(t, "redis://gc:***@h:1?db=2", redismeta.ConnOptions{Addr: "h:1", DB: 2, Username: "gc", Password: "x"}.String())
}

func TestConnOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    redismeta.ConnOptions
		ok   bool
	}{
		{"minimal", redismeta.ConnOptions{Addr: "h:1"}, true},
		{"no address", redismeta.ConnOptions{}, false},
		{"two kinds of auth", redismeta.ConnOptions{Addr: "h:1", UserInfo: "u:p", Password: "p"}, false},
		{"min above max", redismeta.ConnOptions{Addr: "h:1", MinPoolSize: 17}, false},
		{"min at default max", redismeta.ConnOptions{Addr: "h:1", MinPoolSize: 16}, true},
		{"max at the limit", redismeta.ConnOptions{Addr: "h:1", MaxPoolSize: redismeta.MaxPoolSizeLimit}, true},
		{"max above the limit", redismeta.ConnOptions{Addr: "h:1", MaxPoolSize: redismeta.MaxPoolSizeLimit + 1}, false},
		{"cert without key", redismeta.ConnOptions{Addr: "h:1", TLS: redismeta.TLSOptions{CertFile: "c"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.NotContains(t, err.Error(), "u:p")
			_, err = redismeta.NewClient(tc.o)
			require.Error(t, err)
		})
	}
}

func TestNameRoundTrip(t *testing.T) {
	for _, uri := range []string{"redis://u:p@h:1/", "redis://h:7?db=3&timeout_ms=5", "redis://[::1]:6380"} {
		o, err := redismeta.ParseURI(uri)
		require.NoError(t, err)
		back, err := redismeta.ParseURI("redis://" + o.Name())
		require.NoError(t, err)
		require.Equal(t, o.Addr, back.Addr)
		require.Equal(t, o.DB, back.DB)
		require.NotContains(t, o.Name(), "p@")
	}
}

func TestClusterName(t *testing.T) {
	tests := []struct {
		uri  string
		want string
		ok   bool
	}{
		{"redis://h:6379?cluster_name=c1", "c1", true},
		{"redis://u:p@h:6379/?timeout_ms=1&cluster_name=prod-a", "prod-a", true},
		{"redis://h:6379", "", false},
		{"redis://h:6379?cluster_name=", "", false},
	}
	for _, tc := range tests {
		got, ok := redismeta.ClusterName(tc.uri)
		require.Equal(t, tc.ok, ok, tc.uri)
		require.Equal(t, tc.want, got, tc.uri)
	}
}

// FuzzParseURI: URIs come from KVCM's registry, outside bytes. Parsing never panics, an
// error never holds the userinfo, and Redact never returns it.
func FuzzParseURI(f *testing.F) {
	fuzzPlanted(f, []string{
		"redis://h:1", "redis://u:p@h:1/?timeout_ms=5", "rediss://h", "redis://@:?&=", "redis://h:1?db=-1",
		"redis://a@b@c:1", "://", "redis://h:99999",
	}, func(t *testing.T, withSecret, secret string) {
		o, err := redismeta.ParseURI(withSecret)
		if err != nil {
			require.NotContains(t, err.Error(), secret)
		} else {
			require.NotContains(t, o.String(), secret)
			require.NotContains(t, o.Name(), secret)
		}
		require.NotContains(t, redismeta.Redact(withSecret), secret)
	})
}

// fuzzPlanted fuzzes check with URIs (from seeds) whose password is a secret: check must find
// the secret in none of what the URI's parse says.
func fuzzPlanted(f *testing.F, seeds []string, check func(t *testing.T, withSecret, secret string)) {
	for _, s := range seeds {
		f.Add(s, "Zq9secretZq9")
	}
	f.Fuzz(func(t *testing.T, uri, secret string) {
		if withSecret, ok := plantSecret(uri, secret); ok {
			check(t, withSecret, secret)
		}
	})
}

// plantSecret makes secret the password of uri, for a fuzz target to check that no message
// holds it. It says false for a secret that could pass unseen: shorter than 6 bytes, not
// alphanumeric (quoting in a message could disguise a leak), or already in uri, in its quoted
// form too (%q turns a control byte into text such as "\x01"); and for a uri without "://".
func plantSecret(uri, secret string) (string, bool) {
	if len(secret) < 6 || strings.IndexFunc(secret, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) >= 0 {
		return "", false
	}
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || strings.Contains(strconv.Quote(uri), secret) {
		return "", false
	}
	return scheme + "://user:" + secret + "@" + rest, true
}
