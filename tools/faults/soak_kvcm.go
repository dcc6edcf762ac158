package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// kvcmWorkload plays KVCM on the soak's keyspace, all the time, in the layout of each key (the
// run's layout for new blocks; in the location run an old KVCM still writes a few legacy
// blocks, as in a rolling upgrade):
//   - write sessions: StartWrite adds a WRITING location (create_time now; its data file
//     written), FinishWrite makes it SERVING a moment later;
//   - reads (HGETALL of a few blocks);
//   - deletes through KVCM's DELETING protocol: a SERVING location is set DELETING, and a
//     moment later the delete executor removes it (its CAD; the key goes with its last
//     location); KVCM's NFS delete does nothing, so the file stays, nobody's data now;
//   - crashed writers: a WRITING location whose session died long enough ago to be an orphan
//     (create_time, and in the legacy layout the block's last write, past the grace): garbage;
//   - failovers: a location set DELETING whose executor was lost with the old leader, stuck for
//     good (collect_deleting is off: it is KVCM's, never kvcm-gc's);
//   - storage losses: the data file of a SERVING location disappears: garbage;
//   - upgrades: today's KVCM writes an L# field into a legacy block, which is then ambiguous and
//     must stay byte for byte.
//
// Each write is one WATCH/MULTI read-modify-write, made while holding the model, so the model
// always knows what KVCM wrote. What KVCM reads back tells the model what the collectors
// removed meanwhile (only garbage may go).
type kvcmWorkload struct {
	sm     *soakModel
	rdb    redis.UniversalClient
	layout kvcm.Layout
	root   string // nfs_01's root
	grace  time.Duration
	insts  []string
	period time.Duration
	// target is the number of live locations the workload keeps (the seed's); liveCount the
	// last count (by the run goroutine only).
	target                int
	liveCount, sinceCount int

	// gate is held by the workload around each operation; a Redis fault holds it instead, so no
	// write is in flight when Redis goes.
	gate sync.Mutex

	mu       sync.Mutex // rng, pending
	rng      *rand.Rand
	sessions []pending
	deletes  []pending
	problems boundedLog
	// crashAge bounds how long after its crash a crashed session is an orphan (drawn in
	// between).
	crashAge [2]time.Duration

	// Counters since the start (ops by name, garbage made, steps taken), read per round.
	steps       atomic.Int64
	waited      atomic.Int64 // ns spent waiting for the model in writes
	ops         sync.Map     // name → *atomic.Int64
	garbageMade atomic.Int64
	failures    writeFailures
	lostRaces   atomic.Int64 // an upgrade over a collector's mark
}

// pending is a step KVCM takes later: finishing a write session, or the delete executor.
type pending struct {
	key, id string
	at      time.Time
}

// workload weights: the chance of each operation per tick. KVCM's writes add live locations
// and its deletes, failovers and storage losses take them away: run (which turns a session
// into a delete while there are more live locations than at the start) keeps their number,
// and so the work of each round, about the same from round to round.
var workloadOps = []struct {
	name   string
	weight int
}{
	{"read", 40}, {"start", 20}, {"delete", 12}, {"orphan", 6}, {"crash", 2}, {"lose", 6}, {"failover", 1}, {"upgrade", 2}, {"legacy", 3},
}

func newKVCMWorkload(sm *soakModel, rdb redis.UniversalClient, layout kvcm.Layout, root string, insts []string,
	period time.Duration, crashAge [2]time.Duration, seedValue uint64) *kvcmWorkload {
	_, fates := sm.counts()
	return &kvcmWorkload{sm: sm, rdb: rdb, layout: layout, root: root, grace: sm.grace.of(layout), insts: insts,
		period: period, crashAge: crashAge, target: fates[Keep],
		rng: rand.New(rand.NewPCG(seedValue, seedValue^0x2545f4914f6cdd1d))}
}

// live is the number of live locations, counted again every liveEvery operations.
func (w *kvcmWorkload) live() int {
	if w.sinceCount++; w.sinceCount >= liveEvery || w.liveCount == 0 {
		_, fates := w.sm.counts()
		w.liveCount, w.sinceCount = fates[Keep], 0
	}
	return w.liveCount
}

// liveEvery is how often the workload counts the live locations again (a count reads the
// whole model, holding it: 280,000 locations in `make soak`).
const liveEvery = 2000

// pause stops the workload between two operations until resume.
func (w *kvcmWorkload) pause() { w.gate.Lock() }

// resume lets the workload go on after a Redis fault, whose end its failed writes are
// dated from.
func (w *kvcmWorkload) resume() {
	w.failures.faultEnded(time.Now())
	w.gate.Unlock()
}

