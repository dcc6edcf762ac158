package redismeta_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// The scanner's least privilege: what a read-only ACL user for kvcm-gc's scan needs.
var scannerRules = []string{"~*", "+scan", "+hgetall", "+ping"}

// harness runs the conformance suite against srv, with stores built by conn from the
// server's address (the admin client writes the fixtures).
func harness(srv *testenv.Redis, conn func(t *testing.T) redismeta.ConnOptions, readOnly func(t *testing.T) redismeta.ConnOptions) metatest.Harness {
	open := func(t *testing.T, c redismeta.ConnOptions, o redismeta.StoreOptions) meta.Store {
		st, err := redismeta.OpenStore(testenv.Context(t), c, o)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		return st
	}
	h := metatest.Harness{
		NewStore: func(t *testing.T, o metatest.Options) meta.Store {
			require.NoError(t, srv.Client().FlushAll(testenv.Context(t)).Err())
			return open(t, conn(t), redismeta.StoreOptions{DryRun: o.DryRun, EmptyBlock: o.EmptyBlock})
		},
		HSet: func(t *testing.T, key string, kv ...string) {
			args := make([]any, len(kv))
			for i, v := range kv {
				args[i] = v
			}
			require.NoError(t, srv.Client().HSet(testenv.Context(t), key, args...).Err())
		},
		SetString: func(t *testing.T, key, value string) {
			require.NoError(t, srv.Client().Set(testenv.Context(t), key, value, 0).Err())
		},
		HGetAll: func(t *testing.T, key string) map[string]string {
			m, err := srv.Client().HGetAll(testenv.Context(t), key).Result()
			require.NoError(t, err)
			if len(m) == 0 {
				return nil
			}
			return m
		},
		Del: func(t *testing.T, key string) { require.NoError(t, srv.Client().Del(testenv.Context(t), key).Err()) },
		Keys: func(t *testing.T) []string {
			keys, err := srv.Client().Keys(testenv.Context(t), "*").Result()
			require.NoError(t, err)
			return keys
		},
		CommandCalls: func(t *testing.T) map[string]int64 { return srv.CommandStats(t) },
		FlushScripts: func(t *testing.T) { require.NoError(t, srv.Client().ScriptFlush(testenv.Context(t)).Err()) },
	}
	if readOnly != nil {
		h.ReadOnlyStore = func(t *testing.T) meta.Store { return open(t, readOnly(t), redismeta.StoreOptions{}) }
	}
	return h
}

func TestConformance(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.AddUser(t, "scanner", "scan-pw", scannerRules...)
	metatest.Run(t, harness(srv,
		func(t *testing.T) redismeta.ConnOptions {
			c, err := redismeta.ParseURI(srv.URI())
			require.NoError(t, err)
			return c
		},
		func(t *testing.T) redismeta.ConnOptions {
			return redismeta.ConnOptions{Addr: srv.Addr(), Username: "scanner", Password: "scan-pw"}
		}))
}

// TestConformanceKVCMAuth runs the whole suite through KVCM-style authentication: the
// default user's password is "gc-user:gc-pw", and the store connects with the URI
// redis://gc-user:gc-pw@host:port as KVCM would.
func TestConformanceKVCMAuth(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.AddUser(t, "scanner", "scan-pw", scannerRules...)
	srv.RequirePass(t, "gc-user:gc-pw")
	metatest.Run(t, harness(srv,
		func(t *testing.T) redismeta.ConnOptions {
			c, err := redismeta.ParseURI("redis://gc-user:gc-pw@" + srv.Addr() + "/?timeout_ms=3000")
			require.NoError(t, err)
			return c
		},
		func(t *testing.T) redismeta.ConnOptions {
			return redismeta.ConnOptions{Addr: srv.Addr(), Username: "scanner", Password: "scan-pw"}
		}))
}

