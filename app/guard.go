package app

import (
	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/guard/redisguard"
)

func newRedisGuard(c redis.UniversalClient, prefix string) guard.Guard {
	return redisguard.New(c, prefix)
}
