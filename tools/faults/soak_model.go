package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// The soak's model of the keyspace. KVCM (the seed, then the soak's workload) is the only
// writer the model follows write by write; the collectors (kvcm-gc, and upstream's GC beside
// it) may only remove garbage, and mark it DELETING on the way. So each key's expected value is
// what KVCM last wrote, minus whichever of its garbage locations are gone by now, in the form
// empty_block gives a key that lost its last location (expected, verify.go). Every check
// compares each key byte for byte with that.

// mloc is what the soak knows about one location.
type mloc struct {
	id    string
	field string // L#<id>, or __uri__ (a member of the legacy map)
	// raw is the location's bytes as KVCM last wrote them.
	raw    []byte
	status kvcm.Status
	fate   Fate
	// due is the round whose successor must end with the location gone (fate Go): the first
	// round that started while it was garbage; 0 until one has.
	due uint64
	// files are its data files; the live ones must exist, and once kvcm-gc has collected it
	// (keepFiles aside) they must be gone.
	files     []string
	keepFiles bool
	// kind is what made it (seed kinds, or the workload's: session, orphan, crashed,
	// deleting, stuck, upgrade, legacy).
	kind string
	// keepSince, of a location of fate Either, is when kvcm-gc had to keep it from: the moment
	// it became one (an upgrade of its block, the start for a location only upstream's GC
	// judges) if it was then intact, neither in a collector's DELETING mark nor gone.
	// kvcm-gc's delete of it needs a compare-and-swap after that moment: a violation. Zero:
	// kvcm-gc may have judged it before, and may finish.
	keepSince time.Time
	// refreshedAt, of WRITING garbage whose legacy block KVCM wrote again while it was intact,
	// is when: kvcm-gc's deletes of it (judged before) are counted.
	refreshedAt time.Time
	// orphanAt, of a WRITING location that is not garbage yet (seeded young, or a crashed
	// session), is when kvcm-gc's prober takes it as an orphan: live until then. upstreamAt,
	// when earlier, is when upstream's GC may take it (fate Either from then on).
	orphanAt, upstreamAt time.Time
}

// mkey is one key as the soak knows it.
type mkey struct {
	// val is the key as KVCM last wrote it (the seed's snapshot, or the workload's last write),
	// minus the locations found gone since.
	val  Value
	locs map[string]*mloc
	// inst and block name a block key of a collected instance (block is meaningful only then).
	inst  string
	block int64
	// writable: the workload may write the key (a decodable block of a collected instance in
	// one layout; not corrupt, not ambiguous, no tombstone).
	writable bool
}

// soakModel is the expectation of every key, shared by the workload (which changes it with
// every write, under mu) and the checks (which compare Redis with it, a batch of keys at a
// time under mu).
type soakModel struct {
	mu    sync.Mutex
	keys  map[string]*mkey
	empty string // empty_block
	// writableKeys lists the keys the workload may write, for drawing one.
	writableKeys []string
	// marks are the locations a check found in kvcm-gc's (or upstream's) DELETING mark, with
	// the round after which it was first seen: a mark seen by a check of a later round is
	// stranded. Their keys are read by every check until the mark is gone.
	marks map[locRef]uint64
	// writes counts the workload's writes of each key: a check compares a key read without
	// holding the model only when no write of it came in between.
	writes map[string]uint64
	// lost are Either locations kvcm-gc had to keep (keepSince) found gone, until the records
	// of the collectors say whose removal it was.
	lost map[locRef]lostLoc
	// checked is the last round checked (a location KVCM's reads find gone is found after it).
	checked uint64
	// turn is what is left of the keys a check reads in turn (scope), turnSize how many of
	// them each check reads.
	turn     []string
	turnSize int
	// collected are the locations kvcm-gc's delete events say it removed, by "<key>/<id>";
	// their unshared files must be gone.
	collected map[string]bool
	// collectedKinds counts them by the kind and fate the model had for them; afterRefresh
	// those whose legacy block KVCM had written again since they were intact garbage.
	collectedKinds map[string]int
	afterRefresh   int
	// undue are the garbage locations no round has started on yet.
	undue []*mloc
	// grace is when an orphan WRITING location is garbage, to kvcm-gc and to upstream's GC.
	grace graces
	// aging are the WRITING locations that become orphans by the run's clock (seeded young
	// ones, crashed sessions); agingNext is the earliest moment one of them changes fate.
	aging     []locRef
	agingNext time.Time
	// up is upstream's GC when it runs beside kvcm-gc. It reads only the fields of its layout,
	// in any key: it may take a location out of an upgraded (ambiguous) block, and then delete
	// the whole key when it holds no location it reads (its empty-key recycle); it deletes
	// any key whose last location it removed, where kvcm-gc keeps it (empty_block: keep);
	// its orphan rule reads create_time alone; and in the legacy layout it rewrites
	// __lru_time__ with each of its writes.
	up *soakUpstream
	// Upgraded blocks upstream's GC deleted, with the legacy locations they held.
	upstreamDropped, upstreamDroppedLocs int
	// upstreamChanged are the keys upstream's GC changed as kvcm-gc would not have: it took a
	// location kvcm-gc keeps (fate Either), or deleted an upgraded block. The sweep's
	// expectation of the files those blocks name does not hold any more.
	upstreamChanged map[string]bool
}

