package seed

import (
	"context"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

var testNow = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

// seeded is a keyspace generated on a real redis-server and its snapshot.
type seeded struct {
	rdb    *redis.Client
	m      *Manifest
	before Snapshot
}

func generate(t *testing.T, sp Spec) seeded {
	t.Helper()
	ctx := context.Background()
	r := testenv.StartRedis(t)
	sp.Cluster, sp.Root, sp.MetaURI, sp.Now = "c1", t.TempDir(), r.URI(), testNow
	if sp.Instances == nil {
		sp.Instances = []string{"inst0", "inst1"}
	}
	m, err := Generate(ctx, r.Client(), sp)
	require.NoError(t, err)
	before, err := Take(ctx, r.Client(), "*")
	require.NoError(t, err)
	return seeded{rdb: r.Client(), m: m, before: before}
}

func (s seeded) verify(t *testing.T, mode string) Report {
	t.Helper()
	r, err := VerifyWith(context.Background(), s.rdb, s.before, s.m, VerifyOptions{EmptyBlock: mode})
	require.NoError(t, err)
	return r
}

// collect applies by hand the collection the manifest expects, as a correct collector does
// it: legacy, the garbage taken out of __uri__ (the other locations' bytes kept), {} when the
// last one goes; location layout, HDEL of the garbage L# fields, BP#prev_key = "" where no
// field at all would remain; under empty_block: delete, a DEL where no location remains.
// Garbage files are removed, except shared ones and a stuck DELETING's data left in place.
func collect(t *testing.T, s seeded, mode string) {
	t.Helper()
	ctx := context.Background()
	byKey := map[string][]Loc{}
	for _, l := range s.m.Garbage() {
		k := kvcm.BlockKey(l.Instance, l.Key)
		byKey[k] = append(byKey[k], l)
	}
	for k, locs := range byKey {
		fields, err := s.rdb.HGetAll(ctx, k).Result()
		require.NoError(t, err)
		switch kvcm.LayoutOfFields(fields) {
		case kvcm.LayoutLegacy:
			uri := []byte(fields[kvcm.FieldURI])
			empty := false
			for _, l := range locs {
				blk, err := kvcm.DecodeBlock(uri)
				require.NoError(t, err)
				uri, empty, err = blk.Without(l.Location)
				require.NoError(t, err)
			}
			switch {
			case empty && mode == EmptyDelete:
				require.NoError(t, s.rdb.Del(ctx, k).Err())
			case empty:
				require.NoError(t, s.rdb.HSet(ctx, k, kvcm.FieldURI, "{}").Err())
			default:
				require.NoError(t, s.rdb.HSet(ctx, k, kvcm.FieldURI, uri).Err())
			}
		case kvcm.LayoutLocation:
			var names []string
			for _, l := range locs {
				names = append(names, kvcm.LocationField(l.Location))
			}
			left := 0
			for f := range fields {
				if _, ok := kvcm.LocationID(f); ok && !slices.Contains(names, f) {
					left++
				}
			}
			_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				switch {
				case left == 0 && mode == EmptyDelete:
					p.Del(ctx, k)
				case len(fields) == len(names):
					p.HSet(ctx, k, kvcm.FieldPrevKey, "") // before the HDEL: the key never vanishes
					fallthrough
				default:
					p.HDel(ctx, k, names...)
				}
				return nil
			})
			require.NoError(t, err)
		default:
			t.Fatalf("garbage in key %s of layout %s", k, kvcm.LayoutOfFields(fields))
		}
		for _, l := range locs {
			if !l.KeepsFiles() {
				for _, f := range l.Files {
					require.NoError(t, os.Remove(f))
				}
			}
		}
	}
}

