package faults

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestSoakModelAging: a seeded WRITING location young at the start of a run ages past the
// grace during it, and the model must follow: live (kvcm-gc's delete of it a violation) until
// a moment before kvcm-gc's prober takes it as an orphan, garbage from then on (its delete
// rightful), by the graces the stages run with. In the legacy layout a write of the block
// delays that moment. With kvcm_gc (kvcm-gc's grace past KVCM's), it is upstream's to take
// first (Either, kvcm-gc still must keep it), kvcm-gc's only past its own grace.
func TestSoakModelAging(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := testenv.StartRedis(t).Client()
	const inst = "inst1"
	day := 24 * time.Hour
	start := time.Now()
	block := int64(0)
	// seeded writes one WRITING location of a new block, of the given create_time and (legacy)
	// __lru_time__, to Redis and to the snapshot.
	seeded := func(layout kvcm.Layout, created, lru time.Time) (Snapshot, []Loc) {
		block++
		key, id := kvcm.BlockKey(inst, block), "loc"+strconv.FormatInt(block, 10)
		raw := locationBytes(layout, id, kvcm.StatusWriting, created.UnixMicro(), "")
		fields, field := map[string]string{kvcm.FieldPrevKey: "", kvcm.LocationField(id): raw}, kvcm.LocationField(id)
		if layout == kvcm.LayoutLegacy {
			fields = map[string]string{seed.FieldLegacyPrevKey: "", kvcm.FieldURI: withMember("", id, raw),
				kvcm.FieldLRUTime: strconv.FormatInt(lru.UnixMicro(), 10)}
			field = kvcm.FieldURI
		}
		require.NoError(t, rdb.HSet(ctx, key, fields).Err())
		return Snapshot{key: {Type: "hash", Fields: fields}}, []Loc{{Key: key, ID: id, Field: field, Fate: Keep}}
	}
	model := func(layout kvcm.Layout, g graces, up *soakUpstream, snap Snapshot,
		base []Loc) (*soakModel, *kvcmWorkload, *mloc) {
		sm, err := newSoakModel(snap, base, &seed.Manifest{Instances: []string{inst}}, seed.EmptyKeep, up, g)
		require.NoError(t, err)
		w := newKVCMWorkload(sm, rdb, layout, t.TempDir(), []string{inst}, time.Millisecond, [2]time.Duration{}, 1)
		return sm, w, sm.keys[base[0].Key].locs[base[0].ID]
	}
	// collectedRight reports whether a delete event of kvcm-gc's naming l would be rightful now
	// (what noteCollected judges, without recording it).
	collectedRight := func(l *mloc) bool {
		return l.fate == Go || (l.fate == Either && l.keepSince.IsZero())
	}

	t.Run("location", func(t *testing.T) {
		g := graces{location: day, legacy: day, upstream: day}
		snap, base := seeded(kvcm.LayoutLocation, start.Add(-day+time.Hour), start)
		sm, w, l := model(kvcm.LayoutLocation, g, nil, snap, base)
		orphan := start.Add(time.Hour)
		require.WithinDuration(t, orphan, l.orphanAt, time.Millisecond)
		w.ripen(ctx, orphan.Add(-ripenEarly-time.Millisecond))
		require.Equal(t, Keep, l.fate, "live until a moment before the grace")
		require.False(t, collectedRight(l), "kvcm-gc's delete of it is a violation")
		w.ripen(ctx, orphan.Add(-ripenEarly))
		require.Equal(t, Go, l.fate, "an orphan by the run's clock")
		require.True(t, collectedRight(l))
		require.Empty(t, sm.noteCollected(base[0].Key, base[0].ID))
		require.Equal(t, []*mloc{l}, sm.takeUndueAt(orphan), "due from its orphan moment on")
		require.Empty(t, sm.aging)
	})

	t.Run("kept for another reason", func(t *testing.T) {
		// Past the grace at the start and live all the same (a copy target, a cached store's):
		// its age is not why it is kept, so it does not age into garbage.
		g := graces{location: day, legacy: day, upstream: day}
		snap, base := seeded(kvcm.LayoutLocation, start.Add(-30*time.Hour), start)
		sm, w, l := model(kvcm.LayoutLocation, g, nil, snap, base)
		w.ripen(ctx, start.Add(time.Hour))
		require.Equal(t, Keep, l.fate)
		require.Empty(t, sm.aging)
	})

	t.Run("legacy rewritten", func(t *testing.T) {
		g := graces{location: day, legacy: day, upstream: day}
		// create_time past the grace: its block's __lru_time__ alone keeps it young.
		snap, base := seeded(kvcm.LayoutLegacy, start.Add(-30*time.Hour), start.Add(-day+time.Hour))
		sm, w, l := model(kvcm.LayoutLegacy, g, nil, snap, base)
		orphan := start.Add(time.Hour)
		require.WithinDuration(t, orphan, l.orphanAt, time.Millisecond)
		// KVCM writes the block half an hour in: its last write is the age now.
		sm.keys[base[0].Key].val.Fields[kvcm.FieldLRUTime] = strconv.FormatInt(start.Add(30*time.Minute).UnixMicro(), 10)
		w.ripen(ctx, orphan)
		require.Equal(t, Keep, l.fate, "young again after the block's write")
		require.WithinDuration(t, start.Add(30*time.Minute+day), l.orphanAt, time.Millisecond)
		w.ripen(ctx, l.orphanAt.Add(-ripenEarly))
		require.Equal(t, Go, l.fate)
	})

	t.Run("legacy ripened then rewritten", func(t *testing.T) {
		// Ripened garbage whose block KVCM then writes again is young again: kvcm-gc may have
		// judged it before the write, and its delete of it is no violation, whatever moment
		// the seeded location was kept from (a legacy soak hour failed on that).
		g := graces{location: day, legacy: day, upstream: day}
		snap, base := seeded(kvcm.LayoutLegacy, start.Add(-30*time.Hour), start.Add(-day+time.Hour))
		sm, w, l := model(kvcm.LayoutLegacy, g, nil, snap, base)
		w.ripen(ctx, l.orphanAt.Add(-ripenEarly))
		require.Equal(t, Go, l.fate)
		l.keepSince = start
		refreshed(sm.keys[base[0].Key], nil)
		require.Equal(t, Either, l.fate)
		require.True(t, collectedRight(l), "kvcm-gc's delete judged before the write is rightful")
	})

	t.Run("kvcm_gc", func(t *testing.T) {
		// kvcm_gc_grace 24h + kvcm_gc_margin 6h: upstream's GC (KVCM's) may take it at 24h,
		// kvcm-gc only at 30h.
		g := graces{location: 30 * time.Hour, legacy: day, upstream: day}
		up := newSoakUpstream(rdb, kvcm.LayoutLocation, []string{inst}, g.upstream, time.Second)
		snap, base := seeded(kvcm.LayoutLocation, start.Add(-day+time.Hour), start)
		_, w, l := model(kvcm.LayoutLocation, g, up, snap, base)
		require.Equal(t, Keep, l.fate)
		w.ripen(ctx, start.Add(time.Hour))
		require.Equal(t, Either, l.fate, "upstream's to take from its grace on")
		require.False(t, collectedRight(l), "kvcm-gc must keep it still")
		w.ripen(ctx, start.Add(7*time.Hour-ripenEarly-time.Millisecond))
		require.Equal(t, Either, l.fate)
		w.ripen(ctx, start.Add(7*time.Hour-ripenEarly))
		require.Equal(t, Go, l.fate, "kvcm-gc's past kvcm_gc_grace + kvcm_gc_margin")
	})
}
