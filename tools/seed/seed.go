// Package seed writes a synthetic KVCM deployment into Redis in KVCM's exact format — registry
// (storages, groups, instances) and block hashes — with a known mix of garbage and live
// locations and real files under an NFS-like root, and returns a manifest of what is garbage
// so a collection run can be verified byte for byte.
//
// It writes either block layout (DESIGN §2): the location layout of today's KVCM, one hash
// field L#<location id> per location beside BP#prev_key and tier marks, or the legacy layout
// of KVCM f6aa2b2, one __uri__ map beside __lru_time__.
package seed

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Storage names the generated registry declares.
const (
	StorageNFS      = "nfs_01"     // file, key_count_per_file 1: files unlinked on delete
	StorageShared   = "nfs_shared" // file, key_count_per_file 8: files shared, never unlinked
	StorageMooncake = "mc_01"      // mooncake: no client here, always unknown
	// Location layout only (KVCM f6aa2b2 knows neither type).
	StorageDummy    = "dummy_01"    // dummy (type 6): no data at all
	StorageVineyard = "vineyard_01" // vineyard (type 7)

	GroupRedis = "group_redis"
	GroupLocal = "group_local" // on KVCM's in-process store: skipped by the GC
	// GroupCached (location layout only) is on KVCM's cached store: Redis is a write-behind
	// copy of KVCM's memory there, not the truth, so the GC must skip it although its
	// instance's keys sit in the same Redis and look like garbage.
	GroupCached = "group_cached"

	// InstanceLocal and InstanceCached are the instances of the skipped groups.
	InstanceLocal  = "local_inst"
	InstanceCached = "cached_inst"
)

// Spec describes the deployment to generate.
type Spec struct {
	Cluster string
	// Layout is the block layout written: kvcm.LayoutLocation (today's KVCM) or
	// kvcm.LayoutLegacy (KVCM f6aa2b2). The zero value writes the legacy layout, the only
	// one seed wrote before it knew two, so its callers keep their keyspace; the seed command
	// and the demo default to the location layout.
	Layout kvcm.Layout
	// Ambiguous, in the legacy layout, turns a few blocks into upgraded ones: today's KVCM
	// wrote an L# field beside the legacy __uri__ (DESIGN §8.9: nothing in them
	// may be judged or written). The location layout always has some.
	Ambiguous bool
	// NoUpgraded, in the location layout, writes no upgraded (ambiguous) blocks: their shapes
	// become plain blocks of the same locations. Which fields of such a key KVCM reads depends
	// on its version, so a keyspace that a KVCM of one version collects too (KVCM's own GC
	// beside kvcm-gc) leaves them out.
	NoUpgraded bool
	// Instances are the instance ids of the redis group (default inst0..inst2).
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
	// NoKVCMGC says the collector runs with kvcm_gc off. By default it is on, as kvcm-gc's
	// is, and leaves orphan WRITING of the location layout to KVCM's own GC until
	// KVCMGCAge: the seed's orphans there are older than that, and half its young writings
	// are past Grace but inside KVCMGCAge, live to a collector that defers to KVCM.
	NoKVCMGC bool
	// SpreadYoung spreads the ages of the young WRITING locations (and of the legacy blocks
	// that make theirs young) over the window in which they are live, from youngMargin to the
	// grace they ripen at, so that a run longer than youngMargin sees them ripen a few at a
	// time. By default each is an hour short of it, so all ripen together an hour after Now.
	SpreadYoung bool
	// Now is the reference time (default time.Now()).
	Now time.Time
	// Seed makes the keyspace reproducible.
	Seed uint64
	// NoFiles skips creating data files (benchmarks of metadata only).
	NoFiles bool
	// Progress, when set, is called with (blocks written, total).
	Progress func(done, total int)
	// SweepFiles adds, on storage nfs_01, data files named per block for the sweep of orphan
	// data files, orphans and files that look like orphans but must stay, and the blocks
	// that name some of them (sweep.go). SweepGrace is the sweep's grace (default 24h): the
	// files are dated twice it back, the young ones now.
	SweepFiles bool
	SweepGrace time.Duration
	// DeletingGrace is the collector's deleting_grace when it collects stuck DELETING
	// (collect_deleting); 0 when it does not, and every DELETING is someone else's, live.
	// When set, the seed adds blocks of stuck DELETING locations (stuck.go), DELETING for 12h
	// more than the grace, and keeps its own DELETING younger than it. Legacy layout, the age
	// is the block's __lru_time__; location layout, nothing in Redis tells it, so the caller
	// records each stuck one's first sight (Loc.DeletingSinceUs) in the collector's OBSERVED
	// bucket before its first round.
	DeletingGrace time.Duration
}

