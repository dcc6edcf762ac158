// Package seed writes a synthetic KVCM deployment into Redis in KVCM's exact format — registry
// (storages, groups, instances) and block hashes — with a known mix of garbage and live
// locations and real files under an NFS-like root, and returns a manifest of what is garbage
// so a collection run can be verified byte for byte.
package seed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Storage names the generated registry declares.
const (
	StorageNFS      = "nfs_01"     // file, key_count_per_file 1: files unlinked on delete
	StorageShared   = "nfs_shared" // file, key_count_per_file 8: files shared, never unlinked
	StorageMooncake = "mc_01"      // mooncake: no client here, always unknown
	GroupRedis      = "group_redis"
	GroupLocal      = "group_local" // on KVCM's in-process store: skipped by the GC
)

// Spec describes the deployment to generate.
type Spec struct {
	Cluster string
	// Instances are the instance ids of the redis group (default inst0..instN-1).
	Instances []string
	// Blocks per instance.
	Blocks int
	// LocationsPerBlock is 1 or 2 (default 2).
	LocationsPerBlock int
	// GarbageFraction of locations are garbage, half orphan WRITING, half storage-missing SERVING.
	GarbageFraction float64
	// TrickyFraction of locations are live entries that look like garbage at first sight.
	TrickyFraction float64
	// Root is the directory holding the storages' files (created if missing).
	Root string
	// MetaURI is the metadata store URI written into the group config (KVCM's storage_uri).
	MetaURI string
	// Grace is the orphan-WRITING grace the collector will use.
	Grace time.Duration
	// Now is the reference time (default time.Now()).
	Now time.Time
	// Seed makes the keyspace reproducible.
	Seed uint64
	// NoFiles skips creating data files (benchmarks of metadata only).
	NoFiles bool
	// Progress, when set, is called with (blocks written, total).
	Progress func(done, total int)
}

// Kinds of generated locations (manifest).
const (
	KindOrphanWriting  = "orphan_writing"   // garbage
	KindMissingServing = "storage_missing"  // garbage
	KindLiveServing    = "live_serving"     // live, files exist
	KindYoungWriting   = "young_writing"    // live: WRITING just under the grace
	KindFutureWriting  = "future_writing"   // live: create_time in the future
	KindSharedServing  = "shared_serving"   // live: shared file exists
	KindUnknownType    = "unknown_type"     // live: SERVING of an unknown storage type, file missing
	KindMooncake       = "mooncake_serving" // live: probe unknown
	KindDeleting       = "deleting"         // live: someone else's DELETING, never touched
	KindSharedOrphan   = "shared_orphan"    // garbage: orphan WRITING on a shared file (file must stay)
)

// Loc is one generated location.
type Loc struct {
	Instance string   `json:"instance"`
	Key      int64    `json:"key,string"`
	Location string   `json:"location"`
	Kind     string   `json:"kind"`
	Garbage  bool     `json:"garbage"`
	Files    []string `json:"files,omitempty"` // local paths of its data
}

// Manifest is what was generated.
type Manifest struct {
	Cluster   string         `json:"cluster"`
	Instances []string       `json:"instances"`
	Blocks    int            `json:"blocks"`
	Locations []Loc          `json:"locations"`
	Corrupt   []string       `json:"corrupt_keys"` // keys whose __uri__ is not valid JSON (kept)
	BadKeys   []string       `json:"bad_keys"`     // keys that are not canonical block keys (kept)
	Counts    map[string]int `json:"counts"`
}

// Garbage returns the garbage locations.
func (m *Manifest) Garbage() []Loc {
	var out []Loc
	for _, l := range m.Locations {
		if l.Garbage {
			out = append(out, l)
		}
	}
	return out
}

