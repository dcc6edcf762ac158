package redismeta_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// What a registry reader needs, and nothing else.
var registryRules = []string{"~kvcache_registry:*", "+hgetall", "+hget", "+ping"}

// groupJSON is an InstanceGroup as KVCM writes it, including the quota_config item with the
// key storage_type twice and max_key_count = 2^64-1.
func groupJSON(name, metaBackend string) string {
	return `{"name":"` + name + `","storage_candidates":["nfs_01","hf3fs_01"],"global_quota_group_name":"gq",` +
		`"max_instance_count":100,"quota":{"capacity":1099511627776,"quota_config":[` +
		`{"capacity":1073741824,"storage_type":"file","storage_type":4}]},` +
		`"cache_config":{"reclaim_strategy":{"storage_unique_name":"nfs_01","reclaim_policy":1,` +
		`"trigger_strategy":{"used_size":0,"used_percentage":0.8},"trigger_period_seconds":60,` +
		`"reclaim_step_size":100,"reclaim_step_percentage":10,"delay_before_delete_ms":1500},` +
		`"cache_prefer_strategy":0,"meta_indexer_config":{"max_key_count":18446744073709551615,` +
		`"mutex_shard_num":16,"batch_key_size":16` + metaBackend +
		`,"meta_cache_policy_config":{"capacity":1024}}},"user_data":"","version":3}`
}

func backend(typ, uri string) string {
	return fmt.Sprintf(`,"meta_storage_backend_config":{"storage_type":%q,"storage_uri":%q}`, typ, uri)
}

func infoJSON(id, group string) string {
	return `{"quota_group_name":"q1","instance_group_name":"` + group + `","instance_id":"` + id + `","block_size":16,` +
		`"location_spec_infos":[{"name":"tp0","size":1024},{"name":"tp1","size":1024}],` +
		`"model_deployment":{"model_name":"qwen","dtype":"bf16","use_mla":false,"tp_size":2,"dp_size":1,` +
		`"lora_name":"","pp_size":1,"extra":"","user_data":""},"location_spec_groups":[{"name":"all","spec_names":["tp0","tp1"]}]}`
}

type registryEnv struct {
	reg, meta1, meta2, meta3 *testenv.Redis
	learned                  map[string]string
	mu                       sync.Mutex
}

// The password of meta3 holds a '/', which KVCM's URI parser allows.
const slashUserInfo = "user:pa/ss"