func (w *kvcmWorkload) count(name string) {
	c, _ := w.ops.LoadOrStore(name, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

// opCounts returns the operations made so far, by name.
func (w *kvcmWorkload) opCounts() map[string]int64 {
	out := map[string]int64{}
	w.ops.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (w *kvcmWorkload) problem(format string, a ...any) { w.problems.add(format, a...) }

// takeProblems returns what KVCM's reads found wrong since the last call.
func (w *kvcmWorkload) takeProblems() []string { return w.problems.take() }

func (w *kvcmWorkload) intn(n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.IntN(n)
}

func (w *kvcmWorkload) between(lo, hi time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

// run operates until ctx ends, one step every period by the clock: a step that took longer
// (Redis slow, the model held) is followed by the next ones at once, so the rate holds; a
// pause (a Redis fault) is not made up for beyond catchUp.
func (w *kvcmWorkload) run(ctx context.Context) {
	total := 0
	for _, o := range workloadOps {
		total += o.weight
	}
	next := time.Now()
	for ctx.Err() == nil {
		next = next.Add(w.period)
		if d := time.Until(next); d > 0 {
			if sleep(ctx, d) != nil {
				return
			}
		} else if -d > catchUp {
			next = time.Now()
		}
		w.step(ctx, total)
	}
}

// catchUp bounds how far behind its schedule the workload catches up.
const catchUp = time.Second

// step runs the operations due, then one picked by weight (total: the sum of the weights).
func (w *kvcmWorkload) step(ctx context.Context, total int) {
	w.gate.Lock()
	defer w.gate.Unlock()
	w.steps.Add(1)
	w.due(ctx)
	x := w.intn(total)
	for _, o := range workloadOps {
		if x < o.weight {
			name := o.name
			if (name == "start" || name == "legacy") && w.live() > w.target {
				name = "delete"
			}
			w.operate(ctx, name)
			return
		}
		x -= o.weight
	}
}

// due takes the later steps whose time has come: finishing sessions, executing deletes.
func (w *kvcmWorkload) due(ctx context.Context) {
	now := time.Now()
	take := func(list *[]pending) []pending {
		w.mu.Lock()
		defer w.mu.Unlock()
		var out, keep []pending
		for _, p := range *list {
			if !p.at.After(now) && len(out) < 4 {
				out = append(out, p)
			} else {
				keep = append(keep, p)
			}
		}
		*list = keep
		return out
	}
	for _, p := range take(&w.sessions) {
		w.finish(ctx, p.key, p.id)
	}
	for _, p := range take(&w.deletes) {
		w.execute(ctx, p.key, p.id)
	}
	w.ripen(ctx, now)
}

func (w *kvcmWorkload) later(list *[]pending, key, id string, lo, hi time.Duration) {
	d := w.between(lo, hi)
	w.mu.Lock()
	defer w.mu.Unlock()
	*list = append(*list, pending{key: key, id: id, at: time.Now().Add(d)})
}

func (w *kvcmWorkload) operate(ctx context.Context, name string) {
	ok := false
	switch name {
	case "read":
		ok = w.read(ctx)
	case "start":
		ok = w.start(ctx, w.layout)
	case "legacy":
		if w.layout == kvcm.LayoutLocation {
			ok = w.start(ctx, kvcm.LayoutLegacy) // an old KVCM beside the new ones
		}
	case "delete":
		ok = w.markDeleting(ctx, true)
	case "failover":
		ok = w.markDeleting(ctx, false)
	case "orphan":
		ok = w.orphan(ctx)
	case "crash":
		ok = w.crash(ctx)
	case "lose":
		ok = w.lose()
	case "upgrade":
		ok = w.upgrade(ctx)
	}
	if ok {
		w.count(name)
	}
}

// change is one write of a key: fields to set and to delete, or the whole key to delete.
type change struct {
	set  map[string]string
	hdel []string
	del  bool
	// after updates the model's locations once the write happened (under the model's lock).
	after func(mk *mkey)
}

// write runs one read-modify-write of key under WATCH, holding the model: plan sees the key
// as it is (exists false: no key) once the model has learnt from it what the collectors did
// since, and returns the write (nil: none). It reports whether the write happened.
func (w *kvcmWorkload) write(ctx context.Context, key string, plan func(cur Value, exists bool, mk *mkey) (*change, error)) bool {
	waitFrom := time.Now()
	w.sm.mu.Lock()
	defer w.sm.mu.Unlock()
	w.waited.Add(int64(time.Since(waitFrom)))
	w.sm.wrote(key)
	var done, sent *change
	var newVal, sentVal Value
	var exists bool
	err := w.rdb.Watch(ctx, func(tx *redis.Tx) error {
		fields, err := tx.HGetAll(ctx, key).Result()
		if err != nil {
			return err
		}
		cur := Value{Type: "hash", Fields: fields}
		exists = len(fields) > 0
		mk := w.absorb(key, fields)
		c, err := plan(cur, exists, mk)
		if err != nil || c == nil {
			return err
		}
		sent, sentVal = c, applied(fields, c)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			switch {
			case c.del:
				p.Del(ctx, key)
			case len(c.hdel) > 0:
				p.HDel(ctx, key, c.hdel...)
			}
			if len(c.set) > 0 {
				p.HSet(ctx, key, c.set)
			}
			return nil
		})
		if err == nil {
			done, newVal = c, sentVal
		}
		return err
	}, key)
	switch {
	case errors.Is(err, redis.TxFailedErr):
		return false // a collector wrote the block in between; KVCM reads it again next time
	case err != nil && sent != nil && ctx.Err() == nil:
		// The transaction was sent and no answer came (Redis slow or gone): read whether it
		// happened, as KVCM would find out.
		w.failures.add(err, time.Now())
		ok, rerr := w.happened(ctx, key, sent)
		if rerr != nil {
			w.problem("%s: KVCM's write failed (%v), and whether it happened is unknown: %v", key, err, rerr)
			return false
		}
		if !ok {
			return false
		}
		done, newVal = sent, sentVal
	case err != nil:
		if ctx.Err() == nil {
			w.failures.add(err, time.Now())
		}
		return false
	case done == nil:
		return false
	}
	mk := w.sm.keys[key]
	if len(newVal.Fields) == 0 {
		delete(w.sm.keys, key)
		w.sm.dropWritable(key)
		return true
	}
	if mk == nil {
		inst, block, _ := blockOf(key, map[string]bool{w.instOf(key): true})
		mk = &mkey{locs: map[string]*mloc{}, inst: inst, block: block, writable: true}
		w.sm.keys[key] = mk
		w.sm.addWritable(key)
	}
	mk.val = newVal
	if done.after != nil {
		done.after(mk)
	}
	for _, l := range mk.locs {
		restoreRaw(&mk.val, l)
	}
	return true
}

// absorb makes what KVCM just read of key (fields; none: no key) the model's key, once learn
// has compared the two, and returns it (nil: no key now). The model is held.
func (w *kvcmWorkload) absorb(key string, fields map[string]string) *mkey {
	mk := w.sm.keys[key]
	if mk == nil {
		return nil
	}
	exists := len(fields) > 0
	w.learn(key, mk, Value{Type: "hash", Fields: fields}, exists)
	if !exists {
		// Gone with its last location (upstream's empty-key recycle): a new key now.
		delete(w.sm.keys, key)
		w.sm.dropWritable(key)
		return nil
	}
	// What KVCM just read is the key now; the model keeps KVCM's bytes where a collector's
	// mark is on the way.
	mk.val = Value{Type: "hash", Fields: maps.Clone(fields)}
	for _, l := range mk.locs {
		restoreRaw(&mk.val, l)
	}
	return mk
}

// applied is the key fields once c is written.
func applied(fields map[string]string, c *change) Value {
	v := Value{Type: "hash", Fields: maps.Clone(fields)}
	if c.del {
		v.Fields = map[string]string{}
	}
	for _, f := range c.hdel {
		delete(v.Fields, f)
	}
	maps.Copy(v.Fields, c.set)
	return v
}

// resolveFor bounds the reads that find out whether an unanswered write happened.
const resolveFor = 30 * time.Second

// happened reads key until Redis answers and reports whether c is in it: every field it set
// has its value, every field it deleted (or the key it deleted) is gone.
func (w *kvcmWorkload) happened(ctx context.Context, key string, c *change) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveFor)
	defer cancel()
	for {
		fields, err := w.rdb.HGetAll(ctx, key).Result()
		if err == nil {
			if c.del {
				return len(fields) == 0, nil
			}
			for _, f := range c.hdel {
				if _, ok := fields[f]; ok {
					return false, nil
				}
			}
			for f, v := range c.set {
				if fields[f] != v {
					return false, nil
				}
			}
			return true, nil
		}
		if serr := sleep(ctx, 200*time.Millisecond); serr != nil {
			return false, err
		}
	}
}

