package scanner

import (
	"cmp"
	"context"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// KVCM's RemoveInstance deletes the registry entry first and trims the instance's keys after;
// when the trim fails, the keys stay, under an instance no longer registered, and nothing of
// KVCM's reclaims them (it visits registered instances only). The scanner counts them: every
// key of a store's walk that belongs to no instance the registry lists, collected or skipped,
// is read (HGETALL, as any block) and tallied by instance: keys, locations, and the bytes their
// spec URIs' size parameters account (what KVCM's usage counted). The round's running count
// travels in the store's checkpoint, so a walk resumed elsewhere goes on counting; at the
// round's end it becomes the store's last count, with when each instance was first seen
// unregistered. Nothing of it is ever judged or written.

// maxUnregistered bounds the instances a checkpoint lists (the largest first): a store full of
// abandoned ids must not grow the checkpoint without bound. Truncated counts the rest.
const maxUnregistered = 256

// unregTally is a driver's share of the count: the tallies of pages scanned whose checkpoint
// is not written yet, applied to the checkpoint that records each page.
type unregTally struct {
	mu      sync.Mutex
	pending []unregPage
}

// unregPage is one scanned page's tally, recorded by the checkpoint whose cursor is next.
type unregPage struct {
	from, next uint64
	counts     map[string]*pipeline.UnregisteredCount
	sent       int64                            // keys sent to the deleter (unregistered_collect.go)
	listed     map[string]pipeline.SeenInstance // the store's instances the page's snapshot listed
}

// add remembers the tally of the page scanned from cursor from (next: the cursor after it);
// a page scanned again from the same cursor replaces the earlier tally.
func (u *unregTally) add(
	from, next uint64,
	counts map[string]*pipeline.UnregisteredCount,
	sent int64,
	listed map[string]pipeline.SeenInstance,
) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var earlier int64
	u.pending = slices.DeleteFunc(u.pending, func(p unregPage) bool {
		if p.from == from {
			earlier += p.sent // keys already sent stay counted against the round's cap
		}
		return p.from == from
	})
	u.pending = append(u.pending, unregPage{from: from, next: next, counts: counts, sent: sent + earlier, listed: listed})
}

// apply brings checkpoint c, about to be written for why ("" for a page's record), up to
// date: a round's start clears the running count; the page c records (its cursor is the
// page's next, or the walk is done) joins it; a round's end makes it the store's last count
// at now, and ended says so; a round that ended failed drops its running count, and the last
// completed round's stays the store's (nor are the instances it did not reach forgotten).
func (u *unregTally) apply(c pipeline.Checkpoint, why string, now time.Time) (_ pipeline.Checkpoint, ended bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch why {
	case saveRoundStart:
		u.pending = nil
		c.UnregisteredRound, c.UnregisteredCollected = nil, 0
		return c, false
	case saveRoundEnd:
		c.Unregistered, c.UnregisteredTruncated = finishUnregistered(c.UnregisteredRound, c.Unregistered, now)
		c.UnregisteredRound, u.pending = nil, nil
		c.Seen = pruneSeen(c.Seen, c.Unregistered, c.RoundStartedUs)
		return c, true
	case saveFailed:
		c.UnregisteredRound, u.pending = nil, nil
		return c, false
	}
	if !c.InRound {
		return c, false
	}
	for i, p := range u.pending {
		if p.next == c.Cursor && (p.next != 0 || c.Walked) {
			c.UnregisteredRound = mergeUnregistered(c.UnregisteredRound, p.counts)
			c.UnregisteredCollected += p.sent
			c.Seen = mergeSeen(c.Seen, p.listed)
			u.pending = slices.Delete(u.pending, i, i+1)
			break
		}
	}
	return c, false
}

// mergeSeen remembers the instances a snapshot listed (a fresh map), each with the latest
// time one did.
func mergeSeen(seen, listed map[string]pipeline.SeenInstance) map[string]pipeline.SeenInstance {
	if len(listed) == 0 {
		return seen
	}
	out := maps.Clone(seen)
	if out == nil {
		out = map[string]pipeline.SeenInstance{}
	}
	for id, l := range listed {
		if o, ok := out[id]; !ok || l.LastRegisteredUs >= o.LastRegisteredUs {
			out[id] = l
		}
	}
	return out
}

// seenSlack: an instance the round's snapshots listed was listed at most this long before
// the round started (the round's first snapshot).
const seenSlack = time.Hour

