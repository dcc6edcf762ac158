package faults

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// UpstreamGC plays KVCM's own in-process garbage collector (manager/cache_garbage_collector.cc,
// on by default in KVCM's shipped configuration since #244/#345) and the delete executor it
// submits to (SchedulePlanExecutor), on one metadata Redis, so that kvcm-gc can be run beside
// it over the same keyspace and the same garbage.
//
// Each tick it scans one batch of one instance, round-robin (SCAN MATCH of the instance's
// keys, COUNT ScanBatch, then the keys whole), judges it by upstream's rules, in upstream's
// order (CandidatePriority: orphan_writing, then storage_missing), and submits at most one
// delete request of at most ScanBatch targets, with at most MaxInflight requests in flight and
// the locations of those skipped. A request runs upstream's five steps for each target:
//
//  1. re-read the location from Redis (the persistent store: authoritative_read);
//  2. skip it when it is DELETING, or when its bytes differ from what the scan read (KVCM
//     compares its re-serialization of the value; KVCM wrote these bytes, so they are it);
//  3. CAS it to DELETING (only its status token changes);
//  4. re-read, keep it only when it is still that DELETING, and physically delete every spec
//     URI but the ones the probe confirmed missing, "not found" counting as success (#320);
//  5. CAD: remove it (expecting those DELETING bytes), then DEL the key when no non-empty
//     location field is left (KVCM's empty-key recycle).
//
// How it writes (Writes):
//
//   - WritesAtomic (the default): where KVCM reads and then writes under a lock of its own
//     process, the emulator's read and write of a step are one Redis transaction (WATCH,
//     MULTI), retried from the read when another writer of the key comes between (as KVCM's
//     read would simply have come later): a race it loses is a counted no-op, and each
//     removal is checkable;
//   - WritesKVCM: as KVCM writes (kvcm-upstream.md fact 10h). A status write reads the
//     location (HMGET; legacy: the __uri__ map), compares KVCM's re-serializations of it and
//     of the expected value, and writes KVCM's re-serialization of the changed copy
//     (kvcm.ReencodeLocation: unknown members dropped, members in KVCM's order; legacy: the
//     whole map, kvcm.ReencodeLegacyBlock) with a blind HSET, no MULTI, WATCH or script,
//     WriteWindow after the read at most. So a write can land after another process removed
//     the location, and bring it back (a field resurrected, or a key re-created with that
//     one field). The CAD reads, checks the status is DELETING, and HDELs: it subtracts the
//     location's bytes from its usage whatever the HDEL found, as KVCM's
//     BatchCADLocationStatus does.
//
// With Counters, it keeps each instance's key count and usage as KVCM's leader does (§13 of
// the design; kvcm-upstream.md facts 10 to 10c): restored from the metadata hash when it
// starts, lowered by its own CADs (clamped at 0) and empty-key recycles (also for a key gone
// already), never raised by a status write that re-creates a key, and persisted with DEL and
// HSET every PersistInterval and when it stops.
//
// Layouts: in the location layout it is today's KVCM (one L#<id> field per location). In the
// legacy layout it is the same collector over KVCM f6aa2b2's writes: every CAS and CAD
// rewrites the whole __uri__ and __lru_time__ (µs, now), and a CAD that empties the map DELs
// the key; f6aa2b2 reads no create_time (it drops the member), so there it finds no orphan
// WRITING at all, only storage-missing SERVING.
//
// Like KVCM, it never touches a location that is not WRITING or SERVING, one with a valid
// migration_copy_guard or named as the source of one, nor a key holding a location it cannot
// decode (KVCM's whole-key read fails there, EC_CORRUPTION), and it reads only its layout's
// fields. Unlike KVCM it skips a location kvcm.DecodeLocation calls bad (kvcm-gc's decoder is
// stricter than rapidjson): it plays a collector that keeps what it cannot read exactly.
type UpstreamGC struct {
	cfg UpstreamConfig

	mu      sync.Mutex
	stats   UpstreamStats
	removed map[UpstreamRef]int
	// marked counts, per location, the CAS writes that set it DELETING.
	marked  map[UpstreamRef]int
	touched map[string]bool
	pending map[UpstreamRef]bool
	errs    []error
	// resurrected counts, per location, the writes that brought it back after another
	// process removed it (WritesKVCM).
	resurrected map[UpstreamRef]int
	// counters are KVCM's counters by instance (Counters).
	counters map[string]*UpstreamCounters
	rng      *rand.Rand

	inflight sync.WaitGroup
	slots    chan struct{}
	ran      bool
}

// UpstreamConfig configures an UpstreamGC. Zero durations and sizes take KVCM's defaults
// (kvcm.cache_gc.* of its shipped configuration).
type UpstreamConfig struct {
	// Store is the metadata Redis (the Redis of the instances' group).
	Store redis.UniversalClient
	// Layout is kvcm.LayoutLocation (today's KVCM) or kvcm.LayoutLegacy.
	Layout kvcm.Layout
	// Instances are visited round-robin, each round. KVCM visits the instances its registry
	// lists in groups whose metadata store is this Redis (in a cached store, it scans its own
	// memory: that is not Redis, so such instances do not belong here).
	Instances []string
	// Storages are the storages KVCM's DataStorageManager holds, by global unique name.
	Storages map[string]UpstreamStorage
	// ScanInterval is the tick (scan_interval_ms, 100 ms).
	ScanInterval time.Duration
	// ScanBatch is the keys scanned per tick, and the targets per request (scan_batch_size, 256).
	ScanBatch int
	// MaxInflight caps the delete requests in flight (max_inflight_delete_requests, 64).
	MaxInflight int
	// OrphanGrace is orphan_writing_grace_period_ms (24 h; KVCM refuses less than 1 h).
	OrphanGrace time.Duration
	// RoundPause is the pause after a full round (round_pause_ms, 5 min).
	RoundPause time.Duration
	// DeleteDelay is the executor's wait between the CAS and the physical delete (step 5 of
	// PrepareDeleteTaskImpl). KVCM's GC submits with none; its reclaimer waits the group's
	// delay_before_delete_ms, and a busy executor queue or a slow Sync waits too.
	DeleteDelay time.Duration
	// DeleteDelayMax, when above DeleteDelay, makes each request wait a draw between the two:
	// an executor busy at some moments and idle at others.
	DeleteDelayMax time.Duration
	// Now is the wall clock (µs create_time are compared with it); time.Now when nil.
	Now func() time.Time
	// Writes is how a step's read and write reach Redis: WritesAtomic or WritesKVCM.
	Writes UpstreamWrites
	// WriteWindow (WritesKVCM) is the longest time between a write's read and its write,
	// drawn per write: the window KVCM leaves to other processes. 0: none but the round trip.
	WriteWindow time.Duration
	// Seed seeds the draws of WriteWindow.
	Seed uint64
	// Counters keeps KVCM's counters of each instance (see UpstreamGC).
	Counters bool
	// PersistInterval is how often the counters are persisted
	// (persist_metadata_interval_time_ms, 1 s).
	PersistInterval time.Duration
	// Hook, when set, is called at each point of a delete where KVCM leaves other processes
	// a window (UpstreamPoint), with the block key, and the emulator waits for it to return:
	// a test stages a race there, deterministically, by acting on the key meanwhile.
	Hook func(ctx context.Context, at UpstreamPoint, key string)
}