// newSoakModel builds the model from the seeded keyspace: the snapshot before collection and
// the manifest's expectations.
func newSoakModel(before Snapshot, base []Loc, m *seed.Manifest, empty string, up *soakUpstream,
	g graces) (*soakModel, error) {
	sm := &soakModel{keys: map[string]*mkey{}, empty: empty, marks: map[locRef]uint64{}, collected: map[string]bool{}, up: up,
		upstreamChanged: map[string]bool{}, writes: map[string]uint64{}, lost: map[locRef]lostLoc{}, grace: g}
	start := time.Now()
	collected := map[string]bool{}
	for _, inst := range m.Instances {
		collected[inst] = true
	}
	kinds := map[string]string{}
	for _, l := range m.Locations {
		kinds[kvcm.BlockKey(l.Instance, l.Key)+"/"+l.Location] = l.Kind
	}
	for k, v := range before {
		mk := &mkey{val: v, locs: map[string]*mloc{}}
		if inst, block, ok := blockOf(k, collected); ok {
			mk.inst, mk.block = inst, block
			mk.writable = writableValue(v)
		}
		sm.keys[k] = mk
	}
	for _, l := range base {
		mk := sm.keys[l.Key]
		if mk == nil {
			return nil, fmt.Errorf("soak model: location %s/%s of a key the snapshot does not hold", l.Key, l.ID)
		}
		cur, ok := locationIn(mk.val.Fields, l.Field, l.ID)
		if !ok {
			return nil, fmt.Errorf("soak model: location %s/%s is not in its key", l.Key, l.ID)
		}
		field := l.Field
		if field == "" {
			field = kvcm.FieldURI
		}
		ml := &mloc{id: l.ID, field: field, raw: slices.Clone(cur.Raw), status: cur.Status, fate: l.Fate,
			files: l.Files, keepFiles: l.keepsFiles(), kind: kinds[l.Key+"/"+l.ID]}
		mk.locs[l.ID] = ml
		if ml.fate == Keep && up.judges(cur, field) {
			ml.fate, ml.keepSince = Either, start // upstream's GC may take it, kvcm-gc keeps it
		}
		if ml.fate == Go {
			sm.undue = append(sm.undue, ml)
		} else {
			sm.watchAging(l.Key, mk, ml, start)
		}
	}
	// The blocks the sweep's seeded files are judged by stay as seeded, so each file's fate
	// stays the seed's.
	for _, f := range m.SweepFiles {
		n, err := kvcm.ParseBlockFileName(strings.TrimPrefix(f.Path, m.SweepRoot))
		if err != nil {
			continue
		}
		for _, sp := range n.Splits() {
			if mk := sm.keys[kvcm.BlockKey(sp.Instance, n.Key)]; mk != nil && collected[sp.Instance] {
				mk.writable = false
			}
		}
	}
	for k, mk := range sm.keys {
		if mk.writable {
			sm.writableKeys = append(sm.writableKeys, k)
		}
	}
	slices.Sort(sm.writableKeys)
	return sm, nil
}

// blockOf parses a block key of one of the collected instances.
func blockOf(key string, collected map[string]bool) (string, int64, bool) {
	for inst := range collected {
		if strings.HasPrefix(key, kvcm.KeyPrefix(inst)) {
			if b, err := kvcm.ParseBlockKey(inst, key); err == nil {
				return inst, b, true
			}
		}
	}
	return "", 0, false
}

// writableValue reports whether KVCM of one layout could write a key holding v: a hash in one
// layout whose every location decodes, with no tombstone.
func writableValue(v Value) bool {
	if v.Type != "hash" {
		return false
	}
	switch kvcm.LayoutOfFields(v.Fields) {
	case kvcm.LayoutLegacy:
		blk, err := kvcm.DecodeBlock([]byte(v.Fields[kvcm.FieldURI]))
		if err != nil {
			return false
		}
		for _, l := range blk.Locations {
			if l.Err != nil {
				return false
			}
		}
		return true
	case kvcm.LayoutLocation:
		for f, raw := range v.Fields {
			id, ok := kvcm.LocationID(f)
			if !ok {
				continue
			}
			if raw == "" {
				return false // a tombstone
			}
			if l, err := kvcm.DecodeLocation(id, []byte(raw)); err != nil || l.Err != nil {
				return false
			}
		}
		return true
	}
	return false
}

// gcMarked reports whether cur is the location whose KVCM bytes are raw with only the status
// changed to DELETING: a collector's mark (kvcm-gc's CAS, or upstream's).
func gcMarked(raw, cur []byte) bool {
	want, err := kvcm.LocationWithStatus(raw, kvcm.StatusDeleting)
	return err == nil && string(want) == string(cur)
}