// Generate writes the deployment. Existing keys of the same names are overwritten.
func Generate(ctx context.Context, rdb redis.UniversalClient, sp Spec) (*Manifest, error) {
	if sp.Cluster == "" {
		return nil, errors.New("seed: cluster name is empty")
	}
	if sp.LocationsPerBlock <= 0 {
		sp.LocationsPerBlock = 2
	}
	if sp.Now.IsZero() {
		sp.Now = time.Now()
	}
	if sp.Grace <= 0 {
		sp.Grace = 24 * time.Hour
	}
	if len(sp.Instances) == 0 {
		sp.Instances = []string{"inst0", "inst1", "inst2"}
	}
	nfsRoot := filepath.Join(sp.Root, "nfs") + "/"
	sharedRoot := filepath.Join(sp.Root, "shared") + "/"
	if !sp.NoFiles {
		for _, d := range []string{nfsRoot, sharedRoot} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("seed: create root: %w", err)
			}
		}
	}
	g := &gen{sp: sp, rng: rand.New(rand.NewPCG(sp.Seed, sp.Seed^0x9e3779b97f4a7c15)), nfsRoot: nfsRoot, sharedRoot: sharedRoot,
		m: &Manifest{Cluster: sp.Cluster, Instances: sp.Instances, Counts: map[string]int{}}}
	if err := g.registry(ctx, rdb); err != nil {
		return nil, err
	}
	g.files = newFileWriter(fileWriters)
	// Every file exists when Generate returns, whatever the outcome.
	defer g.files.close()
	total := len(sp.Instances) * sp.Blocks
	done := 0
	pipe := rdb.Pipeline()
	flush := func() error {
		if pipe.Len() == 0 {
			return nil
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	for _, inst := range sp.Instances {
		used := map[int64]bool{}
		for i := 0; i < sp.Blocks; i++ {
			key := g.blockKey(used)
			fields, err := g.block(inst, key)
			if err != nil {
				return nil, err
			}
			pipe.HSet(ctx, kvcm.BlockKey(inst, key), fields...)
			done++
			if pipe.Len() >= 512 {
				if err := flush(); err != nil {
					return nil, fmt.Errorf("seed: write blocks: %w", err)
				}
				if sp.Progress != nil {
					sp.Progress(done, total)
				}
			}
		}
		// A metadata hash and keys that are not canonical block keys: never touched.
		pipe.HSet(ctx, "kvcache:instance_"+inst+":metadata", "__key_count__", strconv.Itoa(sp.Blocks))
		for _, bad := range []string{"abc", "05", "+7"} {
			k := kvcm.KeyPrefix(inst) + bad
			pipe.HSet(ctx, k, "__uri__", "{}", "__lru_time__", "1")
			g.m.BadKeys = append(g.m.BadKeys, k)
		}
	}
	if err := flush(); err != nil {
		return nil, fmt.Errorf("seed: write blocks: %w", err)
	}
	if err := g.files.close(); err != nil {
		return nil, err
	}
	if sp.Progress != nil {
		sp.Progress(total, total)
	}
	g.m.Blocks = total
	for _, l := range g.m.Locations {
		g.m.Counts[l.Kind]++
	}
	g.m.Counts["corrupt_uri"] = len(g.m.Corrupt)
	return g.m, nil
}

type gen struct {
	sp                  Spec
	rng                 *rand.Rand
	nfsRoot, sharedRoot string
	m                   *Manifest
	files               *fileWriter
}

func (g *gen) registry(ctx context.Context, rdb redis.UniversalClient) error {
	p := "kvcache_registry:" + g.sp.Cluster + ":"
	storages := map[string]any{
		StorageNFS:      fmt.Sprintf(`{"type":"file","is_available":true,"global_unique_name":%q,"storage_spec":{"root_path":%q,"key_count_per_file":1}}`, StorageNFS, g.nfsRoot),
		StorageShared:   fmt.Sprintf(`{"type":"file","is_available":true,"global_unique_name":%q,"storage_spec":{"root_path":%q,"key_count_per_file":8}}`, StorageShared, g.sharedRoot),
		StorageMooncake: fmt.Sprintf(`{"type":"mooncake","is_available":true,"global_unique_name":%q,"storage_spec":{"local_hostname":"h","metadata_connstring":"x","protocol":"tcp","rdma_device":"","master_server_entry":"m"}}`, StorageMooncake),
	}
	// The quota section repeats "storage_type" (string, then number) as KVCM writes it, and
	// max_key_count is 2^64-1.
	group := func(name, storeType, uri string) string {
		return fmt.Sprintf(`{"name":%q,"storage_candidates":[%q,%q],"global_quota_group_name":"q","max_instance_count":100,`+
			`"quota":{"capacity":1099511627776,"quota_config":[{"capacity":1,"storage_type":"file","storage_type":4}]},`+
			`"cache_config":{"reclaim_strategy":{"storage_unique_name":%q,"reclaim_policy":1,"trigger_strategy":{"used_size":0,"used_percentage":0.9},"trigger_period_seconds":60,"reclaim_step_size":0,"reclaim_step_percentage":10,"delay_before_delete_ms":1000},`+
			`"cache_prefer_strategy":0,"meta_indexer_config":{"max_key_count":18446744073709551615,"mutex_shard_num":16,"batch_key_size":16,`+
			`"meta_storage_backend_config":{"storage_type":%q,"storage_uri":%q},"meta_cache_policy_config":{"capacity":1024}}},"user_data":"","version":1}`,
			name, StorageNFS, StorageShared, StorageNFS, storeType, uri)
	}
	groups := map[string]any{
		GroupRedis: group(GroupRedis, "redis", g.sp.MetaURI),
		GroupLocal: group(GroupLocal, "local", "file:///var/kvcm/meta"),
	}
	info := func(id, grp string) string {
		return fmt.Sprintf(`{"quota_group_name":"q","instance_group_name":%q,"instance_id":%q,"block_size":16,"location_spec_infos":[{"name":"tp0","size":1024},{"name":"tp1","size":1024}],`+
			`"model_deployment":{"model_name":"m","dtype":"fp16","use_mla":false,"tp_size":2,"dp_size":1,"lora_name":"","pp_size":1,"extra":"","user_data":""},"location_spec_groups":[{"name":"g","spec_names":["tp0","tp1"]}]}`, grp, id)
	}
	pipe := rdb.Pipeline()
	pipe.Del(ctx, p+"storage", p+"instance_group", p+"instance")
	pipe.HSet(ctx, p+"storage", storages)
	pipe.HSet(ctx, p+"instance_group", groups)
	idx := map[string]any{}
	for _, id := range g.sp.Instances {
		idx[id] = id
		pipe.HSet(ctx, p+id, id, info(id, GroupRedis))
	}
	idx["local_inst"] = "local_inst"
	pipe.HSet(ctx, p+"local_inst", "local_inst", info("local_inst", GroupLocal))
	pipe.HSet(ctx, p+"instance", idx)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("seed: write registry: %w", err)
	}
	return nil
}

