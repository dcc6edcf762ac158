package seed

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// locationTricky are the tricky live kinds of the location layout: the legacy ones, and the
// ones only today's KVCM writes.
var locationTricky = append(append([]string(nil), legacyTricky...), KindZeroCreateTime, KindDummy, KindVineyard, KindEventReport)

// special is what a location-layout block holds beside its locations.
type special uint8

const (
	plain special = iota // locations and properties only
	// tombstone: an empty-valued L# field, KVCM's tombstone of a location (written when its
	// serializer meets a null entry). Reads skip it; the collector never judges or touches
	// it.
	tombstone
	// corrupt: an L# value that is not JSON. KVCM fails every whole-key read of the block
	// (EC_CORRUPTION); nothing in it is collected.
	corrupt
	// upgradedOrphan: the key was written by KVCM f6aa2b2 — __uri__ holding an old orphan
	// WRITING, __lru_time__, _prev_key_ — and by today's KVCM since, which read no L# field,
	// saw the key exist and added its locations. Ambiguous: judged by nothing.
	upgradedOrphan
	// upgradedEmptied: the same, but the legacy map is the empty {} a legacy collector left
	// (empty_block: keep), and today's KVCM's location beside it looks like an old orphan.
	upgradedEmptied
)

// blockForm is the shape of one location-layout block.
type blockForm struct {
	kinds []string
	// noPrevKey: the key was re-created by a KVCM upsert (a plain HSET of one L# field) after
	// an outside DEL, so it has no BP#prev_key.
	noPrevKey bool
	// tier: a tier-migration Mark (#209) sits beside the locations.
	tier    bool
	special special
	// eventID: its EventReport location has an id as KVCM names EventReport metadata,
	// holding '#' and ':' (EventReportID).
	eventID bool
}

// EventReportID is the id of the forced EventReport location: kvs#<type>#<medium>#<host:port>,
// as KVCM names EventReport metadata. Its L# field is L#kvs#event_report_l1p5#hbm#….
const EventReportID = "kvs#event_report_l1p5#hbm#10.0.0.8:9000"

// forcedForms are the first blocks of every instance: each form the verification must see
// at least once, whatever the size and the draws.
func (g *gen) forcedForms() []blockForm {
	var out []blockForm
	if g.sp.GarbageFraction > 0 {
		out = append(out,
			// Every location garbage: the key keeps BP#prev_key (empty_block: keep).
			blockForm{kinds: []string{KindOrphanWriting, KindMissingServing}},
			// ... and its tier mark.
			blockForm{kinds: []string{KindMissingServing}, tier: true},
			// ... and no other field: the collector leaves BP#prev_key = "".
			blockForm{kinds: []string{KindMissingServing}, noPrevKey: true},
			// ... a tier mark and no BP#prev_key: the mark keeps the key, nothing is added.
			blockForm{kinds: []string{KindOrphanWriting}, noPrevKey: true, tier: true},
			// Garbage beside live locations and a tier mark.
			blockForm{kinds: []string{KindOrphanWriting, KindLiveServing}, tier: true},
		)
	}
	if g.sp.TrickyFraction > 0 {
		out = append(out,
			blockForm{kinds: []string{KindZeroCreateTime, KindLiveServing}},
			blockForm{kinds: []string{KindLiveServing}, special: tombstone},
			blockForm{special: corrupt},
			blockForm{kinds: []string{KindLiveServing}, special: corrupt},
			blockForm{kinds: []string{KindLiveServing}, special: upgradedOrphan},
			blockForm{kinds: []string{KindOrphanWriting}, special: upgradedEmptied},
			blockForm{kinds: []string{KindDummy, KindVineyard, KindEventReport}, eventID: true},
			blockForm{kinds: []string{KindYoungWriting, KindLiveServing}, tier: true},
			blockForm{kinds: []string{KindFutureWriting, KindDeleting}},
			// A migration's copy target and the source its guard names, both looking like
			// garbage: the guard keeps both.
			blockForm{kinds: []string{KindCopySource, KindCopyTarget}},
		)
	}
	return out
}

