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
	"github.com/kvcm-gc/kvcm-gc/seed"
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
	Key    string // Redis key of the block
	ID     string
	Fate   Fate
	Files  []string // local paths of its data
	Shared bool     // its files hold other blocks too: never removed
}

// Expect is what Redis and the files must look like after collection: Before minus the
// locations that must go (and those of Either that went), byte for byte.
type Expect struct {
	Before Snapshot
	// Orig, when set, is the state collection started from (Before may be later, after a
	// writer): a location DELETING now that was not DELETING there is stranded.
	Orig    Snapshot
	Pattern string // of the keys compared ("*" when empty)
	Locs    []Loc
	// Present lists files that must exist whatever happens (e.g. outside every storage root).
	Present []string
	// DeleteEmpty: the stages run with empty_block: delete, so a block whose every location
	// goes is deleted. By default (keep, the stages' default) it stays with __uri__ {}.
	DeleteEmpty bool
}

// Report is the outcome of a check.
type Report struct {
	Garbage, GarbageGone int // locations of fate Go
	Live, LiveIntact     int // locations of fate Keep
	Either, EitherGone   int
	Stranded             int // locations left DELETING that were not DELETING before
	KeysChecked          int
	Problems             []string // the first mismatches
	Mismatches           int
}

// OK reports whether the state is exactly the expected one.
func (r Report) OK() bool { return r.Mismatches == 0 }

func (r *Report) problem(format string, a ...any) {
	r.Mismatches++
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
}

// Check compares Redis (every metadata store given) and the files now with the expectation.
func (x Expect) Check(ctx context.Context, rdb redis.UniversalClient, more ...redis.UniversalClient) (Report, error) {
	pattern := x.Pattern
	if pattern == "" {
		pattern = "*"
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
	present := func(key, id string) bool {
		v, ok := after[key]
		if !ok {
			return false
		}
		blk, err := kvcm.DecodeBlock([]byte(v.Fields["__uri__"]))
		if err != nil {
			return true // undecodable now: nothing was removed from it
		}
		_, found := blk.Find(id)
		return found
	}
	for _, k := range slices.Sorted(maps.Keys(x.Before)) {
		r.KeysChecked++
		b := x.Before[k]
		got, exists := after[k]
		if b.Type != "hash" || len(byKey[k]) == 0 {
			if !exists {
				r.problem("%s: deleted, but nothing in it was garbage", k)
			} else if !b.equal(got) {
				r.problem("%s: changed, but nothing in it was garbage: __uri__ %q, now %q", k, b.Fields["__uri__"], got.Fields["__uri__"])
			}
		} else {
			uri := []byte(b.Fields["__uri__"])
			empty := false
			for _, l := range byKey[k] {
				if l.Fate == Keep || (l.Fate == Either && present(k, l.ID)) {
					continue
				}
				blk, err := kvcm.DecodeBlock(uri)
				if err != nil {
					return r, fmt.Errorf("expectation of %s: decode __uri__: %w", k, err)
				}
				if _, ok := blk.Find(l.ID); !ok {
					continue // gone before the snapshot already
				}
				if uri, empty, err = blk.Without(l.ID); err != nil {
					return r, fmt.Errorf("expectation of %s: remove %s: %w", k, l.ID, err)
				}
				if empty {
					break
				}
			}
			if empty && !x.DeleteEmpty {
				// empty_block: keep leaves the key as KVCM reads "exists, no location".
				uri, empty = []byte("{}"), false
			}
			switch {
			case empty && exists:
				r.problem("%s: should be deleted (all its locations are garbage), still has __uri__ %q", k, got.Fields["__uri__"])
			case !empty && !exists:
				r.problem("%s: deleted, but it had live locations", k)
			case !empty:
				want := maps.Clone(b.Fields)
				want["__uri__"] = string(uri)
				if got.Type != "hash" || !maps.Equal(want, got.Fields) {
					r.problem("%s: fields differ:\n  want %q\n  got  %q", k, want, got.Fields)
				}
			}
		}
		if exists && got.Type == "hash" {
			orig := b
			if x.Orig != nil {
				orig = x.Orig[k]
			}
			r.Stranded += stranded(orig.Fields["__uri__"], got.Fields["__uri__"])
		}
	}
	for k := range after {
		if _, ok := x.Before[k]; !ok {
			r.problem("%s: key appeared", k)
		}
	}
	if r.Stranded > 0 {
		r.problem("%d locations left DELETING", r.Stranded)
	}
	for _, l := range x.Locs {
		gone := !present(l.Key, l.ID)
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
			case gone && !l.Shared && exists:
				r.problem("%s/%s: collected, but its file %s is still there", l.Key, l.ID, f)
			case (!gone || l.Shared) && !exists:
				r.problem("%s/%s: live or shared file %s is gone", l.Key, l.ID, f)
			}
		}
	}
	for _, f := range x.Present {
		if _, err := os.Lstat(f); err != nil {
			r.problem("file %s must exist: %v", f, err)
		}
	}
	return r, nil
}

// stranded counts the locations DELETING in now that were not DELETING in before.
func stranded(before, now string) int {
	blk, err := kvcm.DecodeBlock([]byte(now))
	if err != nil {
		return 0
	}
	orig, _ := kvcm.DecodeBlock([]byte(before))
	n := 0
	for _, l := range blk.Locations {
		if l.Status != kvcm.StatusDeleting {
			continue
		}
		if orig != nil {
			if o, ok := orig.Find(l.ID); ok && o.Status == kvcm.StatusDeleting {
				continue
			}
		}
		n++
	}
	return n
}

// FromManifest turns a seed manifest into location expectations.
func FromManifest(m *seed.Manifest) []Loc {
	out := make([]Loc, 0, len(m.Locations))
	for _, l := range m.Locations {
		fate := Keep
		if l.Garbage {
			fate = Go
		}
		out = append(out, Loc{Key: kvcm.BlockKey(l.Instance, l.Key), ID: l.Location, Fate: fate, Files: l.Files,
			Shared: l.Kind == seed.KindSharedOrphan || l.Kind == seed.KindSharedServing})
	}
	return out
}