func (g *gen) blockKey(used map[int64]bool) int64 {
	for {
		k := int64(g.rng.Uint64())
		if !used[k] {
			used[k] = true
			return k
		}
	}
}

const idChars = "abcdefghijklmnopqrstuvwxyz0123456789"

func (g *gen) locID() string {
	var b [8]byte
	for i := range b {
		b[i] = idChars[g.rng.IntN(len(idChars))]
	}
	return string(b[:])
}

// pickKind draws the kind of one location.
func (g *gen) pickKind() string {
	x := g.rng.Float64()
	switch {
	case x < g.sp.GarbageFraction/2:
		return KindOrphanWriting
	case x < g.sp.GarbageFraction:
		if g.rng.IntN(10) == 0 {
			return KindSharedOrphan
		}
		return KindMissingServing
	case x < g.sp.GarbageFraction+g.sp.TrickyFraction:
		tricky := []string{KindYoungWriting, KindFutureWriting, KindSharedServing, KindUnknownType, KindMooncake, KindDeleting}
		return tricky[g.rng.IntN(len(tricky))]
	default:
		return KindLiveServing
	}
}

// block returns the hash fields of one block and records its locations.
func (g *gen) block(inst string, key int64) ([]any, error) {
	now := g.sp.Now
	// A small share of blocks is corrupt: KVCM cannot parse them, the GC must keep them.
	if g.sp.TrickyFraction > 0 && g.rng.Float64() < g.sp.TrickyFraction/20 {
		k := kvcm.BlockKey(inst, key)
		g.m.Corrupt = append(g.m.Corrupt, k)
		return []any{"__uri__", `{"abc":{"id":"abc","status":2,`, "__lru_time__", strconv.FormatInt(now.Add(-72*time.Hour).UnixMicro(), 10)}, nil
	}
	kinds := make([]string, g.sp.LocationsPerBlock)
	for i := range kinds {
		kinds[i] = g.pickKind()
	}
	// __lru_time__ is the last write of the block: old enough for orphans unless a location
	// needs a younger block.
	lru := now.Add(-g.sp.Grace - 2*time.Hour)
	youngBlock := false
	for _, k := range kinds {
		if k == KindYoungWriting {
			lru, youngBlock = now.Add(-g.sp.Grace+time.Hour), true
		}
	}
	var b strings.Builder
	b.WriteByte('{')
	hex := strconv.FormatUint(uint64(key), 16)
	for i, kind := range kinds {
		id := g.locID()
		loc := Loc{Instance: inst, Key: key, Location: id, Kind: kind}
		var status, typ int
		var uris []string
		extra := ""
		switch kind {
		case KindOrphanWriting, KindMissingServing, KindLiveServing, KindYoungWriting, KindFutureWriting, KindDeleting, KindUnknownType:
			status = map[string]int{KindOrphanWriting: 2, KindMissingServing: 3, KindLiveServing: 3, KindYoungWriting: 2,
				KindFutureWriting: 2, KindDeleting: 4, KindUnknownType: 3}[kind]
			typ = 4
			for s := 0; s < 2; s++ {
				name := fmt.Sprintf("%s/tp%d/%s_%s", inst, s, hex, id)
				path := g.nfsRoot + name
				// '&' in the query stays raw: KVCM's rapidjson does not escape it.
				uris = append(uris, fmt.Sprintf("file://%s%s?blkid=0&size=1024", StorageNFS, path))
				exists := kind != KindMissingServing && kind != KindUnknownType
				if kind == KindMissingServing && s == 0 {
					exists = true // one spec present, one missing: still garbage
				}
				if exists {
					loc.Files = append(loc.Files, path)
				}
			}
			// blkid=0 with key_count_per_file 1 is how KVCM writes a single-key file; the
			// collector treats any blkid as shared, so these use a separate, unshared form.
			for j := range uris {
				uris[j] = strings.Replace(uris[j], "?blkid=0&size=1024", "?size=1024", 1)
			}
			if kind == KindUnknownType {
				typ = 9
			}
			if kind == KindFutureWriting {
				extra = fmt.Sprintf(`,"create_time":%d`, now.Add(48*time.Hour).UnixMicro())
			}
		case KindSharedServing, KindSharedOrphan:
			status = 3
			if kind == KindSharedOrphan {
				status = 2
			}
			typ = 4
			path := fmt.Sprintf("%s%s/tp0/%s_%016x", g.sharedRoot, inst, hex, g.rng.Uint64())
			uris = []string{fmt.Sprintf("file://%s%s?blkid=%d&size=1024", StorageShared, path, g.rng.IntN(8))}
			loc.Files = []string{path} // exists for both: a shared file is never unlinked
		case KindMooncake:
			status, typ = 3, 2
			uris = []string{fmt.Sprintf("mooncake://%s/?key=%s/tp0/%s&size=1024", StorageMooncake, inst, hex)}
		}
		// In a block written recently, only create_time can prove an orphan old enough: the
		// block's __lru_time__ is a lower bound of every location's age.
		if (kind == KindOrphanWriting || kind == KindSharedOrphan) && (youngBlock || g.rng.IntN(2) == 0) {
			// A newer KVCM's create_time, older than the grace.
			extra = fmt.Sprintf(`,"create_time":%d`, now.Add(-g.sp.Grace-3*time.Hour).UnixMicro())
		}
		if g.rng.IntN(4) == 0 {
			extra += `,"x_future":{"a":[1,2,{"b":null}],"s":"<&>"}` // a member this GC does not know
		}
		loc.Garbage = kind == KindOrphanWriting || kind == KindMissingServing || kind == KindSharedOrphan
		if i > 0 {
			b.WriteByte(',')
		}
		specs := make([]string, len(uris))
		for s, u := range uris {
			uj, _ := json.Marshal(u)
			specs[s] = fmt.Sprintf(`{"name":"tp%d","uri":%s}`, s, strings.ReplaceAll(string(uj), `\u0026`, "&"))
		}
		fmt.Fprintf(&b, `%q:{"id":%q,"status":%d,"type":%d,"spec_size":%d,"location_specs":[%s]%s}`,
			id, id, status, typ, len(specs), strings.Join(specs, ","), extra)
		if !g.sp.NoFiles {
			for _, f := range loc.Files {
				if err := g.files.write(f); err != nil {
					return nil, err
				}
			}
		} else {
			loc.Files = nil
		}
		g.m.Locations = append(g.m.Locations, loc)
	}
	b.WriteByte('}')
	fields := []any{"__uri__", b.String(), "__lru_time__", strconv.FormatInt(lru.UnixMicro(), 10)}
	return fields, nil
}

