package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// TestUnregisteredInstances: keys of an instance the registry no longer lists (a failed
// RemoveInstance leaves them) are counted per store and instance, with their locations and
// bytes, in the store's checkpoint and as gauges, and first seen once; keys of a skipped
// group's instance are not; nothing of them is touched. Once the instance is registered again,
// the count is gone.
func TestUnregisteredInstances(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed(seed.Spec{Blocks: 100, Seed: 31, NoFiles: true, Instances: []string{"inst0"}})
	rdb := e.redis.Client()
	loc := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"status":3,"type":4,"spec_size":2,"create_time":1,"location_specs":[`+
			`{"name":"tp0","uri":"file://nfs_01/r/gone/tp0/%s?size=1024"},{"name":"tp1","uri":"file://nfs_01/r/gone/tp1/%s?size=512"}]}`, id, id, id)
	}
	const gone = "gone:inst #1" // any bytes
	for i := range 25 {
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(gone, int64(i)), kvcm.FieldPrevKey, "",
			kvcm.LocationField("a"), loc("a"), kvcm.LocationField("b"), loc("b")).Err())
	}
	// An instance of a group kvcm-gc skips (the seed's local group) is registered: not counted.
	for i := range 5 {
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(seed.InstanceLocal, int64(i)), kvcm.LocationField("a"), loc("a")).Err())
	}
	before, err := seed.Take(ctx, rdb, "kvcache:instance_*")
	require.NoError(t, err)

	pr := prometheus.NewRegistry()
	o := e.options(pr)
	o.Scanner.RoundPause = 200 * time.Millisecond
	e.run(o, app.All)
	store := strings.TrimPrefix(e.redis.URI(), "redis://")
	storeCkpt := func(round uint64) pipeline.Checkpoint {
		t.Helper()
		var c pipeline.Checkpoint
		require.Eventually(t, func() bool {
			kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
			if err != nil {
				return false // not created yet
			}
			c, _, err = pipeline.ReadStoreCheckpoint(ctx, kv, store)
			return err == nil && (c.Round > round || c.Round == round && !c.InRound)
		}, time.Minute, 20*time.Millisecond)
		return c
	}
	c1 := storeCkpt(1)
	require.Len(t, c1.Unregistered, 1, "%+v", c1.Unregistered)
	u := c1.Unregistered[0]
	require.Equal(t, gone, u.Instance)
	require.Equal(t, int64(25), u.Keys)
	require.Equal(t, int64(50), u.Locations)
	require.Equal(t, uint64(25*2*(1024+512)), u.Bytes)
	require.Zero(t, u.Unreadable)
	require.NotZero(t, u.FirstSeenUs)
	require.Empty(t, c1.UnregisteredRound)
	// The gauges follow the checkpoint's write.
	require.Eventually(t, func() bool {
		return metricValue(t, pr, "kvcm_gc_unregistered_instance_keys") == 25 &&
			metricValue(t, pr, "kvcm_gc_unregistered_instance_locations") == 50 &&
			metricValue(t, pr, "kvcm_gc_unregistered_instance_bytes") == float64(25*2*(1024+512))
	}, 10*time.Second, 10*time.Millisecond)

	// A later round counts them again; the first sight stays.
	c2 := storeCkpt(c1.Round + 1)
	require.Len(t, c2.Unregistered, 1)
	require.Equal(t, u.FirstSeenUs, c2.Unregistered[0].FirstSeenUs)
	require.Equal(t, int64(25), c2.Unregistered[0].Keys)

	// status shows them.
	var out, errOut bytes.Buffer
	require.NoError(t, opsCommand("status")(ctx, opsEnv(t, e, o), nil, &out, &errOut))
	require.Contains(t, out.String(), "UNREGISTERED INSTANCES")
	require.Contains(t, out.String(), `"gone:inst #1"`, "its id quoted: it holds a space")
	require.Regexp(t, `"gone:inst #1"\s+25\s+50\s+75.0 KiB`, out.String())
	t.Logf("status\n%s", out.String())

	// Counted, never touched: the unregistered and the skipped instance's keys as they were.
	now, err := seed.Take(ctx, rdb, "kvcache:instance_*")
	require.NoError(t, err)
	for k, v := range before {
		if strings.HasPrefix(k, kvcm.KeyPrefix(gone)) || strings.HasPrefix(k, kvcm.KeyPrefix(seed.InstanceLocal)) {
			require.Equal(t, v, now[k], k)
		}
	}

	// Registered again (in the seed's group): no longer counted, its series gone.
	reg := "kvcache_registry:" + cluster + ":"
	info, err := rdb.HGet(ctx, reg+"inst0", "inst0").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, reg+gone, gone, strings.ReplaceAll(info, `"inst0"`, fmt.Sprintf("%q", gone))).Err())
	require.NoError(t, rdb.HSet(ctx, reg+"instance", gone, gone).Err())
	// A round that starts once the registry snapshot (reused a moment) lists it counts none.
	require.Eventually(t, func() bool {
		c := storeCkpt(c2.Round + 1)
		return !c.InRound && len(c.Unregistered) == 0
	}, time.Minute, 50*time.Millisecond)
	require.Eventually(t, func() bool { return metricValue(t, pr, "kvcm_gc_unregistered_instance_keys") == 0 }, 10*time.Second, 10*time.Millisecond)
}

// TestCollectUnregisteredInstances: with collect_unregistered_instances, the keys of an
// instance kvcm-gc saw registered go once it has been absent from the registry for the grace,
// through the deleter's CAS and CAD, a capped number per round; never while the registry holds
// a record that does not decode, nor while the instance's group is gone from it, nor for an
// instance never seen registered; the live instance's keys stay byte for byte.
func TestCollectUnregisteredInstances(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.seed(seed.Spec{Blocks: 60, Seed: 32, NoFiles: true, Instances: []string{"inst0"}})
	rdb := e.redis.Client()
	reg := "kvcache_registry:" + cluster + ":"
	loc := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"status":3,"type":4,"spec_size":1,"create_time":1,"location_specs":[`+
			`{"name":"tp0","uri":"file://nfs_01/r/gone/tp0/%s?size=1024"}]}`, id, id)
	}
	const gone, ghost, evr = "gone#1", "ghost", "kvs#event_report_l1p5#hbm#10.0.0.8:9000"
	for i := range 25 {
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(gone, int64(i)), kvcm.FieldPrevKey, "",
			kvcm.LocationField("a"), loc("a"), kvcm.LocationField(evr), loc(evr)).Err())
	}
	for i := range 5 { // never registered: counted, never collected
		require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(ghost, int64(i)), kvcm.LocationField("a"), loc("a")).Err())
	}
	// gone is registered, in a group of its own on the same store.
	info, err := rdb.HGet(ctx, reg+"inst0", "inst0").Result()
	require.NoError(t, err)
	var rec struct {
		Group string `json:"instance_group_name"`
	}
	require.NoError(t, json.Unmarshal([]byte(info), &rec))
	group, err := rdb.HGet(ctx, reg+"instance_group", rec.Group).Result()
	require.NoError(t, err)
	goneInfo := strings.ReplaceAll(strings.ReplaceAll(info, `"inst0"`, fmt.Sprintf("%q", gone)), fmt.Sprintf("%q", rec.Group), `"g-gone"`)
	goneGroup := strings.ReplaceAll(group, fmt.Sprintf("%q", rec.Group), `"g-gone"`)
	require.NoError(t, rdb.HSet(ctx, reg+"instance_group", "g-gone", goneGroup).Err())
	require.NoError(t, rdb.HSet(ctx, reg+gone, gone, goneInfo).Err())
	require.NoError(t, rdb.HSet(ctx, reg+"instance", gone, gone).Err())
	before, err := seed.Take(ctx, rdb, "kvcache:instance_*")
	require.NoError(t, err)

	pr := prometheus.NewRegistry()
	o := e.options(pr)
	o.Scanner.RoundPause = 100 * time.Millisecond
	o.Scanner.CollectUnregistered = true
	o.Scanner.UnregisteredGrace = 300 * time.Millisecond // the configuration refuses less than 24h
	o.Scanner.UnregisteredMaxKeys = 10
	e.run(o, app.All)
	store := strings.TrimPrefix(e.redis.URI(), "redis://")
	ckpt := func() pipeline.Checkpoint {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return pipeline.Checkpoint{}
		}
		c, _, _ := pipeline.ReadStoreCheckpoint(ctx, kv, store)
		return c
	}
	// A round ends that saw gone registered.
	require.Eventually(t, func() bool { c := ckpt(); return c.Round >= 1 && !c.InRound && c.Seen[gone].LastRegisteredUs > 0 },
		time.Minute, 20*time.Millisecond)
	require.NotContains(t, ckpt().Seen, ghost)

	// Removed, and a record that does not decode beside it: a partial registry refuses.
	require.NoError(t, rdb.Del(ctx, reg+gone).Err())
	require.NoError(t, rdb.HDel(ctx, reg+"instance", gone).Err())
	require.NoError(t, rdb.HSet(ctx, reg+"instance", "bad", "bad").Err())
	require.NoError(t, rdb.HSet(ctx, reg+"bad", "bad", "{not json").Err())
	removed := time.Now()
	refusals := func(reason string) float64 {
		return metricByLabel(t, pr, "kvcm_gc_unregistered_refusals_total", "reason")[reason]
	}
	// waitRefused waits for a round that started past the grace and counted gone, with
	// refusals of reason since then, and shows nothing of gone went.
	waitRefused := func(reason string) {
		t.Helper()
		from := refusals(reason)
		start := ckpt().Round
		require.Eventually(t, func() bool {
			c := ckpt()
			counted := slices.ContainsFunc(c.Unregistered, func(u pipeline.UnregisteredCount) bool { return u.Instance == gone })
			return c.Round >= start+2 && !c.InRound && counted && refusals(reason) > from &&
				time.UnixMicro(c.RoundStartedUs).After(removed.Add(o.Scanner.UnregisteredGrace))
		}, time.Minute, 20*time.Millisecond)
		require.Zero(t, metricValue(t, pr, "kvcm_gc_unregistered_collected_keys_total"), reason)
		now, err := seed.Take(ctx, rdb, "kvcache:instance_*")
		require.NoError(t, err)
		require.Equal(t, before, now, "%s: nothing written", reason)
	}
	waitRefused(pipeline.UnregRegistryPartial)

	// Whole again, but gone's group is gone too: refused.
	require.NoError(t, rdb.HDel(ctx, reg+"instance", "bad").Err())
	require.NoError(t, rdb.Del(ctx, reg+"bad").Err())
	require.NoError(t, rdb.HDel(ctx, reg+"instance_group", "g-gone").Err())
	waitRefused(pipeline.UnregGroupAbsent)

	// The group back: gone's keys go, at most 10 a round; ghost's stay.
	r0 := ckpt().Round
	require.NoError(t, rdb.HSet(ctx, reg+"instance_group", "g-gone", goneGroup).Err())
	var most atomic.Int64 // the most a round's checkpoint counted sent
	require.Eventually(t, func() bool {
		if c := ckpt(); c.UnregisteredCollected > most.Load() {
			most.Store(c.UnregisteredCollected)
		}
		for i := range 25 {
			if n, err := rdb.HLen(ctx, kvcm.BlockKey(gone, int64(i))).Result(); err != nil || n > 1 {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond)
	require.LessOrEqual(t, most.Load(), int64(10), "the round's cap")
	require.GreaterOrEqual(t, ckpt().Round, r0+2, "25 keys at most 10 a round take three rounds")
	// The counter counts keys sent: a round that walks a key before the deleter took the
	// last round's request sends it again, so only every key at least once is certain.
	require.GreaterOrEqual(t, metricValue(t, pr, "kvcm_gc_unregistered_collected_keys_total"), float64(25))
	require.Positive(t, refusals(pipeline.UnregNeverRegistered), "ghost")
	require.Positive(t, metricByLabel(t, pr, "kvcm_gc_physical_delete_skips_total", "reason")[deleter.PhysSkipSweep])

	now, err := seed.Take(ctx, rdb, "kvcache:instance_*")
	require.NoError(t, err)
	for k, v := range before {
		switch {
		case strings.HasPrefix(k, kvcm.KeyPrefix(gone)):
			// empty_block keep: the key stays as KVCM reads "exists, no location".
			require.Equal(t, map[string]string{kvcm.FieldPrevKey: ""}, now[k], k)
		default:
			require.Equal(t, v, now[k], k)
		}
	}
}

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
	kv := e.stateKV()
	if kv == nil {
		return pipeline.Checkpoint{}
	}
	c, _, _ := pipeline.ReadStoreCheckpoint(context.Background(), kv, strings.TrimPrefix(e.redis.URI(), "redis://"))
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
	// While gone's keys go, the sweep may already take the files whose keys have gone, but
	// never a file whose key still names it. The file is read first: a file missing while its
	// key still holds the location was missing while the key named it (nothing writes them
	// back).
	var broken error // the first file found gone while its key still named it
	require.Eventually(t, func() bool {
		for i, p := range goneFiles {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				if err != nil {
					broken = err
					return true
				}
				continue
			}
			n, err := f.rdb.HLen(ctx, kvcm.BlockKey("gone", int64(1000+i))).Result()
			if err != nil || n != 1 {
				broken = fmt.Errorf("%s is gone while its key still names it (%d fields, %v)", p, n, err)
				return true
			}
		}
		return goneEmptied()
	}, time.Minute, 20*time.Millisecond, "gone's keys still hold locations after a minute")
	require.NoError(t, broken)
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
	// The walks kept young's files as unknown_instance, within its grace by their clock. Their
	// presence proves it too while young is still within its grace; past it, on a machine so
	// loaded that gone's sweep took longer, the sweep may take them, rightly.
	if since := time.Since(youngGone); since < grace {
		require.Equal(t, len(youngFiles), present(t, f.root, youngFiles), "removed too recently: kept")
	} else {
		t.Logf("young's files not counted: young went %s ago, past its grace", since.Round(time.Millisecond))
	}
	require.Equal(t, len(liveFiles), present(t, f.root, liveFiles), "registered: kept")
	require.Positive(t, kept("referenced"), "inst0's files")
	require.Empty(t, quarantined(t, f.root))
	require.True(t, goneEmptied(), "gone's keys as KVCM reads \"exists, no location\"")
}