// UpstreamPoint is a point of the emulator's delete where a Hook runs.
type UpstreamPoint uint8

const (
	// BeforeCASWrite (WritesKVCM): the targets of the key read and judged unchanged, their
	// DELETING copy not yet written (KVCM's read → re-serialize → blind HSET window).
	BeforeCASWrite UpstreamPoint = iota + 1
	// AfterCAS: the targets marked DELETING, their data not yet deleted (the executor's
	// delay before the physical delete).
	AfterCAS
	// BeforeCADWrite (WritesKVCM): the targets read DELETING for the CAD, their HDEL (legacy:
	// the map without them) not yet sent.
	BeforeCADWrite
)

// hook runs cfg.Hook at point at of key, if set.
func (u *UpstreamGC) hook(ctx context.Context, at UpstreamPoint, key string) {
	if u.cfg.Hook != nil {
		u.cfg.Hook(ctx, at, key)
	}
}

// UpstreamWrites says how the emulator writes Redis.
type UpstreamWrites uint8

const (
	// WritesAtomic reads and writes each step in one transaction.
	WritesAtomic UpstreamWrites = iota
	// WritesKVCM writes as KVCM does: read, re-serialize, blind write.
	WritesKVCM
)

// UpstreamCounters are KVCM's counters of one instance as the emulator keeps them.
type UpstreamCounters struct {
	Keys  int64
	Usage map[kvcm.StorageType]uint64
	// OverSubtracted is the bytes its CADs subtracted for locations another process removed
	// between the CAD's read and its HDEL, by slot: KVCM subtracts them all the same.
	OverSubtracted map[kvcm.StorageType]uint64
	// Recreated counts the keys its status writes re-created (counted +0, as KVCM does);
	// RecycledGone the recycles whose DEL found the key gone (counted −1 all the same).
	Recreated, RecycledGone int64
}

func (c *UpstreamCounters) clone() UpstreamCounters {
	out := *c
	out.Usage, out.OverSubtracted = maps.Clone(c.Usage), maps.Clone(c.OverSubtracted)
	return out
}

// UpstreamStorage is one storage of KVCM's as the emulator's DataStorageManager sees it.
type UpstreamStorage struct {
	Type kvcm.StorageType
	// Files: KVCM's backend for it can look at and delete the files the spec URIs' paths name
	// (as its HF3FS backend does: MightExist is a stat, Delete a remove of the path, shared or
	// not). Otherwise every URI might exist and a delete does nothing, as KVCM's NFS backend
	// does today (nfs_backend.cc: Delete is a no-op returning OK).
	Files bool
}

// UpstreamRef names one location: its block key and location id.
type UpstreamRef struct {
	Key string
	ID  string
}

// UpstreamStats counts what the emulator did.
type UpstreamStats struct {
	Rounds, Ticks int
	// Candidates counts the locations judged garbage, by reason (orphan_writing,
	// storage_missing), before the pending and budget filters.
	Candidates map[string]int
	Requests   int // delete requests submitted
	// CAS counts the locations set DELETING; CASLost those found changed, DELETING or gone
	// at steps 1 to 3 (a no-op).
	CAS, CASLost int
	// Removed counts the locations removed by a CAD; CADLost those found changed or gone at
	// steps 4 and 5 (a no-op: someone else finished it).
	Removed, CADLost int
	// Unlinked, UnlinkAbsent, UnlinkErrors count the physical deletes of files: done, found
	// absent already (success, #320), failed.
	Unlinked, UnlinkAbsent, UnlinkErrors int
	// SkippedMissing counts the spec URIs not deleted because the probe confirmed them missing.
	SkippedMissing int
	// KeysRecycled counts the keys DEL'd when their last location went.
	KeysRecycled int
	// ScanErrors counts failed scans (an instance is left for the round after 3 in a row).
	ScanErrors int
	// Resurrected counts the locations a blind write brought back after another process
	// removed them; Recreated the keys such a write re-created (WritesKVCM).
	Resurrected, Recreated int
	// Persists counts the writes of the counters to the metadata hashes (Counters).
	Persists int
}

// Upstream candidate reasons, KVCM's names.
const (
	upstreamOrphanWriting  = "orphan_writing"
	upstreamStorageMissing = "storage_missing"
)

// NewUpstreamGC checks cfg and applies KVCM's defaults.
func NewUpstreamGC(cfg UpstreamConfig) (*UpstreamGC, error) {
	if cfg.Store == nil {
		return nil, errors.New("upstream gc: no store")
	}
	if cfg.Layout != kvcm.LayoutLocation && cfg.Layout != kvcm.LayoutLegacy {
		return nil, fmt.Errorf("upstream gc: layout %s: want location or legacy", cfg.Layout)
	}
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = 100 * time.Millisecond
	}
	if cfg.ScanBatch <= 0 {
		cfg.ScanBatch = 256
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 64
	}
	if cfg.OrphanGrace == 0 {
		cfg.OrphanGrace = 24 * time.Hour
	}
	if cfg.OrphanGrace < time.Hour {
		return nil, fmt.Errorf("upstream gc: orphan grace %s below KVCM's minimum of 1h", cfg.OrphanGrace)
	}
	if cfg.RoundPause < 0 {
		return nil, fmt.Errorf("upstream gc: negative round pause %s", cfg.RoundPause)
	}
	if cfg.RoundPause == 0 {
		cfg.RoundPause = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Writes > WritesKVCM {
		return nil, fmt.Errorf("upstream gc: writes %d: want WritesAtomic or WritesKVCM", cfg.Writes)
	}
	if cfg.WriteWindow < 0 {
		return nil, fmt.Errorf("upstream gc: negative write window %s", cfg.WriteWindow)
	}
	if cfg.PersistInterval <= 0 {
		cfg.PersistInterval = time.Second
	}
	cfg.Instances = slices.Clone(cfg.Instances)
	slices.Sort(cfg.Instances) // KVCM sorts its snapshot by (group, instance)
	return &UpstreamGC{cfg: cfg, removed: map[UpstreamRef]int{}, marked: map[UpstreamRef]int{}, touched: map[string]bool{}, pending: map[UpstreamRef]bool{},
		resurrected: map[UpstreamRef]int{}, stats: UpstreamStats{Candidates: map[string]int{}}, slots: make(chan struct{}, cfg.MaxInflight),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x6b76636d))}, nil
}