// instOf is the instance of a block key the workload made.
func (w *kvcmWorkload) instOf(key string) string {
	for _, inst := range w.insts {
		if len(key) > len(kvcm.KeyPrefix(inst)) && key[:len(kvcm.KeyPrefix(inst))] == kvcm.KeyPrefix(inst) {
			return inst
		}
	}
	return ""
}

// learn compares what KVCM read with the model: a location gone was collected (a live one
// gone is a violation), a location in a collector's DELETING mark is on its way (a live one
// marked is a violation), anything else changed or new is a violation; KVCM's other fields
// (__lru_time__, BP#prev_key, tier marks) must be as it wrote them.
func (w *kvcmWorkload) learn(key string, mk *mkey, cur Value, exists bool) {
	if !exists && w.sm.up != nil && kvcm.LayoutOfFields(mk.val.Fields) == kvcm.LayoutAmbiguous {
		w.sm.upstreamDropped++
		w.sm.upstreamDroppedLocs += len(mk.locs)
		w.sm.upstreamChanged[key] = true
		for id, l := range mk.locs {
			w.sm.noteGone(key, id, l, w.sm.checked)
			delete(w.sm.marks, locRef{key, id})
		}
		return // upstream's GC deleted the upgraded block (see soakModel.up)
	}
	if exists {
		w.sm.acceptLRU(key, mk, cur)
	}
	for id, l := range mk.locs {
		now, ok := locationIn(cur.Fields, l.field, id)
		switch {
		case !exists || !ok:
			switch l.fate {
			case Keep:
				w.problem("%s/%s (%s): live location gone (KVCM's read)", key, id, l.kind)
			case Either:
				w.sm.upstreamChanged[key] = true
				w.sm.noteGone(key, id, l, w.sm.checked)
			}
			delete(mk.locs, id)
			delete(w.sm.marks, locRef{key, id})
		case string(now.Raw) == string(l.raw):
		case gcMarked(l.raw, now.Raw) && l.status != kvcm.StatusDeleting:
			if l.fate == Keep {
				w.problem("%s/%s (%s): live location marked DELETING by a collector (KVCM's read)", key, id, l.kind)
			}
		default:
			w.problem("%s/%s (%s): location changed by someone else: %s, KVCM wrote %s", key, id, l.kind, seed.Clip(string(now.Raw)), seed.Clip(string(l.raw)))
		}
	}
	if !exists {
		return
	}
	for f, v := range cur.Fields {
		if id, ok := kvcm.LocationID(f); ok {
			if mk.locs[id] == nil && v != "" && kvcm.LayoutOfFields(mk.val.Fields) == kvcm.LayoutLocation {
				if _, was := mk.val.Fields[f]; !was {
					w.problem("%s: location %s appeared, KVCM never wrote it", key, id)
				}
			}
			continue
		}
		if f == kvcm.FieldURI {
			continue
		}
		want, ok := mk.val.Fields[f]
		if !ok && f == kvcm.FieldPrevKey && v == "" {
			continue // kvcm-gc kept the key that lost its last location (empty_block: keep)
		}
		if !ok || want != v {
			w.problem("%s: field %s is %s, KVCM wrote %s", key, f, seed.Clip(v), seed.Clip(want))
		}
	}
}