// randomForm draws a block's shape.
func (g *gen) randomForm() blockForm {
	if g.sp.TrickyFraction > 0 && g.rng.Float64() < g.sp.TrickyFraction/20 {
		switch g.rng.IntN(4) {
		case 0:
			return blockForm{kinds: []string{KindLiveServing}, special: tombstone}
		case 1:
			return blockForm{kinds: []string{KindLiveServing}[:g.rng.IntN(2)], special: corrupt}
		case 2:
			return blockForm{kinds: []string{KindLiveServing}, special: upgradedOrphan}
		default:
			return blockForm{kinds: []string{KindOrphanWriting}, special: upgradedEmptied}
		}
	}
	f := blockForm{kinds: make([]string, g.sp.LocationsPerBlock), special: plain}
	for i := range f.kinds {
		f.kinds[i] = g.pickKind(locationTricky)
	}
	f.tier = g.rng.IntN(40) == 0
	f.noPrevKey = g.rng.IntN(50) == 0
	return f
}

// locationInstance writes one instance's blocks in the location layout, as today's KVCM
// writes them: HSET key BP#prev_key <prev> L#<id> <json> … for a new key.
func (g *gen) locationInstance(ctx context.Context, inst string) error {
	used := map[int64]bool{}
	forced := g.forcedForms()
	var chain requestChain
	for i := 0; i < g.sp.Blocks; i++ {
		key := g.blockKey(used)
		form := g.randomFormOr(forced, i)
		fields, locs, class := g.locationBlock(inst, key, form, chain.next(g.rng, key))
		if err := g.put(ctx, g.m.Layouts, class, inst, key, fields, locs); err != nil {
			return err
		}
	}
	// Keys that are not canonical block keys: never touched.
	for _, bad := range []string{"abc", "05", "+7"} {
		k := kvcm.KeyPrefix(inst) + bad
		l, _ := g.locationOf(inst, 0, "badkey00", KindOrphanWriting, g.rng)
		g.pipe.HSet(ctx, k, kvcm.FieldPrevKey, "", kvcm.LocationField(l.ID), string(l.bytes()))
		g.m.BadKeys = append(g.m.BadKeys, k)
	}
	return nil
}

func (g *gen) randomFormOr(forced []blockForm, i int) blockForm {
	if i < len(forced) {
		return forced[i]
	}
	return g.randomForm()
}

// requestChain gives BP#prev_key as BatchAddLocation writes it: the blocks of one write
// request in order, the first with "", each other with the previous block's key.
type requestChain struct {
	left int
	prev string
}

func (c *requestChain) next(rng *rand.Rand, key int64) string {
	if c.left == 0 {
		c.left, c.prev = 1+rng.IntN(8), ""
	}
	prev := c.prev
	c.prev = strconv.FormatInt(key, 10)
	c.left--
	return prev
}

// put records block key's locations under class in counts, then writes the block.
func (g *gen) put(ctx context.Context, counts map[string]LayoutCount, class, inst string, key int64, fields []any, locs []Loc) error {
	if err := g.record(counts, class, locs); err != nil {
		return err
	}
	return g.block(ctx, inst, key, fields)
}

// block queues one block key of inst, written as KVCM writes it, and counts it in the
// instance's recount: every block KVCM writes, it counts.
func (g *gen) block(ctx context.Context, inst string, key int64, fields []any) error {
	rec, ok := g.recounts[inst]
	if !ok {
		rec = kvcm.NewRecount()
		g.recounts[inst] = rec
	}
	recountFields(rec, fields)
	return g.hset(ctx, kvcm.BlockKey(inst, key), fields)
}

