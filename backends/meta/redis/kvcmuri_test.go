package redismeta_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestParseKVCMURI: each form of a metadata store URI from KVCM's registry and what KVCM's
// StandardUri and RedisClient make of it: the server, the AUTH argument, the database and
// the client settings, or a refusal that says why. The secrets planted in the userinfo never
// appear in an error.
func TestParseKVCMURI(t *testing.T) {
	tests := []struct {
		uri     string
		want    redismeta.ConnOptions
		wantErr string // substring of the error; "" means success
	}{
		{uri: "redis://h:6379", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h", wantErr: "no port: KVCM would dial port 0 and fail"},
		{uri: "redis://h:0", wantErr: "no port: KVCM would dial port 0 and fail"},
		{uri: "redis://s3cr3t:PASSW0RD@h/", wantErr: "no port"},
		// The scheme is never read: plain TCP whatever it says.
		{uri: "tcp://h:6379", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "rediss://h:6379", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "unix://h:6379", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://user:pw@h:6379", want: redismeta.ConnOptions{Addr: "h:6379", UserInfo: "user:pw"}},
		{uri: "redis://tok@h:6379/?db=3&timeout_ms=500",
			want: redismeta.ConnOptions{Addr: "h:6379", UserInfo: "tok", DB: 3, Timeout: 500 * time.Millisecond}},
		// A path is ignored: "/3" does not select database 3.
		{uri: "redis://h:6379/3", want: redismeta.ConnOptions{Addr: "h:6379"}},
		// db: from_chars, the whole value, SELECT only when > 0.
		{uri: "redis://h:6379/?db=0", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h:6379/?db=-1", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h:6379/?db=x", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h:6379/?db=+3", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h:6379/?db=3x", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h:6379/?db=", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h:6379/?db=03", want: redismeta.ConnOptions{Addr: "h:6379", DB: 3}},
		{uri: "redis://h:6379/?db=3&db=5", want: redismeta.ConnOptions{Addr: "h:6379", DB: 5}},
		{uri: "redis://h:6379?db=15", want: redismeta.ConnOptions{Addr: "h:6379", DB: 15}},
		{uri: "redis://h:6379?db=2147483648", wantErr: "KVCM's SELECT would fail"},
		{uri: "redis://h:6379?db=99999999999999999999", want: redismeta.ConnOptions{Addr: "h:6379"}}, // out of int64: unchanged
		// A '/' or '?' in the password: KVCM reads host and port to the end of the string.
		{uri: "redis://user:pa/ss@h:6379", want: redismeta.ConnOptions{Addr: "h:6379", UserInfo: "user:pa/ss"}},
		{uri: "redis://user:pa?ss@h:6379", want: redismeta.ConnOptions{Addr: "h:6379", UserInfo: "user:pa?ss"}},
		{uri: "redis://s3cr3t:PASS/W0RD@h:6379/", wantErr: "a '/' or '?' in the userinfo"},
		{uri: "redis://s3cr3t:PASS/W0RD@h:6379?db=1", wantErr: "a '/' or '?' in the userinfo"},
		{uri: "redis://s3cr3t:PASS?W0RD@h:6379/?db=1", wantErr: "a '/' or '?' in the userinfo"},
		{uri: "redis://s3cr3t:PASS/W0RD@h", wantErr: "no port"},
		// The first '@' wins: the rest of the password becomes the host, which KVCM cannot dial.
		{uri: "redis://s3cr3t:PASS@W0RD@h:6379", wantErr: "not a name KVCM can dial"},
		// An '@' after the host: the two KVCM parsers read different servers.
		{uri: "redis://h:6379/?x=a@b", wantErr: "KVCM versions read different"},
		{uri: "redis://h:6379/x@b:1", wantErr: "KVCM versions read different"},
		// A '/' in a query with no path before it: f6aa2b2 drops the parameters, db included.
		{uri: "redis://h:6379?db=3&x=/y", wantErr: "KVCM versions read different"},
		// strtoll reads the port: a sign and leading spaces pass, the whole text must go.
		{uri: "redis://h:+6379", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h:06379", want: redismeta.ConnOptions{Addr: "h:6379"}},
		{uri: "redis://h:-1", wantErr: "port out of range"},
		{uri: "redis://h:65536", wantErr: "port out of range"},
		{uri: "redis://h:6379x", wantErr: "not a decimal integer"},
		{uri: "redis://s3cr3t:PASSW0RD@h:", wantErr: "not a decimal integer"},
		{uri: "redis://[::1]:6379", wantErr: "not a decimal integer"},
		{uri: "redis://s3cr3t:PASSW0RD@:1", wantErr: "host is empty"},
		{uri: "s3cr3t:PASSW0RD@h:6379", wantErr: `no "://"`},
		{uri: "://h:6379", wantErr: "empty scheme"},
		{uri: "", wantErr: `no "://"`},
		// An empty userinfo is no userinfo (KVCM would send AUTH "").
		{uri: "redis://@h:1", want: redismeta.ConnOptions{Addr: "h:1"}},
		// Client settings: positive integers replace the defaults, anything else keeps them.
		{uri: "redis://h:1?timeout_ms=300&retry_count=5&client_max_pool_size=32&client_min_pool_size=4",
			want: redismeta.ConnOptions{Addr: "h:1", Timeout: 300 * time.Millisecond, RetryCount: 5, MaxPoolSize: 32, MinPoolSize: 4}},
		{uri: "redis://h:1?timeout_ms=abc&retry_count=0&client_max_pool_size=-2&client_min_pool_size=1.5",
			want: redismeta.ConnOptions{Addr: "h:1"}},
		{uri: "redis://h:1?client_max_pool_size=65537", wantErr: "above kvcm-gc's limit"},
		{uri: "redis://h:1?cluster_name=c1&randomkey_batch_num=40&flag", want: redismeta.ConnOptions{Addr: "h:1"}},
	}
	for _, tc := range tests {
		t.Run(tc.uri, func(t *testing.T) {
			got, err := redismeta.ParseKVCMURI(tc.uri)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, redismeta.ErrBadURI)
				require.ErrorContains(t, err, tc.wantErr)
				for _, secret := range []string{"s3cr3t", "PASSW0RD", "PASS", "W0RD"} {
					require.NotContains(t, err.Error(), secret)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestApplyKVCMURI: what kvcm-gc's own settings contribute to a registry URI. TLS stays as
// configured (KVCM's scheme says nothing about it), ACL credentials stay whatever the URI's
// userinfo (KVCM's credentials are used only by a process given none), and the database is
// always the URI's.
func TestApplyKVCMURI(t *testing.T) {
	base := redismeta.ConnOptions{Username: "gc", Password: "gc-pw", Timeout: time.Second, MaxPoolSize: 4, DB: 7,
		TLS: redismeta.TLSOptions{Enabled: true, CAFile: "ca.pem"}}
	tls := redismeta.TLSOptions{Enabled: true, CAFile: "ca.pem"}
	tests := []struct {
		name string
		uri  string
		want redismeta.ConnOptions
	}{
		{"redis:// keeps TLS and the ACL user", "redis://h:1",
			redismeta.ConnOptions{Addr: "h:1", Username: "gc", Password: "gc-pw", Timeout: time.Second, MaxPoolSize: 4, TLS: tls}},
		{"KVCM's userinfo never replaces the ACL user", "tcp://u:p/w@h:1",
			redismeta.ConnOptions{Addr: "h:1", Username: "gc", Password: "gc-pw", Timeout: time.Second, MaxPoolSize: 4, TLS: tls}},
		{"the URI's database", "rediss://h:1?db=2&timeout_ms=5",
			redismeta.ConnOptions{Addr: "h:1", DB: 2, Username: "gc", Password: "gc-pw", Timeout: 5 * time.Millisecond, MaxPoolSize: 4, TLS: tls}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := base.ApplyKVCMURI(tc.uri)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	plain, err := redismeta.ConnOptions{}.ApplyKVCMURI("rediss://h:1")
	require.NoError(t, err)
	require.False(t, plain.TLS.Enabled, "rediss:// in the registry is plain TCP for KVCM")
	strict, err := base.ApplyURI("redis://h:1")
	require.NoError(t, err)
	require.False(t, strict.TLS.Enabled, "kvcm-gc's own redis:// URIs turn TLS off")
}

// TestKVCMURINames: a registry URI's store name carries the server and the database KVCM
// uses, never the credentials, and reads back as the same server and database.
func TestKVCMURINames(t *testing.T) {
	tests := []struct{ uri, name string }{
		{"redis://user:pa/ss@h:6379", "h:6379"},
		{"tcp://tok@h:+6379/?db=3", "h:6379?db=3"},
		{"redis://h:6379?db=-1", "h:6379"},
		{"redis://h:6379/3", "h:6379"},
	}
	for _, tc := range tests {
		o, err := redismeta.ParseKVCMURI(tc.uri)
		require.NoError(t, err, tc.uri)
		require.Equal(t, tc.name, o.Name(), tc.uri)
		back, err := redismeta.ParseURI("redis://" + o.Name())
		require.NoError(t, err)
		require.Equal(t, o.Addr, back.Addr)
		require.Equal(t, o.DB, back.DB)
	}
}

// TestKVCMURIConnects: on a real redis-server protected as KVCM deployments protect it
// (requirepass set to the URI's userinfo), a registry URI with a '/' in the password gets in,
// its trailing-slash form is refused as KVCM refuses it, and db=3 reads database 3 only.
func TestKVCMURIConnects(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	const userInfo = "user:pa/ss"
	db3 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 3, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { require.NoError(t, db3.Close()) })
	require.NoError(t, srv.Client().Set(ctx, "where", "db0", 0).Err())
	require.NoError(t, db3.Set(ctx, "where", "db3", 0).Err())
	srv.RequirePass(t, userInfo)

	read := func(t *testing.T, uri string) (string, error) {
		t.Helper()
		conn, err := redismeta.ConnOptions{RetryCount: 1}.ApplyKVCMURI(uri)
		if err != nil {
			return "", err
		}
		c, err := redismeta.NewClient(conn)
		require.NoError(t, err)
		defer c.Close()
		return c.Get(ctx, "where").Result()
	}
	tests := []struct {
		name, uri, want, wantErr string
	}{
		{"slash in the password", "redis://" + userInfo + "@" + srv.Addr(), "db0", ""},
		{"scheme ignored", "tcp://" + userInfo + "@" + srv.Addr(), "db0", ""},
		{"rediss is plain TCP", "rediss://" + userInfo + "@" + srv.Addr(), "db0", ""},
		{"slash after the port, as KVCM fails", "redis://" + userInfo + "@" + srv.Addr() + "/", "", "a '/' or '?' in the userinfo"},
		{"userinfo without slash, db=3", "redis://" + srv.Addr() + "/?db=3", "", "NOAUTH"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := read(t, tc.uri)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.NotContains(t, err.Error(), "pa/ss")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	// db=3 with a password that holds no '/' (with one, nothing may follow the port).
	srv.RequirePass(t, "user:pass")
	for uri, want := range map[string]string{
		"redis://user:pass@" + srv.Addr() + "/?db=3": "db3",
		"redis://user:pass@" + srv.Addr() + "?db=3":  "db3",
		"redis://user:pass@" + srv.Addr() + "/3":     "db0", // a path, not a database
		"redis://user:pass@" + srv.Addr() + "?db=x":  "db0",
	} {
		got, err := read(t, uri)
		require.NoError(t, err, uri)
		require.Equal(t, want, got, uri)
	}
	_, err := read(t, "redis://user:pass@"+srv.Addr()+"?db=16")
	require.ErrorContains(t, err, "select database", "KVCM's SELECT of a database the server lacks fails the connection")
	require.False(t, strings.Contains(err.Error(), "user:pass"))
}

// FuzzParseKVCMURI: registry URIs are outside bytes. Parsing never panics, an error never
// holds the userinfo, a store name never holds it, and a parsed address always has a port.
func FuzzParseKVCMURI(f *testing.F) {
	fuzzPlanted(f, []string{
		"redis://h:1", "tcp://h:1/?db=3", "redis://x/y@h:6379", "redis://x?y@h:1", "rediss://h", "redis://@:?&=",
		"redis://h:1?db=-1", "redis://a@b@c:1", "://", "redis://h:+99999", "redis://h:1/?x=a@b:2",
	}, func(t *testing.T, withSecret, secret string) {
		o, err := redismeta.ParseKVCMURI(withSecret)
		if err != nil {
			require.NotContains(t, err.Error(), secret)
			return
		}
		require.NotContains(t, o.String(), secret)
		require.NotContains(t, o.Name(), secret)
		require.NotContains(t, o.Addr, "@")
	})
}