// TestVerifyAfterCollection: on a real redis-server, the collection the manifest describes,
// applied by hand, verifies in every layout and empty_block setting; before it, the
// verification fails.
func TestVerifyAfterCollection(t *testing.T) {
	for _, tc := range []struct {
		name      string
		layout    kvcm.Layout
		ambiguous bool
	}{
		{"location", kvcm.LayoutLocation, false},
		{"legacy", kvcm.LayoutLegacy, false},
		{"legacy_with_upgraded_blocks", kvcm.LayoutLegacy, true},
	} {
		for _, mode := range []string{EmptyKeep, EmptyDelete} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				s := generate(t, Spec{Layout: tc.layout, Ambiguous: tc.ambiguous, Blocks: 300,
					GarbageFraction: 0.3, TrickyFraction: 0.3, Seed: 3})
				r := s.verify(t, mode)
				require.False(t, r.OK(), "nothing collected yet")
				require.Zero(t, r.GarbageGone)

				collect(t, s, mode)
				r = s.verify(t, mode)
				require.True(t, r.OK(), "%+v", r.Problems)
				require.Equal(t, r.GarbageLocations, r.GarbageGone)
				require.Positive(t, r.GarbageLocations)
				require.Equal(t, r.LiveLocations, r.LiveIntact)
				require.Equal(t, r.KeysChecked, r.KeysIntact)
				require.Equal(t, r.LiveFiles, r.LiveFilesPresent)
				require.Positive(t, r.GarbageFilesGone)
				require.Zero(t, r.StrandedDeleting)
				require.Equal(t, mode, r.EmptyBlock)
				require.Positive(t, r.EmptyKeys)
				if mode == EmptyKeep {
					require.Equal(t, r.EmptyKeys, r.EmptyKept)
					require.Zero(t, r.EmptyDeleted)
				} else {
					require.Equal(t, r.EmptyKeys, r.EmptyDeleted)
					require.Zero(t, r.EmptyKept)
				}
				all := 0
				for _, c := range s.m.Layouts {
					all += c.AllGarbage
				}
				require.Equal(t, all, r.EmptyKeys, "the manifest counts the keys that lose every location")
				require.Equal(t, r.AmbiguousKeys, r.AmbiguousIntact)
				require.Equal(t, len(s.m.Ambiguous), r.AmbiguousKeys)
				require.Equal(t, tc.layout == kvcm.LayoutLocation || tc.ambiguous, r.AmbiguousKeys > 0)
				if tc.layout == kvcm.LayoutLocation {
					require.Positive(t, r.TierKeys)
					require.Equal(t, r.TierKeys, r.TierIntact)
					require.Positive(t, r.TombstoneKeys)
					require.Equal(t, r.TombstoneKeys, r.TombstonesIntact)
				}
			})
		}
	}
}