// pick draws a writable key (nil when there is none) while holding the model.
func (w *kvcmWorkload) pickKey() string {
	w.sm.mu.Lock()
	n := len(w.sm.writableKeys)
	w.sm.mu.Unlock()
	if n == 0 {
		return ""
	}
	i := w.intn(n)
	w.sm.mu.Lock()
	defer w.sm.mu.Unlock()
	if i >= len(w.sm.writableKeys) {
		return ""
	}
	return w.sm.writableKeys[i]
}

// newKey draws a block key nobody uses.
func (w *kvcmWorkload) newKey() string {
	for {
		w.mu.Lock()
		inst := w.insts[w.rng.IntN(len(w.insts))]
		block := int64(w.rng.Uint64() >> 1)
		w.mu.Unlock()
		k := kvcm.BlockKey(inst, block)
		w.sm.mu.Lock()
		_, used := w.sm.keys[k]
		w.sm.mu.Unlock()
		if !used {
			return k
		}
	}
}

func (w *kvcmWorkload) newID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b [8]byte
	for i := range b {
		b[i] = idChars[w.rng.IntN(len(idChars))]
	}
	return string(b[:])
}

// dataFile writes the data of location id of block key and returns its path and spec: KVCM's
// file names of a location (<hex key>_<id>), never a per-block name the sweep would consider.
func (w *kvcmWorkload) dataFile(key, id string) (string, string, error) {
	inst := w.instOf(key)
	mk := w.sm.keys[key]
	var block int64
	if mk != nil {
		block = mk.block
	} else if _, b, ok := blockOf(key, map[string]bool{inst: true}); ok {
		block = b
	}
	path := filepath.Join(w.root, inst, "tp0", hexKey(block)+"_"+id)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(path, []byte("kv"), 0o644); err != nil {
		return "", "", err
	}
	return path, fmt.Sprintf(`{"name":"tp0","uri":"file://%s%s?size=1024"}`, seed.StorageNFS, path), nil
}

// locationBytes is a location as KVCM of layout writes it: today's with create_time before its
// specs, the legacy one (f6aa2b2) with none.
func locationBytes(layout kvcm.Layout, id string, status kvcm.Status, createUs int64, spec string) string {
	specs := "[]"
	n := 0
	if spec != "" {
		specs, n = "["+spec+"]", 1
	}
	if layout == kvcm.LayoutLegacy {
		return fmt.Sprintf(`{"id":%q,"status":%d,"type":4,"spec_size":%d,"location_specs":%s}`, id, status, n, specs)
	}
	return fmt.Sprintf(`{"id":%q,"status":%d,"type":4,"spec_size":%d,"create_time":%d,"location_specs":%s}`, id, status, n, createUs, specs)
}