// KVCMGCAge is the age until which kvcm-gc, with its defaults (kvcm_gc on, kvcm_gc_grace
// 24h, kvcm_gc_margin 6h), leaves an orphan WRITING location of the location layout to
// KVCM's own GC.
const KVCMGCAge = 30 * time.Hour

// Kinds of generated locations (manifest).
const (
	KindOrphanWriting  = "orphan_writing"   // garbage
	KindMissingServing = "storage_missing"  // garbage
	KindLiveServing    = "live_serving"     // live, files exist
	KindYoungWriting   = "young_writing"    // live: WRITING just under the grace (or KVCMGCAge)
	KindFutureWriting  = "future_writing"   // live: create_time in the future
	KindSharedServing  = "shared_serving"   // live: shared file exists
	KindUnknownType    = "unknown_type"     // live: SERVING of a storage type kvcm-gc does not know, file missing
	KindMooncake       = "mooncake_serving" // live: probe unknown
	KindDeleting       = "deleting"         // live: someone else's DELETING, never touched
	KindSharedOrphan   = "shared_orphan"    // garbage: orphan WRITING on a shared file (file must stay)
	// KindRecentBlockWriting (legacy layout): live, a WRITING whose create_time is past the
	// grace in a block whose __lru_time__ is not: its age is the younger of the two.
	KindRecentBlockWriting = "recent_block_writing"

	// Location layout only.
	KindZeroCreateTime = "zero_create_time" // live: WRITING with create_time 0, data from before KVCM had it
	KindDummy          = "dummy_serving"    // live: SERVING of type 6 (dummy), no data
	KindVineyard       = "vineyard_serving" // live: SERVING of type 7 (vineyard), no data here
	KindEventReport    = "event_report"     // live: SERVING of an EventReport type (7 or 8), file missing
	// KindCopyTarget is a migration's copy target carrying migration_copy_guard (CopyGA): live,
	// although it is a WRITING past the orphan grace. KindCopySource is the location of the
	// same block its guard names: live, although a spec's file is missing (storage-missing).
	KindCopyTarget = "copy_target"
	KindCopySource = "copy_source"
	// KindAmbiguous is any location of a key holding both layouts (an upgraded block), in
	// __uri__ or in an L# field, whatever it looks like: live, as nothing in such a key may be
	// judged.
	KindAmbiguous = "ambiguous"
	// KindCachedStore is any location of the cached group's instance: live, although it
	// looks like garbage (orphan WRITING, SERVING with missing data).
	KindCachedStore = "cached_store"
)

// Loc is one generated location.
type Loc struct {
	Instance string `json:"instance"`
	Key      int64  `json:"key,string"`
	Location string `json:"location"`
	Kind     string `json:"kind"`
	Garbage  bool   `json:"garbage"`
	// Layout is its key's layout as the collector sees it: legacy, location or ambiguous.
	Layout string `json:"layout,omitempty"`
	// Field is the hash field holding it: __uri__ or L#<location>.
	Field string   `json:"field,omitempty"`
	Files []string `json:"files,omitempty"` // local paths of its data
	// SharedFile: its data is a file other blocks share, never unlinked, where its kind does
	// not say so (a shared orphan that a young legacy block makes recent_block_writing).
	SharedFile bool `json:"shared_file,omitempty"`
	// DataLeft (stuck DELETING): why its files must stay when the collector removes it (a
	// DataLeft* reason); "" when they go with it.
	DataLeft string `json:"data_left,omitempty"`
	// DeletingSinceUs (stuck DELETING): since when it is DELETING, µs since the epoch.
	DeletingSinceUs int64 `json:"deleting_since_us,omitempty"`
}