// fileWriters is the number of goroutines creating data files. Creating a file is a few
// system calls that mostly wait on the file system; a few at once fill a small machine's
// cores while the generator builds the next blocks.
const fileWriters = 4

// fileWriter creates data files in the background; the first error is kept and returned by
// every later write and by close.
type fileWriter struct {
	paths chan string
	wg    sync.WaitGroup
	once  sync.Once

	mu   sync.Mutex
	err  error
	dirs map[string]bool // directories known to exist
}

func newFileWriter(n int) *fileWriter {
	w := &fileWriter{paths: make(chan string, 1024), dirs: map[string]bool{}}
	for range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for p := range w.paths {
				if w.failed() != nil {
					continue
				}
				if err := w.create(p); err != nil {
					w.mu.Lock()
					if w.err == nil {
						w.err = err
					}
					w.mu.Unlock()
				}
			}
		}()
	}
	return w
}

func (w *fileWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *fileWriter) write(path string) error {
	if err := w.failed(); err != nil {
		return err
	}
	w.paths <- path
	return nil
}

// close waits for every queued file; it may be called more than once.
func (w *fileWriter) close() error {
	w.once.Do(func() { close(w.paths) })
	w.wg.Wait()
	return w.failed()
}

func (w *fileWriter) create(path string) error {
	dir := filepath.Dir(path)
	w.mu.Lock()
	known := w.dirs[dir]
	w.mu.Unlock()
	if !known {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		w.mu.Lock()
		w.dirs[dir] = true
		w.mu.Unlock()
	}
	if err := os.WriteFile(path, []byte("kv"), 0o644); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}