// withMember puts location id (raw) in front of the legacy map uri ("" or "{}": a new map).
func withMember(uri, id, raw string) string {
	member := strconv.Quote(id) + ":" + raw
	blk, err := kvcm.DecodeBlock([]byte(uri))
	if uri == "" || err != nil || len(blk.Locations) == 0 {
		return "{" + member + "}"
	}
	return "{" + member + "," + uri[1:]
}

// start begins a write session in a block of layout (a new one at times) and finishes it later.
func (w *kvcmWorkload) start(ctx context.Context, layout kvcm.Layout) bool {
	key := ""
	if layout == w.layout && w.intn(4) > 0 {
		key = w.pickKey()
	}
	if key == "" {
		key = w.newKey()
	}
	id := w.newID()
	ok := w.addWriting(ctx, key, id, layout, time.Now(), func(cur Value, exists bool, mk *mkey) bool {
		l := kvcm.LayoutOfFields(cur.Fields)
		return !exists || (l == kvcm.LayoutLocation || l == kvcm.LayoutLegacy) && (mk == nil || mk.writable)
	}, func(mk *mkey, l *mloc, cur *Value) {
		if l.field == kvcm.FieldURI {
			refreshed(mk, cur)
		}
		l.fate, l.kind = Keep, "session"
	})
	if ok {
		w.later(&w.sessions, key, id, 100*time.Millisecond, 3*time.Second)
	}
	return ok
}

// addWriting is StartWrite: it adds WRITING location id, created at created, to key as KVCM of
// its layout writes it (layout for a new key), with its data file: an L# field (and
// BP#prev_key when it creates the key), or a new member in front of __uri__ with
// __lru_time__ created (and _prev_key_ when it creates the key). fits says whether KVCM writes
// into the key as it is; made records the new location in the model.
func (w *kvcmWorkload) addWriting(ctx context.Context, key, id string, layout kvcm.Layout, created time.Time,
	fits func(cur Value, exists bool, mk *mkey) bool, made func(mk *mkey, l *mloc, cur *Value)) bool {
	var path string
	ok := w.write(ctx, key, func(cur Value, exists bool, mk *mkey) (*change, error) {
		if !fits(cur, exists, mk) {
			return nil, nil
		}
		l := layout
		if exists {
			l = kvcm.LayoutOfFields(cur.Fields)
		}
		if _, taken := cur.Fields[kvcm.LocationField(id)]; taken {
			return nil, nil
		}
		p, spec, err := w.dataFile(key, id)
		if err != nil {
			return nil, err
		}
		path = p
		raw := locationBytes(l, id, kvcm.StatusWriting, created.UnixMicro(), spec)
		c := &change{set: map[string]string{}}
		field := kvcm.LocationField(id)
		if l == kvcm.LayoutLocation {
			c.set[field] = raw
			if !exists {
				c.set[kvcm.FieldPrevKey] = "" // BatchAddLocation creating the key
			}
		} else {
			field = kvcm.FieldURI
			c.set[kvcm.FieldURI] = withMember(cur.Fields[kvcm.FieldURI], id, raw)
			c.set[kvcm.FieldLRUTime] = strconv.FormatInt(created.UnixMicro(), 10)
			if !exists {
				c.set[seed.FieldLegacyPrevKey] = ""
			}
		}
		c.after = func(mk *mkey) {
			l := &mloc{id: id, field: field, raw: []byte(raw), status: kvcm.StatusWriting, files: []string{p}}
			mk.locs[id] = l
			made(mk, l, &cur)
		}
		return c, nil
	})
	if !ok && path != "" {
		_ = os.Remove(path)
	}
	return ok
}

// refreshed: a write rewrote a legacy block's __lru_time__, so its WRITING garbage is young
// again (its age is the later of create_time and __lru_time__). kvcm-gc may have judged it
// already, and its delete compares the location's bytes, which did not change: it may go or
// stay (Either). It is no live data either way — its session died long ago, and the write was
// another location's — so kvcm-gc need not keep it; the deletes of it after the refresh are
// counted (refreshedAt, for those intact in cur, the block as KVCM read it for the write; nil:
// the write was upstream's GC's, at a moment unknown).
func refreshed(mk *mkey, cur *Value) {
	now := time.Now()
	for id, l := range mk.locs {
		if l.fate != Go || l.status != kvcm.StatusWriting {
			continue
		}
		// Garbage that ripened from a seeded young location kept its keepSince: cleared, since
		// kvcm-gc need not keep it (a delete it judged before the write is no violation).
		l.fate, l.due, l.keepSince = Either, 0, time.Time{}
		if cur == nil {
			continue
		}
		if at, ok := locationIn(cur.Fields, l.field, id); ok && string(at.Raw) == string(l.raw) {
			l.refreshedAt = now
		}
	}
}