// TestVerifyCatchesDamage: after a correct collection, each kind of damage a wrong collector
// could do fails the verification, naming the key.
func TestVerifyCatchesDamage(t *testing.T) {
	ctx := context.Background()
	loc := generate(t, Spec{Layout: kvcm.LayoutLocation, Blocks: 300, GarbageFraction: 0.3, TrickyFraction: 0.3, Seed: 5})
	collect(t, loc, EmptyKeep)
	require.True(t, loc.verify(t, EmptyKeep).OK())
	leg := generate(t, Spec{Layout: kvcm.LayoutLegacy, Blocks: 300, GarbageFraction: 0.3, TrickyFraction: 0.3, Seed: 5})
	collect(t, leg, EmptyKeep)
	require.True(t, leg.verify(t, EmptyKeep).OK())

	// Keys of each shape, from what the seed wrote.
	garbageByKey := map[string]int{}
	for _, l := range loc.m.Garbage() {
		garbageByKey[kvcm.BlockKey(l.Instance, l.Key)]++
	}
	find := func(s seeded, what string, ok func(k string, f map[string]string) bool) string {
		t.Helper()
		for _, k := range slices.Sorted(maps.Keys(s.before)) {
			if strings.HasPrefix(k, "kvcache:instance_") && ok(k, s.before[k]) {
				return k
			}
		}
		t.Fatalf("no key %s", what)
		return ""
	}
	locFields := func(f map[string]string) int {
		n := 0
		for name := range f {
			if _, ok := kvcm.LocationID(name); ok {
				n++
			}
		}
		return n
	}
	emptied := func(k string, f map[string]string) bool {
		return kvcm.LayoutOfFields(f) == kvcm.LayoutLocation && garbageByKey[k] == locFields(f)
	}
	var liveLoc, garbageLoc Loc
	for _, l := range loc.m.Locations {
		if l.Layout == "location" && l.Kind == KindLiveServing && liveLoc.Field == "" {
			liveLoc = l
		}
		if l.Garbage && garbageLoc.Field == "" {
			garbageLoc = l
		}
	}
	liveKey, garbageKey := kvcm.BlockKey(liveLoc.Instance, liveLoc.Key), kvcm.BlockKey(garbageLoc.Instance, garbageLoc.Key)
	emptyKey := find(loc, "that loses every location", func(k string, f map[string]string) bool { return emptied(k, f) && len(f) > locFields(f) })
	bareKey := find(loc, "with nothing but garbage locations", func(k string, f map[string]string) bool { return emptied(k, f) && len(f) == locFields(f) })
	markOnlyKey := find(loc, "kept by its tier mark alone", func(k string, f map[string]string) bool {
		_, prev := f[kvcm.FieldPrevKey]
		_, tier := f[FieldTierTarget]
		return emptied(k, f) && tier && !prev
	})
	tierKey := find(loc, "with a tier mark", func(k string, f map[string]string) bool { _, ok := f[FieldTierTarget]; return ok })
	ambKey := find(loc, "holding both layouts", func(k string, f map[string]string) bool {
		return kvcm.LayoutOfFields(f) == kvcm.LayoutAmbiguous && f[kvcm.FieldURI] != "{}"
	})
	tombKey := find(loc, "with a tombstone", func(k string, f map[string]string) bool { return hasTombstone(f) })
	legacyEmpty := find(leg, "legacy, that loses every location", func(k string, f map[string]string) bool {
		n := 0
		for _, l := range leg.m.Locations {
			if kvcm.BlockKey(l.Instance, l.Key) == k {
				if !l.Garbage {
					return false
				}
				n++
			}
		}
		return n > 0
	})

	for _, tc := range []struct {
		name string
		s    seeded
		key  string
		// damage harms the collected state; the verification must then fail with want.
		damage func(p redis.Pipeliner, now map[string]string)
		want   string
	}{
		{"live field changed", loc, liveKey, func(p redis.Pipeliner, now map[string]string) {
			raw, err := kvcm.LocationWithStatus([]byte(now[liveLoc.Field]), kvcm.StatusDeleting)
			require.NoError(t, err)
			p.HSet(ctx, liveKey, liveLoc.Field, raw)
		}, "field " + liveLoc.Field + " changed"},
		{"live field removed", loc, liveKey, func(p redis.Pipeliner, _ map[string]string) { p.HDel(ctx, liveKey, liveLoc.Field) },
			"field " + liveLoc.Field + " gone"},
		{"garbage field left", loc, garbageKey, func(p redis.Pipeliner, _ map[string]string) {
			p.HSet(ctx, garbageKey, garbageLoc.Field, loc.before[garbageKey][garbageLoc.Field])
		}, "garbage field left " + garbageLoc.Field},
		{"garbage field rewritten DELETING instead of removed", loc, garbageKey, func(p redis.Pipeliner, _ map[string]string) {
			raw, err := kvcm.LocationWithStatus([]byte(loc.before[garbageKey][garbageLoc.Field]), kvcm.StatusDeleting)
			require.NoError(t, err)
			p.HSet(ctx, garbageKey, garbageLoc.Field, raw)
		}, "left DELETING"},
		{"empty key deleted under keep", loc, emptyKey, func(p redis.Pipeliner, _ map[string]string) { p.Del(ctx, emptyKey) },
			"deleted, but empty_block: keep keeps"},
		{"key with no other field deleted under keep", loc, bareKey, func(p redis.Pipeliner, _ map[string]string) { p.Del(ctx, bareKey) },
			"deleted, but empty_block: keep keeps"},
		{"BP#prev_key changed", loc, emptyKey, func(p redis.Pipeliner, now map[string]string) {
			p.HSet(ctx, emptyKey, kvcm.FieldPrevKey, now[kvcm.FieldPrevKey]+"0")
		}, "field " + kvcm.FieldPrevKey + " changed"},
		{"BP#prev_key added where a tier mark keeps the key", loc, markOnlyKey, func(p redis.Pipeliner, _ map[string]string) {
			p.HSet(ctx, markOnlyKey, kvcm.FieldPrevKey, "")
		}, "unexpected field BP#prev_key"},
		{"an empty L# written instead of HDEL", loc, emptyKey, func(p redis.Pipeliner, _ map[string]string) {
			p.HSet(ctx, emptyKey, kvcm.LocationField("zzzzzzzz"), "")
		}, "unexpected field L#zzzzzzzz"},
		{"tier mark changed", loc, tierKey, func(p redis.Pipeliner, now map[string]string) {
			d, err := strconv.ParseInt(now[FieldTierDeadline], 10, 64)
			require.NoError(t, err)
			p.HSet(ctx, tierKey, FieldTierDeadline, strconv.FormatInt(d+1, 10))
		}, "field " + FieldTierDeadline + " changed"},
		{"tier mark removed", loc, tierKey, func(p redis.Pipeliner, _ map[string]string) { p.HDel(ctx, tierKey, FieldTierTarget) },
			"field " + FieldTierTarget + " gone"},
		{"ambiguous key: legacy orphan collected", loc, ambKey, func(p redis.Pipeliner, _ map[string]string) {
			p.HSet(ctx, ambKey, kvcm.FieldURI, "{}")
		}, "field __uri__ changed"},
		{"ambiguous key deleted", loc, ambKey, func(p redis.Pipeliner, _ map[string]string) { p.Del(ctx, ambKey) },
			"deleted, but it had live fields"},
		{"tombstone removed", loc, tombKey, func(p redis.Pipeliner, now map[string]string) {
			for f, v := range now {
				if _, ok := kvcm.LocationID(f); ok && v == "" {
					p.HDel(ctx, tombKey, f)
				}
			}
		}, "gone (was \"\")"},
		{"legacy empty key deleted under keep", leg, legacyEmpty, func(p redis.Pipeliner, _ map[string]string) { p.Del(ctx, legacyEmpty) },
			"deleted, but empty_block: keep keeps"},
		{"legacy empty key lost its __lru_time__", leg, legacyEmpty, func(p redis.Pipeliner, _ map[string]string) {
			p.HDel(ctx, legacyEmpty, kvcm.FieldLRUTime)
		}, "field __lru_time__ gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now, err := tc.s.rdb.HGetAll(ctx, tc.key).Result()
			require.NoError(t, err)
			_, err = tc.s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { tc.damage(p, now); return nil })
			require.NoError(t, err)
			r := tc.s.verify(t, EmptyKeep)
			require.False(t, r.OK())
			require.Contains(t, strings.Join(r.Problems, "\n"), tc.key)
			require.Contains(t, strings.Join(r.Problems, "\n"), tc.want)
			// Undo, so the next case starts from a correct collection.
			_, err = tc.s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, tc.key)
				if len(now) > 0 {
					p.HSet(ctx, tc.key, now)
				}
				return nil
			})
			require.NoError(t, err)
			require.True(t, tc.s.verify(t, EmptyKeep).OK())
		})
	}

	t.Run("empty keys kept under delete", func(t *testing.T) {
		r := loc.verify(t, EmptyDelete)
		require.False(t, r.OK())
		require.Equal(t, r.EmptyKeys, r.EmptyKept)
		require.Zero(t, r.EmptyDeleted)
		require.Contains(t, strings.Join(r.Problems, "\n"), "empty_block is delete, but the key is still there")
	})
	t.Run("garbage file left and live file removed", func(t *testing.T) {
		var garbageFile, liveFile string
		for _, l := range loc.m.Locations {
			if len(l.Files) > 0 && l.Garbage && !l.Shared() && garbageFile == "" {
				garbageFile = l.Files[0]
			}
			if len(l.Files) > 0 && !l.Garbage && liveFile == "" {
				liveFile = l.Files[0]
			}
		}
		require.NoError(t, os.WriteFile(garbageFile, []byte("kv"), 0o644))
		data, err := os.ReadFile(liveFile)
		require.NoError(t, err)
		require.NoError(t, os.Remove(liveFile))
		r := loc.verify(t, EmptyKeep)
		require.Equal(t, 2, r.Mismatch, r.Problems)
		require.Contains(t, strings.Join(r.Problems, "\n"), "garbage file "+garbageFile+" still present")
		require.Contains(t, strings.Join(r.Problems, "\n"), "live or shared file "+liveFile+" is gone")
		require.NoError(t, os.Remove(garbageFile))
		require.NoError(t, os.WriteFile(liveFile, data, 0o644))
		require.True(t, loc.verify(t, EmptyKeep).OK())
	})
	t.Run("unknown empty_block", func(t *testing.T) {
		_, err := VerifyWith(ctx, loc.rdb, loc.before, loc.m, VerifyOptions{EmptyBlock: "drop"})
		require.ErrorContains(t, err, `empty_block "drop"`)
	})
}

