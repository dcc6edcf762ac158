package redismeta_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func TestPoolResolution(t *testing.T) {
	defaults := redismeta.ConnOptions{Username: "gc", Password: "Gc-Pw", Timeout: time.Second,
		TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}
	p := redismeta.NewPool(redismeta.PoolOptions{
		Defaults: defaults,
		URIs:     map[string]string{"m1:6379": "redis://kvcm:Pw1@m1-internal:7000/?timeout_ms=300"},
	})
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	p.Learn("m1:6379", "redis://kvcm:Learned@m1:6379/") // configuration wins
	p.Learn("m2:6379", "redis://kvcm:Pw2@m2:6379/?retry_count=4")
	p.Learn("m4:6379", "redis://kvcm:Secret-Pw9@m4:bad")
	// URIs from KVCM's registry, read as KVCM reads them.
	p.Learn("m6:6379", redismeta.KVCMURIPrefix+"rediss://kvcm:pa/ss@m6:6379")
	p.Learn("m7:6379?db=3", redismeta.KVCMURIPrefix+"tcp://m7:6379/?db=3&timeout_ms=250")
	p.Learn("m8:6379", redismeta.KVCMURIPrefix+"redis://kvcm:Secret-Pw9@m8")
	p.Learn("m9:6379", redismeta.KVCMURIPrefix+"redis://kvcm:Secret-Pw9/x@m9:6379/?db=1")
	// A configured override (meta.group_store_uris) learned as is: strict, rediss is TLS.
	p.Learn("m10:6379", "rediss://kvcm:Pw10@m10:6379")

	tests := []struct {
		name string
		want redismeta.ConnOptions
	}{
		{"m1:6379", redismeta.ConnOptions{Addr: "m1-internal:7000", UserInfo: "kvcm:Pw1", Timeout: 300 * time.Millisecond,
			TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}},
		{"m2:6379", redismeta.ConnOptions{Addr: "m2:6379", UserInfo: "kvcm:Pw2", Timeout: time.Second, RetryCount: 4,
			TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}},
		{"m3:6380", redismeta.ConnOptions{Addr: "m3:6380", Username: "gc", Password: "Gc-Pw", Timeout: time.Second,
			TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}},
		{"m3:6380?db=2", redismeta.ConnOptions{Addr: "m3:6380", DB: 2, Username: "gc", Password: "Gc-Pw", Timeout: time.Second,
			TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}},
		// KVCM's credentials in a registry URI never replace kvcm-gc's own user.
		{"m6:6379", redismeta.ConnOptions{Addr: "m6:6379", Username: "gc", Password: "Gc-Pw", Timeout: time.Second,
			TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}},
		{"m7:6379?db=3", redismeta.ConnOptions{Addr: "m7:6379", DB: 3, Username: "gc", Password: "Gc-Pw", Timeout: 250 * time.Millisecond,
			TLS: redismeta.TLSOptions{CAFile: "ca.pem"}}},
		{"m10:6379", redismeta.ConnOptions{Addr: "m10:6379", UserInfo: "kvcm:Pw10", Timeout: time.Second,
			TLS: redismeta.TLSOptions{Enabled: true, CAFile: "ca.pem"}}},
	}
	for _, tc := range tests {
		requireResolves(t, tc.name, p.ConnOptions, tc.name, tc.want)
	}
	for _, bad := range []string{"", "m4:6379", "h:port", "m8:6379", "m9:6379"} {
		_, err := p.ConnOptions(bad)
		require.Error(t, err, bad)
		_, err = p.Store(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "Secret-Pw9")
	}

	tlsPool := redismeta.NewPool(redismeta.PoolOptions{Defaults: redismeta.ConnOptions{TLS: redismeta.TLSOptions{Enabled: true}}})
	got, err := tlsPool.ConnOptions("m5:6379")
	require.NoError(t, err)
	require.True(t, got.TLS.Enabled, "a TLS default reaches stores known by name only")
	tlsPool.Learn("m6:6379", redismeta.KVCMURIPrefix+"redis://m6:6379")
	got, err = tlsPool.ConnOptions("m6:6379")
	require.NoError(t, err)
	require.True(t, got.TLS.Enabled, "a TLS default reaches stores learned from the registry")
	tlsPool.Learn("m11:6379", redismeta.KVCMURIPrefix+"redis://kvcm:Pw11@m11:6379")
	got, err = tlsPool.ConnOptions("m11:6379")
	require.NoError(t, err)
	require.Equal(t, "kvcm:Pw11", got.UserInfo, "without credentials of its own, kvcm-gc signs in as KVCM does")
	require.NoError(t, tlsPool.Close())
}

