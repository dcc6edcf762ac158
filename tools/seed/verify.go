package seed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Snapshot holds every field of every key matching a pattern.
type Snapshot map[string]map[string]string

// Take reads every key matching pattern (e.g. "kvcache:*") with HGETALL (hashes only).
func Take(ctx context.Context, rdb redis.UniversalClient, pattern string) (Snapshot, error) {
	snap := Snapshot{}
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("snapshot: scan: %w", err)
		}
		pipe := rdb.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.HGetAll(ctx, k)
		}
		if len(keys) > 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, fmt.Errorf("snapshot: hgetall: %w", err)
			}
		}
		for i, k := range keys {
			snap[k] = cmds[i].Val()
		}
		cursor = next
		if cursor == 0 {
			return snap, nil
		}
	}
}

// The collector's empty_block settings: what becomes of a block whose last location it
// removes.
const (
	// EmptyKeep leaves the key in a form KVCM reads as "exists, no location", so KVCM's key
	// count stays equal to the keys in Redis (DESIGN §8.10): legacy, __uri__ =
	// {} beside the untouched __lru_time__ and _prev_key_; location layout, the key's other
	// fields (BP#prev_key, tier marks), or BP#prev_key = "" where none would remain.
	EmptyKeep = "keep"
	// EmptyDelete DELs the key.
	EmptyDelete = "delete"
)

// VerifyOptions steer VerifyWith.
type VerifyOptions struct {
	// Pattern selects the keys compared (default "*": every key).
	Pattern string
	// EmptyBlock is the collector's empty_block setting: EmptyKeep (the default) or
	// EmptyDelete.
	EmptyBlock string
}

// Report is the outcome of a verification.
type Report struct {
	GarbageLocations int `json:"garbage_locations"`
	GarbageGone      int `json:"garbage_gone"`
	LiveLocations    int `json:"live_locations"`
	LiveIntact       int `json:"live_intact"`
	KeysChecked      int `json:"keys_checked"`
	KeysIntact       int `json:"keys_intact"` // keys exactly as expected (including untouched ones)
	StrandedDeleting int `json:"stranded_deleting"`
	GarbageFilesGone int `json:"garbage_files_gone"`
	LiveFilesPresent int `json:"live_files_present"`
	LiveFiles        int `json:"live_files"`

	// EmptyBlock is the setting verified. EmptyKeys lost every location; EmptyKept of them
	// are still there (in the expected form, or a problem says otherwise), EmptyDeleted are
	// gone.
	EmptyBlock   string `json:"empty_block"`
	EmptyKeys    int    `json:"empty_keys"`
	EmptyKept    int    `json:"empty_kept"`
	EmptyDeleted int    `json:"empty_deleted"`
	// Keys that must stay byte for byte whatever the collector removed around them: keys
	// holding both layouts, keys with a tier mark (the marks compared), keys with an empty
	// L# field (KVCM's tombstone).
	AmbiguousKeys    int `json:"ambiguous_keys"`
	AmbiguousIntact  int `json:"ambiguous_intact"`
	TierKeys         int `json:"tier_marked_keys"`
	TierIntact       int `json:"tier_marks_intact"`
	TombstoneKeys    int `json:"tombstone_keys"`
	TombstonesIntact int `json:"tombstones_intact"`

	// Migration copy guards: GuardedLocations copy targets and the sources their guards name
	// (KindCopyTarget, KindCopySource), which look like garbage; GuardedIntact of them are
	// byte-identical in their field, GuardedFilesPresent of their GuardedFiles present.
	GuardedLocations    int `json:"guarded_locations"`
	GuardedIntact       int `json:"guarded_intact"`
	GuardedFiles        int `json:"guarded_files"`
	GuardedFilesPresent int `json:"guarded_files_present"`

	// Stuck DELETING (Spec.DeletingGrace): StuckGone of the StuckLocations are gone;
	// StuckFilesGone of their files were unlinked (named per block), StuckFilesLeft stayed in
	// place as their DataLeft reason asks; StuckByType counts the gone ones by storage type
	// and StuckLeftBy the ones whose data stayed by reason.
	StuckLocations int            `json:"stuck_deleting"`
	StuckGone      int            `json:"stuck_deleting_gone"`
	StuckFilesGone int            `json:"stuck_files_unlinked"`
	StuckFilesLeft int            `json:"stuck_files_left"`
	StuckByType    map[string]int `json:"stuck_gone_by_storage_type,omitempty"`
	StuckLeftBy    map[string]int `json:"stuck_data_left_by_reason,omitempty"`

	Mismatches
}

// OK reports whether every garbage location is gone and everything else is byte-identical.
func (r Report) OK() bool { return r.Mismatch == 0 }