// Run collects until ctx ends, round after round, then waits for its delete requests in
// flight (as KVCM's executor finishes accepted requests after its GC stops) and returns. A
// Redis error is counted and retried on a later tick, never returned; Err reports the
// emulator's own failures (a write it could not make sense of).
func (u *UpstreamGC) Run(ctx context.Context) {
	u.mu.Lock()
	if u.ran {
		u.mu.Unlock()
		panic("upstream gc: Run called twice")
	}
	u.ran = true
	u.mu.Unlock()
	if err := u.restoreCounters(ctx); err != nil {
		u.fail(err)
		return
	}
	stopPersist := u.persistLoop(ctx)
	defer stopPersist()
	defer u.inflight.Wait()
	for ctx.Err() == nil {
		if !u.round(ctx) {
			return
		}
		u.mu.Lock()
		u.stats.Rounds++
		u.mu.Unlock()
		if !pause(ctx, u.cfg.RoundPause) {
			return
		}
	}
}

// RunRounds runs n rounds, waits for every request they submitted, and returns: a
// synchronous form for tests. It fails when ctx ends first.
func (u *UpstreamGC) RunRounds(ctx context.Context, n int) error {
	if err := u.restoreCounters(ctx); err != nil {
		return err
	}
	stopPersist := u.persistLoop(ctx)
	defer stopPersist()
	defer u.inflight.Wait()
	for range n {
		if !u.round(ctx) {
			return ctx.Err()
		}
		u.mu.Lock()
		u.stats.Rounds++
		u.mu.Unlock()
	}
	return nil
}

// Stats returns the counts so far.
func (u *UpstreamGC) Stats() UpstreamStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.stats
	s.Candidates = maps.Clone(u.stats.Candidates)
	return s
}

// DeletesFiles reports whether any of the emulator's storages deletes the files it removes
// locations of (Files); KVCM's NFS backend deletes none.
func (u *UpstreamGC) DeletesFiles() bool {
	for _, st := range u.cfg.Storages {
		if st.Files {
			return true
		}
	}
	return false
}

// Resurrected returns how many times a blind write of the emulator brought each location
// back after another process had removed it (WritesKVCM).
func (u *UpstreamGC) Resurrected() map[UpstreamRef]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.resurrected)
}

// Counters returns KVCM's counters of each instance as the emulator keeps them (Counters).
func (u *UpstreamGC) Counters() map[string]UpstreamCounters {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]UpstreamCounters, len(u.counters))
	for inst, c := range u.counters {
		out[inst] = c.clone()
	}
	return out
}

// Removed returns how many times each location was removed by the emulator's CAD (1 at
// most, unless something re-created it).
func (u *UpstreamGC) Removed() map[UpstreamRef]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.removed)
}

// Marked returns how many times each location was set DELETING by the emulator's CAS.
func (u *UpstreamGC) Marked() map[UpstreamRef]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.marked)
}

// mark records the locations a CAS set DELETING; u.mu held.
func (u *UpstreamGC) mark(ts []markedTarget) {
	for _, m := range ts {
		u.marked[m.ref]++
	}
}

// Touched returns the legacy keys whose __lru_time__ the emulator rewrote, or sent a rewrite
// of (touching): the age kvcm-gc gives their WRITING and DELETING locations (the later of
// create_time and __lru_time__) may be young from then on.
func (u *UpstreamGC) Touched() map[string]bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.touched)
}

// Err reports the emulator's own failures, nil when there were none.
func (u *UpstreamGC) Err() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return errors.Join(u.errs...)
}

func (u *UpstreamGC) fail(err error) {
	u.mu.Lock()
	u.errs = append(u.errs, err)
	u.mu.Unlock()
}

// restoreCounters reads each instance's metadata hash as RecoverMetaData does: an absent
// hash is all zero, anything KVCM's recovery refuses fails the emulator.
func (u *UpstreamGC) restoreCounters(ctx context.Context) error {
	if !u.cfg.Counters {
		return nil
	}
	counters := map[string]*UpstreamCounters{}
	for _, inst := range u.cfg.Instances {
		c := &UpstreamCounters{Usage: map[kvcm.StorageType]uint64{}, OverSubtracted: map[kvcm.StorageType]uint64{}}
		h, err := u.cfg.Store.HGetAll(ctx, kvcm.MetadataKey(inst)).Result()
		if err != nil {
			return fmt.Errorf("upstream gc: restore counters of %s: %w", inst, err)
		}
		if len(h) > 0 {
			if c.Keys, err = kvcm.ParseKeyCount(h[kvcm.FieldKeyCount]); err != nil {
				return fmt.Errorf("upstream gc: restore counters of %s: %w", inst, err)
			}
		}
		if raw, ok := h[kvcm.FieldStorageUsage]; ok {
			usage, err := kvcm.DecodeStorageUsage([]byte(raw))
			if err != nil {
				return fmt.Errorf("upstream gc: restore counters of %s: %w", inst, err)
			}
			for _, m := range usage.Members {
				if !m.Known {
					return fmt.Errorf("upstream gc: restore counters of %s: unrecognized storage type %q", inst, m.Name)
				}
				c.Usage[m.Slot] = m.Value
			}
		}
		counters[inst] = c
	}
	u.mu.Lock()
	u.counters = counters
	u.mu.Unlock()
	return nil
}

// persistLoop persists the counters every PersistInterval until the returned stop, which
// persists them once more (as ~MetaIndexer does) and waits.
func (u *UpstreamGC) persistLoop(ctx context.Context) (stop func()) {
	if !u.cfg.Counters {
		return func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick(pctx, u.cfg.PersistInterval, func() { u.persist(pctx) })
	}()
	return func() {
		cancel()
		<-done
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer fcancel()
		u.persist(fctx)
	}
}