// checkReport is what one check found.
type checkReport struct {
	// Full: every key was read (the stores SCANned too); otherwise Keys were the keys written
	// since the last check, those holding garbage due, those marked at the last one and a
	// share of the others in turn.
	Full      bool
	Keys      int
	Live      int // Keep locations read, all present with KVCM's bytes
	Garbage   int // Go locations still present (not due yet)
	Due       int // Go locations due by this check still present (each a problem)
	Gone      int // garbage locations found gone (since the last check)
	Marked    int // locations in a collector's DELETING mark right now
	Stranded  int // marks that were there at the last check too
	Refreshed int // legacy blocks whose __lru_time__ upstream's GC rewrote
	FilesSeen int
	// Again: keys read again because KVCM wrote them while they were read; Held: keys read
	// while holding the model at last (KVCM wrote them at every try).
	Again, Held int
	seed.Mismatches
}

// locRef names one location of one key.
type locRef struct{ key, id string }

func (l locRef) String() string { return l.key + "/" + l.id }

// checkBatch is how many keys one check reads at a time.
const checkBatch = 256

// checkScope is what one check reads: every key there is or the model expects (full), or
// the keys named (by store: -1 the first, where the workload writes).
type checkScope struct {
	full bool
	keys map[string]int
}

// check compares the keys of scope with the model after the end of round `after` (its garbage
// locations due by then must be gone), then forgets what it found gone. It reads Redis without
// holding the model, so KVCM's workload keeps its pace: a key KVCM wrote meanwhile is read
// again, and after a few tries read while holding the model.
func (sm *soakModel) check(ctx context.Context, rdbs []redis.UniversalClient, after uint64, slack func(due uint64) uint64, scope checkScope) (checkReport, error) {
	r := checkReport{Full: scope.full}
	names := map[string]int{}
	for k, i := range scope.keys {
		names[k] = i
	}
	if scope.full {
		for i, rdb := range rdbs {
			keys, err := scanRetrying(ctx, rdb)
			if err != nil {
				return r, err
			}
			for _, k := range keys {
				names[k] = i
			}
		}
		sm.mu.Lock()
		for k := range sm.keys {
			if _, ok := names[k]; !ok {
				names[k] = -1
			}
		}
		sm.mu.Unlock()
	}
	all := slices.Sorted(maps.Keys(names))
	for start := 0; start < len(all); start += checkBatch {
		batch := all[start:min(start+checkBatch, len(all))]
		if err := sm.checkKeys(ctx, rdbs, names, batch, after, slack, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// readTries is how many times a check reads a key KVCM keeps writing before it reads it
// holding the model; compareRun is how many keys it compares holding the model at a time.
const (
	readTries  = 3
	compareRun = 16
)

// checkKeys checks keys: read without the model, compared holding it, those KVCM wrote in
// between read again.
func (sm *soakModel) checkKeys(ctx context.Context, rdbs []redis.UniversalClient, store map[string]int, keys []string,
	after uint64, slack func(uint64) uint64, r *checkReport) error {
	for try := 0; len(keys) > 0; try++ {
		held := try == readTries
		sm.mu.Lock()
		seen := make([]uint64, len(keys))
		for i, k := range keys {
			seen[i] = sm.writes[k]
		}
		if !held {
			sm.mu.Unlock()
		}
		got, err := readRetrying(ctx, rdbs, store, keys)
		if !held {
			sm.mu.Lock()
		}
		if err != nil {
			sm.mu.Unlock()
			return err
		}
		var again []string
		for i, k := range keys {
			// The model is let go every compareRun keys, so KVCM's workload waits for no more
			// than that many comparisons (a key it writes meanwhile is read again).
			if i > 0 && i%compareRun == 0 && !held {
				sm.mu.Unlock()
				sm.mu.Lock()
			}
			if sm.writes[k] != seen[i] {
				again = append(again, k)
				continue
			}
			if err := sm.compareKey(k, got, after, slack, r); err != nil {
				sm.mu.Unlock()
				return err
			}
		}
		sm.mu.Unlock()
		if held {
			r.Held += len(keys)
			return nil
		}
		r.Again += len(again)
		keys = again
	}
	return nil
}

// compareKey compares key k as read (got) with the model, which is held.
func (sm *soakModel) compareKey(k string, got map[string]Value, after uint64, slack func(uint64) uint64, r *checkReport) error {
	r.Keys++
	cur, exists := got[k]
	mk := sm.keys[k]
	if mk == nil {
		if exists {
			r.Problem("%s: key appeared, nobody wrote it", k)
		}
		return nil
	}
	if exists && sm.acceptLRU(k, mk, cur) {
		r.Refreshed++
	}
	if !exists && sm.up != nil && kvcm.LayoutOfFields(mk.val.Fields) == kvcm.LayoutAmbiguous {
		// Upstream's GC took the block's last L# location and then the key: the legacy
		// locations went with it (today's KVCM does not see them).
		sm.upstreamDropped++
		sm.upstreamDroppedLocs += len(mk.locs)
		sm.upstreamChanged[k] = true
		for id, l := range mk.locs {
			sm.noteGone(k, id, l, after)
			delete(sm.marks, locRef{k, id})
		}
		r.Gone += len(mk.locs)
		delete(sm.keys, k)
		sm.dropWritable(k)
		return nil
	}
	var gone []Loc
	for _, id := range slices.Sorted(maps.Keys(mk.locs)) {
		l := mk.locs[id]
		lc := Loc{Key: k, ID: id, Field: l.field}
		present := exists && in(cur, lc)
		if !present {
			switch l.fate {
			case Keep:
				r.Problem("%s/%s (%s, %s): live location gone", k, id, l.kind, l.status)
			case Either:
				sm.upstreamChanged[k] = true
				sm.noteGone(k, id, l, after)
			}
			gone = append(gone, lc)
			continue
		}
		switch l.fate {
		case Keep:
			r.Live++
		case Go:
			if l.due > 0 && l.due+1+slack(l.due) <= after {
				r.Due++
				r.Problem("%s/%s (%s): garbage since round %d still there after round %d", k, id, l.kind, l.due, after)
			} else {
				r.Garbage++
			}
		}
	}
	want, mayVanish, err := sm.expected(mk.val, gone)
	if err != nil {
		r.Problem("%s: %v", k, err)
		return nil
	}
	if want != nil && exists && want.Type == "hash" {
		// A collector's mark on a location it may collect is a state on the way.
		if err := sm.allowMarks(k, mk, want, cur, after, r); err != nil {
			return err
		}
	}
	switch {
	case want == nil && exists:
		r.Problem("%s: every location went and empty_block is %s, but the key is still there: %s", k, sm.empty, seed.FieldNames(cur.Fields))
	case want != nil && !exists && !mayVanish:
		r.Problem("%s: deleted, but it had live fields (%s)", k, seed.FieldNames(want.Fields))
	case want != nil && exists && !want.equal(cur):
		r.Problem("%s (%s layout): %s", k, kvcm.LayoutOfFields(mk.val.Fields), diff(*want, cur))
	}
	if !exists {
		want = nil
	}
	if err := sm.checkFiles(k, mk, gone, r); err != nil {
		return err
	}
	// What went stays gone: the model forgets it.
	r.Gone += len(gone)
	for _, g := range gone {
		delete(mk.locs, g.ID)
		delete(sm.marks, locRef{k, g.ID})
	}
	if len(gone) > 0 {
		if want == nil {
			delete(sm.keys, k)
			sm.dropWritable(k)
		} else {
			mk.val = Value{Type: want.Type, Fields: maps.Clone(want.Fields), Dump: want.Dump}
			// Marks are not KVCM's bytes: the model keeps the bytes KVCM wrote.
			for _, l := range mk.locs {
				restoreRaw(&mk.val, l)
			}
		}
	}
	return nil
}

// expected is what key val must hold once the locations gone are removed: the form
// empty_block gives a key that lost its last location (nil: no key), or, where upstream's GC
// runs, possibly no key (mayVanish: it deletes a key it emptied). In an upgraded (ambiguous)
// block only upstream's GC removes anything, L# fields alone, and then the key when none is
// left.
func (sm *soakModel) expected(val Value, gone []Loc) (*Value, bool, error) {
	if kvcm.LayoutOfFields(val.Fields) != kvcm.LayoutAmbiguous || len(gone) == 0 {
		want, emptied, err := expected(val, gone, sm.empty)
		return want, emptied && sm.up != nil, err
	}
	want := Value{Type: val.Type, Fields: maps.Clone(val.Fields)}
	for _, g := range gone {
		field := g.Field
		if field == "" {
			field = kvcm.FieldURI
		}
		if !sm.up.inLayout(field) {
			return nil, false, fmt.Errorf("location %s (%s) of an upgraded block gone, which nothing may collect", g.ID, field)
		}
		if field != kvcm.FieldURI {
			delete(want.Fields, field)
			continue
		}
		blk, err := kvcm.DecodeBlock([]byte(want.Fields[kvcm.FieldURI]))
		if err != nil {
			return nil, false, err
		}
		if _, ok := blk.Find(g.ID); !ok {
			continue
		}
		out, empty, err := blk.Without(g.ID)
		if err != nil {
			return nil, false, err
		}
		if empty {
			return nil, false, nil // upstream's CAD emptied the map and DEL'd the key
		}
		want.Fields[kvcm.FieldURI] = string(out)
	}
	if !sm.up.inLayout(kvcm.FieldURI) {
		for f, v := range want.Fields {
			if _, ok := kvcm.LocationID(f); ok && v != "" {
				return &want, false, nil
			}
		}
		return nil, false, nil // no L# location left: upstream DEL'd the key
	}
	return &want, false, nil
}

// acceptLRU takes the __lru_time__ of a legacy block as it is now when upstream's GC rewrote
// it (its CAS and CAD do), and makes the block's WRITING garbage young again (refreshed).
func (sm *soakModel) acceptLRU(k string, mk *mkey, cur Value) bool {
	now, ok := cur.Fields[kvcm.FieldLRUTime]
	if !ok || now == mk.val.Fields[kvcm.FieldLRUTime] || !sm.up.rewroteLRU(k) {
		return false
	}
	mk.val.Fields[kvcm.FieldLRUTime] = now
	refreshed(mk, nil)
	return true
}

// allowMarks puts into want, for every location of mk present in cur in a collector's DELETING
// mark, the marked bytes when the location may be collected (not Keep); the marks are
// recorded, and one seen by a check of an earlier round too is stranded.
func (sm *soakModel) allowMarks(k string, mk *mkey, want *Value, cur Value, after uint64, r *checkReport) error {
	for id, l := range mk.locs {
		ref := locRef{k, id}
		now, ok := locationIn(cur.Fields, l.field, id)
		if !ok || now.Status != kvcm.StatusDeleting || l.status == kvcm.StatusDeleting || !gcMarked(l.raw, now.Raw) {
			delete(sm.marks, ref)
			continue
		}
		r.Marked++
		if first, seen := sm.marks[ref]; !seen {
			sm.marks[ref] = after
		} else if first < after {
			r.Stranded++
			r.Problem("%s: a collector's DELETING mark seen after round %d still there after round %d (stranded)", ref, first, after)
		}
		if l.fate == Keep {
			r.Problem("%s (%s): live location marked DELETING by a collector", ref, l.kind)
			continue
		}
		if err := setLocation(want, l.field, id, now.Raw); err != nil {
			return fmt.Errorf("check %s: %w", ref, err)
		}
	}
	return nil
}

// setLocation sets location id of v (field L#id, or the member of __uri__) to raw.
func setLocation(v *Value, field, id string, raw []byte) error {
	if field != kvcm.FieldURI {
		v.Fields[field] = string(raw)
		return nil
	}
	blk, err := kvcm.DecodeBlock([]byte(v.Fields[kvcm.FieldURI]))
	if err != nil {
		return err
	}
	l, ok := blk.Find(id)
	if !ok {
		return fmt.Errorf("no location %s in __uri__", id)
	}
	if st, err := kvcm.DecodeLocation(id, raw); err == nil && st.Status != l.Status {
		out, err := blk.WithStatus(id, st.Status)
		if err != nil {
			return err
		}
		v.Fields[kvcm.FieldURI] = string(out)
	}
	return nil
}

// restoreRaw puts l's KVCM bytes back into v where a check copied a mark.
func restoreRaw(v *Value, l *mloc) {
	if cur, ok := locationIn(v.Fields, l.field, l.id); ok && string(cur.Raw) != string(l.raw) {
		_ = setLocation(v, l.field, l.id, l.raw)
	}
}

// checkFiles: the files of every live location exist; those of a location kvcm-gc collected
// are gone (unless shared, or left as stuck DELETING data). Upstream's GC leaves files (KVCM's
// NFS delete does nothing), so a location it collected says nothing about its files.
func (sm *soakModel) checkFiles(k string, mk *mkey, gone []Loc, r *checkReport) error {
	for _, l := range mk.locs {
		if l.fate != Keep {
			continue
		}
		for _, f := range l.files {
			r.FilesSeen++
			if _, err := os.Lstat(f); err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("check file %s: %w", f, err)
				}
				r.Problem("%s/%s (%s): live file %s gone", k, l.id, l.kind, f)
			}
		}
	}
	for _, g := range gone {
		l := mk.locs[g.ID]
		if l.keepFiles || !sm.collected[k+"/"+g.ID] {
			continue
		}
		for _, f := range l.files {
			if _, err := os.Lstat(f); err == nil {
				r.Problem("%s/%s (%s): collected by kvcm-gc, but its file %s is still there", k, l.id, l.kind, f)
			}
		}
	}
	return nil
}

func (sm *soakModel) dropWritable(k string) {
	if i, ok := slices.BinarySearch(sm.writableKeys, k); ok {
		sm.writableKeys = slices.Delete(sm.writableKeys, i, i+1)
	}
}

func (sm *soakModel) addWritable(k string) {
	if i, ok := slices.BinarySearch(sm.writableKeys, k); !ok {
		sm.writableKeys = slices.Insert(sm.writableKeys, i, k)
	}
}

// garbage makes l garbage (the model is held).
func (sm *soakModel) garbage(l *mloc) {
	l.fate, l.due = Go, 0
	sm.undue = append(sm.undue, l)
}

// takeUndue returns the garbage locations no round has been given yet: those garbage by now
// (a WRITING location ripened a moment before it is an orphan waits for that moment).
func (sm *soakModel) takeUndue() []*mloc { return sm.takeUndueAt(time.Now()) }

func (sm *soakModel) takeUndueAt(now time.Time) []*mloc {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	var out, later []*mloc
	for _, l := range sm.undue {
		if l.orphanAt.After(now) {
			later = append(later, l)
		} else {
			out = append(out, l)
		}
	}
	sm.undue = later
	return out
}

// assignDue gives each of locs (taken by takeUndue before the checkpoint was read that shows
// round) that round: they existed before the next round started, so by that one's end they
// must be gone.
func (sm *soakModel) assignDue(locs []*mloc, round uint64) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, l := range locs {
		if l.fate == Go && l.due == 0 {
			l.due = round
		}
	}
}

