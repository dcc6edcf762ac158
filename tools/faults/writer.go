package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// writerPeriod is the pause between two writes of the writer's own (a write rate, not a wait).
const writerPeriod = 15 * time.Millisecond

// writerMode is what the writer plays.
type writerMode int

const (
	// writeSessions: KVCM's write sessions in the blocks being collected. The writer finishes
	// writes as KVCM's FinishWriteCache does (SERVING whatever the status, no compare) and
	// adds WRITING locations, at random and right after every candidate event: the prober has
	// just judged that location, so those writes land between probe and CAS, or after the
	// CAS, on a location kvcm-gc already marked DELETING. It finishes the locations that were
	// WRITING when collection started and the ones it added itself.
	writeSessions writerMode = iota
	// finishDeleting: KVCM acting on DELETING locations kvcm-gc has just nominated as stuck
	// (a stuck_deleting candidate event): a late FinishWriteCache flips one to SERVING (a write
	// session KVCM's demotion had marked DELETING), or KVCM's delete executor finishes one
	// (its CAD; today's KVCM's NFS delete is a no-op, so the files stay), or nothing happens.
	finishDeleting
)

// writer plays KVCM writing the blocks kvcm-gc collects, in the scenario's layout, the way
// KVCM of that layout writes:
//   - location layout (today's KVCM): FinishWriteCache is HMGET of one L#<id> field and an
//     unconditional HSET of it with status SERVING (a DELETING included); BatchAddLocation is
//     an HSET of a new L#<id> field (status WRITING, create_time now), with BP#prev_key only
//     when it creates the key; the executor's CAD is an HDEL of the field, then a DEL of the
//     key when no non-empty L# field is left (its empty-key recycle). No other field changes.
//   - legacy layout (KVCM f6aa2b2): every write rewrites the whole __uri__ and __lru_time__;
//     the executor's CAD DELs a key whose map it empties.
//
// KVCM's own read-modify-write is not atomic towards other writers; the writer uses WATCH
// and MULTI so that each of its writes is one step the outcome can be checked against.
type writer struct {
	e      *env
	rdb    redis.UniversalClient
	mode   writerMode
	layout kvcm.Layout

	mu   sync.Mutex
	rng  *rand.Rand
	keys []string // blocks to write to
	// live: locations the writer made live (finished, flipped or added), by key: their bytes.
	live map[string]map[string][]byte
	// overMark: locations the writer finished while they were DELETING (kvcm-gc's mark, or a
	// stuck DELETING kvcm-gc had nominated).
	overMark map[string]map[string]bool
	// removed: stuck DELETING locations the writer removed as KVCM's executor.
	removed map[string]map[string]bool
	// touched: legacy keys whose __lru_time__ the writer rewrote.
	touched                                map[string]bool
	finished, added, flips, removes, raced int
	tries                                  int
	errs                                   []error
}

func newWriter(e *env, mode writerMode, seedValue uint64) *writer {
	w := &writer{e: e, rdb: e.redis.Client(), mode: mode, layout: e.layout, rng: rand.New(rand.NewPCG(seedValue, ^seedValue)),
		live: map[string]map[string][]byte{}, overMark: map[string]map[string]bool{}, removed: map[string]map[string]bool{},
		touched: map[string]bool{}}
	seen := map[string]bool{}
	for _, l := range e.base {
		if l.Fate == Go && !seen[l.Key] {
			seen[l.Key] = true
			w.keys = append(w.keys, l.Key)
		}
	}
	slices.Sort(w.keys)
	return w
}

// field is the hash field of location id in the writer's layout.
func (w *writer) field(id string) string {
	if w.layout == kvcm.LayoutLocation {
		return kvcm.LocationField(id)
	}
	return kvcm.FieldURI
}