// persist writes every instance's counters as PersistMetaData does: DEL, then HSET of both
// fields (the legacy layout's KVCM: the key count only), in a pipeline without MULTI.
func (u *UpstreamGC) persist(ctx context.Context) {
	cs := u.Counters()
	pipe := u.cfg.Store.Pipeline()
	for _, inst := range slices.Sorted(maps.Keys(cs)) {
		c := cs[inst]
		key := kvcm.MetadataKey(inst)
		pipe.Del(ctx, key)
		if u.cfg.Layout == kvcm.LayoutLegacy {
			pipe.HSet(ctx, key, kvcm.FieldKeyCount, strconv.FormatInt(c.Keys, 10))
			continue
		}
		pipe.HSet(ctx, key, kvcm.FieldKeyCount, strconv.FormatInt(c.Keys, 10),
			kvcm.FieldStorageUsage, string(kvcm.FormatStorageUsage(kvcm.UsageMembersCurrent, c.Usage)))
	}
	if _, err := pipe.Exec(ctx); err == nil {
		u.count(func(st *UpstreamStats) { st.Persists++ })
	}
}

// instanceOf is the instance a block key of the emulator's belongs to.
func (u *UpstreamGC) instanceOf(key string) string {
	id, _ := kvcm.OwnerOf(key, func(id string) bool { return slices.Contains(u.cfg.Instances, id) })
	return id
}

// subtract lowers the counters of key's instance for a CAD of l (SubStorageUsageByType,
// clamped at 0); gone says the HDEL found it removed already.
func (u *UpstreamGC) subtract(key string, l *kvcm.Location, gone bool) {
	if !u.cfg.Counters || u.cfg.Layout == kvcm.LayoutLegacy {
		return // f6aa2b2 kept its usage in memory only: nothing of it is persisted
	}
	lu := kvcm.UsageOf(l)
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.counters[u.instanceOf(key)]
	if c == nil || lu.Slot > kvcm.MaxUsageSlot {
		return
	}
	c.Usage[lu.Slot] -= min(c.Usage[lu.Slot], lu.Bytes)
	if gone {
		c.OverSubtracted[lu.Slot] += lu.Bytes
	}
}

// recycled lowers key's instance's key count for a DEL of the recycle; gone: it found none.
func (u *UpstreamGC) recycled(key string, gone bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stats.KeysRecycled++
	if c := u.counters[u.instanceOf(key)]; c != nil {
		c.Keys = max(c.Keys-1, 0)
		if gone {
			c.RecycledGone++
		}
	}
}

// deleteDelay is the wait between a request's CAS and its physical delete.
func (u *UpstreamGC) deleteDelay() time.Duration {
	if u.cfg.DeleteDelayMax <= u.cfg.DeleteDelay {
		return u.cfg.DeleteDelay
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cfg.DeleteDelay + time.Duration(u.rng.Int64N(int64(u.cfg.DeleteDelayMax-u.cfg.DeleteDelay)+1))
}

// window waits a draw of WriteWindow: KVCM's time between a read and its write.
func (u *UpstreamGC) window(ctx context.Context) {
	if u.cfg.WriteWindow <= 0 {
		return
	}
	u.mu.Lock()
	d := time.Duration(u.rng.Int64N(int64(u.cfg.WriteWindow) + 1))
	u.mu.Unlock()
	pause(ctx, d)
}

// pause waits d or until ctx ends; false when ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// scanEntry is one instance's walk in a round.
type scanEntry struct {
	instance string
	cursor   uint64
	done     bool
	failures int
}

// round walks every instance once, a batch per tick, moving to the next instance after each
// batch (AdvanceInstance). false when ctx ended.
func (u *UpstreamGC) round(ctx context.Context) bool {
	entries := make([]*scanEntry, len(u.cfg.Instances))
	for i, inst := range u.cfg.Instances {
		entries[i] = &scanEntry{instance: inst}
	}
	next := 0
	for {
		open := 0
		for _, e := range entries {
			if !e.done {
				open++
			}
		}
		if open == 0 {
			return true
		}
		for entries[next].done {
			next = (next + 1) % len(entries)
		}
		if !pause(ctx, u.cfg.ScanInterval) {
			return false
		}
		u.mu.Lock()
		u.stats.Ticks++
		u.mu.Unlock()
		if len(u.slots) == cap(u.slots) {
			continue // a full window: nothing scanned this tick
		}
		u.tick(ctx, entries[next])
		next = (next + 1) % len(entries)
	}
}

// upstreamTarget is one location of a delete request.
type upstreamTarget struct {
	ref      UpstreamRef
	reason   string
	expected []byte          // the location's bytes as scanned
	missing  map[string]bool // spec URIs the probe confirmed missing
}

// tick scans one batch of e, judges it and submits its targets.
func (u *UpstreamGC) tick(ctx context.Context, e *scanEntry) {
	rdb := u.cfg.Store
	keys, cursor, err := rdb.Scan(ctx, e.cursor, kvcm.ScanPattern(e.instance), int64(u.cfg.ScanBatch)).Result()
	if err != nil {
		u.scanFailed(e)
		return
	}
	pipe := rdb.Pipeline()
	reads := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		reads[i] = pipe.HGetAll(ctx, k)
	}
	if len(keys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			u.scanFailed(e)
			return
		}
	}
	e.failures = 0
	e.cursor = cursor
	if cursor == 0 {
		e.done = true
	}
	var cands []upstreamTarget
	for i, k := range keys {
		if _, err := kvcm.ParseBlockKey(e.instance, k); err != nil {
			continue
		}
		cands = append(cands, u.judge(k, reads[i].Val())...)
	}
	// CandidatePriority, then the key.
	prio := map[string]int{upstreamOrphanWriting: 0, upstreamStorageMissing: 1}
	slices.SortStableFunc(cands, func(a, b upstreamTarget) int {
		if d := prio[a.reason] - prio[b.reason]; d != 0 {
			return d
		}
		if a.ref.Key != b.ref.Key {
			if a.ref.Key < b.ref.Key {
				return -1
			}
			return 1
		}
		if a.ref.ID < b.ref.ID {
			return -1
		}
		if a.ref.ID > b.ref.ID {
			return 1
		}
		return 0
	})
	u.mu.Lock()
	var req []upstreamTarget
	for _, c := range cands {
		u.stats.Candidates[c.reason]++
		if u.pending[c.ref] || len(req) >= u.cfg.ScanBatch {
			continue
		}
		u.pending[c.ref] = true
		req = append(req, c)
	}
	if len(req) > 0 {
		u.stats.Requests++
	}
	u.mu.Unlock()
	if len(req) == 0 {
		return
	}
	u.slots <- struct{}{}
	u.inflight.Add(1)
	go func() {
		defer u.inflight.Done()
		defer func() { <-u.slots }()
		// Accepted requests finish even after the GC stops (KVCM's executor does not cancel
		// them), bounded so a dead Redis cannot hold the caller for ever.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		u.execute(rctx, req)
		u.mu.Lock()
		for _, t := range req {
			delete(u.pending, t.ref)
		}
		u.mu.Unlock()
	}()
}

