package seed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestGenerateLocationLayout: every key of a location-layout keyspace is what today's KVCM
// writes, and the manifest says of each location what a correct collector must do with it.
func TestGenerateLocationLayout(t *testing.T) {
	s := generate(t, Spec{Layout: kvcm.LayoutLocation, Blocks: 400, GarbageFraction: 0.2, TrickyFraction: 0.3, Seed: 11})
	m, before := s.m, s.before
	grace := 24 * time.Hour
	require.Equal(t, "location", m.Layout)
	require.Equal(t, 800, m.Blocks)

	locs := map[string]map[string]Loc{} // key -> field -> location
	for _, l := range m.Locations {
		k := kvcm.BlockKey(l.Instance, l.Key)
		if locs[k] == nil {
			locs[k] = map[string]Loc{}
		}
		require.NotContains(t, locs[k], l.FieldName())
		locs[k][l.FieldName()] = l
		require.Contains(t, before[k], l.FieldName(), "every location is in its field")
	}
	ambiguous, corrupt, tombstones, tiered := set(m.Ambiguous), set(m.Corrupt), set(m.Tombstones), set(m.TierMarked)
	require.NotEmpty(t, ambiguous)
	require.NotEmpty(t, corrupt)
	require.NotEmpty(t, tombstones)
	require.NotEmpty(t, tiered)

	byLayout := map[string]int{}
	kinds := map[string]int{}
	for _, k := range slices.Sorted(maps.Keys(before)) {
		f := before[k]
		inst, ok := kvcm.OwnerOf(k, func(id string) bool { return slices.Contains(m.Instances, id) || id == InstanceCached })
		if !ok {
			continue
		}
		if _, err := kvcm.ParseBlockKey(inst, k); err != nil {
			require.Contains(t, m.BadKeys, k)
			continue
		}
		layout := kvcm.LayoutOfFields(f)
		require.Equal(t, ambiguous[k], layout == kvcm.LayoutAmbiguous, k)
		if inst != InstanceCached {
			byLayout[layout.String()]++
		}
		require.NotContains(t, f, "BP#lru_time", "KVCM's Redis backends never write it")
		if layout == kvcm.LayoutAmbiguous {
			// Written by KVCM f6aa2b2, then by today's KVCM, which saw the key exist.
			require.Contains(t, f, kvcm.FieldLRUTime)
			require.Contains(t, f, FieldLegacyPrevKey)
			require.NotContains(t, f, kvcm.FieldPrevKey)
			if f[kvcm.FieldURI] != "{}" {
				blk, err := kvcm.DecodeBlock([]byte(f[kvcm.FieldURI]))
				require.NoError(t, err)
				for _, l := range blk.Locations {
					require.False(t, l.HasCreateTime, "f6aa2b2 had no create_time")
					require.Equal(t, KindAmbiguous, locs[k][kvcm.FieldURI].Kind)
				}
			}
		}
		if prev, ok := f[kvcm.FieldPrevKey]; ok && prev != "" {
			_, err := strconv.ParseInt(prev, 10, 64)
			require.NoError(t, err, "BP#prev_key is a decimal block key")
			require.Contains(t, before, kvcm.KeyPrefix(inst)+prev, "the previous block of the request exists")
		}
		if tiered[k] {
			require.Equal(t, StorageMooncake, f[FieldTierTarget])
			_, err := strconv.ParseInt(f[FieldTierDeadline], 10, 64)
			require.NoError(t, err)
		} else {
			require.NotContains(t, f, FieldTierTarget)
		}
		var empty, bad int
		for name, v := range f {
			id, ok := kvcm.LocationID(name)
			if !ok {
				continue
			}
			if v == "" {
				empty++
				continue
			}
			loc, err := kvcm.DecodeLocation(id, []byte(v))
			if errors.Is(err, kvcm.ErrCorruptLocation) {
				bad++
				continue
			}
			require.NoError(t, err)
			require.NoError(t, loc.Err)
			l, ok := locs[k][name]
			require.True(t, ok, "%s %s is in the manifest", k, name)
			kinds[l.Kind]++
			checkLocation(t, k, l, loc, grace)
			if age, _ := kvcm.LocationAge(&loc, testNow); l.Kind == KindYoungWriting && age >= grace {
				kinds["young_writing past the grace"]++
			}
		}
		require.Equal(t, tombstones[k], empty > 0, k)
		require.Equal(t, corrupt[k], bad > 0, k)
	}
	for kind, n := range kinds {
		require.Positive(t, n, kind)
	}
	// Both young writings: under the grace, and past it inside kvcm_gc's deferral.
	require.Positive(t, kinds["young_writing past the grace"])
	require.Less(t, kinds["young_writing past the grace"], kinds[KindYoungWriting])
	for _, kind := range []string{KindOrphanWriting, KindMissingServing, KindSharedOrphan, KindLiveServing, KindYoungWriting,
		KindFutureWriting, KindSharedServing, KindUnknownType, KindMooncake, KindDeleting, KindZeroCreateTime, KindDummy,
		KindVineyard, KindEventReport, KindCopyTarget, KindCopySource, KindAmbiguous, KindCachedStore} {
		require.Positive(t, m.Counts[kind], kind)
	}
	for layout, c := range m.Layouts {
		require.Equal(t, byLayout[layout], c.Keys, layout)
	}
	require.Equal(t, m.Blocks, m.Layouts["location"].Keys+m.Layouts["ambiguous"].Keys)
	require.Positive(t, m.Layouts["location"].AllGarbage)
	require.Positive(t, m.Skipped[GroupCached].Keys)

	// The registry: today's storage types, and the cached group on the same Redis.
	reg := "kvcache_registry:c1:"
	for name, typ := range map[string]kvcm.StorageType{StorageDummy: kvcm.TypeDummy, StorageVineyard: kvcm.TypeVineyard, StorageNFS: kvcm.TypeFile} {
		sc, err := kvcm.DecodeStorageConfig([]byte(before[reg+"storage"][name]))
		require.NoError(t, err)
		require.Equal(t, typ, sc.Type)
	}
	g, err := kvcm.DecodeInstanceGroup([]byte(before[reg+"instance_group"][GroupCached]))
	require.NoError(t, err)
	require.Equal(t, "cached", g.MetaStorageType)
	require.True(t, strings.HasSuffix(g.MetaStorageURI, "?persistent_type=redis"), g.MetaStorageURI)
	info, err := kvcm.DecodeInstanceInfo([]byte(before[reg+InstanceCached][InstanceCached]))
	require.NoError(t, err)
	require.Equal(t, GroupCached, info.InstanceGroupName)

	// The metadata hash, as PersistMetaData writes it: the counters of the blocks seeded.
	meta := before["kvcache:instance_inst0:metadata"]
	require.Equal(t, "400", meta["__key_count__"])
	var usage map[string]uint64
	require.NoError(t, json.Unmarshal([]byte(meta["__storage_usage_data__"]), &usage))
	require.Len(t, usage, 9)
	require.Positive(t, usage["file"])
	u, err := kvcm.DecodeStorageUsage([]byte(meta["__storage_usage_data__"]))
	require.NoError(t, err)
	require.Equal(t, kvcm.UsageMembersCurrent, func() (names []string) {
		for _, m := range u.Members {
			names = append(names, m.Name)
		}
		return names
	}())
}

