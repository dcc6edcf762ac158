package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/seed"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// writerPeriod is the pause between two writes of the writer's own (a write rate, not a wait).
const writerPeriod = 15 * time.Millisecond

// writer plays KVCM writing the blocks kvcm-gc collects: it finishes writes as KVCM's
// FinishWriteCache does (SERVING whatever the status, no compare, a fresh __lru_time__) and
// adds WRITING locations. It finishes the locations that were WRITING when collection started
// and the ones it added itself. Besides writes at random, it reacts to every candidate event:
// the prober has just judged that location, so those writes land between probe and CAS, or
// after the CAS, on a location kvcm-gc already marked DELETING.
//
// KVCM's own read-modify-write is not atomic towards other writers; the writer uses WATCH
// and MULTI so that each of its writes is one step the outcome can be checked against.
type writer struct {
	e   *env
	rdb redis.UniversalClient

	mu      sync.Mutex
	rng     *rand.Rand
	keys    []string                     // blocks to write to
	live    map[string]map[string][]byte // locations the writer made live, by key: their bytes
	touched map[string]bool              // keys whose __lru_time__ the writer rewrote
	// overMark: locations the writer finished after kvcm-gc had marked them DELETING.
	overMark                      map[string]map[string]bool
	finished, added, raced, tries int
	errs                          []error
}

func newWriter(e *env, seedValue uint64) *writer {
	w := &writer{e: e, rdb: e.redis.Client(), rng: rand.New(rand.NewPCG(seedValue, ^seedValue)),
		live: map[string]map[string][]byte{}, touched: map[string]bool{}, overMark: map[string]map[string]bool{}}
	seen := map[string]bool{}
	for _, l := range e.manifest.Locations {
		k := kvcm.BlockKey(l.Instance, l.Key)
		if l.Garbage && !seen[k] {
			seen[k] = true
			w.keys = append(w.keys, k)
		}
	}
	return w
}

// run writes until ctx ends.
func (w *writer) run(ctx context.Context) error {
	// Candidate events as they are stored: the window between probe and CAS.
	sub, err := w.e.nc.Subscribe(w.e.names.EventKindFilter(subjects.EventCandidate), func(m *nats.Msg) {
		ev, err := subjects.DecodeEvent(m.Data)
		if err != nil || ev.Key == nil || ctx.Err() != nil {
			return
		}
		k := kvcm.BlockKey(ev.Instance, *ev.Key)
		w.mu.Lock()
		x := w.rng.Float64()
		w.mu.Unlock()
		var ok bool
		switch {
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
	})
	if err != nil {
		return fmt.Errorf("writer: subscribe to candidates: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	t := time.NewTicker(writerPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
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
}

// finish sets location id of key (when id is "", the first location of the block that a
// write session owns and that is not SERVING) to SERVING, whatever its status.
func (w *writer) finish(ctx context.Context, key, id string) bool {
	return w.update(ctx, key, func(blk *kvcm.Block) ([]byte, string, bool, error) {
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
			return nil, "", false, nil
		}
		next, err := blk.WithStatus(l.ID, kvcm.StatusServing)
		return next, l.ID, l.Status == kvcm.StatusDeleting, err
	}, func() { w.finished++ })
}

// owned reports whether a write session owns location id of key: it was WRITING when
// collection started, or the writer added it.
func (w *writer) owned(key, id string) bool {
	w.mu.Lock()
	_, added := w.live[key][id]
	w.mu.Unlock()
	if added {
		return true
	}
	blk, err := kvcm.DecodeBlock([]byte(w.e.before[key].Fields["__uri__"]))
	if err != nil {
		return false
	}
	l, ok := blk.Find(id)
	return ok && l.Err == nil && l.Status == kvcm.StatusWriting
}

// add puts a new WRITING location in front of key's locations.
func (w *writer) add(ctx context.Context, key string) bool {
	return w.update(ctx, key, func(blk *kvcm.Block) ([]byte, string, bool, error) {
		w.mu.Lock()
		id := "w" + strconv.FormatUint(w.rng.Uint64()%(36*36*36*36*36*36), 36)
		w.mu.Unlock()
		if _, taken := blk.Find(id); taken {
			return nil, "", false, nil
		}
		loc := fmt.Sprintf(`%q:{"id":%q,"status":2,"type":4,"spec_size":0,"location_specs":[]}`, id, id)
		next := slices.Concat([]byte("{"+loc+","), blk.Raw[1:])
		return next, id, false, nil
	}, func() { w.added++ })
}

// update applies change to key's __uri__ atomically and writes a fresh __lru_time__. change
// returns the new bytes (nil: write nothing), the location it made live, and whether that
// location was DELETING.
func (w *writer) update(ctx context.Context, key string, change func(*kvcm.Block) ([]byte, string, bool, error), count func()) bool {
	var made string
	var wrote []byte
	var wasDeleting bool
	err := w.rdb.Watch(ctx, func(tx *redis.Tx) error {
		cur, err := tx.HGet(ctx, key, "__uri__").Bytes()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		if err != nil {
			return err
		}
		blk, err := kvcm.DecodeBlock(cur)
		if err != nil || len(blk.Locations) == 0 {
			return nil
		}
		next, id, deleting, err := change(blk)
		if err != nil || next == nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, key, "__uri__", next, "__lru_time__", strconv.FormatInt(time.Now().UnixMicro(), 10))
			return nil
		})
		if err == nil {
			made, wrote, wasDeleting = id, next, deleting
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
	case made == "":
		return false
	}
	blk, err := kvcm.DecodeBlock(wrote)
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("writer: %s: decode what it wrote: %w", key, err))
		return false
	}
	l, _ := blk.Find(made)
	if w.live[key] == nil {
		w.live[key] = map[string][]byte{}
	}
	w.live[key][made] = l.Raw
	w.touched[key] = true
	if wasDeleting {
		if w.overMark[key] == nil {
			w.overMark[key] = map[string]bool{}
		}
		w.overMark[key][made] = true
	}
	count()
	return true
}

