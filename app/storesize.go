package app

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
)

// storeSizes reads a metadata store's DBSIZE for the scanner's estimated end of a walk, over
// a connection of its own per store (opened on first use, one connection at most, idle
// between rounds): the store's pool is the scan's. A user without +dbsize gets an error, and
// the scanner then estimates from the previous round.
type storeSizes struct {
	pool *redismeta.Pool

	mu      sync.Mutex
	clients map[string]*redis.Client
}

func newStoreSizes(pool *redismeta.Pool) *storeSizes {
	return &storeSizes{pool: pool, clients: map[string]*redis.Client{}}
}

func (z *storeSizes) size(ctx context.Context, store string) (int64, error) {
	z.mu.Lock()
	c := z.clients[store]
	if c == nil {
		conn, err := z.pool.ConnOptions(store)
		if err != nil {
			z.mu.Unlock()
			return 0, err
		}
		conn.MaxPoolSize, conn.MinPoolSize = 1, 0
		if c, err = redismeta.NewClient(conn); err != nil {
			z.mu.Unlock()
			return 0, fmt.Errorf("dbsize of %s: %w", store, err)
		}
		z.clients[store] = c
	}
	z.mu.Unlock()
	n, err := c.DBSize(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("dbsize of %s: %w", store, err)
	}
	return n, nil
}

func (z *storeSizes) close() {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, c := range z.clients {
		_ = c.Close()
	}
	clear(z.clients)
}