// race writes to the block of candidate ev as its mode says.
func (w *writer) race(ctx context.Context, ev subjects.Event) {
	k := kvcm.BlockKey(ev.Instance, *ev.Key)
	w.mu.Lock()
	x := w.rng.Float64()
	w.mu.Unlock()
	var ok bool
	switch {
	case w.mode == finishDeleting && ev.Reason != subjects.ReasonStuckDeleting:
	case w.mode == finishDeleting && x < 1.0/3:
		ok = w.finish(ctx, k, ev.Location)
	case w.mode == finishDeleting && x < 2.0/3:
		ok = w.removeDeleting(ctx, k, ev.Location)
	case w.mode == finishDeleting:
	case x < 0.5:
		ok = w.finish(ctx, k, ev.Location)
	case x < 0.75:
		ok = w.add(ctx, k)
	}
	if ok {
		w.mu.Lock()
		w.raced++
		w.mu.Unlock()
	}
}

// run writes until ctx ends.
func (w *writer) run(ctx context.Context) error { return w.runReady(ctx, nil) }

// runReady is run, closing ready (when not nil) once the writer receives candidate events.
func (w *writer) runReady(ctx context.Context, ready chan<- struct{}) error {
	// Candidate events as they are stored: the window between probe and CAS.
	sub, err := w.e.nc.Subscribe(w.e.names.EventKindFilter(subjects.EventCandidate), func(m *nats.Msg) {
		all, err := subjects.DecodeEvent(m.Data)
		if err != nil {
			return
		}
		for _, ev := range all.PerTarget() { // a batch's candidate event: one per target
			if ctx.Err() != nil {
				return
			}
			if ev.Key != nil {
				w.race(ctx, ev)
			}
		}
	})
	if err != nil {
		return fmt.Errorf("writer: subscribe to candidates: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := w.e.nc.Flush(); err != nil {
		return fmt.Errorf("writer: subscribe to candidates: %w", err)
	}
	if ready != nil {
		close(ready)
	}
	if w.mode == finishDeleting || len(w.keys) == 0 {
		<-ctx.Done() // it only reacts to candidates
		return nil
	}

	tick(ctx, writerPeriod, func() { w.step(ctx) })
	return nil
}

// step finishes or adds a write session on a random key.
func (w *writer) step(ctx context.Context) {
	w.mu.Lock()
	k := w.keys[w.rng.IntN(len(w.keys))]
	finish := w.rng.IntN(2) == 0
	w.mu.Unlock()
	if finish {
		w.finish(ctx, k, "")
	} else {
		w.add(ctx, k)
	}
}

// owned reports whether a write session owns location id of key: it was WRITING when
// collection started (or, when the writer finishes DELETING locations, DELETING: KVCM's
// demotion marked the session's location and its FinishWriteCache still comes), or the
// writer added it.
func (w *writer) owned(key, id string) bool {
	w.mu.Lock()
	_, added := w.live[key][id]
	w.mu.Unlock()
	if added {
		return true
	}
	l, ok := locationIn(w.e.before[key].Fields, w.field(id), id)
	if !ok || l.Err != nil {
		return false
	}
	return l.Status == kvcm.StatusWriting || w.mode == finishDeleting && l.Status == kvcm.StatusDeleting
}

// op is one write the writer makes to a block: the fields to set and delete (or the whole key
// to delete), the location it made live, and what to record.
type op struct {
	set    []any
	hdel   []string
	delKey bool
	// made is the location the write made live (finished or added), with its new bytes.
	made      string
	madeBytes []byte
	// wasDeleting: made was DELETING before the write.
	wasDeleting bool
	// removed is the DELETING location the write removed (the executor's CAD).
	removed string
}

// apply runs one read-modify-write of key atomically: plan reads through tx and returns the
// write (nil: write nothing). It reports whether the write happened.
func (w *writer) apply(ctx context.Context, key string, plan func(tx *redis.Tx) (*op, error), count func()) bool {
	var done *op
	err := w.rdb.Watch(ctx, func(tx *redis.Tx) error {
		o, err := plan(tx)
		if err != nil || o == nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			switch {
			case o.delKey:
				p.Del(ctx, key)
			case len(o.hdel) > 0:
				p.HDel(ctx, key, o.hdel...)
			}
			if len(o.set) > 0 {
				p.HSet(ctx, key, o.set...)
			}
			return nil
		})
		if err == nil {
			done = o
		}
		return err
	}, key)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tries++
	switch {
	case errors.Is(err, redis.TxFailedErr):
		return false // kvcm-gc wrote the block in between; the next write reads it again
	case err != nil:
		if ctx.Err() == nil {
			w.errs = append(w.errs, fmt.Errorf("writer: %s: %w", key, err))
		}
		return false
	case done == nil:
		return false
	}
	if w.layout == kvcm.LayoutLegacy && !done.delKey {
		w.touched[key] = true
	}
	if done.made != "" {
		if w.live[key] == nil {
			w.live[key] = map[string][]byte{}
		}
		w.live[key][done.made] = done.madeBytes
		if done.wasDeleting {
			if w.overMark[key] == nil {
				w.overMark[key] = map[string]bool{}
			}
			w.overMark[key][done.made] = true
		}
	}
	if done.removed != "" {
		if w.removed[key] == nil {
			w.removed[key] = map[string]bool{}
		}
		w.removed[key][done.removed] = true
	}
	count()
	return true
}

