// Package redisguard is the migration copy-target guard kept in Redis hashes.
//
// Whatever drives a migration (the tool that copies a block's data to a new location) records
// each copy it has in flight, and removes the record when the copy is finished or abandoned:
//
//	key:   <keyPrefix><instance id>            one hash per instance, e.g. "kvcm_gc:copy:inst_a"
//	field: <block key>                          the whole block: every location of it is a copy
//	                                            target (the copy may not have a location id yet)
//	field: <block key>:<location id>            that location only
//	value: anything; the field's presence is what counts (a timestamp or the migration id helps
//	       operators)
//
// The block key is KVCM's signed int64 in decimal ("-7262535415567954716"), the location id
// KVCM's map key. The instance id is taken as is; instances never share a hash, so a record of
// one instance protects nothing of another (DESIGN §8.4).
//
// kvcm-gc only reads these hashes. A block-level field exists because KVCM's migration may
// create the target's WRITING location before the migrator learns its location id: the
// migrator can protect the block first and narrow the record later.
package redisguard

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
)

// Guard answers IsCopyTarget from the Redis hashes described in the package documentation. It
// is safe for concurrent use.
type Guard struct {
	client    redis.UniversalClient
	keyPrefix string
}

var _ guard.Guard = (*Guard)(nil)

// New returns a Guard reading the hashes <keyPrefix><instance id> through client, which the
// caller owns (and closes).
func New(client redis.UniversalClient, keyPrefix string) *Guard {
	return &Guard{client: client, keyPrefix: keyPrefix}
}

// Key returns the hash key of an instance's copy-target records.
func (g *Guard) Key(instanceID string) string { return g.keyPrefix + instanceID }

// IsCopyTarget reports whether the block, or that location of it, is recorded as an active
// copy target of the instance. It sends one HMGET of both fields. Any Redis error is returned,
// and the caller then keeps the location: a guard that cannot answer must never let a copy in
// progress be collected as an orphan.
func (g *Guard) IsCopyTarget(ctx context.Context, instanceID string, blockKey int64, locationID string) (bool, error) {
	block := strconv.FormatInt(blockKey, 10)
	key := g.Key(instanceID)
	vals, err := g.client.HMGet(ctx, key, block, block+":"+locationID).Result()
	if err != nil {
		return false, fmt.Errorf("read copy targets %s fields %s, %s:%s: %w", key, block, block, locationID, err)
	}
	for _, v := range vals {
		if v != nil { // a missing field is nil; a present one, even empty, is a string
			return true, nil
		}
	}
	return false, nil
}

// Kinds of guard.kind.
const (
	KindNone  = "none"
	KindRedis = "redis"
)

// Open builds the guard of a kind: none ("" too), or redis (the hashes under keyPrefix on
// the server conn names). Close releases what it opened.
func Open(kind string, conn redismeta.ConnOptions, keyPrefix string) (g guard.Guard, closeFn func() error, err error) {
	switch kind {
	case "", KindNone:
		return guard.None{}, func() error { return nil }, nil
	case KindRedis:
		c, err := redismeta.NewClient(conn)
		if err != nil {
			return nil, nil, fmt.Errorf("copy guard: %w", err)
		}
		return New(c, keyPrefix), c.Close, nil
	}
	return nil, nil, fmt.Errorf("guard: unknown kind %q (none, redis)", kind)
}