// refusalGrace is the unregistered_grace of the refusal tests: short, so that a refusal is
// shown past it.
const refusalGrace = time.Second

// refusalRun is a keyspace of inst0 and of instance gone (g-extra), 10 blocks each with a
// per-block file, under every stage with collect_unregistered_instances and the sweep on.
type refusalRun struct {
	f      *unregFixture
	pr     *prometheus.Registry
	files  []string
	before seed.Snapshot
}

// startRefusal writes the keyspace, registers gone when registered, and runs the stages until
// a round has ended (having seen gone registered, when it was).
func startRefusal(t *testing.T, registered bool) *refusalRun {
	t.Helper()
	e := newEnv(t)
	r := &refusalRun{f: newUnregFixture(t, e), pr: prometheus.NewRegistry()}
	if registered {
		r.f.register(t, "gone")
	}
	r.files = append(r.f.blocks(t, "gone", 10), r.f.blocks(t, "inst0", 10)...)
	r.before = r.snapshot(t)
	e.run(e.unregOptions(r.pr, refusalGrace), app.All)
	require.Eventually(t, func() bool {
		c := e.storeCheckpoint()
		return c.Round >= 1 && !c.InRound && (!registered || c.Seen["gone"].LastRegisteredUs > 0)
	}, time.Minute, 20*time.Millisecond)
	return r
}

