package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// Value is one Redis key as a snapshot holds it: the fields of a hash, or the DUMP bytes of
// any other type (a key of the wrong type must survive untouched too).
type Value struct {
	Type   string
	Fields map[string]string // hashes
	Dump   string            // other types
}

func (v Value) equal(o Value) bool {
	return v.Type == o.Type && maps.Equal(v.Fields, o.Fields) && v.Dump == o.Dump
}

// Snapshot is every key matching a pattern.
type Snapshot map[string]Value

// TakeSnapshot reads every key matching pattern: HGETALL for hashes, DUMP for the rest.
func TakeSnapshot(ctx context.Context, rdb redis.UniversalClient, pattern string) (Snapshot, error) {
	snap := Snapshot{}
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("snapshot: scan: %w", err)
		}
		for _, k := range keys {
			typ, err := rdb.Type(ctx, k).Result()
			if err != nil {
				return nil, fmt.Errorf("snapshot: type of %q: %w", k, err)
			}
			v := Value{Type: typ}
			switch typ {
			case "none":
				continue // gone between SCAN and TYPE
			case "hash":
				if v.Fields, err = rdb.HGetAll(ctx, k).Result(); err != nil {
					return nil, fmt.Errorf("snapshot: hgetall %q: %w", k, err)
				}
			default:
				if v.Dump, err = rdb.Dump(ctx, k).Result(); err != nil && !errors.Is(err, redis.Nil) {
					return nil, fmt.Errorf("snapshot: dump %q: %w", k, err)
				}
			}
			snap[k] = v
		}
		cursor = next
		if cursor == 0 {
			return snap, nil
		}
	}
}

// Fate is what kvcm-gc must do to a location.
type Fate int

const (
	// Keep: the location is live; its bytes must stay as they are.
	Keep Fate = iota
	// Go: the location is garbage; it must be gone, and its unshared files with it.
	Go
	// Either: the location may go or stay; when it stays, its bytes are unchanged. (A
	// concurrent writer made it live after kvcm-gc may already have judged it.)
	Either
)

// Loc is the expectation about one location.
type Loc struct {
	Key string // Redis key of the block
	ID  string
	// Field is the hash field holding the location: L#<ID> in the location layout (and for
	// the L# side of a key holding both layouts); "" or __uri__ for a location of a legacy
	// __uri__ map.
	Field  string
	Fate   Fate
	Files  []string // local paths of its data
	Shared bool     // its files hold other blocks too: never removed
	// DataLeft: its files must stay even when the location goes: a stuck DELETING whose data
	// kvcm-gc removes only where the name cannot have been reused (DESIGN §8.11).
	DataLeft bool
}

// inField reports whether the location is a field of its own (location layout).
func (l Loc) inField() bool { return l.Field != "" && l.Field != kvcm.FieldURI }

// keepsFiles reports whether the location's files must stay whatever becomes of it.
func (l Loc) keepsFiles() bool { return l.Shared || l.DataLeft }

// Expect is what Redis and the files must look like after collection: Before minus the
// locations that must go (and those of Either that went), byte for byte, in each key's
// layout, with every key that lost its last location in the form empty_block gives it.
type Expect struct {
	Before Snapshot
	// Orig, when set, is the state collection started from (Before may be later, after a
	// writer): a location DELETING now that was not DELETING there is stranded.
	Orig    Snapshot
	Pattern string // of the keys compared ("*" when empty)
	Locs    []Loc
	// Present lists files that must exist whatever happens (e.g. outside every storage root).
	Present []string
	// EmptyBlock is the collector's empty_block setting: seed.EmptyKeep (also when empty) or
	// seed.EmptyDelete.
	EmptyBlock string
}

// Report is the outcome of a check.
type Report struct {
	Garbage, GarbageGone int // locations of fate Go
	Live, LiveIntact     int // locations of fate Keep
	Either, EitherGone   int
	Stranded             int // locations left DELETING that were not DELETING before
	KeysChecked          int
	// Emptied counts the keys that lost their last location: with empty_block: keep each is
	// still there in KVCM's "exists, no location" form (a problem says otherwise), with
	// delete each is gone.
	Emptied int
	// Mismatches: every mismatch counted, the first ones described.
	seed.Mismatches
}

// OK reports whether the state is exactly the expected one.
func (r Report) OK() bool { return r.Mismatch == 0 }