// giveBack returns locs to the undue ones (the checkpoint could not be read).
func (sm *soakModel) giveBack(locs []*mloc) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.undue = append(sm.undue, locs...)
}

// changedByUpstream reports whether upstream's GC changed key as kvcm-gc would not have.
func (sm *soakModel) changedByUpstream(key string) bool {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.upstreamChanged[key]
}

// noteCollected records a location kvcm-gc's delete events say it removed, and returns what is
// wrong with that ("" when nothing is): the model still holds it live, or as an Either
// location kvcm-gc had to keep (its compare-and-swap came after the moment it had to keep it
// from: the location was intact then).
func (sm *soakModel) noteCollected(key, id string) string {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.collected[key+"/"+id] = true
	kind := "forgotten"
	var wrong string
	if mk := sm.keys[key]; mk != nil && mk.locs[id] != nil {
		l := mk.locs[id]
		kind = l.kind + "/" + fmt.Sprint(l.fate)
		if !l.refreshedAt.IsZero() {
			sm.afterRefresh++
		}
		switch {
		case l.fate == Keep:
			wrong = fmt.Sprintf("%s/%s (%s): kvcm-gc's delete event names a live location", key, id, l.kind)
		case l.fate == Either && !l.keepSince.IsZero():
			wrong = fmt.Sprintf("%s/%s (%s): deleted by kvcm-gc, which had to keep it from %s on (upstream's GC alone may take it)",
				key, id, l.kind, l.keepSince.Format(time.RFC3339Nano))
		}
	}
	if sm.collectedKinds == nil {
		sm.collectedKinds = map[string]int{}
	}
	sm.collectedKinds[kind]++
	return wrong
}