// checkLocation checks that a location decodes to what its kind promises the collector.
func checkLocation(t *testing.T, k string, l Loc, loc kvcm.Location, grace time.Duration) {
	t.Helper()
	what := fmt.Sprintf("%s %s (%s)", k, l.Field, l.Kind)
	require.True(t, loc.HasCreateTime, what)
	age, known := kvcm.LocationAge(&loc, testNow)
	filesMissing := len(l.Files) < len(loc.Specs)
	for _, f := range l.Files {
		_, err := os.Stat(f)
		require.NoError(t, err, what)
	}
	// With kvcm_gc on (the default), an orphan of the location layout is kvcm-gc's only
	// from KVCMGCAge.
	looksOrphan := loc.Status == kvcm.StatusWriting && known && age >= max(grace, KVCMGCAge)
	switch l.Kind {
	case KindOrphanWriting, KindSharedOrphan:
		require.True(t, looksOrphan, what)
	case KindMissingServing:
		require.Equal(t, kvcm.StatusServing, loc.Status, what)
		require.True(t, filesMissing, what)
		require.True(t, loc.Type.Probed(), what)
	case KindYoungWriting:
		// Under the grace, or past it and inside kvcm_gc's deferral: KVCM's own GC's.
		require.True(t, known && age < KVCMGCAge, what)
	case KindFutureWriting:
		require.False(t, known, what)
	case KindZeroCreateTime:
		require.Equal(t, kvcm.StatusWriting, loc.Status, what)
		require.Zero(t, loc.CreateTimeUs, what)
		require.False(t, known, what)
	case KindDeleting:
		require.Equal(t, kvcm.StatusDeleting, loc.Status, what)
	case KindDummy, KindVineyard, KindEventReport, KindUnknownType:
		require.Equal(t, kvcm.StatusServing, loc.Status, what)
		require.False(t, loc.Type.Probed(), what)
		if want, ok := map[string]kvcm.StorageType{KindDummy: kvcm.TypeDummy, KindVineyard: kvcm.TypeEventReportL1P5}[l.Kind]; ok {
			require.Equal(t, want, loc.Type, what)
		}
		if l.Kind == KindEventReport {
			require.True(t, loc.Type.EventReport(), what)
		}
		if l.Kind == KindUnknownType {
			require.Equal(t, "unknown", loc.Type.String(), what)
		}
	case KindCopyTarget:
		// An orphan WRITING by the rules, but for its guard.
		require.True(t, looksOrphan, what)
		require.NotNil(t, loc.Guard, what)
		require.True(t, loc.Guard.Valid, what)
		require.NotEmpty(t, loc.Guard.SourceID, what)
	case KindCopySource:
		// Storage-missing by the rules, but for the guard that names it.
		require.Equal(t, kvcm.StatusServing, loc.Status, what)
		require.True(t, filesMissing, what)
		require.Nil(t, loc.Guard, what)
	case KindCachedStore:
		// Garbage by the rules, if the group were collected.
		require.True(t, looksOrphan || loc.Status == kvcm.StatusServing && filesMissing, what)
	}
	require.Equal(t, isGarbage(l.Kind) && l.Layout == "location", l.Garbage, what)
}