// nowUs is the writer's clock, as KVCM writes times: µs, decimal.
func nowUs() string { return strconv.FormatInt(time.Now().UnixMicro(), 10) }

// readLegacy reads key's __uri__ as KVCM f6aa2b2 does; nil when absent, empty or corrupt.
func readLegacy(ctx context.Context, tx *redis.Tx, key string) (*kvcm.Block, error) {
	cur, err := tx.HGet(ctx, key, kvcm.FieldURI).Bytes()
	if errors.Is(err, redis.Nil) || err == nil && len(cur) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	blk, err := kvcm.DecodeBlock(cur)
	if err != nil {
		return nil, nil
	}
	return blk, nil
}

// readField reads location field L#id as today's KVCM's HMGET does; nil when absent or empty.
func readField(ctx context.Context, tx *redis.Tx, key, id string) (*kvcm.Location, error) {
	vals, err := tx.HMGet(ctx, key, kvcm.LocationField(id)).Result()
	if err != nil {
		return nil, err
	}
	s, _ := vals[0].(string)
	if s == "" {
		return nil, nil
	}
	l, err := kvcm.DecodeLocation(id, []byte(s))
	if err != nil {
		return nil, nil
	}
	return &l, nil
}

// finish sets location id of key (when id is "", the first location of the block that a
// write session owns and that is not SERVING) to SERVING, whatever its status.
func (w *writer) finish(ctx context.Context, key, id string) bool {
	count := func() {
		if w.mode == finishDeleting {
			w.flips++
		} else {
			w.finished++
		}
	}
	if w.layout == kvcm.LayoutLocation {
		return w.apply(ctx, key, func(tx *redis.Tx) (*op, error) {
			pick := id
			if pick == "" {
				fields, err := tx.HGetAll(ctx, key).Result()
				if err != nil {
					return nil, err
				}
				for _, f := range slices.Sorted(maps.Keys(fields)) {
					lid, ok := kvcm.LocationID(f)
					if !ok || fields[f] == "" || !w.owned(key, lid) {
						continue
					}
					if l, err := kvcm.DecodeLocation(lid, []byte(fields[f])); err == nil && l.Err == nil && l.Status != kvcm.StatusServing {
						pick = lid
						break
					}
				}
				if pick == "" {
					return nil, nil
				}
			}
			l, err := readField(ctx, tx, key, pick)
			if err != nil || l == nil || l.Err != nil || l.Status == kvcm.StatusServing || !w.owned(key, pick) {
				return nil, err // absent: FinishWriteCache writes nothing (EC_NOENT)
			}
			next, err := kvcm.LocationWithStatus(l.Raw, kvcm.StatusServing)
			if err != nil {
				return nil, err
			}
			return &op{set: []any{kvcm.LocationField(pick), next}, made: pick, madeBytes: next,
				wasDeleting: l.Status == kvcm.StatusDeleting}, nil
		}, count)
	}
	return w.apply(ctx, key, func(tx *redis.Tx) (*op, error) {
		blk, err := readLegacy(ctx, tx, key)
		if err != nil || blk == nil {
			return nil, err
		}
		var l *kvcm.Location
		if id != "" {
			l, _ = blk.Find(id)
		} else {
			for i := range blk.Locations {
				c := &blk.Locations[i]
				if c.Err == nil && c.Status != kvcm.StatusServing && w.owned(key, c.ID) {
					l = c
					break
				}
			}
		}
		if l == nil || l.Err != nil || l.Status == kvcm.StatusServing || !w.owned(key, l.ID) {
			return nil, nil
		}
		next, err := blk.WithStatus(l.ID, kvcm.StatusServing)
		if err != nil {
			return nil, err
		}
		nb, err := kvcm.DecodeBlock(next)
		if err != nil {
			return nil, fmt.Errorf("decode what it writes: %w", err)
		}
		made, _ := nb.Find(l.ID)
		return &op{set: []any{kvcm.FieldURI, next, kvcm.FieldLRUTime, nowUs()}, made: l.ID, madeBytes: made.Raw,
			wasDeleting: l.Status == kvcm.StatusDeleting}, nil
	}, count)
}