// counts returns the locations of each fate.
func (sm *soakModel) counts() (keys int, fates map[Fate]int) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	fates = map[Fate]int{}
	for _, mk := range sm.keys {
		for _, l := range mk.locs {
			fates[l.fate]++
		}
	}
	return len(sm.keys), fates
}

// readValues reads keys (each from its store; -1: the first) as TakeSnapshot does, pipelined.
func readValues(ctx context.Context, rdbs []redis.UniversalClient, store map[string]int, keys []string) (map[string]Value, error) {
	out := map[string]Value{}
	byStore := map[int][]string{}
	for _, k := range keys {
		byStore[max(store[k], 0)] = append(byStore[max(store[k], 0)], k)
	}
	for i, ks := range byStore {
		rdb := rdbs[i]
		types := make([]*redis.StatusCmd, len(ks))
		p := rdb.Pipeline()
		for j, k := range ks {
			types[j] = p.Type(ctx, k)
		}
		if _, err := p.Exec(ctx); err != nil {
			return nil, fmt.Errorf("check: read types: %w", err)
		}
		hashes := map[string]*redis.MapStringStringCmd{}
		dumps := map[string]*redis.StringCmd{}
		p = rdb.Pipeline()
		for j, k := range ks {
			switch types[j].Val() {
			case "none":
			case "hash":
				hashes[k] = p.HGetAll(ctx, k)
			default:
				dumps[k] = p.Dump(ctx, k)
			}
		}
		if len(hashes)+len(dumps) == 0 {
			continue
		}
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("check: read values: %w", err)
		}
		for k, c := range hashes {
			if len(c.Val()) > 0 { // gone between TYPE and HGETALL: an empty hash is no key
				out[k] = Value{Type: "hash", Fields: c.Val()}
			}
		}
		for k, c := range dumps {
			if c.Err() == nil {
				out[k] = Value{Type: typeOf(types, ks, k), Dump: c.Val()}
			}
		}
	}
	return out, nil
}

