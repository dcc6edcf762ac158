package seed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Stuck DELETING (Spec.DeletingGrace, a collector with collect_deleting): DELETING locations a
// KVCM left behind when it crashed or lost its leadership between its CAS to DELETING and its
// CAD. The collector removes them once they have been DELETING for deleting_grace, and their
// data only where its name cannot have been reused: a file named per block.

// KindStuckDeleting is a DELETING location that has been DELETING for longer than the
// deleting grace: garbage, its files unlinked unless Loc.DataLeft says why they stay.
const KindStuckDeleting = "stuck_deleting"

// Why the data of a collected stuck DELETING stays (Loc.DataLeft): the values of the
// collector's "reason" label of kvcm_gc_stuck_deleting_data_left_total.
const (
	DataLeftReusable    = "reusable_storage"   // the storage reuses names or addresses (mooncake, pace, …)
	DataLeftShared      = "shared"             // a file several blocks share (blkid)
	DataLeftNotPerBlock = "not_per_block_name" // a file not named <instance>/<spec>/<hex key>
	DataLeftReferenced  = "referenced"         // another location of the block names the same file
)

// StuckGrace is a deleting_grace for a test or scenario that seeds stuck DELETING itself:
// above the seed's instance group's delay_before_delete_ms (1s) + 1h, below which the prober
// keeps every DELETING of the group (rule 3). StuckAge is how long such a stuck DELETING has
// been DELETING: past the grace.
const (
	StuckGrace = 2 * time.Hour
	StuckAge   = 3 * time.Hour
)

// stuckAgeOver is how much longer than the grace the stuck DELETING have been DELETING.
const stuckAgeOver = 12 * time.Hour

// stuckForm is one block of the stuck DELETING set.
type stuckForm struct {
	kind     string // KindStuckDeleting, or KindDeleting for one not stuck yet
	dataLeft string
	storage  string // StorageNFS, StorageShared or StorageMooncake
	perBlock bool   // file: KVCM's own per-block name
	serving  bool   // a SERVING location of the block names the same file
}

var stuckForms = []stuckForm{
	{kind: KindStuckDeleting, storage: StorageNFS, perBlock: true},                                              // data unlinked
	{kind: KindStuckDeleting, storage: StorageNFS, dataLeft: DataLeftNotPerBlock},                               // metadata only
	{kind: KindStuckDeleting, storage: StorageShared, dataLeft: DataLeftShared},                                 // metadata only
	{kind: KindStuckDeleting, storage: StorageMooncake, dataLeft: DataLeftReusable},                             // metadata only
	{kind: KindStuckDeleting, storage: StorageNFS, perBlock: true, serving: true, dataLeft: DataLeftReferenced}, // metadata only
	// Not stuck yet: legacy, DELETING for an hour less than the grace; location layout, never
	// seen before (no first sight recorded), so the first round only records it.
	{kind: KindDeleting, storage: StorageNFS, perBlock: true},
}