// add puts a new WRITING location into key (legacy: in front of its locations).
func (w *writer) add(ctx context.Context, key string) bool {
	w.mu.Lock()
	id := "w" + strconv.FormatUint(w.rng.Uint64()%(36*36*36*36*36*36), 36)
	w.mu.Unlock()
	count := func() { w.added++ }
	if w.layout == kvcm.LayoutLocation {
		return w.apply(ctx, key, func(tx *redis.Tx) (*op, error) {
			n, err := tx.Exists(ctx, key).Result()
			if err != nil {
				return nil, err
			}
			taken, err := tx.HExists(ctx, key, kvcm.LocationField(id)).Result()
			if err != nil || taken {
				return nil, err
			}
			loc := []byte(fmt.Sprintf(`{"id":%q,"status":2,"type":4,"spec_size":0,"create_time":%s,"location_specs":[]}`, id, nowUs()))
			set := []any{kvcm.LocationField(id), loc}
			if n == 0 {
				set = append(set, kvcm.FieldPrevKey, "") // BatchAddLocation creating the key
			}
			return &op{set: set, made: id, madeBytes: loc}, nil
		}, count)
	}
	return w.apply(ctx, key, func(tx *redis.Tx) (*op, error) {
		blk, err := readLegacy(ctx, tx, key)
		if err != nil || blk == nil {
			return nil, err
		}
		if _, taken := blk.Find(id); taken {
			return nil, nil
		}
		loc := fmt.Sprintf(`{"id":%q,"status":2,"type":4,"spec_size":0,"location_specs":[]}`, id)
		next := []byte("{" + strconv.Quote(id) + ":" + loc + "}")
		if len(blk.Locations) > 0 {
			next = slices.Concat([]byte("{"+strconv.Quote(id)+":"+loc+","), blk.Raw[1:])
		}
		return &op{set: []any{kvcm.FieldURI, next, kvcm.FieldLRUTime, nowUs()}, made: id, madeBytes: []byte(loc)}, nil
	}, count)
}

// removeDeleting removes DELETING location id of key as KVCM's delete executor finishing it
// does (its CAD, expecting DELETING), with KVCM's empty-key recycle.
func (w *writer) removeDeleting(ctx context.Context, key, id string) bool {
	count := func() { w.removes++ }
	if w.layout == kvcm.LayoutLocation {
		return w.apply(ctx, key, func(tx *redis.Tx) (*op, error) {
			l, err := readField(ctx, tx, key, id)
			if err != nil || l == nil || l.Status != kvcm.StatusDeleting {
				return nil, err
			}
			fields, err := tx.HGetAll(ctx, key).Result()
			if err != nil {
				return nil, err
			}
			for f, v := range fields {
				if other, ok := kvcm.LocationID(f); ok && other != id && v != "" {
					return &op{hdel: []string{kvcm.LocationField(id)}, removed: id}, nil
				}
			}
			return &op{delKey: true, removed: id}, nil
		}, count)
	}
	return w.apply(ctx, key, func(tx *redis.Tx) (*op, error) {
		blk, err := readLegacy(ctx, tx, key)
		if err != nil || blk == nil {
			return nil, err
		}
		l, ok := blk.Find(id)
		if !ok || l.Status != kvcm.StatusDeleting {
			return nil, nil
		}
		next, empty, err := blk.Without(id)
		if err != nil {
			return nil, err
		}
		if empty {
			return &op{delKey: true, removed: id}, nil
		}
		return &op{set: []any{kvcm.FieldURI, next, kvcm.FieldLRUTime, nowUs()}, removed: id}, nil
	}, count)
}

