package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
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
	// kind is what made it (seed kinds, or the workload's: session, orphan, deleting, stuck,
	// upgrade, legacy).
	kind string
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
	// marked are the locations seen in kvcm-gc's (or upstream's) DELETING at the last check, by
	// "<key>/<id>": still so at the next one, they are stranded.
	marked map[string]bool
	// collected are the locations kvcm-gc's delete events say it removed, by "<key>/<id>";
	// their unshared files must be gone.
	collected map[string]bool
	// collectedKinds counts them by the kind and fate the model had for them.
	collectedKinds map[string]int
	// undue are the garbage locations no round has started on yet.
	undue []*mloc
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
func newSoakModel(before Snapshot, base []Loc, m *seed.Manifest, empty string, up *soakUpstream) (*soakModel, error) {
	sm := &soakModel{keys: map[string]*mkey{}, empty: empty, marked: map[string]bool{}, collected: map[string]bool{}, up: up,
		upstreamChanged: map[string]bool{}}
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
			ml.fate = Either // upstream's GC may take it, kvcm-gc keeps it
		}
		if ml.fate == Go {
			sm.undue = append(sm.undue, ml)
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
	switch layoutOf(v.Fields) {
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

// checkReport is what one check of the whole keyspace found.
type checkReport struct {
	Keys      int
	Live      int // Keep locations, all present with KVCM's bytes
	Garbage   int // Go locations still present (not due yet)
	Due       int // Go locations due by this check (all must be gone)
	Gone      int // garbage locations found gone (since the last check)
	Marked    int // locations in a collector's DELETING mark right now
	Stranded  int // marks that were there at the last check too
	Refreshed int // legacy blocks whose __lru_time__ upstream's GC rewrote
	FilesSeen int
	Problems  []string
	Mismatch  int
}

func (r *checkReport) problem(format string, a ...any) {
	r.Mismatch++
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
}

// checkBatch is how many keys one check reads and compares while holding the model: the
// workload waits at most that long.
const checkBatch = 256

// check compares every key of the stores with the model after the end of round `after` (its
// garbage locations due by then must be gone), then forgets what it found gone. The workload
// keeps writing between batches; within a batch the model and Redis agree on KVCM's writes.
func (sm *soakModel) check(ctx context.Context, rdbs []redis.UniversalClient, after uint64, slack func(due uint64) uint64) (checkReport, error) {
	var r checkReport
	// Every key there is, or the model expects.
	names := map[string]int{}
	for i, rdb := range rdbs {
		var cursor uint64
		for {
			keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
			if err != nil {
				return r, fmt.Errorf("check: scan: %w", err)
			}
			for _, k := range keys {
				names[k] = i
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	sm.mu.Lock()
	for k := range sm.keys {
		if _, ok := names[k]; !ok {
			names[k] = -1 // read from the first store, where the workload writes
		}
	}
	sm.mu.Unlock()
	all := slices.Sorted(maps.Keys(names))
	marked := map[string]bool{}
	for start := 0; start < len(all); start += checkBatch {
		batch := all[start:min(start+checkBatch, len(all))]
		if err := sm.checkKeys(ctx, rdbs, names, batch, after, slack, marked, &r); err != nil {
			return r, err
		}
	}
	sm.mu.Lock()
	sm.marked = marked
	sm.mu.Unlock()
	return r, nil
}

func (sm *soakModel) checkKeys(ctx context.Context, rdbs []redis.UniversalClient, store map[string]int, keys []string,
	after uint64, slack func(uint64) uint64, marked map[string]bool, r *checkReport) error {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	got, err := readValues(ctx, rdbs, store, keys)
	if err != nil {
		return err
	}
	for _, k := range keys {
		r.Keys++
		cur, exists := got[k]
		mk := sm.keys[k]
		if mk == nil {
			if exists {
				r.problem("%s: key appeared, nobody wrote it", k)
			}
			continue
		}
		if exists && sm.acceptLRU(k, mk, cur) {
			r.Refreshed++
		}
		if !exists && sm.up != nil && layoutOf(mk.val.Fields) == kvcm.LayoutAmbiguous {
			// Upstream's GC took the block's last L# location and then the key: the legacy
			// locations went with it (today's KVCM does not see them).
			sm.upstreamDropped++
			sm.upstreamDroppedLocs += len(mk.locs)
			sm.upstreamChanged[k] = true
			r.Gone += len(mk.locs)
			delete(sm.keys, k)
			sm.dropWritable(k)
			continue
		}
		var gone []Loc
		for _, id := range slices.Sorted(maps.Keys(mk.locs)) {
			l := mk.locs[id]
			lc := Loc{Key: k, ID: id, Field: l.field}
			present := exists && in(cur, lc)
			if !present {
				switch l.fate {
				case Keep:
					r.problem("%s/%s (%s, %s): live location gone", k, id, l.kind, l.status)
				case Either:
					sm.upstreamChanged[k] = true
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
					r.problem("%s/%s (%s): garbage since round %d still there after round %d", k, id, l.kind, l.due, after)
				} else {
					r.Garbage++
				}
			}
		}
		want, mayVanish, err := sm.expected(mk.val, gone)
		if err != nil {
			r.problem("%s: %v", k, err)
			continue
		}
		if want != nil && exists && want.Type == "hash" {
			// A collector's mark on a location it may collect is a state on the way.
			if err := sm.allowMarks(k, mk, want, cur, marked, r); err != nil {
				return err
			}
		}
		switch {
		case want == nil && exists:
			r.problem("%s: every location went and empty_block is %s, but the key is still there: %s", k, sm.empty, fieldNames(cur.Fields))
		case want != nil && !exists && !mayVanish:
			r.problem("%s: deleted, but it had live fields (%s)", k, fieldNames(want.Fields))
		case want != nil && exists && !want.equal(cur):
			r.problem("%s (%s layout): %s", k, layoutOf(mk.val.Fields), diff(*want, cur))
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
	}
	return nil
}

// expected is what key val must hold once the locations gone are removed: the form
// empty_block gives a key that lost its last location (nil: no key), or, where upstream's GC
// runs, possibly no key (mayVanish: it deletes a key it emptied). In an upgraded (ambiguous)
// block only upstream's GC removes anything, L# fields alone, and then the key when none is
// left.
func (sm *soakModel) expected(val Value, gone []Loc) (*Value, bool, error) {
	if layoutOf(val.Fields) != kvcm.LayoutAmbiguous || len(gone) == 0 {
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
	refreshed(mk)
	return true
}

// allowMarks puts into want, for every location of mk present in cur in a collector's DELETING
// mark, the marked bytes when the location may be collected (not Keep); the marks are
// recorded, and one seen at the last check too is stranded.
func (sm *soakModel) allowMarks(k string, mk *mkey, want *Value, cur Value, marked map[string]bool, r *checkReport) error {
	for id, l := range mk.locs {
		now, ok := locationIn(cur.Fields, l.field, id)
		if !ok || now.Status != kvcm.StatusDeleting || l.status == kvcm.StatusDeleting || !gcMarked(l.raw, now.Raw) {
			continue
		}
		r.Marked++
		name := k + "/" + id
		marked[name] = true
		if sm.marked[name] {
			r.Stranded++
			r.problem("%s: a collector's DELETING mark still there a round later (stranded)", name)
		}
		if l.fate == Keep {
			r.problem("%s (%s): live location marked DELETING by a collector", name, l.kind)
			continue
		}
		if err := setLocation(want, l.field, id, now.Raw); err != nil {
			return fmt.Errorf("check %s: %w", name, err)
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
				r.problem("%s/%s (%s): live file %s gone", k, l.id, l.kind, f)
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
				r.problem("%s/%s (%s): collected by kvcm-gc, but its file %s is still there", k, l.id, l.kind, f)
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

// takeUndue returns the garbage locations no round has been given yet.
func (sm *soakModel) takeUndue() []*mloc {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	out := sm.undue
	sm.undue = nil
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

// noteCollected records a location kvcm-gc's delete events say it removed.
func (sm *soakModel) noteCollected(key, id string) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.collected[key+"/"+id] = true
	kind := "forgotten"
	if mk := sm.keys[key]; mk != nil && mk.locs[id] != nil {
		kind = mk.locs[id].kind + "/" + fmt.Sprint(mk.locs[id].fate)
	}
	if sm.collectedKinds == nil {
		sm.collectedKinds = map[string]int{}
	}
	sm.collectedKinds[kind]++
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