func typeOf(types []*redis.StatusCmd, keys []string, k string) string {
	if i := slices.Index(keys, k); i >= 0 {
		return types[i].Val()
	}
	return ""
}

// hexKey is a block key as KVCM names its per-block files.
func hexKey(block int64) string { return strconv.FormatUint(uint64(block), 16) }

// lostLoc is an Either location kvcm-gc had to keep, found gone.
type lostLoc struct {
	since time.Time // keepSince
	kind  string
	found uint64 // the round after which it was found gone
}

// noteGone records that location id of key k (held in the model) is gone, found by the check after
// round `after` or KVCM's read: an Either location kvcm-gc had to keep waits for the
// collectors' records to say whose removal it was (resolveLost).
func (sm *soakModel) noteGone(k, id string, l *mloc, after uint64) {
	if l.fate == Either && !l.keepSince.IsZero() {
		sm.lost[locRef{k, id}] = lostLoc{since: l.keepSince, kind: l.kind, found: after}
	}
}

// lostWait is how many rounds a lost location waits for a collector's record of its removal:
// kvcm-gc's delete event is read after its round's drain, upstream's removal as it happens.
const lostWait = 3

// resolveLost judges the lost locations by the collectors' records after round r: one kvcm-gc's
// delete events name is a violation (it deleted what it had to keep); one upstream's GC removed
// is upstream's right; one neither names after lostWait rounds is a violation too (something
// removed a location nobody may have).
func (sm *soakModel) resolveLost(r uint64, byUpstream func(locRef) bool) []string {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	var out []string
	for _, ref := range slices.SortedFunc(maps.Keys(sm.lost), func(a, b locRef) int { return strings.Compare(a.String(), b.String()) }) {
		ll := sm.lost[ref]
		switch {
		case sm.collected[ref.String()]:
			out = append(out, fmt.Sprintf("%s (%s): deleted by kvcm-gc, which had to keep it from %s on (upstream's GC alone may take it)",
				ref, ll.kind, ll.since.Format(time.RFC3339Nano)))
		case byUpstream(ref):
		case r >= ll.found+lostWait:
			out = append(out, fmt.Sprintf("%s (%s): gone since round %d, and neither kvcm-gc's events nor upstream's GC name its removal",
				ref, ll.kind, ll.found))
		default:
			continue
		}
		delete(sm.lost, ref)
	}
	return out
}