// startRegistry writes a realistic registry of cluster "c1" on its own Redis, whose groups
// point at three metadata Redis servers protected KVCM-style, in every form of store KVCM
// knows.
func startRegistry(t *testing.T) *registryEnv {
	env := &registryEnv{
		reg:     testenv.StartRedis(t),
		meta1:   testenv.StartRedis(t),
		meta2:   testenv.StartRedis(t),
		meta3:   testenv.StartRedis(t),
		learned: make(map[string]string),
	}
	env.meta1.RequirePass(t, "kvcm:Meta-Pw1")
	env.meta2.RequirePass(t, "kvcm:Meta-Pw2")
	env.meta3.RequirePass(t, slashUserInfo)
	env.reg.AddUser(t, "gc-registry", "Reg-Pw", registryRules...)
	ctx := testenv.Context(t)
	c := env.reg.Client()
	p := "kvcache_registry:c1:"
	require.NoError(t, c.HSet(ctx, p+"storage",
		"nfs_01", `{"type":"file","is_available":true,"global_unique_name":"nfs_01","storage_spec":{"root_path":"/tmp/nfs/","key_count_per_file":8}}`,
		"hf3fs_01", `{"type":"hf3fs","is_available":true,"global_unique_name":"hf3fs_01","storage_spec":{"cluster_name":"c","mountpoint":"/3fs","root_dir":"stage/kvcm/"}}`,
		"broken_storage", `{"type":"file",`,
	).Err())
	require.NoError(t, c.HSet(ctx, p+"instance_group",
		"g-redis", groupJSON("g-redis", backend("redis", "redis://kvcm:Meta-Pw1@"+env.meta1.Addr()+"/")),
		// Overridden by configuration: the registry's address is never dialed.
		"g-redis2", groupJSON("g-redis2", backend("redis", "redis://kvcm:Old-Pw@192.0.2.1:6379/")),
		// Read as KVCM reads them: any scheme, plain TCP, db=3 is database 3.
		"g-db3", groupJSON("g-db3", backend("redis", "tcp://kvcm:Meta-Pw1@"+env.meta1.Addr()+"?db=3")),
		"g-slash", groupJSON("g-slash", backend("redis", "rediss://"+slashUserInfo+"@"+env.meta3.Addr())),
		"g-slash-bad", groupJSON("g-slash-bad", backend("redis", "redis://"+slashUserInfo+"@"+env.meta3.Addr()+"/")),
		"g-noport", groupJSON("g-noport", backend("redis", "redis://kvcm:Secret-Pw9@h")),
		"g-local", groupJSON("g-local", backend("local", "file:///tmp/meta_storage")),
		"g-default", groupJSON("g-default", ""),
		"g-dummy", groupJSON("g-dummy", backend("dummy", "")),
		"g-cached", groupJSON("g-cached", backend("cached",
			"redis://kvcm:Secret-Pw9@"+env.meta1.Addr()+"/?db=3&persistent_type=async_redis&cache_type=local&async_queue_count=8")),
		"g-cached-redis", groupJSON("g-cached-redis", backend("cached", "redis://kvcm:Secret-Pw9@"+env.meta1.Addr())),
		"g-etcd", groupJSON("g-etcd", backend("etcd", "etcd://h:1")),
		"g-emptytype", groupJSON("g-emptytype", backend("", "redis://h:1")),
		"g-nouri", groupJSON("g-nouri", backend("redis", "")),
		"g-baduri", groupJSON("g-baduri", backend("redis", "redis://kvcm:Secret-Pw9@h:notaport")),
		"g-bad", `{"name":"g-bad","cache_config":`,
	).Err())
	instances := map[string]string{
		"inst-b":             infoJSON("inst-b", "g-redis"),
		"inst-a":             infoJSON("inst-a", "g-redis"),
		"inst-0":             infoJSON("inst-0", "g-redis2"),
		"inst-db3":           infoJSON("inst-db3", "g-db3"),
		"inst-slash":         infoJSON("inst-slash", "g-slash"),
		"inst-slash-bad":     infoJSON("inst-slash-bad", "g-slash-bad"),
		"inst-noport":        infoJSON("inst-noport", "g-noport"),
		"inst-c":             infoJSON("inst-c", "g-local"),
		"inst-d":             infoJSON("inst-d", "g-default"),
		"inst-cached1":       infoJSON("inst-cached1", "g-cached"),
		"inst-cached2":       infoJSON("inst-cached2", "g-cached"),
		"inst-cached-redis":  infoJSON("inst-cached-redis", "g-cached-redis"),
		"inst-etcd":          infoJSON("inst-etcd", "g-etcd"),
		"inst-emptytype":     infoJSON("inst-emptytype", "g-emptytype"),
		"inst-nouri":         infoJSON("inst-nouri", "g-nouri"),
		"inst-baduri":        infoJSON("inst-baduri", "g-baduri"),
		"inst-badgroup":      infoJSON("inst-badgroup", "g-bad"),
		"inst-unknown-group": infoJSON("inst-unknown-group", "g-nope"),
		"inst-mismatch":      infoJSON("inst-a", "g-redis"),
		"inst-malformed":     `{"quota_group_name":"q1","instance_group_name":"g-redis","instance_id":"inst-malformed","block_size":"16"`,
		"inst-empty":         "",
		// KVMeta's (open upstream PR #341): by its reserved id, even with a record that does
		// not decode, or by a marker of its record, in a group kvcm-gc collects.
		"__kv_meta_v1__656d62": `{"instance_id":`,
		"inst-kvmeta": `{"quota_group_name":"q1","instance_group_name":"g-redis","instance_id":"inst-kvmeta","block_size":1,` +
			`"location_spec_infos":[{"name":"value","size":1}],"model_deployment":{"model_name":"__kv_meta_object__","dtype":"opaque_bytes","extra":"kv_meta_v1"}}`,
	}
	for id, info := range instances {
		require.NoError(t, c.HSet(ctx, p+"instance", id, id).Err())
		require.NoError(t, c.HSet(ctx, p+id, id, info).Err())
	}
	require.NoError(t, c.HSet(ctx, p+"instance", "inst-missing", "inst-missing").Err())
	// Keys the reader must never read or touch.
	require.NoError(t, c.HSet(ctx, p+"account", "u", `{"user":"u"}`).Err())
	require.NoError(t, c.Set(ctx, "kvcm_lock:_TAIR_KVCM_LEADER_KEY", "node-1", 0).Err())
	return env
}

