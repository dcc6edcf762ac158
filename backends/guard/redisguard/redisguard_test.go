package redisguard_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/guard/redisguard"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/guardtest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

const prefix = "kvcm_gc:copy:"

// harness writes records with plain HSET/DEL in the documented format, so the suite also
// checks the format the package documentation promises to migrators.
type harness struct{ srv *testenv.Redis }

type records struct {
	t      *testing.T
	client *redis.Client
	prefix string
}

func (h harness) NewGuard(t *testing.T) (guard.Guard, guardtest.Records) {
	// One server for the whole suite; a prefix per case keeps cases apart.
	p := prefix + t.Name() + ":"
	return redisguard.New(h.srv.Client(), p), records{t: t, client: h.srv.Client(), prefix: p}
}

func (r records) ProtectBlock(t *testing.T, instanceID string, blockKey int64) {
	require.NoError(t, r.client.HSet(context.Background(), r.prefix+instanceID,
		strconv.FormatInt(blockKey, 10), "migration-1").Err())
}

func (r records) ProtectLocation(t *testing.T, instanceID string, blockKey int64, locationID string) {
	require.NoError(t, r.client.HSet(context.Background(), r.prefix+instanceID,
		strconv.FormatInt(blockKey, 10)+":"+locationID, "").Err()) // presence counts, not the value
}

func (r records) Clear(t *testing.T, instanceID string) {
	require.NoError(t, r.client.Del(context.Background(), r.prefix+instanceID).Err())
}

func TestConformance(t *testing.T) {
	guardtest.Run(t, harness{srv: testenv.StartRedis(t)})
}

// TestOneHMGETPerCall: the guard costs one round trip and one read command per location.
func TestOneHMGETPerCall(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	require.NoError(t, srv.Client().HSet(ctx, prefix+"inst_a", "5:loc", "1").Err())
	before := srv.CommandStats(t)
	g := redisguard.New(srv.Client(), prefix)
	for _, loc := range []string{"loc", "other", "third"} {
		_, err := g.IsCopyTarget(ctx, "inst_a", 5, loc)
		require.NoError(t, err)
	}
	after := srv.CommandStats(t)
	require.Equal(t, int64(3), after["hmget"]-before["hmget"])
	for cmd, n := range after {
		if cmd != "hmget" && cmd != "info" {
			require.Equal(t, before[cmd], n, "unexpected command %s", cmd)
		}
	}
	require.Equal(t, prefix+"inst_a", g.Key("inst_a"))
}

// TestErrors: a guard that cannot read answers with an error (the caller keeps the location),
// never with "not a copy target".
func TestErrors(t *testing.T) {
	ctx := context.Background()

	// A server that hangs up on every connection: the port stays taken for the test (a port
	// just released may be handed to the next redis-server started, this test's own included).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	addr := l.Addr().String()
	down := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = down.Close() })

	// A key of the wrong type is an error too (WRONGTYPE), not an empty answer.
	srv := testenv.StartRedis(t)
	require.NoError(t, srv.Client().Set(ctx, prefix+"inst_s", "x", 0).Err())

	canceled, cancel := context.WithCancel(ctx)
	cancel()

	cases := []struct {
		name   string
		client redis.UniversalClient
		ctx    context.Context
		inst   string
	}{
		{"unreachable", down, ctx, "inst_a"},
		{"wrong type", srv.Client(), ctx, "inst_s"},
		{"canceled", srv.Client(), canceled, "inst_a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			protected, err := redisguard.New(c.client, prefix).IsCopyTarget(c.ctx, c.inst, 1, "loc")
			require.Error(t, err)
			require.ErrorContains(t, err, "read copy targets "+prefix+c.inst)
			require.False(t, protected)
		})
	}
}

func TestOpen(t *testing.T) {
	g, closeFn, err := redisguard.Open("", redismeta.ConnOptions{}, "p:")
	require.NoError(t, err)
	require.IsType(t, guard.None{}, g)
	require.NoError(t, closeFn())
	_, _, err = redisguard.Open("etcd", redismeta.ConnOptions{}, "p:")
	require.ErrorContains(t, err, `unknown kind "etcd"`)
	srv := testenv.StartRedis(t)
	conn, err := redismeta.ParseURI(srv.URI())
	require.NoError(t, err)
	g, closeFn, err = redisguard.Open(redisguard.KindRedis, conn, "p:")
	require.NoError(t, err)
	require.NoError(t, srv.Client().HSet(context.Background(), "p:i", "5", "m1").Err())
	hit, err := g.IsCopyTarget(context.Background(), "i", 5, "x")
	require.NoError(t, err)
	require.True(t, hit)
	require.NoError(t, closeFn())
}
