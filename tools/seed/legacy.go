package seed

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// legacyTricky are the tricky live kinds of the legacy layout.
var legacyTricky = []string{KindYoungWriting, KindFutureWriting, KindSharedServing, KindUnknownType, KindMooncake, KindDeleting}

// legacyInstance writes one instance's blocks in the legacy layout (KVCM f6aa2b2): __uri__
// and __lru_time__. For a given seed it writes what seed wrote before it knew the location
// layout; Spec.Ambiguous then upgrades a few blocks from a draw stream of its own.
func (g *gen) legacyInstance(ctx context.Context, inst string) error {
	used := map[int64]bool{}
	upgradedOrphan := false
	for i := 0; i < g.sp.Blocks; i++ {
		key := g.blockKey(used)
		k := kvcm.BlockKey(inst, key)
		fields, locs := g.legacyBlock(inst, key)
		class := kvcm.LayoutLegacy.String()
		if g.sp.Ambiguous && len(locs) > 0 {
			// Upgrade the first block of each instance holding an orphan (the case of issue
			// 11: a legacy orphan beside a live L# field), and a few others.
			orphan := false
			for _, l := range locs {
				orphan = orphan || l.Kind == KindOrphanWriting
			}
			if orphan && !upgradedOrphan || g.extra.Float64() < max(g.sp.TrickyFraction/20, 0.002) {
				upgradedOrphan = upgradedOrphan || orphan
				fields, locs = g.upgrade(inst, key, fields, locs)
				class = kvcm.LayoutAmbiguous.String()
				g.m.Ambiguous = append(g.m.Ambiguous, k)
			}
		}
		if err := g.put(ctx, g.m.Layouts, class, inst, key, fields, locs); err != nil {
			return err
		}
	}
	// Keys that are not canonical block keys: never touched.
	for _, bad := range []string{"abc", "05", "+7"} {
		k := kvcm.KeyPrefix(inst) + bad
		g.pipe.HSet(ctx, k, kvcm.FieldURI, "{}", kvcm.FieldLRUTime, "1")
		g.m.BadKeys = append(g.m.BadKeys, k)
	}
	return nil
}

// upgrade turns a legacy block into one today's KVCM has written to since: it read no L#
// field, saw the key exist (so wrote no BP#prev_key) and added a location that is now
// SERVING. Every location of the key is then live: the collector judges nothing in it.
func (g *gen) upgrade(inst string, key int64, fields []any, locs []Loc) ([]any, []Loc) {
	for i := range locs {
		locs[i].Kind, locs[i].Garbage, locs[i].Layout = KindAmbiguous, false, kvcm.LayoutAmbiguous.String()
	}
	id := g.extraID()
	l, files := g.locationOf(inst, key, id, KindLiveServing, g.extra)
	locs = append(locs, Loc{Instance: inst, Key: key, Location: id, Kind: KindAmbiguous, Layout: kvcm.LayoutAmbiguous.String(),
		Field: kvcm.LocationField(id), Files: files})
	return append(fields, kvcm.LocationField(id), string(l.bytes())), locs
}

// extraID draws a location id from the options' stream.
func (g *gen) extraID() string {
	var b [8]byte
	for i := range b {
		b[i] = idChars[g.extra.IntN(len(idChars))]
	}
	return string(b[:])
}

// legacyBlock returns the hash fields of one legacy block and its locations.
func (g *gen) legacyBlock(inst string, key int64) ([]any, []Loc) {
	now := g.sp.Now
	// A small share of blocks is corrupt: KVCM cannot parse them, the GC must keep them.
	if g.sp.TrickyFraction > 0 && g.rng.Float64() < g.sp.TrickyFraction/20 {
		k := kvcm.BlockKey(inst, key)
		g.m.Corrupt = append(g.m.Corrupt, k)
		return []any{kvcm.FieldURI, `{"abc":{"id":"abc","status":2,`, kvcm.FieldLRUTime, us(now.Add(-72 * time.Hour))}, nil
	}
	kinds := make([]string, g.sp.LocationsPerBlock)
	for i := range kinds {
		kinds[i] = g.pickKind(legacyTricky)
	}
	// __lru_time__ is the last write of the block: old enough for orphans unless a location
	// needs a younger block.
	lru := now.Add(-g.sp.Grace - 2*time.Hour)
	youngBlock := false
	for _, k := range kinds {
		if k == KindYoungWriting {
			youngBlock = true
		}
	}
	if youngBlock {
		lru = now.Add(-g.youngAge(0, g.sp.Grace))
	}
	var b strings.Builder
	b.WriteByte('{')
	hex := strconv.FormatUint(uint64(key), 16)
	locs := make([]Loc, 0, len(kinds))
	for i, kind := range kinds {
		id := g.locID()
		loc := Loc{Instance: inst, Key: key, Location: id, Kind: kind, Layout: kvcm.LayoutLegacy.String(), Field: kvcm.FieldURI}
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
				// No type of f6aa2b2, which this layout is; today's pace_ssd, which against
				// an NFS storage is a type mismatch, kept all the same. The digest of
				// TestLegacyKeyspaceUnchanged pins the number.
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
		// A newer KVCM's create_time on some orphans (on every one in a block written within
		// the grace, which makes them live: see below).
		if (kind == KindOrphanWriting || kind == KindSharedOrphan) && (youngBlock || g.rng.IntN(2) == 0) {
			// A newer KVCM's create_time, older than the grace.
			extra = fmt.Sprintf(`,"create_time":%d`, now.Add(-g.sp.Grace-3*time.Hour).UnixMicro())
		}
		if g.rng.IntN(4) == 0 {
			extra += `,"x_future":{"a":[1,2,{"b":null}],"s":"<&>"}` // a member this GC does not know
		}
		loc.Garbage = isGarbage(kind)
		if youngBlock && (kind == KindOrphanWriting || kind == KindSharedOrphan) {
			// Its create_time is past the grace, but a legacy location is as young as its
			// block's last write when that is later (kvcm.LegacyAge): live.
			// A shared orphan's file stays shared: when it ripens and goes, its file stays.
			loc.Kind, loc.Garbage, loc.SharedFile = KindRecentBlockWriting, false, kind == KindSharedOrphan
		}
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
		locs = append(locs, loc)
	}
	b.WriteByte('}')
	return []any{kvcm.FieldURI, b.String(), kvcm.FieldLRUTime, us(lru)}, locs
}