// Mismatches are the mismatches a verification found, as its report gives them.
type Mismatches struct {
	// Problems lists every mismatch (capped).
	Problems []string `json:"problems,omitempty"`
	Mismatch int      `json:"mismatch"`
}

// Problem counts a mismatch, and describes it while fewer than 20 are.
func (p *Mismatches) Problem(format string, a ...any) {
	p.Mismatch++
	if len(p.Problems) < 20 {
		p.Problems = append(p.Problems, fmt.Sprintf(format, a...))
	}
}

// Verify is VerifyWith for the keys matching pattern and empty_block: keep.
func Verify(ctx context.Context, rdb redis.UniversalClient, before Snapshot, m *Manifest, pattern string) (Report, error) {
	return VerifyWith(ctx, rdb, before, m, VerifyOptions{Pattern: pattern})
}

// VerifyWith compares Redis and the files now with before minus the manifest's garbage:
// every garbage location gone — legacy, out of __uri__ with every other location's bytes
// kept; location layout, its L# field removed, never rewritten — and its unshared files
// too; a key that lost every location in the form o.EmptyBlock gives it; every other field
// of every key, and every live file, as it was; nothing left DELETING by the collector.
func VerifyWith(ctx context.Context, rdb redis.UniversalClient, before Snapshot, m *Manifest, o VerifyOptions) (Report, error) {
	switch o.EmptyBlock {
	case "":
		o.EmptyBlock = EmptyKeep
	case EmptyKeep, EmptyDelete:
	default:
		return Report{}, fmt.Errorf("verify: empty_block %q: want %q or %q", o.EmptyBlock, EmptyKeep, EmptyDelete)
	}
	if o.Pattern == "" {
		o.Pattern = "*"
	}
	after, err := Take(ctx, rdb, o.Pattern)
	if err != nil {
		return Report{}, err
	}
	garbage := map[string][]Loc{} // redis key -> its garbage locations
	for _, l := range m.Locations {
		if l.Garbage {
			k := kvcm.BlockKey(l.Instance, l.Key)
			garbage[k] = append(garbage[k], l)
		}
	}
	r := Report{EmptyBlock: o.EmptyBlock}
	for _, k := range slices.Sorted(maps.Keys(before)) {
		r.checkKey(k, before[k], after, garbage[k], o.EmptyBlock)
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			r.Problem("%s: key appeared", k)
		}
	}
	for _, l := range m.Locations {
		gone := !present(after, l)
		if l.Kind == KindStuckDeleting {
			r.stuck(l, gone, before)
		}
		guarded := l.Kind == KindCopyTarget || l.Kind == KindCopySource
		if guarded {
			r.guarded(l, before, after)
		}
		if l.Garbage {
			r.GarbageLocations++
			if gone {
				r.GarbageGone++
			}
		} else {
			r.LiveLocations++
			if !gone {
				r.LiveIntact++
			}
		}
		for _, f := range l.Files {
			_, err := os.Stat(f)
			present := err == nil
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return r, fmt.Errorf("verify: stat %s: %w", f, err)
			}
			switch {
			case l.Garbage && !l.KeepsFiles():
				if present {
					r.Problem("%s/%d/%s: garbage file %s still present", l.Instance, l.Key, l.Location, f)
				} else {
					r.GarbageFilesGone++
					if l.Kind == KindStuckDeleting {
						r.StuckFilesGone++
					}
				}
			default:
				r.LiveFiles++
				if guarded {
					r.GuardedFiles++
				}
				if present {
					r.LiveFilesPresent++
					if guarded {
						r.GuardedFilesPresent++
					}
					if l.Kind == KindStuckDeleting {
						r.StuckFilesLeft++
					}
				} else {
					r.Problem("%s/%d/%s: live or shared file %s is gone", l.Instance, l.Key, l.Location, f)
				}
			}
		}
	}
	return r, nil
}

// stuck counts a stuck DELETING location: gone or not, by the storage type its seeded bytes
// name, and the reason its data stays.
func (r *Report) stuck(l Loc, gone bool, before Snapshot) {
	r.StuckLocations++
	if !gone {
		return
	}
	r.StuckGone++
	typ := kvcm.TypeUnknown
	raw := []byte(before[kvcm.BlockKey(l.Instance, l.Key)][l.FieldName()])
	if l.FieldName() == kvcm.FieldURI {
		if blk, err := kvcm.DecodeBlock(raw); err == nil {
			if loc, ok := blk.Find(l.Location); ok {
				typ = loc.Type
			}
		}
	} else if loc, err := kvcm.DecodeLocation(l.Location, raw); err == nil {
		typ = loc.Type
	}
	if r.StuckByType == nil {
		r.StuckByType, r.StuckLeftBy = map[string]int{}, map[string]int{}
	}
	r.StuckByType[typ.String()]++
	if l.DataLeft != "" {
		r.StuckLeftBy[l.DataLeft]++
	}
}

