package faults

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestKeyWatch: every key written before a barrier is taken after it, whoever wrote it and
// however (HSET, HDEL, DEL, a Lua script); a restart of Redis, or any cut of the subscription,
// is a gap, after which the watch works again.
func TestKeyWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := testenv.StartRedis(t, testenv.WithRedisPersistence())
	rdb := r.Client()
	k := newKeyWatch([]redis.UniversalClient{rdb})
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	require.NoError(t, k.start(wctx, &wg))
	require.NoError(t, k.barrier(ctx))
	_, gap := k.take()
	require.True(t, gap, "nothing is known before the first take")

	other := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer other.Close()
	require.NoError(t, other.HSet(ctx, "a", "f", "1").Err())
	require.NoError(t, other.HSet(ctx, "b", "f", "1", "g", "2").Err())
	require.NoError(t, other.HDel(ctx, "b", "g").Err())
	require.NoError(t, other.Set(ctx, "c", "x", 0).Err())
	require.NoError(t, other.Del(ctx, "c").Err())
	require.NoError(t, other.Eval(ctx, `redis.call('HSET', KEYS[1], 'f', 'v') return 1`, []string{"d"}).Err())
	require.NoError(t, other.HGetAll(ctx, "e").Err(), "a read")
	require.NoError(t, k.barrier(ctx))
	got, gap := k.take()
	require.False(t, gap)
	require.Equal(t, map[string]int{"a": 0, "b": 0, "c": 0, "d": 0}, got)

	require.NoError(t, k.barrier(ctx))
	got, gap = k.take()
	require.False(t, gap)
	require.Empty(t, got, "taken once")

	// A restart: its gap is known from the subscription's cut, and the watch comes back.
	r.Restart(t)
	require.NoError(t, k.restarted(ctx))
	require.NoError(t, k.barrier(ctx))
	_, gap = k.take()
	require.True(t, gap)
	require.NoError(t, other.HSet(ctx, "f", "f", "1").Err())
	require.NoError(t, k.barrier(ctx))
	got, gap = k.take()
	require.False(t, gap)
	require.Equal(t, map[string]int{"f": 0}, got)

	// Redis dropping the subscriber (as it does a slow one) is a gap as well.
	require.NoError(t, rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	require.NoError(t, k.barrier(ctx))
	_, gap = k.take()
	require.True(t, gap)
}