func (u *UpstreamGC) scanFailed(e *scanEntry) {
	u.mu.Lock()
	u.stats.ScanErrors++
	u.mu.Unlock()
	e.failures++
	if e.failures >= 3 {
		e.done = true // the rest of this instance waits for the next round
	}
}

// decoded is one location of a key as upstream's scan reads it.
type decoded struct {
	loc kvcm.Location
	raw []byte
}

// readLocations decodes the locations of a key in the emulator's layout; ok is false when
// KVCM's whole-key read of it fails (a location that does not decode, an invalid guard).
func (u *UpstreamGC) readLocations(fields map[string]string) ([]decoded, bool) {
	var out []decoded
	if u.cfg.Layout == kvcm.LayoutLegacy {
		v, ok := fields[kvcm.FieldURI]
		if !ok || v == "" {
			return nil, true
		}
		blk, err := kvcm.DecodeBlock([]byte(v))
		if err != nil {
			return nil, false // BatchGetLocation: an empty map
		}
		for _, l := range blk.Locations {
			if l.Guard != nil && !l.Guard.Valid {
				return nil, false
			}
			out = append(out, decoded{loc: l, raw: l.Raw})
		}
		return out, true
	}
	for f, v := range fields {
		id, ok := kvcm.LocationID(f)
		if !ok || v == "" {
			continue // not a location, or KVCM's tombstone
		}
		l, err := kvcm.DecodeLocation(id, []byte(v))
		if err != nil || l.Guard != nil && !l.Guard.Valid {
			return nil, false
		}
		out = append(out, decoded{loc: l, raw: []byte(v)})
	}
	return out, true
}

// judge applies upstream's rules to the key's locations (BuildDeleteActions).
func (u *UpstreamGC) judge(key string, fields map[string]string) []upstreamTarget {
	locs, ok := u.readLocations(fields)
	if !ok {
		return nil
	}
	all := make([]kvcm.Location, len(locs))
	for i := range locs {
		all[i] = locs[i].loc
	}
	sources, _ := kvcm.CopySources(all)
	now := u.cfg.Now()
	var out []upstreamTarget
	for _, d := range locs {
		l := d.loc
		if l.Err != nil || l.ID == "" || l.Guard != nil || sources[l.ID] {
			continue
		}
		ref := UpstreamRef{Key: key, ID: l.ID}
		switch l.Status {
		case kvcm.StatusWriting:
			if u.cfg.Layout == kvcm.LayoutLegacy {
				continue // f6aa2b2's decoder drops create_time: every age is 0, never collected
			}
			ct := l.CreateTimeUs
			if !l.HasCreateTime || ct <= 0 || now.UnixMicro() < ct || time.Duration(now.UnixMicro()-ct)*time.Microsecond < u.cfg.OrphanGrace {
				continue
			}
			out = append(out, upstreamTarget{ref: ref, reason: upstreamOrphanWriting, expected: d.raw})
		case kvcm.StatusServing:
			if missing := u.missing(l); len(missing) > 0 {
				out = append(out, upstreamTarget{ref: ref, reason: upstreamStorageMissing, expected: d.raw, missing: missing})
			}
		}
	}
	return out
}

// knownType is a type of today's KVCM (below DataStorageType::COUNT), not unknown.
func knownType(t kvcm.StorageType) bool { return t > kvcm.TypeUnknown && t <= kvcm.TypePaceSSD }

// missing is the storage-missing rule: the spec URIs a storage of the location's type
// definitively misses (none: not a candidate). KVCM groups the URIs by (host, type), drops a
// group whose storage is not registered or of another type, and asks MightExist.
func (u *UpstreamGC) missing(l kvcm.Location) map[string]bool {
	if !knownType(l.Type) || l.Type.EventReport() || len(l.Specs) == 0 {
		return nil
	}
	var out map[string]bool
	for _, s := range l.Specs {
		d, err := kvcm.ParseDataURI(s.URI)
		if err != nil || d.Host == "" {
			continue
		}
		st, ok := u.cfg.Storages[d.Host]
		if !ok || st.Type != l.Type || !st.Files {
			continue // not found, another type, or MightExist all-true
		}
		if _, err := os.Lstat(d.Path); errors.Is(err, fs.ErrNotExist) {
			if out == nil {
				out = map[string]bool{}
			}
			out[s.URI] = true
		}
	}
	return out
}

// execute runs the five steps for a request's targets, block by block.
func (u *UpstreamGC) execute(ctx context.Context, req []upstreamTarget) {
	byKey := map[string][]upstreamTarget{}
	var order []string
	for _, t := range req {
		if byKey[t.ref.Key] == nil {
			order = append(order, t.ref.Key)
		}
		byKey[t.ref.Key] = append(byKey[t.ref.Key], t)
	}
	kvcmWrites := u.cfg.Writes == WritesKVCM
	for _, k := range order {
		var marked []markedTarget
		if kvcmWrites {
			marked = u.casKVCM(ctx, k, byKey[k])
		} else {
			marked = u.cas(ctx, k, byKey[k])
		}
		if len(marked) == 0 {
			continue
		}
		u.hook(ctx, AfterCAS, k)
		if d := u.deleteDelay(); d > 0 {
			pause(ctx, d) // ended early by the request's own deadline only
		}
		u.deleteData(ctx, k, marked)
		if kvcmWrites {
			u.cadKVCM(ctx, k, marked)
		} else {
			u.cad(ctx, k, marked)
		}
	}
}

// markedTarget is a target CAS'd to DELETING: those are the bytes its CAD expects.
type markedTarget struct {
	upstreamTarget
	deleting []byte
}

// txRetries bounds the attempts of one step's transaction when other writers of the key keep
// coming between its read and its write.
const txRetries = 20