// withStatus is KVCM's write of location l of key cur with status st: its L# field, or the
// whole __uri__ with __lru_time__ now. Its after records the location's new bytes and status
// in the model, and a rewritten __lru_time__ (refreshed).
func withStatus(cur Value, l *mloc, st kvcm.Status) (*change, error) {
	next, err := kvcm.LocationWithStatus(l.raw, st)
	if err != nil {
		return nil, err
	}
	c := &change{set: map[string]string{}, after: func(mk *mkey) {
		if l.field == kvcm.FieldURI {
			refreshed(mk, &cur)
		}
		l.raw, l.status = next, st
	}}
	if l.field != kvcm.FieldURI {
		c.set[l.field] = string(next)
		return c, nil
	}
	blk, err := kvcm.DecodeBlock([]byte(cur.Fields[kvcm.FieldURI]))
	if err != nil {
		return nil, err
	}
	out, err := blk.WithStatus(l.id, st)
	if err != nil {
		return nil, err
	}
	c.set[kvcm.FieldURI], c.set[kvcm.FieldLRUTime] = string(out), nowUs()
	return c, nil
}

// finish is FinishWrite: the session's location becomes SERVING, whatever else happened.
func (w *kvcmWorkload) finish(ctx context.Context, key, id string) {
	w.write(ctx, key, func(cur Value, exists bool, mk *mkey) (*change, error) {
		if mk == nil || mk.locs[id] == nil || !exists {
			return nil, nil // the live-location check has said what is wrong
		}
		return withStatus(cur, mk.locs[id], kvcm.StatusServing)
	})
	w.count("finish")
}

// pickLoc draws, holding the model, a location of a writable key that ok accepts.
func (w *kvcmWorkload) pickLoc(ok func(mk *mkey, l *mloc) bool) (string, string) {
	for range 8 {
		key := w.pickKey()
		if key == "" {
			return "", ""
		}
		w.sm.mu.Lock()
		mk := w.sm.keys[key]
		var ids []string
		if mk != nil {
			for id, l := range mk.locs {
				if ok(mk, l) {
					ids = append(ids, id)
				}
			}
		}
		w.sm.mu.Unlock()
		if len(ids) > 0 {
			slices.Sort(ids)
			return key, ids[w.intn(len(ids))]
		}
	}
	return "", ""
}

// servingFile accepts a live SERVING file location KVCM wrote, with its data files.
func servingFile(_ *mkey, l *mloc) bool {
	if l.fate != Keep || l.status != kvcm.StatusServing || l.keepFiles || len(l.files) == 0 {
		return false
	}
	return l.kind == "session" || l.kind == seed.KindLiveServing
}

// markDeleting is the start of KVCM's delete: a SERVING location becomes DELETING. With
// execute, its delete executor removes it a moment later; without, the leader failed over
// and nobody ever does (a stuck DELETING).
func (w *kvcmWorkload) markDeleting(ctx context.Context, execute bool) bool {
	key, id := w.pickLoc(servingFile)
	if key == "" {
		return false
	}
	ok := w.write(ctx, key, func(cur Value, exists bool, mk *mkey) (*change, error) {
		if mk == nil || mk.locs[id] == nil || !exists {
			return nil, nil
		}
		l := mk.locs[id]
		if now, ok := locationIn(cur.Fields, l.field, id); !ok || string(now.Raw) != string(l.raw) {
			return nil, nil // KVCM's CAS expects the location as it wrote it
		}
		c, err := withStatus(cur, l, kvcm.StatusDeleting)
		if err != nil || execute {
			return c, err
		}
		record := c.after
		c.after = func(mk *mkey) {
			record(mk)
			l.kind = "stuck"
		}
		return c, nil
	})
	if ok && execute {
		w.later(&w.deletes, key, id, 50*time.Millisecond, 2*time.Second)
	}
	return ok
}

// execute is KVCM's delete executor finishing a delete: it removes the DELETING location (its
// CAD), and the key when no location is left (its empty-key recycle). The data file stays.
func (w *kvcmWorkload) execute(ctx context.Context, key, id string) {
	w.write(ctx, key, func(cur Value, exists bool, mk *mkey) (*change, error) {
		if mk == nil || mk.locs[id] == nil || !exists {
			return nil, nil
		}
		l := mk.locs[id]
		if l.field == kvcm.FieldURI {
			blk, err := kvcm.DecodeBlock([]byte(cur.Fields[kvcm.FieldURI]))
			if err != nil {
				return nil, err
			}
			out, empty, err := blk.Without(id)
			if err != nil {
				return nil, err
			}
			if empty {
				return &change{del: true}, nil
			}
			return &change{set: map[string]string{kvcm.FieldURI: string(out), kvcm.FieldLRUTime: nowUs()},
				after: func(mk *mkey) { delete(mk.locs, id); refreshed(mk, &cur) }}, nil
		}
		for f, v := range cur.Fields {
			if other, ok := kvcm.LocationID(f); ok && other != id && v != "" {
				return &change{hdel: []string{l.field}, after: func(mk *mkey) { delete(mk.locs, id) }}, nil
			}
		}
		return &change{del: true}, nil
	})
	w.count("execute")
}