// TestPoolKeepsItsOwnUser: on a real redis-server protected as KVCM deployments protect it
// (the default user's password is the registry URI's userinfo) and holding a read-only ACL
// user for kvcm-gc, a store learned from the registry is signed in to as that user, never as
// KVCM, and the log says which credentials were used; without a user of its own, the pool
// signs in with KVCM's and warns.
func TestPoolKeepsItsOwnUser(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	srv.AddUser(t, "gc-ro", "Ro-Pw", "~*", "+@read", "+ping", "+acl|whoami")
	srv.RequirePass(t, "kvcm:Kvcm-Pw")
	uri := redismeta.KVCMURIPrefix + "redis://kvcm:Kvcm-Pw@" + srv.Addr()

	whoami := func(t *testing.T, defaults redismeta.ConnOptions) (string, string) {
		t.Helper()
		var logs bytes.Buffer
		p := redismeta.NewPool(redismeta.PoolOptions{Defaults: defaults,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		t.Cleanup(func() { require.NoError(t, p.Close()) })
		p.Learn(srv.Addr(), uri)
		p.Learn(srv.Addr(), uri) // learned again each registry read: said once
		conn, err := p.ConnOptions(srv.Addr())
		require.NoError(t, err)
		c, err := redismeta.NewClient(conn)
		require.NoError(t, err)
		defer c.Close()
		who, err := c.Do(ctx, "ACL", "WHOAMI").Text()
		require.NoError(t, err)
		require.NotContains(t, logs.String(), "Kvcm-Pw")
		return who, logs.String()
	}
	who, logs := whoami(t, redismeta.ConnOptions{Username: "gc-ro", Password: "Ro-Pw", RetryCount: 1})
	require.Equal(t, "gc-ro", who)
	require.Equal(t, 1, strings.Count(logs, "signing in as kvcm-gc's own user"), logs)

	who, logs = whoami(t, redismeta.ConnOptions{RetryCount: 1})
	require.Equal(t, "default", who)
	require.Equal(t, 1, strings.Count(logs, "level=WARN msg=\"signing in with kvcm's credentials"), logs)
}

func TestPoolOpensOncePerName(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.AddUser(t, "gc", "Gc-Pw", "~*", "+@all")
	ctx := testenv.Context(t)
	require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", 1), "__uri__", "v", "__lru_time__", "1").Err())
	p := redismeta.NewPool(redismeta.PoolOptions{Defaults: redismeta.ConnOptions{Username: "gc", Password: "Gc-Pw"}})

	const n = 8
	stores := make([]meta.Store, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			st, err := p.Store(srv.Addr())
			require.NoError(t, err)
			stores[i] = st
		})
	}
	wg.Wait()
	for _, st := range stores {
		require.Same(t, stores[0], st)
	}
	page, err := metatest.ScanInstance(ctx, stores[0], "i", 0, 10)
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.NoError(t, metatest.CAS(ctx, stores[0], "i", 1, []byte("v"), []byte("w")))

	require.NoError(t, p.Close())
	_, err = p.Store(srv.Addr())
	require.Error(t, err)
	_, err = metatest.ScanInstance(ctx, stores[0], "i", 0, 10)
	require.Error(t, err, "a closed pool's stores are closed")
}

func TestPoolDryRun(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	key := kvcm.BlockKey("i", 1)
	require.NoError(t, srv.Client().HSet(ctx, key, "__uri__", "v").Err())
	p := redismeta.NewPool(redismeta.PoolOptions{Store: redismeta.StoreOptions{DryRun: true}})
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	st, err := p.Store(srv.Addr())
	require.NoError(t, err)
	require.ErrorIs(t, metatest.CAS(ctx, st, "i", 1, []byte("v"), []byte("w")), meta.ErrDryRun)
	require.ErrorIs(t, metatest.CAD(ctx, st, "i", 1, []byte("v"), nil), meta.ErrDryRun)
	require.Equal(t, "v", srv.Client().HGet(ctx, key, "__uri__").Val())
}