func newStore(t *testing.T, srv *testenv.Redis, o redismeta.StoreOptions) *redismeta.Store {
	t.Helper()
	c, err := redismeta.ParseURI(srv.URI())
	require.NoError(t, err)
	st, err := redismeta.OpenStore(testenv.Context(t), c, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

func TestScanPageArguments(t *testing.T) {
	srv := testenv.StartRedis(t)
	st := newStore(t, srv, redismeta.StoreOptions{})
	for _, count := range []int{0, -1} {
		_, err := metatest.ScanInstance(testenv.Context(t), st, "inst1", 0, count)
		require.Error(t, err)
	}
}

// TestScanErrorKeepsCursor: a SCAN the server refuses returns an error and no page; the same
// cursor completes the keyspace once SCAN works again. (The failure is an ACL change rather
// than a restart: a restarted server rebuilds its hash table, and SCAN's guarantee does not
// span that.) A server that is down is an error too, and a new round from cursor 0 works
// after it is back.
func TestScanErrorKeepsCursor(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.AddUser(t, "scanner", "scan-pw", scannerRules...)
	ctx := testenv.Context(t)
	for i := range 50 {
		require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", int64(i)), "__uri__", `{}`, "__lru_time__", "1").Err())
	}
	st, err := redismeta.OpenStore(ctx, redismeta.ConnOptions{Addr: srv.Addr(), Username: "scanner", Password: "scan-pw"}, redismeta.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })

	p, err := metatest.ScanInstance(ctx, st, "i", 0, 5)
	require.NoError(t, err)
	require.NotZero(t, p.Next)
	cursor := p.Next
	seen := make(map[string]bool)
	for _, e := range p.Entries {
		seen[e.Key] = true
	}

	srv.AddUser(t, "scanner", "scan-pw", "~*", "+hmget", "+hget", "+ping") // no +scan
	// The page at cursor was scanned with the last one's reads (one round trip per page): its
	// reads fail first, and the SCAN itself once asked again.
	_, err = metatest.ScanInstance(ctx, st, "i", cursor, 5)
	require.ErrorContains(t, err, "NOPERM")
	_, err = metatest.ScanInstance(ctx, st, "i", cursor, 5)
	require.ErrorContains(t, err, `scan store`)
	require.ErrorContains(t, err, "NOPERM")

	srv.AddUser(t, "scanner", "scan-pw", scannerRules...)
	for cursor != 0 {
		p, err := metatest.ScanInstance(ctx, st, "i", cursor, 5)
		require.NoError(t, err)
		for _, e := range p.Entries {
			seen[e.Key] = true
		}
		cursor = p.Next
	}
	require.Len(t, seen, 50, "the resumed scan completes the keyspace")

	srv.Stop()
	_, err = metatest.ScanInstance(ctx, st, "i", 0, 5)
	require.ErrorContains(t, err, `scan store`)
	srv.Restart(t)
	clear(seen)
	for cursor = 0; ; {
		p, err := metatest.ScanInstance(ctx, st, "i", cursor, 5)
		require.NoError(t, err)
		for _, e := range p.Entries {
			seen[e.Key] = true
		}
		if cursor = p.Next; cursor == 0 {
			break
		}
	}
	require.Empty(t, seen, "without persistence the restarted server is empty")
}

// TestScanPerKeyError: a key whose HMGET the server refuses goes to BadKeys and the rest of
// the page is read normally.
func TestScanPerKeyError(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", 1), "__uri__", `{"a":{}}`).Err())
	require.NoError(t, srv.Client().RPush(ctx, kvcm.BlockKey("i", 2), "x").Err())
	require.NoError(t, srv.Client().SAdd(ctx, kvcm.BlockKey("i", 3), "x").Err())
	st := newStore(t, srv, redismeta.StoreOptions{})
	p, err := metatest.ScanInstance(ctx, st, "i", 0, 100)
	require.NoError(t, err)
	require.Zero(t, p.Next)
	require.Equal(t, []meta.Entry{{Key: kvcm.BlockKey("i", 1), Instance: "i", BlockKey: 1, Layout: kvcm.LayoutLegacy, URI: []byte(`{"a":{}}`)}}, p.Entries)
	require.ElementsMatch(t, []string{kvcm.BlockKey("i", 2), kvcm.BlockKey("i", 3)}, p.BadKeys)
}

// TestCASAfterScriptCacheLoss: after a server restart (or SCRIPT FLUSH) the scripts loaded at
// construction are gone; EVALSHA's NOSCRIPT falls back to EVAL.
func TestCASAfterScriptCacheLoss(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithRedisPersistence())
	ctx := testenv.Context(t)
	key := kvcm.BlockKey("i", 7)
	require.NoError(t, srv.Client().HSet(ctx, key, "__uri__", "v0", "__lru_time__", "5").Err())
	st := newStore(t, srv, redismeta.StoreOptions{})
	require.NoError(t, metatest.CAS(ctx, st, "i", 7, []byte("v0"), []byte("v1")))

	srv.Restart(t)
	require.NoError(t, metatest.CAS(ctx, st, "i", 7, []byte("v1"), []byte("v2")))
	require.NoError(t, srv.Client().ScriptFlush(ctx).Err())
	require.NoError(t, metatest.CAD(ctx, st, "i", 7, []byte("v2"), []byte("v3")))
	require.Equal(t, map[string]string{"__uri__": "v3", "__lru_time__": "5"}, srv.Client().HGetAll(ctx, key).Val())

	// Data written before a SIGKILL survives too (appendfsync always).
	srv.Kill()
	srv.Restart(t)
	require.NoError(t, metatest.CAD(ctx, st, "i", 7, []byte("v3"), nil))
	require.Equal(t, map[string]string{"__uri__": "{}", "__lru_time__": "5"}, srv.Client().HGetAll(ctx, key).Val())
}