// refusedPast waits until the grace since from has passed and, after that, two more walks of
// the sweep have ended and done holds; then nothing of any instance is gone: every key as it
// was, every file in place with its bytes.
func (r *refusalRun) refusedPast(t *testing.T, from time.Time, done func() bool) {
	t.Helper()
	e := r.f.e
	past := from.Add(refusalGrace + 200*time.Millisecond).UnixMicro()
	var first uint64 // the first walk seen that started past the grace
	require.Eventually(t, func() bool {
		c := e.sweepCheckpoint()
		if first == 0 && c.RoundStartedUs > past {
			first = c.Round
		}
		return first != 0 && c.Round > first && done() // that walk has ended, the next begun
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, r.before, r.snapshot(t), "no key written")
	require.Equal(t, len(r.files), present(t, r.f.root, r.files), "no file unlinked")
	require.Empty(t, quarantined(t, r.f.root))
	require.Zero(t, metricValue(t, r.pr, "kvcm_gc_unregistered_collected_keys_total"))
	require.Zero(t, metricValue(t, r.pr, "kvcm_gc_sweep_unlinked_files_total"))
}

// snapshot reads the keys of the blocks startRefusal wrote (the seed's own keys of inst0 hold
// garbage, which goes).
func (r *refusalRun) snapshot(t *testing.T) seed.Snapshot {
	t.Helper()
	all, err := seed.Take(context.Background(), r.f.rdb, "kvcache:instance_*")
	require.NoError(t, err)
	out := seed.Snapshot{}
	for _, id := range []string{"gone", "inst0"} {
		for i := range 10 {
			k := kvcm.BlockKey(id, int64(1000+i))
			out[k] = all[k]
		}
	}
	return out
}

func (r *refusalRun) counter(t *testing.T, name, label, value string) float64 {
	return metricByLabel(t, r.pr, name, label)[value]
}

// TestUnregisteredRefusedRegistryUnread: with collect_unregistered_instances, nothing of a
// removed instance goes, keys nor files, past its grace, while the registry holds a record
// that does not decode (a partial read) and then while the registry cannot be read at all
// (its instance index of the wrong type: every read fails).
func TestUnregisteredRefusedRegistryUnread(t *testing.T) {
	r := startRefusal(t, true)
	ctx := context.Background()
	f := r.f
	f.unregister(t, "gone")
	require.NoError(t, f.rdb.HSet(ctx, f.reg+"instance", "bad", "bad").Err())
	require.NoError(t, f.rdb.HSet(ctx, f.reg+"bad", "bad", "{not json").Err())
	removed := time.Now()
	partial := func() float64 {
		return r.counter(t, "kvcm_gc_unregistered_refusals_total", "reason", pipeline.UnregRegistryPartial)
	}
	p0 := partial()
	r.refusedPast(t, removed, func() bool { return partial() > p0 })

	// The index replaced by a string: every registry read fails from now on.
	require.NoError(t, f.rdb.Del(ctx, f.reg+"instance").Err())
	require.NoError(t, f.rdb.Set(ctx, f.reg+"instance", "not a hash", 0).Err())
	failed := func() float64 {
		return r.counter(t, "kvcm_gc_sweep_errors_total", "reason", "registry") +
			metricByLabels(t, r.pr, "kvcm_gc_operation_errors_total", "stage", "op")[[2]string{pipeline.StageScanner, "registry"}]
	}
	f0 := failed()
	r.refusedPast(t, time.Now(), func() bool { return failed() > f0+2 })
}

// TestUnregisteredRefusedStoreEmpty: nothing of a removed instance goes past its grace while
// the registry lists no instance of its store (every instance removed, the groups left).
func TestUnregisteredRefusedStoreEmpty(t *testing.T) {
	r := startRefusal(t, true)
	r.f.unregister(t, "gone")
	r.f.unregister(t, "inst0")
	removed := time.Now()
	unknown := func() float64 { return r.counter(t, "kvcm_gc_sweep_kept_files_total", "reason", "unknown_instance") }
	k0 := unknown()
	r.refusedPast(t, removed, func() bool { return unknown() >= k0+float64(len(r.files)) })
}

// TestUnregisteredRefusedFirstSight: nothing goes of an instance kvcm-gc first saw already
// unregistered, however long it stays so.
func TestUnregisteredRefusedFirstSight(t *testing.T) {
	r := startRefusal(t, false)
	never := func() float64 {
		return r.counter(t, "kvcm_gc_unregistered_refusals_total", "reason", pipeline.UnregNeverRegistered)
	}
	n0 := never()
	r.refusedPast(t, time.Now(), func() bool { return never() > n0 })
	require.NotContains(t, r.f.e.storeCheckpoint().Seen, "gone")
}