// TestMetadataCountsEveryBlock: each instance's persisted counters are the recount of all its
// block keys, the stuck and sweep setups' blocks included (they are written after the
// instance's own), so that before a round the persisted counters and the keyspace agree.
func TestMetadataCountsEveryBlock(t *testing.T) {
	for _, layout := range []kvcm.Layout{kvcm.LayoutLegacy, kvcm.LayoutLocation} {
		t.Run(layout.String(), func(t *testing.T) {
			s := generate(t, Spec{Layout: layout, Blocks: 300, LocationsPerBlock: 2, GarbageFraction: 0.2, TrickyFraction: 0.3,
				Seed: 4, SweepFiles: true, DeletingGrace: 36 * time.Hour})
			// The setups' blocks are what the check is about: there must be some.
			require.Greater(t, s.m.Blocks, 300*len(s.m.Instances))
			instances := slices.Clone(s.m.Instances)
			if layout == kvcm.LayoutLocation {
				instances = append(instances, InstanceCached)
			}
			for _, inst := range instances {
				rec := kvcm.NewRecount()
				blocks := 0
				for k, fields := range s.before {
					if _, err := kvcm.ParseBlockKey(inst, k); err == nil {
						rec.AddFields(fields)
						blocks++
					}
				}
				require.NotZero(t, blocks, inst)
				meta := s.before[kvcm.MetadataKey(inst)]
				require.Equal(t, strconv.FormatInt(rec.Keys, 10), meta[kvcm.FieldKeyCount], "%s: %d block keys", inst, blocks)
				if layout == kvcm.LayoutLocation {
					require.Equal(t, string(kvcm.FormatStorageUsage(kvcm.UsageMembersCurrent, rec.Usage)), meta[kvcm.FieldStorageUsage], inst)
				} else {
					require.NotContains(t, meta, kvcm.FieldStorageUsage, "%s: a legacy KVCM kept usage in memory", inst)
				}
			}
		})
	}
}