// watch runs f as one transaction on key, again from its read when the key changed in between.
func (u *UpstreamGC) watch(ctx context.Context, key string, f func(tx *redis.Tx) error) error {
	var err error
	for range txRetries {
		if err = u.cfg.Store.Watch(ctx, f, key); !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return err
}

// cas is steps 1 to 3 for the targets of one key, in one transaction.
func (u *UpstreamGC) cas(ctx context.Context, key string, ts []upstreamTarget) []markedTarget {
	var marked []markedTarget
	lost := 0
	err := u.watch(ctx, key, func(tx *redis.Tx) error {
		marked, lost = nil, 0
		fields, err := tx.HGetAll(ctx, key).Result()
		if err != nil {
			return err
		}
		var set []any
		uri := fields[kvcm.FieldURI]
		for _, t := range ts {
			cur, ok := u.current(fields, uri, t.ref.ID)
			if !ok || string(cur) != string(t.expected) {
				lost++ // gone, rewritten, or DELETING already (then it differs too)
				continue
			}
			next, err := kvcm.LocationWithStatus(cur, kvcm.StatusDeleting)
			if err != nil {
				return fmt.Errorf("set %s DELETING: %w", t.ref.ID, err)
			}
			if u.cfg.Layout == kvcm.LayoutLocation {
				set = append(set, kvcm.LocationField(t.ref.ID), next)
			} else {
				blk, err := kvcm.DecodeBlock([]byte(uri))
				if err != nil {
					return err
				}
				out, err := blk.WithStatus(t.ref.ID, kvcm.StatusDeleting)
				if err != nil {
					return fmt.Errorf("set %s DELETING: %w", t.ref.ID, err)
				}
				uri = string(out)
			}
			marked = append(marked, markedTarget{upstreamTarget: t, deleting: next})
		}
		if len(marked) == 0 {
			return nil
		}
		if u.cfg.Layout == kvcm.LayoutLegacy {
			set = []any{kvcm.FieldURI, uri, kvcm.FieldLRUTime, strconv.FormatInt(u.cfg.Now().UnixMicro(), 10)}
			u.touching(key)
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, key, set...)
			return nil
		})
		return err
	})
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		// An outage, or other writers of the key every time: a no-op, and the next scan
		// judges the key again.
		u.stats.CASLost += len(ts)
		if !errors.Is(err, redis.TxFailedErr) && ctx.Err() == nil && !isNetErr(err) {
			u.errs = append(u.errs, fmt.Errorf("upstream gc: cas %s: %w", key, err))
		}
		return nil
	}
	u.stats.CAS += len(marked)
	u.stats.CASLost += lost
	u.mark(marked)
	return marked
}

// current returns location id's bytes in the key's fields (legacy: in __uri__).
func (u *UpstreamGC) current(fields map[string]string, uri, id string) ([]byte, bool) {
	if u.cfg.Layout == kvcm.LayoutLocation {
		v, ok := fields[kvcm.LocationField(id)]
		return []byte(v), ok && v != ""
	}
	if uri == "" {
		return nil, false
	}
	blk, err := kvcm.DecodeBlock([]byte(uri))
	if err != nil {
		return nil, false
	}
	l, ok := blk.Find(id)
	if !ok {
		return nil, false
	}
	return l.Raw, true
}

// deleteData is step 4: the targets still DELETING as this request left them have their data
// deleted (DoLocationDelTask), spec URI by spec URI, the confirmed-missing ones skipped.
func (u *UpstreamGC) deleteData(ctx context.Context, key string, ts []markedTarget) {
	fields, err := u.cfg.Store.HGetAll(ctx, key).Result()
	if err != nil {
		return // the CAD re-reads; a DELETING left here is what KVCM's executor leaves too
	}
	uri := fields[kvcm.FieldURI]
	for _, t := range ts {
		cur, ok := u.current(fields, uri, t.ref.ID)
		if !ok {
			continue
		}
		l, err := kvcm.DecodeLocation(t.ref.ID, cur)
		// DoLocationDelTask keeps the locations still DELETING; the atomic emulator only
		// its own mark, byte for byte.
		if err != nil || l.Status != kvcm.StatusDeleting || u.cfg.Writes == WritesAtomic && string(cur) != string(t.deleting) {
			continue
		}
		for _, s := range l.Specs {
			if t.missing[s.URI] {
				u.count(func(st *UpstreamStats) { st.SkippedMissing++ })
				continue
			}
			d, err := kvcm.ParseDataURI(s.URI)
			if err != nil {
				continue // an invalid URI: KVCM leaves the location (counted as partial)
			}
			st, ok := u.cfg.Storages[d.Host]
			if !ok || !st.Files {
				continue // an unknown storage, or a backend whose Delete is a no-op
			}
			switch err := os.Remove(d.Path); {
			case err == nil:
				u.count(func(st *UpstreamStats) { st.Unlinked++ })
			case errors.Is(err, fs.ErrNotExist):
				u.count(func(st *UpstreamStats) { st.UnlinkAbsent++ }) // EC_NOENT: success
			default:
				u.count(func(st *UpstreamStats) { st.UnlinkErrors++ })
			}
		}
	}
}

func (u *UpstreamGC) count(f func(*UpstreamStats)) {
	u.mu.Lock()
	f(&u.stats)
	u.mu.Unlock()
}

// cad is step 5 for the targets of one key, in one transaction: each still holding the bytes
// its CAS wrote goes; a key left without a non-empty location field is DEL'd.
func (u *UpstreamGC) cad(ctx context.Context, key string, ts []markedTarget) {
	var gone []UpstreamRef
	lost, recycled := 0, false
	err := u.watch(ctx, key, func(tx *redis.Tx) error {
		gone, lost, recycled = nil, 0, false
		fields, err := tx.HGetAll(ctx, key).Result()
		if err != nil {
			return err
		}
		uri := fields[kvcm.FieldURI]
		var hdel []string
		for _, t := range ts {
			cur, ok := u.current(fields, uri, t.ref.ID)
			if !ok || string(cur) != string(t.deleting) {
				lost++
				continue
			}
			gone = append(gone, t.ref)
			if u.cfg.Layout == kvcm.LayoutLocation {
				hdel = append(hdel, kvcm.LocationField(t.ref.ID))
				continue
			}
			blk, err := kvcm.DecodeBlock([]byte(uri))
			if err != nil {
				return err
			}
			out, empty, err := blk.Without(t.ref.ID)
			if err != nil {
				return err
			}
			if uri = string(out); empty {
				uri = ""
			}
		}
		if len(gone) == 0 {
			return nil
		}
		if u.cfg.Layout == kvcm.LayoutLocation {
			left := false
			for f, v := range fields {
				if id, ok := kvcm.LocationID(f); ok && v != "" && !slices.Contains(hdel, kvcm.LocationField(id)) {
					left = true
					break
				}
			}
			recycled = !left
		} else {
			recycled = uri == ""
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			switch {
			case recycled:
				p.Del(ctx, key)
			case u.cfg.Layout == kvcm.LayoutLocation:
				p.HDel(ctx, key, hdel...)
			default:
				u.touching(key)
				p.HSet(ctx, key, kvcm.FieldURI, uri, kvcm.FieldLRUTime, strconv.FormatInt(u.cfg.Now().UnixMicro(), 10))
			}
			return nil
		})
		return err
	})
	u.mu.Lock()
	if err != nil {
		// Other writers every time, or an outage: the DELETING stays, as KVCM's executor leaves it
		// when its CAD fails. Nothing of KVCM's retries it.
		u.stats.CADLost += len(ts)
		if !errors.Is(err, redis.TxFailedErr) && ctx.Err() == nil && !isNetErr(err) {
			u.errs = append(u.errs, fmt.Errorf("upstream gc: cad %s: %w", key, err))
		}
		u.mu.Unlock()
		return
	}
	u.stats.CADLost += lost
	u.stats.Removed += len(gone)
	for _, r := range gone {
		u.removed[r]++
	}
	u.mu.Unlock()
	for _, t := range ts {
		if slices.Contains(gone, t.ref) {
			if l, err := kvcm.DecodeLocation(t.ref.ID, t.deleting); err == nil {
				u.subtract(key, &l, false)
			}
		}
	}
	if recycled {
		u.recycled(key, false)
	}
}