func (env *registryEnv) reader(t *testing.T, o redismeta.RegistryOptions) *redismeta.RegistryReader {
	t.Helper()
	o.Learn = func(name, uri string) {
		env.mu.Lock()
		defer env.mu.Unlock()
		env.learned[name] = uri
	}
	r, err := redismeta.OpenRegistryReader(redismeta.ConnOptions{Addr: env.reg.Addr(), Username: "gc-registry", Password: "Reg-Pw"}, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}

func TestRegistryReader(t *testing.T) {
	env := startRegistry(t)
	override := "redis://kvcm:Meta-Pw2@" + env.meta2.Addr()
	r := env.reader(t, redismeta.RegistryOptions{Cluster: "c1", GroupStoreURIs: map[string]string{"g-redis2": override}})

	before := env.reg.CommandStats(t)
	reg, err := r.ReadRegistry(testenv.Context(t))
	require.NoError(t, err)
	sent := make(map[string]int64)
	for cmd, n := range env.reg.CommandStats(t) {
		if n > before[cmd] {
			sent[cmd] = n - before[cmd]
		}
	}
	for cmd := range sent {
		require.Contains(t, []string{"hgetall", "hget", "ping", "hello", "auth", "info"}, cmd, "registry reader sent %v", sent)
	}

	type inst struct{ ID, Group, Store string }
	var got []inst
	for _, i := range reg.Instances {
		got = append(got, inst{i.ID, i.Group, i.Store})
		require.Equal(t, i.ID, i.Info.InstanceID)
		require.Equal(t, []kvcm.LocationSpecInfo{{Name: "tp0", Size: 1024}, {Name: "tp1", Size: 1024}}, i.Info.LocationSpecs)
	}
	require.Equal(t, []inst{
		{"inst-db3", "g-db3", env.meta1.Addr() + "?db=3"},
		{"inst-a", "g-redis", env.meta1.Addr()},
		{"inst-b", "g-redis", env.meta1.Addr()},
		{"inst-0", "g-redis2", env.meta2.Addr()},
		{"inst-slash", "g-slash", env.meta3.Addr()},
	}, got, "instances sorted by (group, id), stores named by address and database")

	skipped := make(map[string]string)
	var storageSkips []string
	for _, s := range reg.Skipped {
		requireNoSecret(t, s.Reason)
		if s.Instance == "" {
			storageSkips = append(storageSkips, s.Reason)
			continue
		}
		skipped[s.Instance] = s.Reason
	}
	wantSkips := map[string]string{
		"inst-slash-bad":       redismeta.SkipBadStoreURI + `: parse "redis://***@` + env.meta3.Addr() + `/" as KVCM does: a '/' or '?' in the userinfo`,
		"inst-noport":          redismeta.SkipBadStoreURI + `: parse "redis://***@h" as KVCM does: no port: KVCM would dial port 0 and fail`,
		"inst-c":               redismeta.SkipLocalStore + ": in KVCM's memory, not in Redis",
		"inst-d":               redismeta.SkipLocalStore,
		"inst-cached1":         redismeta.SkipCachedStore + ": Redis is a write-behind copy of KVCM's memory, not the truth (persistent_type=async_redis, cache_type=local)",
		"inst-cached2":         redismeta.SkipCachedStore,
		"inst-cached-redis":    redismeta.SkipCachedStore + ": Redis is a write-behind copy of KVCM's memory, not the truth (persistent_type=redis, cache_type=local)",
		"inst-etcd":            redismeta.SkipUnknownStoreType + `: "etcd"`,
		"inst-emptytype":       redismeta.SkipUnknownStoreType + `: ""`,
		"inst-nouri":           redismeta.SkipNoStoreURI,
		"inst-baduri":          redismeta.SkipBadStoreURI,
		"inst-badgroup":        redismeta.SkipBadGroup,
		"inst-unknown-group":   redismeta.SkipUnknownGroup,
		"inst-mismatch":        redismeta.SkipInfoIDMismatch,
		"inst-malformed":       redismeta.SkipBadInfo,
		"inst-empty":           redismeta.SkipInfoMissing,
		"inst-missing":         redismeta.SkipInfoMissing,
		"__kv_meta_v1__656d62": redismeta.SkipKVMeta + ": instance id starts with __kv_meta_v1__",
		"inst-kvmeta":          redismeta.SkipKVMeta + ": model_name __kv_meta_object__",
	}
	require.Len(t, skipped, len(wantSkips), "skipped: %v", skipped)
	for id, prefix := range wantSkips {
		require.True(t, strings.HasPrefix(skipped[id], prefix), "%s skipped for %q, want %q", id, skipped[id], prefix)
	}
	require.Len(t, storageSkips, 1)
	require.Contains(t, storageSkips[0], `"broken_storage"`)

	// Every group not collected is reported by name, instances or not.
	require.True(t, reg.HasGroups())
	type gskip struct {
		Group, Reason string
		Instances     int
	}
	var groups []gskip
	for _, g := range reg.SkippedGroupSummary() {
		requireNoSecret(t, g.String())
		require.Equal(t, reg.SkippedGroups[g.Group], g.Reason)
		groups = append(groups, gskip{g.Group, g.Reason[:min(len(g.Reason), 17)], g.Instances})
	}
	require.Equal(t, []gskip{
		{"g-bad", "bad instance grou", 1},
		{"g-baduri", "bad meta store ur", 1},
		{"g-cached", "cached meta store", 2},
		{"g-cached-redis", "cached meta store", 1},
		{"g-default", "local meta store:", 1},
		{"g-dummy", "dummy meta store:", 0},
		{"g-emptytype", "unknown meta stor", 1},
		{"g-etcd", "unknown meta stor", 1},
		{"g-local", "local meta store:", 1},
		{"g-noport", "bad meta store ur", 1},
		{"g-nouri", "meta store uri mi", 1},
		{"g-slash-bad", "bad meta store ur", 1},
	}, groups)

	require.Equal(t, []string{"g-baduri", "g-cached", "g-cached-redis", "g-db3", "g-default", "g-dummy", "g-emptytype", "g-etcd",
		"g-local", "g-noport", "g-nouri", "g-redis", "g-redis2", "g-slash", "g-slash-bad"}, sortedMapKeys(reg.Groups))
	g := reg.Groups["g-redis"]
	require.Equal(t, "redis", g.MetaStorageType)
	require.Equal(t, int64(1500), g.DelayBeforeDeleteMs)
	require.Equal(t, "local", reg.Groups["g-default"].MetaStorageType)
	require.Equal(t, "async_redis", reg.Groups["g-cached"].MetaPersistentType)
	require.Equal(t, []string{"hf3fs_01", "nfs_01"}, sortedMapKeys(reg.Storages))
	require.Equal(t, uint64(8), reg.Storages["nfs_01"].KeyCountPerFile)

	// The URIs behind the store names, credentials included, went to Learn: registry URIs
	// marked to be read as KVCM reads them, the override as configured. The overridden
	// registry URI did not.
	require.Equal(t, map[string]string{
		env.meta1.Addr():           redismeta.KVCMURIPrefix + "redis://kvcm:Meta-Pw1@" + env.meta1.Addr() + "/",
		env.meta1.Addr() + "?db=3": redismeta.KVCMURIPrefix + "tcp://kvcm:Meta-Pw1@" + env.meta1.Addr() + "?db=3",
		env.meta2.Addr():           override,
		env.meta3.Addr():           redismeta.KVCMURIPrefix + "rediss://" + slashUserInfo + "@" + env.meta3.Addr(),
	}, env.learned)
}

func requireNoSecret(t *testing.T, s string) {
	t.Helper()
	for _, secret := range []string{"Secret-Pw9", "Meta-Pw", "pa/ss", "Old-Pw"} {
		require.NotContains(t, s, secret)
	}
}

// TestRegistryToStores: a snapshot's store names open, through a pool that learned their
// URIs, stores that authenticate KVCM-style (a '/' in the password included) and see the
// instances' blocks, each in the database its KVCM uses.
func TestRegistryToStores(t *testing.T) {
	env := startRegistry(t)
	ctx := testenv.Context(t)
	for _, tc := range []struct {
		srv  *testenv.Redis
		inst string
	}{{env.meta1, "inst-a"}, {env.meta2, "inst-0"}, {env.meta3, "inst-slash"}} {
		key := kvcm.BlockKey(tc.inst, -5)
		require.NoError(t, tc.srv.Client().HSet(ctx, key, metatest.Block(`{"x":{}}`, "")).Err())
	}
	// inst-db3's block lives in database 3 only; a copy in database 0 must not be seen.
	db3 := redis.NewClient(&redis.Options{Addr: env.meta1.Addr(), DB: 3, Password: "kvcm:Meta-Pw1", Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { require.NoError(t, db3.Close()) })
	// (A KVCM that reads db= keeps today's layout; a legacy key in DB 3 would be nobody's.)
	require.NoError(t, db3.HSet(ctx, kvcm.BlockKey("inst-db3", -5),
		metatest.LocationBlock("", metatest.LocationField("x0x0x0x0", kvcm.StatusServing, kvcm.TypeFile, "file://nfs_01/x?size=1"))).Err())
	require.NoError(t, env.meta1.Client().HSet(ctx, kvcm.BlockKey("inst-db3", 7), metatest.Block(`{"y":{}}`, "")).Err())
	pool := redismeta.NewPool(redismeta.PoolOptions{})
	t.Cleanup(func() { require.NoError(t, pool.Close()) })
	r, err := redismeta.OpenRegistryReader(redismeta.ConnOptions{Addr: env.reg.Addr(), Username: "gc-registry", Password: "Reg-Pw"},
		redismeta.RegistryOptions{
			Cluster:        "c1",
			GroupStoreURIs: map[string]string{"g-redis2": "redis://kvcm:Meta-Pw2@" + env.meta2.Addr()},
			Learn:          pool.Learn,
		})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	reg, err := r.ReadRegistry(ctx)
	require.NoError(t, err)
	require.Len(t, reg.Instances, 5)
	for _, in := range reg.Instances {
		st, err := pool.Store(in.Store)
		require.NoError(t, err)
		p, err := metatest.ScanInstance(ctx, st, in.ID, 0, 100)
		require.NoError(t, err)
		if in.ID == "inst-b" {
			require.Empty(t, p.Entries)
			continue
		}
		require.Len(t, p.Entries, 1, in.ID)
		require.Equal(t, int64(-5), p.Entries[0].BlockKey)
	}
}

func TestRegistryReaderErrors(t *testing.T) {
	env := startRegistry(t)
	t.Run("no cluster", func(t *testing.T) {
		_, err := redismeta.OpenRegistryReader(redismeta.ConnOptions{Addr: env.reg.Addr()}, redismeta.RegistryOptions{})
		require.Error(t, err)
	})
	t.Run("bad override", func(t *testing.T) {
		_, err := redismeta.OpenRegistryReader(redismeta.ConnOptions{Addr: env.reg.Addr()}, redismeta.RegistryOptions{
			Cluster: "c1", GroupStoreURIs: map[string]string{"g": "redis://u:Secret-Pw9@h:x"},
		})
		require.ErrorIs(t, err, redismeta.ErrBadURI)
		require.NotContains(t, err.Error(), "Secret-Pw9")
	})
	t.Run("empty cluster reads empty", func(t *testing.T) {
		r := env.reader(t, redismeta.RegistryOptions{Cluster: "other"})
		reg, err := r.ReadRegistry(testenv.Context(t))
		require.NoError(t, err)
		require.Empty(t, reg.Instances)
		require.Empty(t, reg.Skipped)
		require.False(t, reg.HasGroups(), "no groups for this cluster")
		require.Empty(t, reg.SkippedGroupSummary())
	})
	t.Run("groups, all skipped", func(t *testing.T) {
		ctx := testenv.Context(t)
		c := env.reg.Client()
		require.NoError(t, c.HSet(ctx, "kvcache_registry:c2:instance_group", "g", groupJSON("g", backend("cached", "redis://h:1"))).Err())
		require.NoError(t, c.HSet(ctx, "kvcache_registry:c2:instance", "i", "i").Err())
		require.NoError(t, c.HSet(ctx, "kvcache_registry:c2:i", "i", infoJSON("i", "g")).Err())
		r := env.reader(t, redismeta.RegistryOptions{Cluster: "c2"})
		reg, err := r.ReadRegistry(ctx)
		require.NoError(t, err)
		require.Empty(t, reg.Instances)
		require.True(t, reg.HasGroups(), "groups, all skipped")
		require.Equal(t, []meta.GroupSkip{{Group: "g", Instances: 1,
			Reason: "cached meta store: Redis is a write-behind copy of KVCM's memory, not the truth (persistent_type=redis, cache_type=local)"}},
			reg.SkippedGroupSummary())
	})
	t.Run("permission denied fails the snapshot", func(t *testing.T) {
		env.reg.AddUser(t, "no-hget", "pw", "~*", "+hgetall")
		r, err := redismeta.OpenRegistryReader(redismeta.ConnOptions{Addr: env.reg.Addr(), Username: "no-hget", Password: "pw"},
			redismeta.RegistryOptions{Cluster: "c1"})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, r.Close()) })
		_, err = r.ReadRegistry(testenv.Context(t))
		require.ErrorContains(t, err, "NOPERM")
	})
	t.Run("server down fails the snapshot", func(t *testing.T) {
		r := env.reader(t, redismeta.RegistryOptions{Cluster: "c1"})
		env.reg.Stop()
		_, err := r.ReadRegistry(testenv.Context(t))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "Reg-Pw")
	})
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var _ meta.RegistryReader = (*redismeta.RegistryReader)(nil)