// FieldName is the hash field holding the location (__uri__ for manifests without fields).
func (l Loc) FieldName() string {
	if l.Field == "" {
		return kvcm.FieldURI
	}
	return l.Field
}

// Shared reports whether the location's files are shared with other blocks (never unlinked).
func (l Loc) Shared() bool {
	return l.SharedFile || l.Kind == KindSharedOrphan || l.Kind == KindSharedServing
}

// KeepsFiles reports whether the location's files must stay even when it is garbage: shared,
// or the data of a stuck DELETING that may be another block's now.
func (l Loc) KeepsFiles() bool { return l.Shared() || l.DataLeft != "" }

// LayoutCount is what the keys of one layout hold.
type LayoutCount struct {
	Keys      int `json:"keys"`
	Locations int `json:"locations"`
	Garbage   int `json:"garbage"`
	// AllGarbage keys lose every location: the collector leaves them in KVCM's "exists, no
	// location" form (empty_block: keep) or deletes them (delete).
	AllGarbage int `json:"all_garbage_keys"`
}

// Manifest is what was generated.
type Manifest struct {
	Cluster string `json:"cluster"`
	// Layout is the layout seeded (legacy or location); a few keys may hold both (Ambiguous).
	Layout    string   `json:"layout,omitempty"`
	Instances []string `json:"instances"`
	// Blocks counts the collected instances' block keys (the cached group's are in Skipped).
	Blocks    int   `json:"blocks"`
	Locations []Loc `json:"locations"`
	// Corrupt keys hold a __uri__, or an L# value, that is not valid JSON (kept).
	Corrupt []string `json:"corrupt_keys"`
	BadKeys []string `json:"bad_keys"` // keys that are not canonical block keys (kept)
	// Ambiguous keys hold both __uri__ and L# fields (kept byte for byte).
	Ambiguous []string `json:"ambiguous_keys,omitempty"`
	// Tombstones are keys with an empty-valued L# field, KVCM's tombstone (never touched).
	Tombstones []string `json:"tombstone_keys,omitempty"`
	// TierMarked keys carry __mig_tier_target__ and __mig_tier_deadline_ms__ (kept).
	TierMarked []string `json:"tier_marked_keys,omitempty"`
	// Layouts counts the collected instances' block keys by layout.
	Layouts map[string]LayoutCount `json:"layouts,omitempty"`
	// Skipped counts the block keys of groups the collector must skip, by group.
	Skipped map[string]LayoutCount `json:"skipped_groups,omitempty"`
	Counts  map[string]int         `json:"counts"`
	// SweepRoot is nfs_01's root, SweepFiles the files Spec.SweepFiles wrote there.
	SweepRoot  string      `json:"sweep_root,omitempty"`
	SweepFiles []SweepFile `json:"sweep_files,omitempty"`
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

// Tier-mark fields of the location layout (KVCM #209): a Mark steering the block's next write
// to another tier. kvcm-gc never writes them.
const (
	FieldTierTarget   = "__mig_tier_target__"
	FieldTierDeadline = "__mig_tier_deadline_ms__"
	// FieldLegacyPrevKey is the legacy layout's BP#prev_key.
	FieldLegacyPrevKey = "_prev_key_"
)

// Generate writes the deployment. Existing keys of the same names are overwritten.
func Generate(ctx context.Context, rdb redis.UniversalClient, sp Spec) (*Manifest, error) {
	if sp.Cluster == "" {
		return nil, errors.New("seed: cluster name is empty")
	}
	switch sp.Layout {
	case kvcm.LayoutNone:
		sp.Layout = kvcm.LayoutLegacy
	case kvcm.LayoutLegacy, kvcm.LayoutLocation:
	default:
		return nil, fmt.Errorf("seed: cannot write layout %s", sp.Layout)
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
	if sp.DeletingGrace > 0 && sp.DeletingGrace <= sp.Grace+2*time.Hour {
		// The legacy blocks holding the seed's own DELETING were last written grace + 2h ago
		// (so their orphans are old enough): with a shorter deleting grace they would be stuck.
		return nil, fmt.Errorf("seed: deleting grace %s: want more than the orphan grace + 2h (%s)", sp.DeletingGrace, sp.Grace+2*time.Hour)
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
	g := &gen{sp: sp, recounts: map[string]*kvcm.Recount{}, rng: rand.New(rand.NewPCG(sp.Seed, sp.Seed^0x9e3779b97f4a7c15)),
		// The draws of the options come from a stream of their own, so that a legacy
		// keyspace without them stays what it was for the same seed.
		extra:   rand.New(rand.NewPCG(sp.Seed^0x5bd1e9955bd1e995, sp.Seed)),
		spread:  rand.New(rand.NewPCG(sp.Seed^0x2545f4914f6cdd1d, sp.Seed+1)),
		nfsRoot: nfsRoot, sharedRoot: sharedRoot,
		m: &Manifest{Cluster: sp.Cluster, Layout: sp.Layout.String(), Instances: sp.Instances, Counts: map[string]int{},
			Layouts: map[string]LayoutCount{}}}
	if err := g.registry(ctx, rdb); err != nil {
		return nil, err
	}
	g.files = newFileWriter(fileWriters)
	// Every file exists when Generate returns, whatever the outcome.
	defer g.files.close()
	g.pipe = rdb.Pipeline()
	g.total = len(sp.Instances) * sp.Blocks
	for _, inst := range sp.Instances {
		var err error
		if sp.Layout == kvcm.LayoutLocation {
			err = g.locationInstance(ctx, inst)
		} else {
			err = g.legacyInstance(ctx, inst)
		}
		if err != nil {
			return nil, err
		}
	}
	if sp.Layout == kvcm.LayoutLocation {
		if err := g.cachedInstance(ctx); err != nil {
			return nil, err
		}
	}
	if sp.DeletingGrace > 0 {
		if err := g.stuckSetup(ctx); err != nil {
			return nil, err
		}
	}
	if sp.SweepFiles && !sp.NoFiles {
		if err := g.sweepSetup(ctx); err != nil {
			return nil, err
		}
	}
	g.metadata(ctx)
	if err := g.flush(ctx); err != nil {
		return nil, err
	}
	if err := g.files.close(); err != nil {
		return nil, err
	}
	if sp.Progress != nil {
		sp.Progress(g.total, g.total)
	}
	g.m.Blocks = len(sp.Instances)*sp.Blocks + g.extraBlocks // the collected instances' blocks
	for _, l := range g.m.Locations {
		g.m.Counts[l.Kind]++
	}
	g.m.Counts["corrupt_uri"] = len(g.m.Corrupt)
	return g.m, nil
}

type gen struct {
	sp                  Spec
	rng, extra          *rand.Rand
	spread              *rand.Rand // Spec.SpreadYoung's draws
	nfsRoot, sharedRoot string
	m                   *Manifest
	files               *fileWriter

	pipe        redis.Pipeliner
	done, total int
	extraBlocks int                      // blocks stuckSetup and sweepSetup added
	recounts    map[string]*kvcm.Recount // each instance's blocks, for its metadata hash
	young       int                      // KindYoungWriting locations of the location layout made so far
}

// youngMargin is, with Spec.SpreadYoung, how long after Now the first young WRITING ripens:
// the time to seed, snapshot and start a run.
const youngMargin = 15 * time.Minute

// youngAge returns the age of a young WRITING location (or legacy block) that stays live until
// it is ripe old and is at least from old: an hour short of ripe, or with Spec.SpreadYoung a
// draw between from and ripe - youngMargin.
func (g *gen) youngAge(from, ripe time.Duration) time.Duration {
	if !g.sp.SpreadYoung {
		return ripe - time.Hour
	}
	return from + time.Duration(g.spread.Int64N(max(int64(ripe-youngMargin-from), 1)))
}

// hset queues one block's fields and flushes every 512 blocks.
func (g *gen) hset(ctx context.Context, key string, fields []any) error {
	g.pipe.HSet(ctx, key, fields...)
	g.done++
	if g.pipe.Len() < 512 {
		return nil
	}
	if err := g.flush(ctx); err != nil {
		return err
	}
	if g.sp.Progress != nil {
		g.sp.Progress(min(g.done, g.total), g.total)
	}
	return nil
}

func (g *gen) flush(ctx context.Context) error {
	if g.pipe.Len() == 0 {
		return nil
	}
	if _, err := g.pipe.Exec(ctx); err != nil {
		return fmt.Errorf("seed: write blocks: %w", err)
	}
	return nil
}

// record adds a block's locations to the manifest and counts the key under its layout (or
// its skipped group), and queues its files.
func (g *gen) record(counts map[string]LayoutCount, class string, locs []Loc) error {
	c := counts[class]
	c.Keys++
	garbage := 0
	for i := range locs {
		if locs[i].Garbage {
			garbage++
		}
		if g.sp.NoFiles {
			locs[i].Files = nil
		}
		for _, f := range locs[i].Files {
			if err := g.files.write(f); err != nil {
				return err
			}
		}
	}
	c.Locations += len(locs)
	c.Garbage += garbage
	if garbage > 0 && garbage == len(locs) {
		c.AllGarbage++
	}
	counts[class] = c
	g.m.Locations = append(g.m.Locations, locs...)
	return nil
}

func (g *gen) registry(ctx context.Context, rdb redis.UniversalClient) error {
	p := "kvcache_registry:" + g.sp.Cluster + ":"
	location := g.sp.Layout == kvcm.LayoutLocation
	storages := map[string]any{
		StorageNFS:      fmt.Sprintf(`{"type":"file","is_available":true,"global_unique_name":%q,"storage_spec":{"root_path":%q,"key_count_per_file":1}}`, StorageNFS, g.nfsRoot),
		StorageShared:   fmt.Sprintf(`{"type":"file","is_available":true,"global_unique_name":%q,"storage_spec":{"root_path":%q,"key_count_per_file":8}}`, StorageShared, g.sharedRoot),
		StorageMooncake: fmt.Sprintf(`{"type":"mooncake","is_available":true,"global_unique_name":%q,"storage_spec":{"local_hostname":"h","metadata_connstring":"x","protocol":"tcp","rdma_device":"","master_server_entry":"m"}}`, StorageMooncake),
	}
	if location {
		storages[StorageDummy] = fmt.Sprintf(`{"type":"dummy","is_available":true,"global_unique_name":%q,"storage_spec":{}}`, StorageDummy)
		storages[StorageVineyard] = fmt.Sprintf(`{"type":"vineyard","is_available":true,"global_unique_name":%q,"storage_spec":{}}`, StorageVineyard)
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
	if location {
		// cached mode takes its persistent side from a parameter of the same URI.
		groups[GroupCached] = group(GroupCached, "cached", withParam(g.sp.MetaURI, "persistent_type=redis"))
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
	idx[InstanceLocal] = InstanceLocal
	pipe.HSet(ctx, p+InstanceLocal, InstanceLocal, info(InstanceLocal, GroupLocal))
	if location {
		idx[InstanceCached] = InstanceCached
		pipe.HSet(ctx, p+InstanceCached, InstanceCached, info(InstanceCached, GroupCached))
	}
	pipe.HSet(ctx, p+"instance", idx)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("seed: write registry: %w", err)
	}
	return nil
}

// withParam adds a query parameter to a KVCM-style URI.
func withParam(uri, param string) string {
	if strings.Contains(uri, "?") {
		return uri + "&" + param
	}
	return uri + "?" + param
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

// unknownType is a storage type number no KVCM uses (today's end at pace_ssd, 9).
const unknownType = 200

const idChars = "abcdefghijklmnopqrstuvwxyz0123456789"

// locID draws a location id as KVCM's GenerateRandomString(8) makes them.
func (g *gen) locID() string {
	var b [8]byte
	for i := range b {
		b[i] = idChars[g.rng.IntN(len(idChars))]
	}
	return string(b[:])
}

// pickKind draws the kind of one location among the garbage kinds and the tricky live ones.
func (g *gen) pickKind(tricky []string) string {
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
		return tricky[g.rng.IntN(len(tricky))]
	default:
		return KindLiveServing
	}
}

// isGarbage reports whether a location of kind, in a key the collector judges, is garbage.
func isGarbage(kind string) bool {
	return kind == KindOrphanWriting || kind == KindMissingServing || kind == KindSharedOrphan || kind == KindStuckDeleting
}

func us(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }
