package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/seed"
)

// unregFixture is a keyspace of the seed's inst0 beside instances registered in a group of
// their own (g-extra, on the same store), each of whose blocks has a location naming one
// per-block data file on nfs_01, written two days ago (older than any sweep grace).
type unregFixture struct {
	e    *env
	rdb  *redis.Client
	reg  string // the registry's key prefix
	root string // nfs_01's root_path
	// info and group are inst0's registry records, the models of the others'.
	info, group, groupName string
}

func newUnregFixture(t *testing.T, e *env) *unregFixture {
	t.Helper()
	e.seed(seed.Spec{Blocks: 40, Seed: 34, NoFiles: true, Instances: []string{"inst0"}})
	ctx := context.Background()
	f := &unregFixture{e: e, rdb: e.redis.Client(), reg: "kvcache_registry:" + cluster + ":", root: filepath.Join(e.root, "nfs") + "/"}
	var err error
	f.info, err = f.rdb.HGet(ctx, f.reg+"inst0", "inst0").Result()
	require.NoError(t, err)
	var rec struct {
		Group string `json:"instance_group_name"`
	}
	require.NoError(t, json.Unmarshal([]byte(f.info), &rec))
	f.groupName = rec.Group
	f.group, err = f.rdb.HGet(ctx, f.reg+"instance_group", rec.Group).Result()
	require.NoError(t, err)
	require.NoError(t, f.rdb.HSet(ctx, f.reg+"instance_group", "g-extra",
		strings.ReplaceAll(f.group, fmt.Sprintf("%q", rec.Group), `"g-extra"`)).Err())
	return f
}

// register lists instance id in group g-extra.
func (f *unregFixture) register(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	info := strings.ReplaceAll(strings.ReplaceAll(f.info, `"inst0"`, fmt.Sprintf("%q", id)), fmt.Sprintf("%q", f.groupName), `"g-extra"`)
	require.NoError(t, f.rdb.HSet(ctx, f.reg+id, id, info).Err())
	require.NoError(t, f.rdb.HSet(ctx, f.reg+"instance", id, id).Err())
}

// unregister removes id's registry entry, as KVCM's RemoveInstance does first.
func (f *unregFixture) unregister(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.rdb.Del(ctx, f.reg+id).Err())
	require.NoError(t, f.rdb.HDel(ctx, f.reg+"instance", id).Err())
}

// blocks writes n blocks of instance id, keys 1000.., each with one SERVING location naming
// its per-block file id/tp0/<hex key>, and the files; it returns the files.
func (f *unregFixture) blocks(t *testing.T, id string, n int) []string {
	t.Helper()
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour)
	var files []string
	for i := range n {
		key := int64(1000 + i)
		object := kvcm.BlockObjectName(id, "tp0", key)
		path := f.root + object
		loc := fmt.Sprintf(`{"id":"l%d","status":3,"type":4,"spec_size":1,"create_time":%d,"location_specs":[`+
			`{"name":"tp0","uri":"file://%s%s?size=1024"}]}`, i, old.UnixMicro(), seed.StorageNFS, path)
		require.NoError(t, f.rdb.HSet(ctx, kvcm.BlockKey(id, key), kvcm.FieldPrevKey, "", kvcm.LocationField("l"+strconv.Itoa(i)), loc).Err())
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte("kv of "+object), 0o644))
		require.NoError(t, os.Chtimes(path, old, old))
		files = append(files, path)
	}
	return files
}

// present counts the files that exist and have the bytes blocks wrote.
func present(t *testing.T, root string, files []string) int {
	t.Helper()
	n := 0
	for _, p := range files {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		require.Equal(t, "kv of "+strings.TrimPrefix(p, root), string(b), p)
		n++
	}
	return n
}

// storeCheckpoint reads the checkpoint of the env's one store (zero before the bucket exists).
func (e *env) storeCheckpoint() pipeline.Checkpoint {
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	if err != nil {
		return pipeline.Checkpoint{}
	}
	c, _, _ := pipeline.ReadStoreCheckpoint(ctx, kv, strings.TrimPrefix(e.redis.URI(), "redis://"))
	return c
}