// Check compares Redis (every metadata store given) and the files now with the expectation.
func (x Expect) Check(ctx context.Context, rdb redis.UniversalClient, more ...redis.UniversalClient) (Report, error) {
	pattern := x.Pattern
	if pattern == "" {
		pattern = "*"
	}
	mode := x.EmptyBlock
	switch mode {
	case "":
		mode = seed.EmptyKeep
	case seed.EmptyKeep, seed.EmptyDelete:
	default:
		return Report{}, fmt.Errorf("expectation: empty_block %q: want %q or %q", mode, seed.EmptyKeep, seed.EmptyDelete)
	}
	after, err := takeSnapshots(ctx, append([]redis.UniversalClient{rdb}, more...), pattern)
	if err != nil {
		return Report{}, err
	}
	byKey := map[string][]Loc{}
	for _, l := range x.Locs {
		byKey[l.Key] = append(byKey[l.Key], l)
	}
	var r Report
	for _, k := range slices.Sorted(maps.Keys(x.Before)) {
		r.KeysChecked++
		b := x.Before[k]
		got, exists := after[k]
		var gone []Loc
		for _, l := range byKey[k] {
			if l.Fate == Go || l.Fate == Either && !present(after, l) {
				gone = append(gone, l)
			}
		}
		want, emptied, err := expected(b, gone, mode)
		if err != nil {
			return r, fmt.Errorf("expectation of %s: %w", k, err)
		}
		if emptied {
			r.Emptied++
		}
		switch {
		case want == nil && exists:
			r.Problem("%s: every location went and empty_block is %s, but the key is still there: %s", k, mode, seed.FieldNames(got.Fields))
		case want != nil && !exists && emptied:
			r.Problem("%s: deleted, but empty_block: %s keeps a key that lost its last location (as %s)", k, mode, seed.FieldNames(want.Fields))
		case want != nil && !exists:
			r.Problem("%s: deleted, but it had live fields (%s)", k, seed.FieldNames(want.Fields))
		case want != nil && !want.equal(got):
			r.Problem("%s (%s layout): %s", k, kvcm.LayoutOfFields(b.Fields), diff(*want, got))
		}
		if exists && got.Type == "hash" {
			orig := b
			if x.Orig != nil {
				orig = x.Orig[k]
			}
			r.Stranded += stranded(orig.Fields, got.Fields)
		}
	}
	for k := range after {
		if _, ok := x.Before[k]; !ok {
			r.Problem("%s: key appeared", k)
		}
	}
	if r.Stranded > 0 {
		r.Problem("%d locations left DELETING", r.Stranded)
	}
	for _, l := range x.Locs {
		gone := !present(after, l)
		switch l.Fate {
		case Go:
			r.Garbage++
			if gone {
				r.GarbageGone++
			}
		case Keep:
			r.Live++
			if !gone {
				r.LiveIntact++
			}
		case Either:
			r.Either++
			if gone {
				r.EitherGone++
			}
		}
		for _, f := range l.Files {
			_, err := os.Lstat(f)
			exists := err == nil
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return r, fmt.Errorf("check file %s: %w", f, err)
			}
			switch {
			case gone && !l.keepsFiles() && exists:
				r.Problem("%s/%s: collected, but its file %s is still there", l.Key, l.ID, f)
			case (!gone || l.keepsFiles()) && !exists:
				r.Problem("%s/%s: live, shared or left data file %s is gone", l.Key, l.ID, f)
			}
		}
	}
	for _, f := range x.Present {
		if _, err := os.Lstat(f); err != nil {
			r.Problem("file %s must exist: %v", f, err)
		}
	}
	return r, nil
}

// expected returns what key b must be once the locations gone are removed from it under
// empty_block mode (nil: the key must be gone), and whether it lost its last location. A
// location gone already in b is skipped. The other locations keep their bytes, so the
// result is exact:
//   - legacy layout: each location leaves __uri__ (the others byte for byte); an emptied map
//     is {} beside the untouched __lru_time__ (keep), or the key is gone (delete);
//   - location layout: each location's L# field goes; once no non-empty L# field is left,
//     the key keeps its other fields, or BP#prev_key = "" where none would remain (keep), or
//     is gone (delete);
//   - any other layout: nothing may go (DESIGN §8.9).
func expected(b Value, gone []Loc, mode string) (*Value, bool, error) {
	var there []Loc
	for _, l := range gone {
		if in(b, l) {
			there = append(there, l)
		}
	}
	if len(there) == 0 {
		return &b, false, nil
	}
	gone = there
	want := Value{Type: b.Type, Fields: maps.Clone(b.Fields)}
	switch layout := kvcm.LayoutOfFields(b.Fields); layout {
	case kvcm.LayoutLegacy:
		uri := []byte(b.Fields[kvcm.FieldURI])
		removed := false
		for _, l := range gone {
			if l.inField() {
				return nil, false, fmt.Errorf("location %s in field %s of a legacy key", l.ID, l.Field)
			}
			blk, err := kvcm.DecodeBlock(uri)
			if err != nil {
				return nil, false, fmt.Errorf("decode __uri__: %w", err)
			}
			if _, ok := blk.Find(l.ID); !ok {
				continue // a repeated expectation
			}
			out, empty, err := blk.Without(l.ID)
			if err != nil {
				return nil, false, fmt.Errorf("remove %s: %w", l.ID, err)
			}
			if uri, removed = out, true; empty {
				uri = []byte("{}")
			}
		}
		if !removed {
			return &want, false, nil
		}
		want.Fields[kvcm.FieldURI] = string(uri)
		if string(uri) != "{}" {
			return &want, false, nil
		}
		if mode == seed.EmptyDelete {
			return nil, true, nil
		}
		return &want, true, nil
	case kvcm.LayoutLocation:
		removed := false
		for _, l := range gone {
			if !l.inField() || l.Field != kvcm.LocationField(l.ID) {
				return nil, false, fmt.Errorf("location %s is not field %s of a location-layout key", l.ID, kvcm.LocationField(l.ID))
			}
			if v, ok := want.Fields[l.Field]; ok && v != "" {
				delete(want.Fields, l.Field)
				removed = true
			}
		}
		if !removed {
			return &want, false, nil
		}
		for f, v := range want.Fields {
			if _, ok := kvcm.LocationID(f); ok && v != "" {
				return &want, false, nil
			}
		}
		if mode == seed.EmptyDelete {
			return nil, true, nil
		}
		if len(want.Fields) == 0 {
			want.Fields[kvcm.FieldPrevKey] = ""
		}
		return &want, true, nil
	default:
		return nil, false, fmt.Errorf("garbage %s in a key of the %s layout, which nothing may collect", gone[0].ID, layout)
	}
}