// orphan is a crashed write session, long enough ago to be an orphan: location layout, a
// WRITING location whose create_time is past the grace, in any block; legacy layout, a new
// block whose only write (an hour and more ago) was the crashed session's.
func (w *kvcmWorkload) orphan(ctx context.Context) bool {
	id := w.newID()
	at := time.Now().Add(-w.grace - w.between(time.Minute, time.Hour))
	key := ""
	switch {
	case w.layout == kvcm.LayoutLocation && w.intn(2) == 0:
		key = w.pickKey()
	case w.layout == kvcm.LayoutLegacy:
		key = w.emptyLegacyKey(at)
	}
	if key == "" {
		key = w.newKey()
	}
	ok := w.addWriting(ctx, key, id, w.layout, at, func(cur Value, exists bool, mk *mkey) bool {
		switch l := kvcm.LayoutOfFields(cur.Fields); {
		case !exists:
			return true
		case mk != nil && !mk.writable:
			return false
		case l == kvcm.LayoutLegacy:
			return emptyLegacy(cur, at)
		default:
			return l == kvcm.LayoutLocation
		}
	}, func(_ *mkey, l *mloc, _ *Value) {
		l.kind = "orphan"
		w.sm.garbage(l)
	})
	if ok {
		w.garbageMade.Add(1)
	}
	return ok
}

// crash is a write session whose writer dies between StartWrite and FinishWrite: its WRITING
// location stays for good. It is stamped by the clock of a KVCM node running behind by the
// grace less crashAge, so that it becomes an orphan crashAge from now by the run's clock
// (create_time, and in the legacy layout the block's __lru_time__, past the grace): kvcm-gc
// must keep it until then, and collect it after. Location layout: in any block, its age being
// its create_time alone; legacy: in a new block nobody writes again, since a write of the
// block would make it young again.
func (w *kvcmWorkload) crash(ctx context.Context) bool {
	if w.crashAge[1] <= 0 {
		return false
	}
	id := w.newID()
	age := w.crashAge[0]
	if w.crashAge[1] > w.crashAge[0] {
		age = w.between(w.crashAge[0], w.crashAge[1])
	}
	created := time.Now().Add(age - w.grace)
	key := ""
	if w.layout == kvcm.LayoutLocation && w.intn(2) == 0 {
		key = w.pickKey()
	}
	if key == "" {
		key = w.newKey()
	}
	ok := w.addWriting(ctx, key, id, w.layout, created, func(cur Value, exists bool, mk *mkey) bool {
		switch {
		case !exists:
			return true
		case mk != nil && !mk.writable:
			return false
		default:
			return w.layout == kvcm.LayoutLocation && kvcm.LayoutOfFields(cur.Fields) == kvcm.LayoutLocation
		}
	}, func(mk *mkey, l *mloc, _ *Value) {
		l.fate, l.kind = Keep, "crashed"
		if w.layout == kvcm.LayoutLegacy {
			mk.writable = false
			w.sm.dropWritable(key)
		}
		w.sm.watchAging(key, mk, l, time.Now())
	})
	return ok
}

// ripenEarly is how long before a WRITING location is an orphan the model reads it a last
// time while kvcm-gc must keep it, and ripenLate how close to that moment the read may be:
// after, a removal seen could be a rightful one, and the read is skipped.
const (
	ripenEarly = time.Second
	ripenLate  = 200 * time.Millisecond
)

// ripen makes the aging WRITING locations (crashed sessions, seeded young ones) garbage a
// moment before they are orphans: a last read of their keys (KVCM's) finds whether a collector
// took or marked one while it was live. A key that cannot be read now is tried again shortly.
func (w *kvcmWorkload) ripen(ctx context.Context, now time.Time) {
	w.sm.mu.Lock()
	defer w.sm.mu.Unlock()
	refs := w.sm.ripening(now)
	if len(refs) == 0 {
		return
	}
	var read []string
	for _, ref := range refs {
		if l := w.sm.keys[ref.key].locs[ref.id]; l.orphanAt.Sub(now) > ripenLate && !slices.Contains(read, ref.key) {
			read = append(read, ref.key)
		}
	}
	p := w.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(read))
	for i, k := range read {
		cmds[i] = p.HGetAll(ctx, k)
	}
	if len(read) > 0 {
		if _, err := p.Exec(ctx); err != nil {
			w.sm.aging = append(w.sm.aging, refs...)
			w.sm.agingNext = now.Add(50 * time.Millisecond)
			return
		}
	}
	for i, k := range read {
		w.absorb(k, cmds[i].Val())
	}
	for _, ref := range refs {
		if mk := w.sm.keys[ref.key]; mk != nil && mk.locs[ref.id] != nil && mk.locs[ref.id].fate != Go {
			w.sm.garbage(mk.locs[ref.id])
			w.garbageMade.Add(1)
		}
	}
}