// metadata writes each instance's metadata hash as MetaIndexer::PersistMetaData does, with
// the counters a KVCM that wrote the seeded blocks itself would hold: their recount by KVCM's
// rules (kvcm.Recount; a spec without a readable size counted 0, where KVCM added whatever
// its uninitialised variable held). It runs once every block is written, the stuck and
// sweep setups' included, so that before kvcm-gc deletes anything the persisted counters
// and the keyspace agree, and every drift after a round is the round's. A KVCM of the
// legacy layout (f6aa2b2) persisted its key count only: it kept usage in memory.
func (g *gen) metadata(ctx context.Context) {
	for _, inst := range slices.Sorted(maps.Keys(g.recounts)) {
		rec := g.recounts[inst]
		if g.sp.Layout != kvcm.LayoutLocation {
			g.pipe.HSet(ctx, kvcm.MetadataKey(inst), kvcm.FieldKeyCount, strconv.FormatInt(rec.Keys, 10))
			continue
		}
		usage := kvcm.FormatStorageUsage(kvcm.UsageMembersCurrent, rec.Usage)
		g.pipe.HSet(ctx, kvcm.MetadataKey(inst), kvcm.FieldKeyCount, strconv.FormatInt(rec.Keys, 10),
			kvcm.FieldStorageUsage, string(usage))
	}
}

// recountFields adds a block's fields (name, value pairs as HSET takes them) to rec.
func recountFields(rec *kvcm.Recount, fields []any) {
	h := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		h[fields[i].(string)] = fields[i+1].(string)
	}
	rec.AddFields(h)
}

// locationBlock returns the fields of one location-layout block, its locations and its
// key's layout.
func (g *gen) locationBlock(inst string, key int64, form blockForm, prev string) ([]any, []Loc, string) {
	now := g.sp.Now
	class := kvcm.LayoutLocation.String()
	if g.sp.NoUpgraded && (form.special == upgradedOrphan || form.special == upgradedEmptied) {
		form.special = plain
	}
	upgraded := form.special == upgradedOrphan || form.special == upgradedEmptied
	if upgraded {
		class = kvcm.LayoutAmbiguous.String()
		g.m.Ambiguous = append(g.m.Ambiguous, kvcm.BlockKey(inst, key))
	}
	fields := make([]any, 0, 2+2*len(form.kinds)+4)
	if !form.noPrevKey && !upgraded {
		fields = append(fields, kvcm.FieldPrevKey, prev)
	}
	locs := make([]Loc, 0, len(form.kinds)+1)
	var source locationJSON // the block's KindCopySource, which a KindCopyTarget's guard names
	for _, kind := range form.kinds {
		id := g.locID()
		if form.eventID && kind == KindEventReport {
			id = EventReportID // the draw above still made: the rest of the keyspace is as before
		}
		l, files := g.locationOf(inst, key, id, kind, g.rng)
		switch kind {
		case KindCopySource:
			source = l
		case KindCopyTarget:
			l.Guard = copyGuard("copy-"+strconv.FormatUint(uint64(key), 16), source, now)
		}
		loc := Loc{Instance: inst, Key: key, Location: id, Kind: kind, Garbage: isGarbage(kind), Layout: class,
			Field: kvcm.LocationField(id), Files: files}
		if upgraded {
			loc.Kind, loc.Garbage = KindAmbiguous, false
		}
		fields = append(fields, loc.Field, string(l.bytes()))
		locs = append(locs, loc)
	}
	switch form.special {
	case tombstone:
		fields = append(fields, kvcm.LocationField(g.locID()), "")
		g.m.Tombstones = append(g.m.Tombstones, kvcm.BlockKey(inst, key))
	case corrupt:
		id := g.locID()
		fields = append(fields, kvcm.LocationField(id), `{"id":"`+id+`","status":2,"type":4,`)
		g.m.Corrupt = append(g.m.Corrupt, kvcm.BlockKey(inst, key))
	case upgradedOrphan, upgradedEmptied:
		uri := "{}"
		if form.special == upgradedOrphan {
			id := g.locID()
			l, files := g.locationOf(inst, key, id, KindOrphanWriting, g.rng)
			l.NoCreateTime = true // KVCM f6aa2b2 had none
			uri = string(appendLegacyMap(nil, []string{id}, []locationJSON{l}))
			locs = append(locs, Loc{Instance: inst, Key: key, Location: id, Kind: KindAmbiguous, Layout: class,
				Field: kvcm.FieldURI, Files: files})
		}
		fields = append(fields, kvcm.FieldURI, uri, kvcm.FieldLRUTime, us(now.Add(-g.sp.Grace-5*time.Hour)), FieldLegacyPrevKey, prev)
	}
	if form.tier {
		deadline := now.Add(10 * time.Minute)
		if g.rng.IntN(2) == 0 {
			deadline = now.Add(-time.Hour) // expired, not consumed yet
		}
		fields = append(fields, FieldTierTarget, StorageMooncake, FieldTierDeadline, strconv.FormatInt(deadline.UnixMilli(), 10))
		g.m.TierMarked = append(g.m.TierMarked, kvcm.BlockKey(inst, key))
	}
	return fields, locs, class
}

