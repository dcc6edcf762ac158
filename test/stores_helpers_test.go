package test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// multiStore is a KVCM cluster whose instance groups each have a metadata Redis of their own
// (a real redis-server per store): group g<i> on store i holds the instances s<i>a, s<i>b, …;
// the registry is in another redis-server.
type multiStore struct {
	cluster   string
	registry  *testenv.Redis
	stores    []*testenv.Redis
	manifests []*seed.Manifest
	before    []seed.Snapshot
	root      string
}

// seedStores starts the servers and seeds every store; the registry stays empty until
// register is called (scanners started before see no store at all).
func seedStores(t *testing.T, cluster string, stores, instances, blocks int, root string) *multiStore {
	t.Helper()
	ctx := context.Background()
	ms := &multiStore{cluster: cluster, registry: testenv.StartRedis(t), root: root}
	for i := range stores {
		r := testenv.StartRedis(t)
		ids := make([]string, instances)
		for j := range ids {
			ids[j] = fmt.Sprintf("s%d%c", i, 'a'+j)
		}
		m, err := seed.Generate(ctx, r.Client(), seed.Spec{Cluster: cluster, Instances: ids, Blocks: blocks,
			GarbageFraction: 0.2, TrickyFraction: 0.1, Root: root, MetaURI: r.URI(), Seed: uint64(100 + i)})
		require.NoError(t, err)
		// The seed wrote a registry of its own into the store: only the registry server has one.
		keys, err := r.Client().Keys(ctx, "kvcache_registry:*").Result()
		require.NoError(t, err)
		require.NoError(t, r.Client().Del(ctx, keys...).Err())
		before, err := seed.Take(ctx, r.Client(), "*")
		require.NoError(t, err)
		ms.stores = append(ms.stores, r)
		ms.manifests = append(ms.manifests, m)
		ms.before = append(ms.before, before)
	}
	return ms
}

// storeName is the store's name as the registry gives it (host:port).
func (ms *multiStore) storeName(i int) string {
	return strings.TrimPrefix(ms.stores[i].URI(), "redis://")
}

// register writes the registry: the seed's storages, one group per store, its instances
// (of the stores given; none: every store).
func (ms *multiStore) register(t *testing.T, which ...int) {
	t.Helper()
	if len(which) == 0 {
		for i := range ms.stores {
			which = append(which, i)
		}
	}
	ctx := context.Background()
	p := "kvcache_registry:" + ms.cluster + ":"
	rdb := ms.registry.Client()
	// The seed's own registry, written once more into a scratch database of the registry
	// server, gives the exact storage and group documents.
	scratch := redis.NewClient(&redis.Options{Addr: ms.registry.Addr(), DB: 15})
	defer scratch.Close()
	pipe := rdb.Pipeline()
	index := map[string]any{}
	for _, i := range which {
		m := ms.manifests[i]
		_, err := seed.Generate(ctx, scratch, seed.Spec{Cluster: ms.cluster, Instances: m.Instances, Blocks: 0,
			MetaURI: ms.stores[i].URI(), Root: ms.root})
		require.NoError(t, err)
		storages, err := scratch.HGetAll(ctx, p+"storage").Result()
		require.NoError(t, err)
		for k, v := range storages {
			pipe.HSet(ctx, p+"storage", k, v)
		}
		group, err := scratch.HGet(ctx, p+"instance_group", seed.GroupRedis).Result()
		require.NoError(t, err)
		name := fmt.Sprintf("g%d", i)
		pipe.HSet(ctx, p+"instance_group", name, strings.Replace(group, `"name":"`+seed.GroupRedis+`"`, `"name":"`+name+`"`, 1))
		for _, id := range m.Instances {
			info, err := scratch.HGet(ctx, p+id, id).Result()
			require.NoError(t, err)
			pipe.HSet(ctx, p+id, id, strings.ReplaceAll(info, `"`+seed.GroupRedis+`"`, `"`+name+`"`))
			index[id] = id
		}
		require.NoError(t, scratch.FlushDB(ctx).Err())
	}
	pipe.HSet(ctx, p+"instance", index)
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
}

// unregister removes store i's group and instances from the registry.
func (ms *multiStore) unregister(t *testing.T, i int) {
	t.Helper()
	ctx := context.Background()
	p := "kvcache_registry:" + ms.cluster + ":"
	rdb := ms.registry.Client()
	for _, id := range ms.manifests[i].Instances {
		require.NoError(t, rdb.HDel(ctx, p+"instance", id).Err())
		require.NoError(t, rdb.Del(ctx, p+id).Err())
	}
	require.NoError(t, rdb.HDel(ctx, p+"instance_group", fmt.Sprintf("g%d", i)).Err())
}

// options are the test options on these servers: the registry server, the stores it names.
func (ms *multiStore) options(t *testing.T, e *env, holder string) app.Options {
	t.Helper()
	o := e.options(prometheus.NewRegistry())
	conn, err := redismeta.ParseURI(ms.registry.URI())
	require.NoError(t, err)
	o.Registry, o.Meta = conn, conn
	o.Scanner.Holder = holder
	return o
}

// blockKeys returns the block keys of store i a round must batch ("instance/key"): every
// canonical block key of its instances with a non-empty __uri__.
func (ms *multiStore) blockKeys(i int) map[string]bool {
	out := map[string]bool{}
	for k, fields := range ms.before[i] {
		if fields["__uri__"] == "" {
			continue
		}
		for _, inst := range ms.manifests[i].Instances {
			if b, err := kvcm.ParseBlockKey(inst, k); err == nil {
				out[fmt.Sprintf("%s/%d", inst, b)] = true
			}
		}
	}
	return out
}