func set(keys []string) map[string]bool {
	out := map[string]bool{}
	for _, k := range keys {
		out[k] = true
	}
	return out
}

// TestLegacyKeyspaceUnchanged: the legacy layout writes, for a given seed, what seed wrote
// before it knew the location layout (the benchmarks, the fault suite and the integration
// tests count on it). The digest was taken from that version.
func TestLegacyKeyspaceUnchanged(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedis(t)
	_, err := Generate(ctx, r.Client(), Spec{Cluster: "c1", Blocks: 500, GarbageFraction: 0.1, TrickyFraction: 0.1,
		Root: "/nonexistent/seed", NoFiles: true, MetaURI: "redis://meta:6379", Now: testNow, Seed: 9})
	require.NoError(t, err)
	snap, err := Take(ctx, r.Client(), "*")
	require.NoError(t, err)
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(snap)) {
		for _, f := range slices.Sorted(maps.Keys(snap[k])) {
			fmt.Fprintf(h, "%q %q %q\n", k, f, snap[k][f])
		}
	}
	require.Equal(t, legacyDigest, hex.EncodeToString(h.Sum(nil)))
}

const legacyDigest = "ab24bf26a624ad07b5e8ec3d441ea6fa4314942c72b8980174e91c631cc4bf5b"

// TestGenerateNoUpgraded: without upgraded blocks no key holds both layouts' fields, and the
// locations those blocks would have held are plain ones.
func TestGenerateNoUpgraded(t *testing.T) {
	s := generate(t, Spec{Layout: kvcm.LayoutLocation, Blocks: 200, GarbageFraction: 0.2, TrickyFraction: 0.3, Seed: 11, NoUpgraded: true})
	require.Empty(t, s.m.Ambiguous)
	for k, fields := range s.before {
		_, legacy := fields[kvcm.FieldURI]
		require.False(t, legacy, k)
	}
	for _, l := range s.m.Locations {
		require.NotEqual(t, KindAmbiguous, l.Kind)
	}
}