// pruneSeen forgets, at a round's end, the instances no snapshot of the round listed and of
// which the round counted no key: nothing is left of them to collect.
func pruneSeen(
	seen map[string]pipeline.SeenInstance,
	counted []pipeline.UnregisteredCount,
	roundStartUs int64,
) map[string]pipeline.SeenInstance {
	left := map[string]bool{}
	for _, u := range counted {
		left[u.Instance] = true
	}
	out := map[string]pipeline.SeenInstance{}
	for id, s := range seen {
		if left[id] || s.LastRegisteredUs >= roundStartUs-seenSlack.Microseconds() {
			out[id] = s
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// mergeUnregistered adds a page's counts to a round's (a fresh slice).
func mergeUnregistered(
	round []pipeline.UnregisteredCount,
	page map[string]*pipeline.UnregisteredCount,
) []pipeline.UnregisteredCount {
	if len(page) == 0 {
		return round
	}
	by := map[string]pipeline.UnregisteredCount{}
	for _, r := range round {
		by[r.Instance] = r
	}
	for id, p := range page {
		r := by[id]
		r.Instance = id
		r.Keys += p.Keys
		r.Locations += p.Locations
		r.Bytes = satAdd(r.Bytes, p.Bytes)
		r.Unreadable += p.Unreadable
		by[id] = r
	}
	out := slices.Collect(maps.Values(by))
	slices.SortFunc(out, func(a, b pipeline.UnregisteredCount) int {
		return cmp.Or(cmp.Compare(b.Keys, a.Keys), cmp.Compare(a.Instance, b.Instance))
	})
	return out
}

// satAdd adds byte counts, saturating: a report, not an account.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// finishUnregistered is a round's count as the store's last one, each instance keeping when it
// was first seen unregistered (now, for one not in the last count), the largest first, at most
// maxUnregistered; truncated counts the instances left out.
func finishUnregistered(round, last []pipeline.UnregisteredCount, now time.Time) ([]pipeline.UnregisteredCount, int) {
	first := map[string]int64{}
	for _, l := range last {
		first[l.Instance] = l.FirstSeenUs
	}
	var out []pipeline.UnregisteredCount
	for _, r := range mergeUnregistered(nil, toMap(round)) {
		r.FirstSeenUs = first[r.Instance]
		if r.FirstSeenUs == 0 {
			r.FirstSeenUs = now.UnixMicro()
		}
		out = append(out, r)
	}
	truncated := 0
	if len(out) > maxUnregistered {
		truncated, out = len(out)-maxUnregistered, out[:maxUnregistered]
	}
	return out, truncated
}

func toMap(round []pipeline.UnregisteredCount) map[string]*pipeline.UnregisteredCount {
	m := make(map[string]*pipeline.UnregisteredCount, len(round))
	for i := range round {
		m[round[i].Instance] = &round[i]
	}
	return m
}

// countUnregistered tallies the page's keys of instances the registry does not list: read
// whole, their locations and bytes counted. registered says whether the registry lists an
// instance id (ok false: no snapshot yet, nothing counted).
func countUnregistered(
	ctx context.Context,
	store meta.Store,
	keys []string,
	registered func(id string) (known, ok bool),
) (map[string]*pipeline.UnregisteredCount, map[string][]meta.BlockRead) {
	byInst := map[string][]int64{}
	var order []string
	for _, k := range keys {
		id, block, ok := kvcm.KeyInstance(k)
		if !ok {
			continue
		}
		known, ok := registered(id)
		if !ok || known {
			continue // another store's instance, a skipped group's, or no registry yet
		}
		if byInst[id] == nil {
			order = append(order, id)
		}
		byInst[id] = append(byInst[id], block)
	}
	if len(order) == 0 {
		return nil, nil
	}
	out := map[string]*pipeline.UnregisteredCount{}
	all := map[string][]meta.BlockRead{}
	for _, id := range order {
		c := &pipeline.UnregisteredCount{Instance: id}
		out[id] = c
		blocks := byInst[id]
		reads, err := store.ReadBlocks(ctx, id, blocks)
		if err != nil {
			c.Keys, c.Unreadable = int64(len(blocks)), int64(len(blocks))
			continue
		}
		all[id] = reads
		for _, r := range reads {
			if r.Err == nil && !r.Exists {
				continue // gone since the SCAN
			}
			c.Keys++
			n, bytes, ok := entryLocations(&r.Entry)
			if r.Err != nil || !ok {
				c.Unreadable++
			}
			c.Locations += n
			c.Bytes = satAdd(c.Bytes, bytes)
		}
	}
	return out, all
}

// entryLocations counts a block's locations and their spec bytes, in either layout; ok is
// false when part of it does not decode (what did is counted).
func entryLocations(e *meta.Entry) (n int64, bytes uint64, ok bool) {
	ok = true
	ps := e.Parts()
	for p := range ps.All() {
		switch p.Kind {
		case kvcm.PartCorrupt:
			ok = false
		case kvcm.PartLocation:
			n++
			b, _ := kvcm.SpecBytes(p.Loc.Specs)
			bytes = satAdd(bytes, b)
		}
	}
	return n, bytes, ok
}