func TestConditionalWriteArguments(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	key := kvcm.BlockKey("i", 1)
	require.NoError(t, srv.Client().HSet(ctx, key, "__uri__", "", "__lru_time__", "5").Err())
	st := newStore(t, srv, redismeta.StoreOptions{})
	tests := []struct {
		name     string
		op       func(context.Context, meta.Store, string, int64, []byte, []byte) error
		expected []byte
		next     []byte
	}{
		{"cas empty expected matches no empty field", metatest.CAS, nil, []byte("x")},
		{"cad empty expected", metatest.CAD, []byte{}, nil},
		{"cas empty next", metatest.CAS, []byte("x"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op(ctx, st, "i", 1, tc.expected, tc.next)
			require.Error(t, err)
			require.False(t, errors.Is(err, meta.ErrConflict))
			require.Equal(t, map[string]string{"__uri__": "", "__lru_time__": "5"}, srv.Client().HGetAll(ctx, key).Val())
		})
	}
}

// TestStoreWrongType: a conditional write on a key that is not a hash is an error, not a
// conflict, and changes nothing.
func TestStoreWrongType(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	key := kvcm.BlockKey("i", 1)
	require.NoError(t, srv.Client().Set(ctx, key, "s", 0).Err())
	st := newStore(t, srv, redismeta.StoreOptions{})
	err := metatest.CAS(ctx, st, "i", 1, []byte("s"), []byte("x"))
	require.Error(t, err)
	require.False(t, errors.Is(err, meta.ErrConflict))
	_, _, err = metatest.GetURI(ctx, st, "i", 1)
	require.Error(t, err)
	require.Equal(t, "s", srv.Client().Get(ctx, key).Val())
}

