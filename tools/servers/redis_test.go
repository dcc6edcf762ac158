package servers

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestRedisRestartWaitsForLoad: Restart returns once the server has loaded its dataset, not
// as soon as it answers. While it loads its AOF, a write gets LOADING: a harness that ends
// a Redis fault there (the soak resumes KVCM's workload) saw its first writes fail.
func TestRedisRestartWaitsForLoad(t *testing.T) {
	r, err := StartRedis("", WithRedisPersistence())
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// An AOF that takes a while to replay: 300,000 writes, one script's effects.
	const n = 300000
	require.NoError(t, r.Client().Eval(ctx, `for i = 1, tonumber(ARGV[1]) do
		redis.call('HSET', 'k' .. i, 'f', string.rep('v', 64), 'g', i) end
		return 1`, nil, n).Err())

	// No retries: go-redis would retry LOADING by itself and hide it.
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	for range 3 {
		require.NoError(t, r.Restart())
		require.NoError(t, c.Set(ctx, "after-restart", "1", 0).Err(), "the first write after Restart")
		persistence, err := c.Info(ctx, "persistence").Result()
		require.NoError(t, err)
		require.Contains(t, persistence, "loading:0\r\n", "still loading after Restart")
		keys, err := c.DBSize(ctx).Result()
		require.NoError(t, err)
		require.EqualValues(t, n+1, keys, "the dataset is back whole")
	}
}