// unregOptions are sweepOptions with collect_unregistered_instances on, both in the scanner
// and the sweep, with grace (the configuration refuses less than 24h), short round pauses and
// a registry read for every sweep batch.
func (e *env) unregOptions(reg prometheus.Registerer, grace time.Duration) app.Options {
	o := e.sweepOptions(reg)
	o.Scanner.RoundPause = 100 * time.Millisecond
	o.Scanner.CollectUnregistered, o.Scanner.UnregisteredGrace, o.Scanner.UnregisteredMaxKeys = true, grace, 1000
	o.Sweep.RoundPause, o.Sweep.RegistryRefresh = 100*time.Millisecond, 50*time.Millisecond
	o.Sweep.CollectUnregistered, o.Sweep.UnregisteredGrace = true, grace
	return o
}

// TestSweepUnregisteredFiles: with collect_unregistered_instances, once the keys of an
// instance removed for the grace are gone, the sweep unlinks its per-block files; the files of
// the live instance, and of an instance removed too recently (its keys deleted by hand, so
// that only the grace protects its files), stay byte for byte.
func TestSweepUnregisteredFiles(t *testing.T) {
	e := newEnv(t)
	f := newUnregFixture(t, e)
	ctx := context.Background()
	const grace = 4 * time.Second
	f.register(t, "gone")
	f.register(t, "young")
	goneFiles := f.blocks(t, "gone", 12)
	youngFiles := f.blocks(t, "young", 12)
	liveFiles := f.blocks(t, "inst0", 12)

	pr := prometheus.NewRegistry()
	e.run(e.unregOptions(pr, grace), app.All)
	require.Eventually(t, func() bool {
		c := e.storeCheckpoint()
		return c.Round >= 1 && !c.InRound && c.Seen["gone"].LastRegisteredUs > 0 && c.Seen["young"].LastRegisteredUs > 0
	}, time.Minute, 20*time.Millisecond)

	require.Equal(t, len(goneFiles), present(t, f.root, goneFiles), "registered: kept")
	f.unregister(t, "gone")
	goneEmptied := func() bool {
		for i := range 12 {
			if n, err := f.rdb.HLen(ctx, kvcm.BlockKey("gone", int64(1000+i))).Result(); err != nil || n != 1 {
				return false // empty_block keep leaves BP#prev_key alone
			}
		}
		return true
	}
	require.Eventually(t, goneEmptied, time.Minute, 20*time.Millisecond)
	require.Equal(t, len(goneFiles), present(t, f.root, goneFiles), "keys just gone")
	// young goes now, its keys with it, as a trim that left only the files: nothing names
	// them, and only the grace keeps them.
	f.unregister(t, "young")
	youngGone := time.Now()
	for i := range 12 {
		require.NoError(t, f.rdb.Del(ctx, kvcm.BlockKey("young", int64(1000+i))).Err())
	}
	start := time.Now()
	// Quarantined first (moved from their paths), unlinked after sweep_quarantine.
	require.Eventually(t, func() bool {
		return present(t, f.root, goneFiles) == 0 && len(quarantined(t, f.root)) == 0 &&
			metricValue(t, pr, "kvcm_gc_sweep_unlinked_files_total") >= float64(len(goneFiles))
	}, time.Minute, 20*time.Millisecond)
	t.Logf("gone's %d files unlinked %s after its keys went", len(goneFiles), time.Since(start).Round(time.Millisecond))
	// A walk since young went has judged its files too.
	kept := func(reason string) float64 {
		return metricByLabel(t, pr, "kvcm_gc_sweep_kept_files_total", "reason")[reason]
	}
	require.Eventually(t, func() bool { return kept("unknown_instance") >= float64(len(youngFiles)) }, time.Minute, 20*time.Millisecond)
	require.Less(t, time.Since(youngGone), grace, "the checks below need young within its grace")
	require.Equal(t, len(youngFiles), present(t, f.root, youngFiles), "removed too recently: kept")
	require.Equal(t, len(liveFiles), present(t, f.root, liveFiles), "registered: kept")
	require.Positive(t, kept("referenced"), "inst0's files")
	require.Empty(t, quarantined(t, f.root))
	require.True(t, goneEmptied(), "gone's keys as KVCM reads \"exists, no location\"")
}