// TestSkippedGroupSummary: the summary a report prints, from a snapshot built by hand.
func TestSkippedGroupSummary(t *testing.T) {
	reg := &meta.Registry{
		Instances: []meta.Instance{{ID: "a", Group: "g-redis"}},
		Groups:    map[string]kvcm.InstanceGroup{"g-redis": {}, "g-local": {}, "g-cached": {}, "g-dummy": {}},
		Skipped: []meta.Skip{
			{Instance: "c1", Group: "g-cached", Reason: "cached meta store: x"},
			{Instance: "l1", Group: "g-local", Reason: "local meta store: y"},
			{Instance: "c2", Group: "g-cached", Reason: "cached meta store: x"},
			{Instance: "u1", Group: "g-nope", Reason: redismeta.SkipUnknownGroup},
			{Reason: "bad storage config json: z"},
		},
		SkippedGroups: map[string]string{"g-local": "local meta store: y", "g-cached": "cached meta store: x",
			"g-dummy": "dummy meta store: w", "g-bad": "bad instance group json: v"},
	}
	got := reg.SkippedGroupSummary()
	var lines []string
	for _, g := range got {
		lines = append(lines, g.String())
	}
	require.Equal(t, []string{
		`group "g-bad" (0 instances): bad instance group json: v`,
		`group "g-cached" (2 instances): cached meta store: x`,
		`group "g-dummy" (0 instances): dummy meta store: w`,
		`group "g-local" (1 instance): local meta store: y`,
	}, lines)
	require.True(t, reg.HasGroups())

	tests := []struct {
		name string
		reg  meta.Registry
		want bool
	}{
		{"nothing", meta.Registry{}, false},
		{"instances of unknown groups only", meta.Registry{Skipped: []meta.Skip{{Instance: "i", Group: "g", Reason: redismeta.SkipUnknownGroup}}}, false},
		{"a group that does not decode", meta.Registry{SkippedGroups: map[string]string{"g": "bad instance group json: x"}}, true},
		{"a collected group without instances", meta.Registry{Groups: map[string]kvcm.InstanceGroup{"g": {}}}, true},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.reg.HasGroups(), tc.name)
	}
}