// guarded counts a guarded location (a copy target or its source) and whether its field is
// byte-identical in after.
func (r *Report) guarded(l Loc, before, after Snapshot) {
	r.GuardedLocations++
	k := kvcm.BlockKey(l.Instance, l.Key)
	want, ok := before[k][l.FieldName()]
	got, found := after[k][l.FieldName()]
	if ok && found && got == want {
		r.GuardedIntact++
		return
	}
	r.Problem("%s/%d/%s: %s kept by a migration guard is not byte-identical", l.Instance, l.Key, l.Location, l.Kind)
}

// checkKey compares one key with what it must be now.
func (r *Report) checkKey(k string, fields map[string]string, after Snapshot, garbage []Loc, mode string) {
	r.KeysChecked++
	layout := kvcm.LayoutOfFields(fields)
	got, exists := after[k]
	want, emptied, err := expected(fields, layout, garbage, mode)
	if err != nil {
		r.Problem("%s: %v", k, err)
		return
	}
	// Fields that must keep their bytes in a key that must stay (a key deleted under
	// empty_block: delete takes its tier mark with it).
	if want != nil {
		if layout == kvcm.LayoutAmbiguous {
			r.AmbiguousKeys++
			if exists && maps.Equal(fields, got) {
				r.AmbiguousIntact++
			}
		}
		if _, ok := fields[FieldTierTarget]; ok {
			r.TierKeys++
			if exists && got[FieldTierTarget] == fields[FieldTierTarget] && got[FieldTierDeadline] == fields[FieldTierDeadline] {
				r.TierIntact++
			}
		}
		if hasTombstone(fields) {
			r.TombstoneKeys++
			if exists && sameTombstones(fields, got) {
				r.TombstonesIntact++
			}
		}
	}
	if emptied {
		r.EmptyKeys++
		if exists {
			r.EmptyKept++
		} else {
			r.EmptyDeleted++
		}
	}
	switch {
	case want == nil && exists:
		r.Problem("%s: every location was garbage and empty_block is %s, but the key is still there: %s", k, mode, FieldNames(got))
	case want != nil && !exists && emptied:
		r.Problem("%s: deleted, but empty_block: %s keeps a key that lost its last location (%s)", k, mode, FieldNames(want))
	case want != nil && !exists:
		r.Problem("%s: deleted, but it had live fields (%s)", k, FieldNames(want))
	case want != nil && !maps.Equal(want, got):
		r.Problem("%s (%s layout): %s", k, layout, diff(want, got, garbage))
	default:
		r.KeysIntact++
	}
	if exists {
		r.StrandedDeleting += strandedDeleting(k, fields, got, r)
	}
}

// expected returns the fields a key must have after its garbage locations are removed under
// empty_block mode (nil: the key must be gone), and whether it lost every location. Untouched
// locations keep their bytes, so the result is exact.
func expected(fields map[string]string, layout kvcm.Layout, garbage []Loc, mode string) (map[string]string, bool, error) {
	if len(garbage) == 0 {
		return fields, false, nil
	}
	want := maps.Clone(fields)
	switch layout {
	case kvcm.LayoutLegacy:
		uri := []byte(fields[kvcm.FieldURI])
		for _, l := range garbage {
			if l.FieldName() != kvcm.FieldURI {
				return nil, false, fmt.Errorf("manifest: garbage location %s in field %s of a legacy key", l.Location, l.FieldName())
			}
			blk, err := kvcm.DecodeBlock(uri)
			if err != nil {
				return nil, false, fmt.Errorf("decode seeded __uri__: %w", err)
			}
			out, empty, err := blk.Without(l.Location)
			if err != nil {
				return nil, false, fmt.Errorf("remove %s: %w", l.Location, err)
			}
			if empty {
				if mode == EmptyDelete {
					return nil, true, nil
				}
				// KVCM f6aa2b2 reads {} as "exists, no location"; __lru_time__ (its
				// reclaimer needs one on every key) and _prev_key_ stay as they were.
				want[kvcm.FieldURI] = "{}"
				return want, true, nil
			}
			uri = out
		}
		want[kvcm.FieldURI] = string(uri)
		return want, false, nil
	case kvcm.LayoutLocation:
		for _, l := range garbage {
			if _, ok := want[l.FieldName()]; !ok || l.FieldName() != kvcm.LocationField(l.Location) {
				return nil, false, fmt.Errorf("manifest: garbage location %s is not field %s of the key", l.Location, l.FieldName())
			}
			delete(want, l.FieldName())
		}
		for f := range want {
			if _, ok := kvcm.LocationID(f); ok {
				return want, false, nil
			}
		}
		if mode == EmptyDelete {
			return nil, true, nil
		}
		// The key's other fields keep it existing; where there are none, BP#prev_key = ""
		// does (KVCM writes "" for the first block of a request, and reads the key as
		// existing with no location: no new count, no new BP#prev_key at its next write).
		if len(want) == 0 {
			want[kvcm.FieldPrevKey] = ""
		}
		return want, true, nil
	}
	return nil, false, fmt.Errorf("manifest: garbage in a key of the %s layout, which nothing may collect", layout)
}

