package seed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

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
	// Problems lists every mismatch (capped).
	Problems []string `json:"problems,omitempty"`
	Mismatch int      `json:"mismatch"`
}

// OK reports whether every garbage location is gone and everything else is byte-identical.
func (r Report) OK() bool { return r.Mismatch == 0 }

func (r *Report) problem(format string, a ...any) {
	r.Mismatch++
	if len(r.Problems) < 20 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
}

// Verify compares Redis and the files now with before minus the manifest's garbage: every
// garbage location gone (its unshared files too), every other byte and file as it was.
func Verify(ctx context.Context, rdb redis.UniversalClient, before Snapshot, m *Manifest, pattern string) (Report, error) {
	after, err := Take(ctx, rdb, pattern)
	if err != nil {
		return Report{}, err
	}
	garbage := map[string][]string{} // redis key -> location ids
	for _, l := range m.Locations {
		if l.Garbage {
			k := kvcm.BlockKey(l.Instance, l.Key)
			garbage[k] = append(garbage[k], l.Location)
		}
	}
	var r Report
	for _, k := range slices.Sorted(maps.Keys(before)) {
		r.KeysChecked++
		want, err := expected(before[k], garbage[k])
		if err != nil {
			r.problem("%s: %v", k, err)
			continue
		}
		got, exists := after[k]
		switch {
		case want == nil && exists:
			r.problem("%s: should be deleted, still has __uri__ %q", k, got["__uri__"])
		case want != nil && !exists:
			r.problem("%s: deleted, but it had live locations", k)
		case want != nil && !maps.Equal(want, got):
			r.problem("%s: fields differ: want %q, got %q", k, want["__uri__"], got["__uri__"])
		default:
			r.KeysIntact++
		}
		if exists {
			if blk, err := kvcm.DecodeBlock([]byte(got["__uri__"])); err == nil {
				orig, _ := kvcm.DecodeBlock([]byte(before[k]["__uri__"]))
				for _, l := range blk.Locations {
					if l.Status == kvcm.StatusDeleting && orig != nil {
						if o, ok := orig.Find(l.ID); ok && o.Status != kvcm.StatusDeleting {
							r.StrandedDeleting++
							r.problem("%s: location %s left DELETING", k, l.ID)
						}
					}
				}
			}
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			r.problem("%s: key appeared", k)
		}
	}
	for _, l := range m.Locations {
		gone := false
		if a, ok := after[kvcm.BlockKey(l.Instance, l.Key)]; ok {
			if blk, err := kvcm.DecodeBlock([]byte(a["__uri__"])); err == nil {
				_, found := blk.Find(l.Location)
				gone = !found
			}
		} else {
			gone = true
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
			shared := l.Kind == KindSharedOrphan || l.Kind == KindSharedServing
			switch {
			case l.Garbage && !shared:
				if present {
					r.problem("%s/%d/%s: garbage file %s still present", l.Instance, l.Key, l.Location, f)
				} else {
					r.GarbageFilesGone++
				}
			default:
				r.LiveFiles++
				if present {
					r.LiveFilesPresent++
				} else {
					r.problem("%s/%d/%s: live or shared file %s is gone", l.Instance, l.Key, l.Location, f)
				}
			}
		}
	}
	return r, nil
}

// expected returns the fields a key must have after the garbage ids are removed (nil: the key
// must be gone). Untouched locations keep their bytes, so the result is exact.
func expected(fields map[string]string, ids []string) (map[string]string, error) {
	if len(ids) == 0 {
		return fields, nil
	}
	uri := []byte(fields["__uri__"])
	for _, id := range ids {
		blk, err := kvcm.DecodeBlock(uri)
		if err != nil {
			return nil, fmt.Errorf("decode seeded __uri__: %w", err)
		}
		out, empty, err := blk.Without(id)
		if err != nil {
			return nil, fmt.Errorf("remove %s: %w", id, err)
		}
		if empty {
			return nil, nil
		}
		uri = out
	}
	want := maps.Clone(fields)
	want["__uri__"] = string(uri)
	return want, nil
}
