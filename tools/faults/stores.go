package faults

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// maxStores is the most metadata stores a scenario spreads its instances over.
const maxStores = 3

// spreadStores gives the deployment several metadata stores: instance i moves, with all its
// keys, to store i mod n (n = min(instances, maxStores)), each store a redis-server of its own
// (with the same persistence as the first) registered as an instance group's store. The
// scanners then divide the stores.
func spreadStores(ctx context.Context, e *env) error {
	n := min(len(e.manifest.Instances), maxStores)
	reg := e.redis.Client()
	p := "kvcache_registry:" + suiteCluster + ":"
	group, err := reg.HGet(ctx, p+"instance_group", seed.GroupRedis).Result()
	if err != nil {
		return fmt.Errorf("read the seed's group: %w", err)
	}
	for s := 1; s < n; s++ {
		r, err := servers.StartRedis("", servers.WithRedisPersistence())
		if err != nil {
			return err
		}
		e.stores = append(e.stores, r)
		name := fmt.Sprintf("group_store%d", s)
		g := strings.Replace(group, `"name":"`+seed.GroupRedis+`"`, `"name":"`+name+`"`, 1)
		g = strings.Replace(g, `"storage_uri":"`+e.redis.URI()+`"`, `"storage_uri":"`+r.URI()+`"`, 1)
		if g == group {
			return fmt.Errorf("the seed's group does not name its store %s", e.redis.URI())
		}
		if err := reg.HSet(ctx, p+"instance_group", name, g).Err(); err != nil {
			return fmt.Errorf("register %s: %w", name, err)
		}
		for i := s; i < len(e.manifest.Instances); i += n {
			inst := e.manifest.Instances[i]
			if err := moveKeys(ctx, reg, r.Client(), "kvcache:instance_"+inst+":*"); err != nil {
				return fmt.Errorf("move %s to store %d: %w", inst, s, err)
			}
			info, err := reg.HGet(ctx, p+inst, inst).Result()
			if err != nil {
				return fmt.Errorf("read instance %s: %w", inst, err)
			}
			info = strings.Replace(info, `"instance_group_name":"`+seed.GroupRedis+`"`, `"instance_group_name":"`+name+`"`, 1)
			if err := reg.HSet(ctx, p+inst, inst, info).Err(); err != nil {
				return fmt.Errorf("register instance %s: %w", inst, err)
			}
		}
	}
	return nil
}

// moveKeys moves every key matching pattern from src to dst (DUMP, RESTORE, DEL).
func moveKeys(ctx context.Context, src, dst redis.UniversalClient, pattern string) error {
	var cursor uint64
	for {
		keys, next, err := src.Scan(ctx, cursor, pattern, 500).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			dumps := make([]*redis.StringCmd, len(keys))
			pipe := src.Pipeline()
			for i, k := range keys {
				dumps[i] = pipe.Dump(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			put := dst.Pipeline()
			for i, k := range keys {
				put.RestoreReplace(ctx, k, 0, dumps[i].Val())
			}
			if _, err := put.Exec(ctx); err != nil {
				return err
			}
			if err := src.Del(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// clients are the Redis clients of every metadata store (the first also holds the registry).
func (e *env) clients() []redis.UniversalClient {
	out := []redis.UniversalClient{e.redis.Client()}
	for _, r := range e.stores {
		out = append(out, r.Client())
	}
	return out
}

// takeSnapshots is TakeSnapshot of every store, merged (block keys name their instance, so
// they never collide).
func takeSnapshots(ctx context.Context, rdbs []redis.UniversalClient, pattern string) (Snapshot, error) {
	all := Snapshot{}
	for _, rdb := range rdbs {
		s, err := TakeSnapshot(ctx, rdb, pattern)
		if err != nil {
			return nil, err
		}
		maps.Copy(all, s)
	}
	return all, nil
}