// stuckSetup writes, for every instance, blocks of each stuck form: max(1, Blocks/4000) sets.
func (g *gen) stuckSetup(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(g.sp.Seed^0x737475636b, g.sp.Seed))
	fresh := g.freshKeys(rng)
	now := g.sp.Now
	since := now.Add(-g.sp.DeletingGrace - stuckAgeOver)
	location := g.sp.Layout == kvcm.LayoutLocation
	class := kvcm.LayoutLegacy.String()
	if location {
		class = kvcm.LayoutLocation.String()
	}
	for _, inst := range g.sp.Instances {
		for range max(1, g.sp.Blocks/4000) {
			for _, f := range stuckForms {
				key := fresh(inst)
				hex := strconv.FormatUint(uint64(key), 16)
				id := g.sweepLocID(rng)
				l := locationJSON{ID: id, Status: int32(kvcm.StatusDeleting), Type: uint8(kvcm.TypeFile),
					CreateTime: since.Add(-time.Minute).UnixMicro(), NoCreateTime: !location}
				var files []string
				switch {
				case f.storage == StorageMooncake:
					l.Type = uint8(kvcm.TypeMooncake)
					l.Specs = []kvcm.Spec{{Name: "tp0", URI: fmt.Sprintf("mooncake://%s/?key=%s/tp0/%s&size=1024", StorageMooncake, inst, hex)}}
				case f.storage == StorageShared:
					p := fmt.Sprintf("%s%s/tp0/%s_%016x", g.sharedRoot, inst, hex, rng.Uint64())
					l.Specs = []kvcm.Spec{{Name: "tp0", URI: fmt.Sprintf("file://%s%s?blkid=%d&size=1024", StorageShared, p, rng.IntN(8))}}
					files = []string{p}
				default:
					specs := []string{"tp0", "tp1"}
					if f.serving {
						specs = specs[:1]
					}
					for _, s := range specs {
						p := g.nfsRoot + kvcm.BlockObjectName(inst, s, key)
						if !f.perBlock {
							p += "_" + id
						}
						l.Specs = append(l.Specs, kvcm.Spec{Name: s, URI: "file://" + StorageNFS + p + "?size=1024"})
						files = append(files, p)
					}
				}
				l.SpecSize = uint64(len(l.Specs))
				loc := Loc{Instance: inst, Key: key, Location: id, Kind: f.kind, Garbage: isGarbage(f.kind), Layout: class,
					Files: files, DataLeft: f.dataLeft}
				lru := since
				if f.kind == KindStuckDeleting {
					loc.DeletingSinceUs = since.UnixMicro()
				} else {
					lru = now.Add(-g.sp.DeletingGrace + time.Hour)
				}
				jsons, locs := []locationJSON{l}, []Loc{loc}
				if f.serving {
					s := locationJSON{ID: g.sweepLocID(rng), Status: int32(kvcm.StatusServing), Type: uint8(kvcm.TypeFile),
						CreateTime: now.Add(-time.Hour).UnixMicro(), NoCreateTime: !location, Specs: l.Specs, SpecSize: l.SpecSize}
					jsons = append(jsons, s)
					locs = append(locs, Loc{Instance: inst, Key: key, Location: s.ID, Kind: KindLiveServing, Layout: class, Files: files})
				}
				var fields []any
				if location {
					fields = []any{kvcm.FieldPrevKey, ""}
					for i := range jsons {
						locs[i].Field = kvcm.LocationField(jsons[i].ID)
						fields = append(fields, locs[i].Field, string(jsons[i].bytes()))
					}
				} else {
					ids := make([]string, len(jsons))
					for i := range jsons {
						ids[i], locs[i].Field = jsons[i].ID, kvcm.FieldURI
					}
					fields = []any{kvcm.FieldURI, string(appendLegacyMap(nil, ids, jsons)), kvcm.FieldLRUTime, us(lru)}
				}
				if err := g.put(ctx, g.m.Layouts, class, inst, key, fields, locs); err != nil {
					return err
				}
				g.extraBlocks++
			}
		}
	}
	return nil
}

// freshKeys returns a source of block keys, drawn from rng, that no block of the manifest
// (special keys included) uses yet, nor an earlier draw.
func (g *gen) freshKeys(rng *rand.Rand) func(inst string) int64 {
	taken := map[string]map[int64]bool{}
	take := func(inst string, key int64) {
		if taken[inst] == nil {
			taken[inst] = map[int64]bool{}
		}
		taken[inst][key] = true
	}
	for _, l := range g.m.Locations {
		take(l.Instance, l.Key)
	}
	for _, lists := range [][]string{g.m.Corrupt, g.m.Ambiguous, g.m.Tombstones} {
		for _, k := range lists {
			inst, ok := kvcm.OwnerOf(k, func(id string) bool { return slices.Contains(g.sp.Instances, id) })
			if !ok {
				continue
			}
			if key, err := kvcm.ParseBlockKey(inst, k); err == nil {
				take(inst, key)
			}
		}
	}
	return func(inst string) int64 {
		for {
			k := int64(rng.Uint64())
			if !taken[inst][k] {
				take(inst, k)
				return k
			}
		}
	}
}