// copyGuard is the migration_copy_guard of a copy of source, operation op, ACTIVE, as CopyGA's
// KVCM writes it (members beyond the ones kvcm-gc reads included).
func copyGuard(op string, source locationJSON, now time.Time) string {
	b := []byte(`{"schema_version":1,"state":2,"operation_id":`)
	b = appendJSONString(b, op)
	b = append(b, `,"source_location_id":`...)
	b = appendJSONString(b, source.ID)
	b = append(b, `,"source_location_create_time":`...)
	b = strconv.AppendInt(b, source.CreateTime, 10)
	b = append(b, `,"source_storage_name":"`+StorageNFS+`","target_storage_name":"`+StorageNFS+`","create_time_us":`...)
	b = strconv.AppendInt(b, now.Add(-time.Hour).UnixMicro(), 10)
	return string(append(b, '}'))
}

// cachedInstance writes the cached group's instance: blocks in the same Redis whose every
// location looks like garbage (orphan WRITING, SERVING with a file gone). KVCM serves them
// from its memory, so none may be collected.
func (g *gen) cachedInstance(ctx context.Context) error {
	blocks := (g.sp.Blocks + 49) / 50
	g.total += blocks
	used := map[int64]bool{}
	g.m.Skipped = map[string]LayoutCount{}
	for i := 0; i < blocks; i++ {
		key := g.blockKey(used)
		kinds := []string{KindOrphanWriting, KindMissingServing}[:min(g.sp.LocationsPerBlock, 2)]
		fields, locs, _ := g.locationBlock(InstanceCached, key, blockForm{kinds: kinds}, "")
		for j := range locs {
			locs[j].Kind, locs[j].Garbage = KindCachedStore, false
		}
		if err := g.put(ctx, g.m.Skipped, GroupCached, InstanceCached, key, fields, locs); err != nil {
			return err
		}
	}
	return nil
}