// TestScanReadRefused: a refusal that is not about one key (here NOPERM for HMGET) fails the
// page instead of turning every key into a bad key.
func TestScanReadRefused(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.AddUser(t, "noread", "pw", "~*", "+scan", "+ping")
	ctx := testenv.Context(t)
	require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", 1), "__uri__", "v").Err())
	st, err := redismeta.OpenStore(ctx, redismeta.ConnOptions{Addr: srv.Addr(), Username: "noread", Password: "pw"}, redismeta.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	_, err = metatest.ScanInstance(ctx, st, "i", 0, 10)
	require.ErrorContains(t, err, `read blocks of store`)
	require.ErrorContains(t, err, "NOPERM")
}

// TestScanBursts: a page read in bursts holds the same blocks as one read whole, each burst
// at most the size asked and gated before it is sent; a gate's error fails the page.
func TestScanBursts(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	for i := range 300 {
		require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", int64(i)), "__uri__", fmt.Sprintf(`{"n":%d}`, i), "__lru_time__", "1").Err())
	}
	st := newStore(t, srv, redismeta.StoreOptions{})
	owns := func(id string) bool { return id == "i" }
	walk := func(b meta.Bursts) map[string]string {
		got := map[string]string{}
		for cursor := uint64(0); ; {
			p, err := st.ScanStoreBursts(ctx, cursor, 128, owns, b)
			require.NoError(t, err)
			for _, e := range p.Entries {
				got[e.Key] = string(e.URI)
			}
			if cursor = p.Next; cursor == 0 {
				return got
			}
		}
	}
	whole := walk(meta.Bursts{})
	require.Len(t, whole, 300)
	var sizes []int
	gated := walk(meta.Bursts{Size: 7, Gate: func(_ context.Context, n int) error {
		sizes = append(sizes, n)
		return nil
	}})
	require.Equal(t, whole, gated)
	total, scans := 0, 0
	for _, n := range sizes {
		require.LessOrEqual(t, n, 7)
		if n == 0 {
			scans++
		}
		total += n
	}
	require.Equal(t, 300, total, "every key read in exactly one burst")
	require.Equal(t, 1, scans, "the first page's SCAN is gated alone; every later one goes with the page before's reads")

	stop := errors.New("stop")
	calls := 0
	_, err := st.ScanStoreBursts(ctx, 0, 128, owns, meta.Bursts{Size: 7, Gate: func(context.Context, int) error {
		if calls++; calls == 3 {
			return stop
		}
		return nil
	}})
	require.ErrorIs(t, err, stop)
}

// TestMainThreadCPU: the main thread's CPU time that INFO reports is the time the kernel
// counts for that thread (/proc/<pid>/task/<pid>/stat), so a pacer reading it reads Redis's
// own load; a user without +info is refused with meta.ErrInfoRefused, as is a reply without
// the counters. Wall time is no proxy for CPU on a loaded machine: the script spins until
// the kernel has counted enough, however long that takes.
func TestMainThreadCPU(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	st := newStore(t, srv, redismeta.StoreOptions{DryRun: true})
	pid := srv.Pid()
	require.Positive(t, pid)
	kernel := func() time.Duration {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, pid))
		require.NoError(t, err)
		_, rest, ok := strings.Cut(string(b), ") ")
		require.True(t, ok, "stat %q", b)
		f := strings.Fields(rest) // f[0] is field 3 (state); utime and stime are fields 14 and 15
		utime, err := strconv.ParseInt(f[11], 10, 64)
		require.NoError(t, err)
		stime, err := strconv.ParseInt(f[12], 10, 64)
		require.NoError(t, err)
		return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	}

	a, err := st.MainThreadCPU(ctx)
	require.NoError(t, err)
	require.Positive(t, a)
	k0 := kernel()
	for i := 0; kernel()-k0 < 200*time.Millisecond; i++ {
		require.Less(t, i, 400, "the kernel counted %v of Redis CPU after %d scripts of 50 ms", kernel()-k0, i)
		require.NoError(t, srv.Client().Eval(ctx, `local s = redis.call('TIME')
repeat
  local n = redis.call('TIME')
until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 50000
return 1`, nil).Err())
	}
	b, err := st.MainThreadCPU(ctx)
	require.NoError(t, err)
	k := kernel() - k0
	// Two ticks of the kernel's clock either way, and the INFO calls' own time.
	require.InDelta(t, k.Seconds(), (b - a).Seconds(), 0.03, "INFO's main-thread CPU against the kernel's count")

	srv.AddUser(t, "noinfo", "pw", "~*", "+scan", "+hgetall", "+ping")
	ro, err := redismeta.OpenStore(ctx, redismeta.ConnOptions{Addr: srv.Addr(), Username: "noinfo", Password: "pw"}, redismeta.StoreOptions{DryRun: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ro.Close()) })
	_, err = ro.MainThreadCPU(ctx)
	require.ErrorIs(t, err, meta.ErrInfoRefused)
	require.ErrorContains(t, err, "NOPERM")
}