// casKVCM is steps 1 to 3 for the targets of one key as KVCM makes them: a read, KVCM's
// comparison of re-serializations, the window, and a blind HSET of its re-serialization of
// the DELETING copy (legacy: of the whole map, and __lru_time__). Whatever another process
// removed or rewrote in the window, the write lands: a removed location comes back as
// DELETING (legacy: every location of the map read), a removed key comes back with that
// field alone.
func (u *UpstreamGC) casKVCM(ctx context.Context, key string, ts []upstreamTarget) []markedTarget {
	legacy := u.cfg.Layout == kvcm.LayoutLegacy
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ref.ID
	}
	blk, cur, err := u.readKVCM(ctx, key, ids)
	if err != nil {
		u.count(func(st *UpstreamStats) { st.CASLost += len(ts) }) // an outage: nothing written
		return nil
	}
	var marked []markedTarget
	for i, t := range ts {
		c := cur[i]
		exp, err := kvcm.DecodeLocation(t.ref.ID, t.expected)
		// KVCM compares its re-serializations (unknown members and member order do not
		// count) and skips what is DELETING already; a location gone is EC_NOENT.
		if c == nil || c.Err != nil || err != nil || c.Status == kvcm.StatusDeleting ||
			string(kvcm.ReencodeLocation(c)) != string(kvcm.ReencodeLocation(&exp)) {
			continue
		}
		c.Status = kvcm.StatusDeleting
		marked = append(marked, markedTarget{upstreamTarget: t, deleting: kvcm.ReencodeLocation(c)})
	}
	if lost := len(ts) - len(marked); lost > 0 {
		u.count(func(st *UpstreamStats) { st.CASLost += lost })
	}
	if len(marked) == 0 {
		return nil
	}
	u.window(ctx)
	u.hook(ctx, BeforeCASWrite, key)
	var set []any
	if legacy {
		u.touching(key)
		set = []any{kvcm.FieldURI, string(kvcm.ReencodeLegacyBlock(blk)), kvcm.FieldLRUTime, strconv.FormatInt(u.cfg.Now().UnixMicro(), 10)}
	} else {
		for _, m := range marked {
			set = append(set, kvcm.LocationField(m.ref.ID), m.deleting)
		}
	}
	back, err := u.blindWrite(ctx, key, set, nil, false, nil)
	if err != nil {
		u.count(func(st *UpstreamStats) { st.CASLost += len(marked) })
		if ctx.Err() == nil && !isNetErr(err) {
			u.fail(fmt.Errorf("upstream gc: cas %s: %w", key, err))
		}
		return nil
	}
	u.count(func(st *UpstreamStats) { st.CAS += len(marked) })
	u.mu.Lock()
	u.mark(marked)
	u.mu.Unlock()
	u.brought(key, back)
	return marked
}

// readKVCM reads the targets' locations as KVCM does (HMGET of their fields; legacy: the map):
// cur[i] is ts[i]'s location, nil when absent or not decodable; blk the legacy map.
func (u *UpstreamGC) readKVCM(ctx context.Context, key string, ids []string) (*kvcm.Block, []*kvcm.Location, error) {
	cur := make([]*kvcm.Location, len(ids))
	if u.cfg.Layout == kvcm.LayoutLegacy {
		uri, err := u.cfg.Store.HGet(ctx, key, kvcm.FieldURI).Result()
		if errors.Is(err, redis.Nil) || err == nil && uri == "" {
			return nil, cur, nil // EC_NOENT
		}
		if err != nil {
			return nil, nil, err
		}
		blk, err := kvcm.DecodeBlock([]byte(uri))
		if err != nil {
			return nil, cur, nil // KVCM's read of the block fails: nothing found
		}
		for i, id := range ids {
			if l, ok := blk.Find(id); ok && l.Err == nil {
				cur[i] = l
			}
		}
		return blk, cur, nil
	}
	fields := make([]string, len(ids))
	for i, id := range ids {
		fields[i] = kvcm.LocationField(id)
	}
	vals, err := u.cfg.Store.HMGet(ctx, key, fields...).Result()
	if err != nil {
		return nil, nil, err
	}
	for i, id := range ids {
		if s, _ := vals[i].(string); s != "" {
			if l, err := kvcm.DecodeLocation(id, []byte(s)); err == nil && l.Err == nil {
				cur[i] = &l
			}
		}
	}
	return nil, cur, nil
}

// blindWrite sends KVCM's write of key: HSET of set, HDEL of del, or (delKey) DEL, with no
// condition at all. It also reads, in the same MULTI so the reading is exact, which fields
// and locations the write brought back that were not there: the write itself is as blind
// as KVCM's, the MULTI only lets the emulator see what it did.
func (u *UpstreamGC) blindWrite(ctx context.Context, key string, set []any, del []string, delKey bool, check []string) (brought writeEffect, err error) {
	legacy := u.cfg.Layout == kvcm.LayoutLegacy
	var exists, hsetN, hdelN, delN *redis.IntCmd
	var before *redis.MapStringStringCmd
	_, err = u.cfg.Store.TxPipelined(ctx, func(p redis.Pipeliner) error {
		exists, before = p.Exists(ctx, key), p.HGetAll(ctx, key)
		switch {
		case delKey:
			delN = p.Del(ctx, key)
		case len(del) > 0:
			hdelN = p.HDel(ctx, key, del...)
		default:
			hsetN = p.HSet(ctx, key, set...)
		}
		return nil
	})
	if err != nil {
		return writeEffect{}, err
	}
	brought.recreated = exists.Val() == 0 && (hsetN != nil)
	old := before.Val()
	// Which of check were gone already (an HDEL or a map written without them found them so).
	had := map[string]bool{}
	if legacy {
		if b, err := kvcm.DecodeBlock([]byte(old[kvcm.FieldURI])); err == nil {
			for _, l := range b.Locations {
				had[l.ID] = true
			}
		}
	} else {
		for f := range old {
			if id, ok := kvcm.LocationID(f); ok {
				had[id] = true
			}
		}
	}
	for _, id := range check {
		if !had[id] {
			brought.goneAlready = append(brought.goneAlready, id)
		}
	}
	switch {
	case delN != nil:
		brought.keyDeleted = delN.Val()
	case hdelN != nil:
		// Redis drops a hash whose last field goes: then the HDEL itself removed the key.
		brought.emptied = hdelN.Val() > 0 && int(hdelN.Val()) == len(old)
	case legacy:
		// The map written holds every location of the map read: those another process
		// removed meanwhile are back.
		if b, err := kvcm.DecodeBlock([]byte(set[1].(string))); err == nil {
			for _, l := range b.Locations {
				if !had[l.ID] {
					brought.back = append(brought.back, l.ID)
				}
			}
		}
	default:
		for i := 0; i+1 < len(set); i += 2 {
			if _, ok := old[set[i].(string)]; !ok {
				id, _ := kvcm.LocationID(set[i].(string))
				brought.back = append(brought.back, id)
			}
		}
	}
	return brought, nil
}