// wrote records, holding the model, that the workload is writing key: a check that read it
// meanwhile reads it again.
func (sm *soakModel) wrote(key string) { sm.writes[key]++ }

// scope is what the check after round `after` reads: the keys written since the last check
// (touched; each of its store), the keys of the marks seen, of the garbage due by now
// (slack as in check), and the next share of every key in turn, so that each is read at least
// every `every` rounds; or every key (full), which also starts the turn over.
func (sm *soakModel) scope(after uint64, touched map[string]int, full bool, every int, slack func(uint64) uint64) checkScope {
	if full {
		sm.mu.Lock()
		sm.turn = nil
		sm.mu.Unlock()
		return checkScope{full: true}
	}
	keys := map[string]int{}
	for k, i := range touched {
		keys[k] = i
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	add := func(k string) {
		if _, ok := keys[k]; !ok {
			keys[k] = -1
		}
	}
	for ref := range sm.marks {
		add(ref.key)
	}
	for k, mk := range sm.keys {
		for _, l := range mk.locs {
			if l.fate == Go && l.due > 0 && l.due+1+slack(l.due) <= after {
				add(k)
				break
			}
		}
	}
	if len(sm.turn) == 0 {
		sm.turn = slices.Sorted(maps.Keys(sm.keys))
		sm.turnSize = (len(sm.turn) + max(every, 1) - 1) / max(every, 1)
	}
	n := min(sm.turnSize, len(sm.turn))
	for _, k := range sm.turn[:n] {
		add(k)
	}
	sm.turn = sm.turn[n:]
	return checkScope{keys: keys}
}

// outageWait bounds how long a check waits for a store that does not answer: a fault may be
// restarting it.
const outageWait = 2 * time.Minute

// readRetrying is readValues, tried again while the stores do not answer, for up to
// outageWait.
func readRetrying(ctx context.Context, rdbs []redis.UniversalClient, store map[string]int, keys []string) (map[string]Value, error) {
	deadline := time.Now().Add(outageWait)
	for {
		got, err := readValues(ctx, rdbs, store, keys)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return got, err
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// scanRetrying lists every key of rdb, starting over while it does not answer, for up to
// outageWait.
func scanRetrying(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	deadline := time.Now().Add(outageWait)
	for {
		var all []string
		var cursor uint64
		var err error
		for {
			var keys []string
			keys, cursor, err = rdb.Scan(ctx, cursor, "*", 1000).Result()
			if err != nil {
				break
			}
			all = append(all, keys...)
			if cursor == 0 {
				return all, nil
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("check: scan: %w", err)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// graces are the ages at which a WRITING location is an orphan, as the run's collectors read
// them: kvcm-gc's prober by block layout (prober.Config.WritingGrace: orphan_writing_grace,
// or with kvcm_gc kvcm_gc_grace + kvcm_gc_margin in the location layout), and upstream's GC
// (KVCM's own, kvcm_gc_grace).
type graces struct {
	location, legacy, upstream time.Duration
}

// of is kvcm-gc's grace for a block of layout.
func (g graces) of(layout kvcm.Layout) time.Duration {
	if layout == kvcm.LayoutLegacy {
		return g.legacy
	}
	return g.location
}

// stageGraces reads the graces from the flags every stage process runs with and the
// environment it inherits, as a stage's own configuration loads them: the model then judges
// by the settings the stages run with, whatever the defaults become.
func stageGraces(args []string) (graces, error) {
	fs := flag.NewFlagSet("stage", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := config.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return graces{}, fmt.Errorf("read the stages' flags: %w", err)
	}
	c, err := f.Load(os.LookupEnv)
	if err != nil {
		return graces{}, fmt.Errorf("read the stages' configuration: %w", err)
	}
	_, pc, _ := c.StageConfigs()
	return graces{location: pc.WritingGrace(subjects.LayoutLocation), legacy: pc.WritingGrace(subjects.LayoutLegacy),
		upstream: pc.KVCMGCGrace}, nil
}

// orphanAt is when kvcm-gc's prober takes WRITING location l of mk as an orphan: its age as
// the prober reads it (prober.WritingAge: create_time, and in the legacy layout the block's
// __lru_time__ too, so a write of the block moves the moment) past the grace of the block's
// layout. false: never (not WRITING, an age unknown or in the future, a block of both layouts
// kvcm-gc does not judge).
func (sm *soakModel) orphanAt(mk *mkey, l *mloc, now time.Time) (time.Time, bool) {
	layout := kvcm.LayoutOfFields(mk.val.Fields)
	name := subjects.LayoutLocation
	switch {
	case l.status != kvcm.StatusWriting:
		return time.Time{}, false
	case layout == kvcm.LayoutLegacy:
		name = subjects.LayoutLegacy
	case layout != kvcm.LayoutLocation:
		return time.Time{}, false
	}
	loc, err := kvcm.DecodeLocation(l.id, l.raw)
	if err != nil || loc.Err != nil {
		return time.Time{}, false
	}
	now = time.UnixMicro(now.UnixMicro()) // ages are whole µs: the moment stays put
	age, ok := prober.WritingAge(&loc, name, mk.val.Fields[kvcm.FieldLRUTime], now)
	if !ok {
		return time.Time{}, false
	}
	return now.Add(sm.grace.of(layout) - age), true
}

// watchAging follows live (or Either) WRITING location l of key k (the model is held) until
// it is an orphan: its orphanAt, and its upstreamAt when upstream's GC, reading create_time
// alone against its own grace, may take it earlier (then it is Either from that moment: a
// delete of kvcm-gc's is still a violation). Only a location kvcm-gc keeps for its age alone
// ages: one of a collected instance's block, within the grace now. One past it already is
// kept for another reason (a copy target, an instance whose store is cached), and stays so.
func (sm *soakModel) watchAging(k string, mk *mkey, l *mloc, now time.Time) {
	at, ok := sm.orphanAt(mk, l, now)
	if !ok || l.fate == Go || mk.inst == "" || !at.After(now) {
		return
	}
	l.orphanAt, l.upstreamAt = at, time.Time{}
	if loc, err := kvcm.DecodeLocation(l.id, l.raw); err == nil && l.fate == Keep && sm.up.inLayout(l.field) &&
		loc.HasCreateTime && loc.CreateTimeUs > 0 {
		if up := time.UnixMicro(loc.CreateTimeUs).Add(sm.grace.upstream); up.Before(at) {
			l.upstreamAt = up
		}
	}
	sm.upstreamMay(l, now)
	sm.aging = append(sm.aging, locRef{k, l.id})
	sm.agingNext = earliest(sm.agingNext, sm.nextAging(l))
}

// upstreamMay makes l Either once upstream's GC may take it.
func (sm *soakModel) upstreamMay(l *mloc, now time.Time) {
	if l.fate == Keep && !l.upstreamAt.IsZero() && !now.Before(l.upstreamAt) {
		l.fate, l.keepSince = Either, now
	}
}

// nextAging is the next moment aging location l changes fate: Either when upstream's GC may
// take it, garbage ripenEarly before it is an orphan.
func (sm *soakModel) nextAging(l *mloc) time.Time {
	next := l.orphanAt.Add(-ripenEarly)
	if l.fate == Keep && !l.upstreamAt.IsZero() {
		next = earliest(next, l.upstreamAt)
	}
	return next
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// ripening takes the aging locations that are orphans in ripenEarly or less at now (the model
// is held), each with its orphanAt computed again (a write of its legacy block delays it),
// and makes those upstream's GC may take Either; the others stay.
func (sm *soakModel) ripening(now time.Time) []locRef {
	if len(sm.aging) == 0 || now.Before(sm.agingNext) {
		return nil
	}
	var out, keep []locRef
	sm.agingNext = time.Time{}
	for _, ref := range sm.aging {
		mk := sm.keys[ref.key]
		if mk == nil || mk.locs[ref.id] == nil {
			continue // gone: a check or KVCM's read judged it
		}
		l := mk.locs[ref.id]
		at, ok := sm.orphanAt(mk, l, now)
		if !ok || l.fate == Go {
			continue // KVCM rewrote it, or it is garbage already
		}
		l.orphanAt = at
		sm.upstreamMay(l, now)
		if now.Before(at.Add(-ripenEarly)) {
			keep = append(keep, ref)
			sm.agingNext = earliest(sm.agingNext, sm.nextAging(l))
			continue
		}
		out = append(out, ref)
	}
	sm.aging = keep
	return out
}