// expect is the expectation once the writer has stopped: the state now, minus what is still
// garbage. A location the writer finished or added is live (unless it finished it over a
// DELETING whose unshared data kvcm-gc may have unlinked before it: that one may go or stay);
// a location the writer removed is gone, its data KVCM's business; a garbage location it did
// not change stays garbage, except, in the legacy layout, a WRITING or DELETING location of a
// block whose __lru_time__ the writer made recent: its age is the later of its create_time
// and __lru_time__ (kvcm.LegacyAge), and kvcm-gc may already have judged it, so it may go or
// stay.
func (w *writer) expect(ctx context.Context) (Expect, error) {
	now, err := TakeSnapshot(ctx, w.rdb, "*")
	if err != nil {
		return Expect{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	known := map[string]map[string]bool{}
	var locs []Loc
	for _, base := range w.e.base {
		k, id := base.Key, base.ID
		if known[k] == nil {
			known[k] = map[string]bool{}
		}
		known[k][id] = true
		loc := base
		cur, _ := locationIn(now[k].Fields, base.Field, id)
		wrote, made := w.live[k][id]
		switch {
		case w.removed[k][id]:
			loc.Fate, loc.Files = Go, nil
		case made && w.overMark[k][id] && !base.keepsFiles():
			// Finished after kvcm-gc's CAS (or after it nominated a stuck DELETING): its data
			// may be gone (deleted before the CAD, which then found the location changed), so
			// the next round finds it storage-missing; or kvcm-gc saw it SERVING first and
			// left the data.
			loc.Fate = Either
		case made || base.Fate == Keep:
			loc.Fate = Keep
		case w.layout == kvcm.LayoutLegacy && w.touched[k] && cur != nil &&
			(cur.Status == kvcm.StatusWriting || cur.Status == kvcm.StatusDeleting):
			loc.Fate = Either
		}
		if loc.Fate == Keep {
			// Checked here, as the state now is what the rest is compared with.
			want := wrote
			if !made {
				if orig, ok := locationIn(w.e.before[k].Fields, base.Field, id); ok {
					want = orig.Raw
				}
			}
			switch {
			case cur == nil:
				return Expect{}, fmt.Errorf("%w: live location %s/%s deleted while the writer ran", errViolation, k, id)
			case string(cur.Raw) != string(want):
				return Expect{}, fmt.Errorf("%w: live location %s/%s changed while the writer ran: %s, was %s", errViolation, k, id, cur.Raw, want)
			}
		}
		locs = append(locs, loc)
	}
	for k, ids := range w.live {
		for id, want := range ids {
			if known[k][id] {
				continue
			}
			cur, _ := locationIn(now[k].Fields, w.field(id), id)
			if cur == nil || string(cur.Raw) != string(want) {
				return Expect{}, fmt.Errorf("%w: location %s/%s added by the writer deleted or changed while the writer ran", errViolation, k, id)
			}
			loc := Loc{Key: k, ID: id, Fate: Keep}
			if w.layout == kvcm.LayoutLocation {
				loc.Field = kvcm.LocationField(id)
			}
			locs = append(locs, loc)
		}
	}
	return Expect{Before: now, Orig: w.e.before, Locs: locs, Present: w.e.present}, nil
}

func (w *writer) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mode == finishDeleting {
		return fmt.Sprintf("writer: %d stuck DELETING flipped to SERVING, %d finished by KVCM's executor, right after kvcm-gc nominated them",
			w.flips, w.removes)
	}
	over, lost := 0, 0
	files := map[string][]string{}
	for _, l := range w.e.base {
		files[l.Key+"/"+l.ID] = l.Files
	}
	for k, ids := range w.overMark {
		for id := range ids {
			over++
			for _, f := range files[k+"/"+id] {
				if _, err := os.Lstat(f); err != nil {
					lost++ // finished by the writer, its data removed by kvcm-gc after the mark
					break
				}
			}
		}
	}
	return fmt.Sprintf("writer: %d finished (%d after kvcm-gc marked them DELETING, %d of those without their data), %d added; %d right after a probe",
		w.finished, over, lost, w.added, w.raced)
}

func (w *writer) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.errs...)
}