// locationIn decodes location id of a key's fields: from its own field when field names one
// (location layout), else from __uri__. ok is false when it is not there, or not decodable.
func locationIn(fields map[string]string, field, id string) (*kvcm.Location, bool) {
	if field != "" && field != kvcm.FieldURI {
		v, ok := fields[field]
		if !ok || v == "" {
			return nil, false
		}
		l, err := kvcm.DecodeLocation(id, []byte(v))
		if err != nil {
			return nil, false
		}
		return &l, true
	}
	u, ok := fields[kvcm.FieldURI]
	if !ok {
		return nil, false
	}
	blk, err := kvcm.DecodeBlock([]byte(u))
	if err != nil {
		return nil, false
	}
	return blk.Find(id)
}

// present reports whether location l is in after.
func present(after Snapshot, l Loc) bool {
	v, ok := after[l.Key]
	return ok && in(v, l)
}

// in reports whether location l is in key v.
func in(v Value, l Loc) bool {
	if v.Type != "hash" {
		return false
	}
	if l.inField() {
		f, ok := v.Fields[l.Field]
		return ok && f != ""
	}
	u, ok := v.Fields[kvcm.FieldURI]
	if !ok {
		return false
	}
	blk, err := kvcm.DecodeBlock([]byte(u))
	if err != nil {
		return true // undecodable now: nothing was removed from it
	}
	_, found := blk.Find(l.ID)
	return found
}

// stranded counts the locations DELETING in now that were not DELETING in before, in either
// layout: in __uri__, and in L# fields.
func stranded(before, now map[string]string) int {
	n := 0
	if u, ok := now[kvcm.FieldURI]; ok {
		if blk, err := kvcm.DecodeBlock([]byte(u)); err == nil {
			for _, l := range blk.Locations {
				if l.Status == kvcm.StatusDeleting && !wasDeleting(before, kvcm.FieldURI, l.ID) {
					n++
				}
			}
		}
	}
	for f, v := range now {
		id, ok := kvcm.LocationID(f)
		if !ok || v == "" {
			continue
		}
		if l, err := kvcm.DecodeLocation(id, []byte(v)); err == nil && l.Status == kvcm.StatusDeleting && !wasDeleting(before, f, id) {
			n++
		}
	}
	return n
}

func wasDeleting(fields map[string]string, field, id string) bool {
	l, ok := locationIn(fields, field, id)
	return ok && l.Status == kvcm.StatusDeleting
}

// diff describes the first few fields in which got differs from want.
func diff(want, got Value) string {
	if want.Type != got.Type {
		return fmt.Sprintf("type %s, want %s", got.Type, want.Type)
	}
	if want.Type != "hash" {
		return "value changed"
	}
	return seed.DiffFields(want.Fields, got.Fields, nil)
}

// FromManifest turns a seed manifest into location expectations (either layout).
func FromManifest(m *seed.Manifest) []Loc {
	out := make([]Loc, 0, len(m.Locations))
	for _, l := range m.Locations {
		fate := Keep
		if l.Garbage {
			fate = Go
		}
		out = append(out, Loc{Key: kvcm.BlockKey(l.Instance, l.Key), ID: l.Location, Field: l.FieldName(), Fate: fate,
			Files: l.Files, Shared: l.Shared()})
	}
	return out
}