// present reports whether location l is still in its field in after.
func present(after Snapshot, l Loc) bool {
	a, ok := after[kvcm.BlockKey(l.Instance, l.Key)]
	if !ok {
		return false
	}
	if f := l.FieldName(); f != kvcm.FieldURI {
		_, ok := a[f]
		return ok
	}
	blk, err := kvcm.DecodeBlock([]byte(a[kvcm.FieldURI]))
	if err != nil {
		return true // not decodable: not removed either
	}
	_, found := blk.Find(l.Location)
	return found
}

// strandedDeleting counts the locations DELETING in got that were not in before, and reports
// each.
func strandedDeleting(k string, before, got map[string]string, r *Report) int {
	n := 0
	if u, ok := got[kvcm.FieldURI]; ok {
		if blk, err := kvcm.DecodeBlock([]byte(u)); err == nil {
			orig, _ := kvcm.DecodeBlock([]byte(before[kvcm.FieldURI]))
			for _, l := range blk.Locations {
				if l.Status == kvcm.StatusDeleting && orig != nil {
					if o, ok := orig.Find(l.ID); ok && o.Status != kvcm.StatusDeleting {
						n++
						r.Problem("%s: location %s left DELETING", k, l.ID)
					}
				}
			}
		}
	}
	for f, v := range got {
		id, ok := kvcm.LocationID(f)
		if !ok || v == "" {
			continue
		}
		l, err := kvcm.DecodeLocation(id, []byte(v))
		if err != nil || l.Status != kvcm.StatusDeleting {
			continue
		}
		o, err := kvcm.DecodeLocation(id, []byte(before[f]))
		if err == nil && o.Status != kvcm.StatusDeleting {
			n++
			r.Problem("%s: field %s left DELETING", k, f)
		}
	}
	return n
}

func hasTombstone(fields map[string]string) bool {
	for f, v := range fields {
		if _, ok := kvcm.LocationID(f); ok && v == "" {
			return true
		}
	}
	return false
}

func sameTombstones(before, got map[string]string) bool {
	for f, v := range before {
		if _, ok := kvcm.LocationID(f); ok && v == "" {
			if g, ok := got[f]; !ok || g != "" {
				return false
			}
		}
	}
	return true
}

// FieldNames lists a hash's fields, sorted, for the description of a mismatch.
func FieldNames(fields map[string]string) string {
	return strings.Join(slices.Sorted(maps.Keys(fields)), " ")
}

// diff describes the first few fields in which got differs from want.
func diff(want, got map[string]string, garbage []Loc) string {
	isGarbage := map[string]bool{}
	for _, l := range garbage {
		if l.FieldName() != kvcm.FieldURI {
			isGarbage[l.FieldName()] = true
		}
	}
	return DiffFields(want, got, isGarbage)
}

// DiffFields describes the first few fields in which the hash got differs from want. A field
// of got that want lacks is a garbage field left where garbage names it, else unexpected.
func DiffFields(want, got map[string]string, garbage map[string]bool) string {
	var parts []string
	for _, f := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[f]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("field %s gone (was %s)", f, Clip(want[f])))
		case g != want[f]:
			parts = append(parts, fmt.Sprintf("field %s changed: want %s, got %s", f, Clip(want[f]), Clip(g)))
		}
	}
	for _, f := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[f]; !ok {
			what := "unexpected field"
			if garbage[f] {
				what = "garbage field left"
			}
			parts = append(parts, fmt.Sprintf("%s %s = %s", what, f, Clip(got[f])))
		}
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("and %d more", len(parts)-3))
	}
	return strings.Join(parts, "; ")
}

// Clip quotes a value for the description of a mismatch, cut to its first 160 bytes.
func Clip(s string) string {
	if len(s) > 160 {
		return fmt.Sprintf("%q…", s[:160])
	}
	return fmt.Sprintf("%q", s)
}