// emptyLegacy reports whether cur is a legacy block in KVCM's "exists, no location" form last
// written before at: a crashed session of at could have been its last write.
func emptyLegacy(cur Value, at time.Time) bool {
	if kvcm.LayoutOfFields(cur.Fields) != kvcm.LayoutLegacy {
		return false
	}
	blk, err := kvcm.DecodeBlock([]byte(cur.Fields[kvcm.FieldURI]))
	if err != nil || len(blk.Locations) > 0 {
		return false
	}
	lru, err := strconv.ParseInt(cur.Fields[kvcm.FieldLRUTime], 10, 64)
	return err == nil && lru < at.UnixMicro()
}

// emptyLegacyKey draws a legacy block the model knows empty, last written before at.
func (w *kvcmWorkload) emptyLegacyKey(at time.Time) string {
	for range 8 {
		k := w.pickKey()
		if k == "" {
			return ""
		}
		w.sm.mu.Lock()
		mk := w.sm.keys[k]
		ok := mk != nil && len(mk.locs) == 0 && emptyLegacy(mk.val, at)
		w.sm.mu.Unlock()
		if ok {
			return k
		}
	}
	return ""
}

// lose removes the data file of a live SERVING location: it is storage-missing garbage now.
// Nothing in Redis changes.
func (w *kvcmWorkload) lose() bool {
	key, id := w.pickLoc(servingFile)
	if key == "" {
		return false
	}
	w.sm.mu.Lock()
	defer w.sm.mu.Unlock()
	mk := w.sm.keys[key]
	if mk == nil || mk.locs[id] == nil || !servingFile(mk, mk.locs[id]) {
		return false
	}
	l := mk.locs[id]
	if err := os.Remove(l.files[0]); err != nil {
		w.problem("%s/%s: lose its file: %v", key, id, err)
		return false
	}
	l.kind, l.files = "lost", l.files[1:]
	w.sm.garbage(l)
	w.garbageMade.Add(1)
	return true
}

// upgrade is today's KVCM writing a block of the legacy layout: it reads no L# field, sees
// the key exist (so writes no BP#prev_key) and adds a location in an L# field of its own. The
// key is then ambiguous: nothing in it may be judged or written (invariant 9), so everything
// in it is live now, byte for byte. A collector's DELETING mark already in it stays for good
// (a lost race: new KVCM ignores __uri__).
func (w *kvcmWorkload) upgrade(ctx context.Context) bool {
	key, _ := w.pickLoc(func(mk *mkey, l *mloc) bool { return l.field == kvcm.FieldURI })
	if key == "" {
		return false
	}
	id := w.newID()
	return w.write(ctx, key, func(cur Value, exists bool, mk *mkey) (*change, error) {
		if !exists || mk == nil || !mk.writable || kvcm.LayoutOfFields(cur.Fields) != kvcm.LayoutLegacy {
			return nil, nil
		}
		raw := locationBytes(kvcm.LayoutLocation, id, kvcm.StatusServing, time.Now().UnixMicro(), "")
		field := kvcm.LocationField(id)
		return &change{set: map[string]string{field: raw}, after: func(mk *mkey) {
			for lid, l := range mk.locs {
				intact := true
				if now, ok := locationIn(cur.Fields, l.field, lid); ok && string(now.Raw) != string(l.raw) {
					// Marked by a collector before the upgrade: those bytes stay now.
					l.raw, l.status = slices.Clone(now.Raw), now.Status
					w.lostRaces.Add(1)
					intact = false
				}
				// Nothing in it may be judged by kvcm-gc any more; upstream's GC still reads
				// the fields of its layout. Intact now, kvcm-gc had not started on it, and
				// must keep it from now on.
				switch {
				case !w.sm.up.inLayout(l.field):
					l.fate, l.due = Keep, 0
				case l.fate == Go:
					l.fate, l.due = Either, 0
					if intact {
						l.keepSince = time.Now()
					}
				}
			}
			mk.locs[id] = &mloc{id: id, field: field, raw: []byte(raw), status: kvcm.StatusServing, fate: Keep, kind: "upgrade"}
			mk.writable = false
			w.sm.dropWritable(key)
		}}, nil
	})
}

// read is KVCM reading a few blocks.
func (w *kvcmWorkload) read(ctx context.Context) bool {
	p := w.rdb.Pipeline()
	for range 8 {
		if k := w.pickKey(); k != "" {
			p.HGetAll(ctx, k)
		}
	}
	_, err := p.Exec(ctx)
	return err == nil
}

// idChars are the characters of KVCM's location ids (GenerateRandomString).
const idChars = "abcdefghijklmnopqrstuvwxyz0123456789"