// expect is the expectation once the writer has stopped: the state now, minus what is still
// garbage. A location the writer finished or added is live; a garbage location it did not
// change stays garbage, except an orphan WRITING in a block whose __lru_time__ the writer made
// recent (its age is the later of that and its create_time): kvcm-gc may already have judged
// it, so it may go or stay.
func (w *writer) expect(ctx context.Context) (Expect, error) {
	now, err := TakeSnapshot(ctx, w.rdb, "*")
	if err != nil {
		return Expect{}, err
	}
	man := map[string]map[string]seed.Loc{}
	for _, l := range w.e.manifest.Locations {
		k := kvcm.BlockKey(l.Instance, l.Key)
		if man[k] == nil {
			man[k] = map[string]seed.Loc{}
		}
		man[k][l.Location] = l
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var locs []Loc
	for k, byID := range man {
		var blk *kvcm.Block
		if v, ok := now[k]; ok {
			blk, _ = kvcm.DecodeBlock([]byte(v.Fields["__uri__"]))
		}
		for id, l := range byID {
			shared := l.Kind == seed.KindSharedOrphan || l.Kind == seed.KindSharedServing
			loc := Loc{Key: k, ID: id, Files: l.Files, Shared: shared}
			var cur *kvcm.Location
			if blk != nil {
				cur, _ = blk.Find(id)
			}
			wrote, made := w.live[k][id]
			switch {
			case made && w.overMark[k][id] && !shared:
				// Finished after kvcm-gc's CAS: its data is gone (deleted before the CAD, which
				// then found the location changed), so the next round finds it storage-missing;
				// unless a redelivery of the request saw it SERVING first and left the data.
				loc.Fate = Either
			case made || !l.Garbage:
				loc.Fate = Keep
			case cur != nil && cur.Status == kvcm.StatusWriting && w.touched[k]:
				// A legacy location is as young as the later of its create_time and its block's
				// __lru_time__ (kvcm.LegacyAge), which the writer made recent.
				loc.Fate = Either
			default:
				loc.Fate = Go
			}
			if loc.Fate == Keep {
				// Checked here, as the state now is what the rest is compared with.
				want := wrote
				if !made {
					want = w.e.originalLocation(k, id)
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
	}
	for k, ids := range w.live {
		for id, want := range ids {
			if _, ok := man[k][id]; ok {
				continue
			}
			var cur *kvcm.Location
			if blk, err := kvcm.DecodeBlock([]byte(now[k].Fields["__uri__"])); err == nil {
				cur, _ = blk.Find(id)
			}
			if cur == nil || string(cur.Raw) != string(want) {
				return Expect{}, fmt.Errorf("%w: location %s/%s added by the writer deleted or changed while the writer ran", errViolation, k, id)
			}
			locs = append(locs, Loc{Key: k, ID: id, Fate: Keep})
		}
	}
	return Expect{Before: now, Orig: w.e.before, Locs: locs}, nil
}

func (w *writer) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	over, lost := 0, 0
	files := map[string][]string{}
	for _, l := range w.e.manifest.Locations {
		files[kvcm.BlockKey(l.Instance, l.Key)+"/"+l.Location] = l.Files
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