// locationOf builds location id of kind in block key: its JSON fields (create_time included)
// and the paths of its data files that exist.
func (g *gen) locationOf(inst string, key int64, id, kind string, rng *rand.Rand) (locationJSON, []string) {
	now := g.sp.Now
	hex := strconv.FormatUint(uint64(key), 16)
	l := locationJSON{ID: id, Type: uint8(kvcm.TypeFile)}
	var files []string
	nfs := func(missing ...int) {
		for s := 0; s < 2; s++ {
			path := fmt.Sprintf("%s%s/tp%d/%s_%s", g.nfsRoot, inst, s, hex, id)
			l.Specs = append(l.Specs, kvcm.Spec{Name: "tp" + strconv.Itoa(s), URI: "file://" + StorageNFS + path + "?size=1024"})
			gone := false
			for _, m := range missing {
				gone = gone || m == s
			}
			if !gone {
				files = append(files, path)
			}
		}
	}
	past := func(atLeast, spread time.Duration) int64 {
		return now.Add(-atLeast - time.Duration(rng.Int64N(int64(spread)))).UnixMicro()
	}
	// orphan is the least age of an orphan WRITING: past the grace, and past the age until
	// which a collector with kvcm_gc leaves it to KVCM's own GC.
	orphan := g.sp.Grace + 3*time.Hour
	if !g.sp.NoKVCMGC {
		orphan = max(orphan, KVCMGCAge+time.Hour)
	}
	switch kind {
	case KindOrphanWriting:
		l.Status, l.CreateTime = 2, past(orphan, 48*time.Hour)
		nfs()
	case KindMissingServing:
		l.Status, l.CreateTime = 3, past(time.Hour, 7*24*time.Hour)
		nfs(1) // one spec present, one missing: still garbage
	case KindLiveServing:
		l.Status, l.CreateTime = 3, past(time.Minute, 7*24*time.Hour)
		nfs()
	case KindYoungWriting:
		l.Status, l.CreateTime = 2, now.Add(-g.youngAge(0, g.sp.Grace)).UnixMicro()
		if !g.sp.NoKVCMGC && g.sp.Grace < KVCMGCAge-time.Hour && g.young%2 == 0 {
			// Past the grace, inside kvcm_gc's deferral: KVCM's own GC's to take.
			l.CreateTime = now.Add(-g.youngAge(g.sp.Grace+time.Minute, KVCMGCAge)).UnixMicro()
		}
		g.young++
		nfs()
	case KindFutureWriting:
		l.Status, l.CreateTime = 2, now.Add(48*time.Hour).UnixMicro()
		nfs()
	case KindZeroCreateTime:
		l.Status, l.CreateTime = 2, 0
		nfs()
	case KindDeleting:
		l.Status, l.CreateTime = 4, past(g.sp.Grace+2*time.Hour, 7*24*time.Hour)
		nfs()
	case KindUnknownType:
		l.Status, l.Type, l.CreateTime = 3, unknownType, past(time.Hour, 7*24*time.Hour)
		nfs(0, 1)
	case KindEventReport:
		l.Status, l.Type, l.CreateTime = 3, uint8(kvcm.TypeEventReportL1P5+kvcm.StorageType(rng.IntN(2))), past(time.Hour, 7*24*time.Hour)
		nfs(0, 1)
	case KindCopyTarget:
		// Written by a copy still open: WRITING past the orphan grace, its data present.
		l.Status, l.CreateTime = 2, past(orphan, 48*time.Hour)
		nfs()
	case KindCopySource:
		l.Status, l.CreateTime = 3, past(g.sp.Grace+6*time.Hour, 7*24*time.Hour)
		nfs(1)
	case KindSharedServing, KindSharedOrphan:
		l.Status, l.CreateTime = 3, past(time.Minute, 7*24*time.Hour)
		if kind == KindSharedOrphan {
			l.Status, l.CreateTime = 2, past(orphan, 48*time.Hour)
		}
		path := fmt.Sprintf("%s%s/tp0/%s_%016x", g.sharedRoot, inst, hex, rng.Uint64())
		l.Specs = []kvcm.Spec{{Name: "tp0", URI: fmt.Sprintf("file://%s%s?blkid=%d&size=1024", StorageShared, path, rng.IntN(8))}}
		files = []string{path} // exists for both: a shared file is never unlinked
	case KindMooncake:
		l.Status, l.Type, l.CreateTime = 3, uint8(kvcm.TypeMooncake), past(time.Minute, 7*24*time.Hour)
		l.Specs = []kvcm.Spec{{Name: "tp0", URI: fmt.Sprintf("mooncake://%s/?key=%s/tp0/%s&size=1024", StorageMooncake, inst, hex)}}
	case KindDummy:
		l.Status, l.Type, l.CreateTime = 3, uint8(kvcm.TypeDummy), past(time.Hour, 7*24*time.Hour)
		l.Specs = []kvcm.Spec{{Name: "tp0", URI: fmt.Sprintf("dummy://%s/%s/tp0/%s?size=1024", StorageDummy, inst, hex)}}
	case KindVineyard:
		l.Status, l.Type, l.CreateTime = 3, uint8(kvcm.TypeVineyard), past(time.Hour, 7*24*time.Hour)
		l.Specs = []kvcm.Spec{{Name: "tp0", URI: fmt.Sprintf("vineyard://%s/%s/tp0/%s?size=1024", StorageVineyard, inst, hex)}}
	default:
		panic("seed: no location of kind " + kind)
	}
	l.SpecSize = uint64(len(l.Specs))
	return l, files
}