// writeEffect is what a blind write did besides what it meant to.
type writeEffect struct {
	recreated   bool     // the key did not exist: the write re-created it
	back        []string // location ids the write brought back after another process removed them
	goneAlready []string // location ids of check the write found gone
	emptied     bool     // an HDEL removed the key's last fields, so Redis dropped the key
	keyDeleted  int64    // a DEL's reply
}

// brought records what a status write brought back.
func (u *UpstreamGC) brought(key string, w writeEffect) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if w.recreated {
		u.stats.Recreated++
		if c := u.counters[u.instanceOf(key)]; c != nil {
			c.Recreated++ // +0: a status write never counts a key
		}
	}
	for _, id := range w.back {
		u.stats.Resurrected++
		u.resurrected[UpstreamRef{Key: key, ID: id}]++
	}
}

// cadKVCM is step 5 as BatchCADLocationStatus makes it: a read, a status check (DELETING),
// the window, an HDEL of the matching ones (legacy: the map written without them, or the key
// DEL'd when none is left), their bytes subtracted whatever the HDEL found, then the
// empty-key recycle: no non-empty L# field left (or no key at all), DEL, one key less.
func (u *UpstreamGC) cadKVCM(ctx context.Context, key string, ts []markedTarget) {
	legacy := u.cfg.Layout == kvcm.LayoutLegacy
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ref.ID
	}
	blk, cur, err := u.readKVCM(ctx, key, ids)
	if err != nil {
		u.count(func(st *UpstreamStats) { st.CADLost += len(ts) })
		return
	}
	var match []markedTarget
	var locs []kvcm.Location
	for i, t := range ts {
		if c := cur[i]; c != nil && c.Status == kvcm.StatusDeleting {
			match, locs = append(match, t), append(locs, *c)
		}
	}
	if lost := len(ts) - len(match); lost > 0 {
		u.count(func(st *UpstreamStats) { st.CADLost += lost }) // EC_NOENT or EC_MISMATCH: nothing subtracted
	}
	if len(match) == 0 {
		return
	}
	u.window(ctx)
	u.hook(ctx, BeforeCADWrite, key)
	var w writeEffect
	var del []string
	emptied := false
	if legacy {
		var keep []kvcm.Location
		for _, l := range blk.Locations {
			if !slices.ContainsFunc(match, func(m markedTarget) bool { return m.ref.ID == l.ID }) {
				keep = append(keep, l)
			}
		}
		u.touching(key)
		emptied = len(keep) == 0
		w, err = u.blindWrite(ctx, key, []any{kvcm.FieldURI, string(kvcm.ReencodeLegacyBlock(&kvcm.Block{Locations: keep})),
			kvcm.FieldLRUTime, strconv.FormatInt(u.cfg.Now().UnixMicro(), 10)}, nil, emptied, targetIDs(match))
	} else {
		for _, m := range match {
			del = append(del, kvcm.LocationField(m.ref.ID))
		}
		w, err = u.blindWrite(ctx, key, nil, del, false, targetIDs(match))
	}
	if err != nil {
		u.count(func(st *UpstreamStats) { st.CADLost += len(match) })
		if ctx.Err() == nil && !isNetErr(err) {
			u.fail(fmt.Errorf("upstream gc: cad %s: %w", key, err))
		}
		return
	}
	u.brought(key, w)
	removed := 0
	for i, m := range match {
		gone := slices.Contains(w.goneAlready, m.ref.ID)
		u.subtract(key, &locs[i], gone)
		if !gone {
			removed++
			u.mu.Lock()
			u.removed[m.ref]++
			u.mu.Unlock()
		}
	}
	u.count(func(st *UpstreamStats) { st.Removed += removed })
	switch {
	case legacy && emptied:
		u.recycled(key, w.keyDeleted == 0)
	case !legacy:
		u.recycle(ctx, key, w.emptied)
	}
}

// targetIDs are the location ids of targets.
func targetIDs(ts []markedTarget) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ref.ID
	}
	return out
}

// recycle is MaybeReclaimEmptyKeys: a key with no non-empty L# field left, or none at all, is
// DEL'd and counted out, also when the DEL finds it gone. emptied: the CAD's own HDEL took
// the key's last fields, so Redis dropped the key then, and a DEL finding it gone is no
// surprise.
func (u *UpstreamGC) recycle(ctx context.Context, key string, emptied bool) {
	fields, err := u.cfg.Store.HGetAll(ctx, key).Result()
	if err != nil {
		return
	}
	for f, v := range fields {
		if _, ok := kvcm.LocationID(f); ok && v != "" {
			return
		}
	}
	n, err := u.cfg.Store.Del(ctx, key).Result()
	if err != nil {
		return
	}
	u.recycled(key, n == 0 && !emptied)
}

// touching records that a write of key's __lru_time__ (legacy layout) is about to be sent.
// It is recorded before the write, not after its answer: a check that reads the key between
// the two, or a write whose answer is lost (a timeout, the stop of a run) though Redis made
// it, must still find the rewrite the emulator's. Recording one that then fails allows no
// more than the rewrite that did not come.
func (u *UpstreamGC) touching(key string) {
	u.mu.Lock()
	u.touched[key] = true
	u.mu.Unlock()
}

// isNetErr reports an error of the connection rather than of the emulator (an outage the
// caller may be injecting).
func isNetErr(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) || errors.Is(err, redis.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded)
}
