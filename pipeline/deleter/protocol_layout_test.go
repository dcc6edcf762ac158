package deleter

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The delete protocol in the location layout (one field L#<id> per location) and across
// layouts (DESIGN §6, §8.9–§8.11).

// lloc is a location-layout location value with one file spec (none when path is "").
func lloc(id string, st kvcm.Status, path string) string {
	if path == "" {
		return fmt.Sprintf(`{"id":%q,"status":%d,"type":4,"spec_size":0,"create_time":1716345600123456,"location_specs":[]}`, id, st)
	}
	return fmt.Sprintf(`{"id":%q,"status":%d,"type":4,"spec_size":1,"create_time":1716345600123456,"location_specs":[{"name":"tp0","uri":"file://nfs%s?size=1"}]}`, id, st, path)
}

func ltarget(key int64, id, raw string) subjects.Target {
	t := target(key, id, raw)
	t.Layout = subjects.LayoutLocation
	return t
}

func (f *deleterFixture) hset(key int64, fieldsAndValues ...string) {
	args := make([]any, len(fieldsAndValues))
	for i, v := range fieldsAndValues {
		args[i] = v
	}
	require.NoError(f.t, f.r.Client().HSet(context.Background(), kvcm.BlockKey("i", key), args...).Err())
}

// TestLocationLayoutDeletesOneField: the target's field goes; every other field (live
// locations, BP#prev_key, tier marks, a tombstone) keeps its bytes; the data goes.
func TestLocationLayoutDeletesOneField(t *testing.T) {
	f := newDeleterFixture(t, false)
	pa, pb := f.file("a"), f.file("b")
	a, b := lloc("a", kvcm.StatusWriting, pa), lloc("b", kvcm.StatusServing, pb)
	f.hset(1, "BP#prev_key", "", "L#a", a, "L#b", b, "L#t", "", "__mig_tier_target__", "cold_01", "__mig_tier_deadline_ms__", "1767225600000")
	before := f.get(1)
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", ltarget(1, "a", a))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeDeleted, res.Outcome, res.Detail)
	require.NoFileExists(t, pa)
	require.FileExists(t, pb)
	delete(before, "L#a")
	require.Equal(t, before, f.get(1))
}

// TestLocationLayoutEmptyBlockKeep: the block's last location goes; the key stays with its
// other fields, or with BP#prev_key = "" when the location was its only field (KVCM reads
// both as "exists, no location", so its key count stays right).
func TestLocationLayoutEmptyBlockKeep(t *testing.T) {
	f := newDeleterFixture(t, false)
	a := lloc("a", kvcm.StatusWriting, "")
	f.hset(1, "L#a", a)
	f.hset(2, "L#a", a, "BP#prev_key", "-5")
	p := NewProtocol(DefaultConfig())
	res, err := p.DeleteAll(context.Background(), f.store, f.set, "i", []subjects.Target{ltarget(1, "a", a), ltarget(2, "a", a)})
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeDeleted, subjects.OutcomeDeleted}, outcomes(res))
	require.False(t, res[0].KeyDeleted || res[1].KeyDeleted)
	require.Equal(t, map[string]string{"BP#prev_key": ""}, f.get(1))
	require.Equal(t, map[string]string{"BP#prev_key": "-5"}, f.get(2))
}

// TestEmptyBlockDelete: with empty_block: delete the key goes once no location is left, in
// both layouts, and the result says so (KVCM's key count now counts a key that is gone).
func TestEmptyBlockDelete(t *testing.T) {
	f := newDeleterFixtureWith(t, redismeta.StoreOptions{EmptyBlock: meta.EmptyBlockDelete})
	a, b := lloc("a", kvcm.StatusWriting, ""), lloc("b", kvcm.StatusServing, "")
	f.hset(1, "L#a", a, "BP#prev_key", "", "L#t", "")   // a tombstone is no location
	f.hset(2, "L#a", a, "L#b", b, "BP#prev_key", "")    // a live location stays
	f.put(3, dblock(dloc("a", kvcm.StatusWriting, ""))) // legacy, last location
	f.put(4, dblock(dloc("a", kvcm.StatusWriting, ""), dloc("b", kvcm.StatusServing, "")))
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), f.store, f.set, "i", []subjects.Target{
		ltarget(1, "a", a), ltarget(2, "a", a), target(3, "a", dloc("a", kvcm.StatusWriting, "")), target(4, "a", dloc("a", kvcm.StatusWriting, ""))})
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeDeleted, subjects.OutcomeDeleted, subjects.OutcomeDeleted, subjects.OutcomeDeleted}, outcomes(res))
	require.Equal(t, []bool{true, false, true, false}, []bool{res[0].KeyDeleted, res[1].KeyDeleted, res[2].KeyDeleted, res[3].KeyDeleted})
	require.Empty(t, f.get(1))
	require.Equal(t, map[string]string{"L#b": b, "BP#prev_key": ""}, f.get(2))
	require.Empty(t, f.get(3))
	require.Equal(t, dblock(dloc("b", kvcm.StatusServing, "")), f.get(4)["__uri__"])
}

// TestLayoutChangeRefusesEveryWrite (invariant 9): a key that gains the other layout's fields
// after it was judged is not written: neither the CAS nor, once marked, the CAD.
func TestLayoutChangeRefusesEveryWrite(t *testing.T) {
	f := newDeleterFixture(t, false)
	pa := f.file("a")
	a := lloc("a", kvcm.StatusWriting, pa)
	legacy := dloc("o", kvcm.StatusWriting, "")
	f.hset(1, "L#a", a, "BP#prev_key", "")
	f.put(2, dblock(legacy))
	// Between the read and the CAS, an old KVCM writes __uri__ into key 1 and a new one an
	// L# field into key 2.
	spy := &spyStore{Store: f.store, afterGet: func(n int) {
		if n == 1 {
			f.hset(1, "__uri__", dblock(dloc("z", kvcm.StatusServing, "")))
			f.hset(2, "L#n", lloc("n", kvcm.StatusServing, ""))
		}
	}}
	before1, before2 := func() map[string]string { m := f.get(1); return m }, func() map[string]string { return f.get(2) }
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i",
		[]subjects.Target{ltarget(1, "a", a), target(2, "o", legacy)})
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeNoopMismatch, subjects.OutcomeNoopMismatch}, outcomes(res))
	require.Equal(t, "key layout changed since it was judged", res[0].Detail)
	require.Equal(t, a, before1()["L#a"], "untouched")
	require.Equal(t, dblock(legacy), before2()["__uri__"], "untouched")
	require.FileExists(t, pa)

	// Marked, then the key turns ambiguous before the CAD: our DELETING stays (the data is
	// not unlinked either: the re-read sees the other layout), nothing is removed.
	f.hset(3, "L#a", a)
	spy = &spyStore{Store: f.store, afterCAS: func() { f.hset(3, "__uri__", "{}") }}
	res, err = NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i", []subjects.Target{ltarget(3, "a", a)})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopMismatch, res[0].Outcome)
	require.FileExists(t, pa)
	require.Equal(t, map[string]string{"L#a": deleting(t, a), "__uri__": "{}"}, f.get(3))
}

// TestUpgradedBlockNeverDeletedWhole is the case of a block written before and after a KVCM
// upgrade: a leftover __uri__ holding an old orphan beside a live SERVING L# field. A legacy
// target for the orphan (from a batch of a scanner that read __uri__ only) must not be
// collected: the key is left byte for byte, the live location and its data stay.
func TestUpgradedBlockNeverDeletedWhole(t *testing.T) {
	for _, mode := range []meta.EmptyBlock{meta.EmptyBlockKeep, meta.EmptyBlockDelete} {
		f := newDeleterFixtureWith(t, redismeta.StoreOptions{EmptyBlock: mode})
		pl := f.file("live")
		orphan := dloc("o", kvcm.StatusWriting, "")
		live := lloc("s", kvcm.StatusServing, pl)
		f.hset(1, "__uri__", dblock(orphan), "__lru_time__", "123", "L#s", live, "BP#prev_key", "")
		before := f.get(1)
		res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), f.store, f.set, "i", []subjects.Target{target(1, "o", orphan)})
		require.NoError(t, err)
		require.Equal(t, subjects.OutcomeNoopMismatch, res[0].Outcome)
		require.Equal(t, before, f.get(1))
		require.FileExists(t, pl)
	}
}

// TestDataNamedElsewhereStays (invariant 11): at the unlink, data another location of the
// block names (in any status, in either layout) is left in place; the metadata goes.
func TestDataNamedElsewhereStays(t *testing.T) {
	f := newDeleterFixture(t, false)
	p1, p2 := f.file("shared-by-two"), f.file("shared-legacy")
	a, b := lloc("a", kvcm.StatusWriting, p1), lloc("b", kvcm.StatusDeleting, p1) // b: someone's DELETING of the same file
	f.hset(1, "L#a", a, "L#b", b)
	la, lb := dloc("a", kvcm.StatusWriting, p2), dloc("b", kvcm.StatusServing, p2)
	f.put(2, dblock(la, lb))
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), f.store, f.set, "i", []subjects.Target{ltarget(1, "a", a), target(2, "a", la)})
	require.NoError(t, err)
	for _, r := range res {
		require.Equal(t, subjects.OutcomeDeleted, r.Outcome, r.Detail)
		require.Equal(t, map[string]int{PhysSkipReferenced: 1}, r.PhysicalSkips)
	}
	require.FileExists(t, p1)
	require.FileExists(t, p2)
	require.Equal(t, map[string]string{"L#b": b}, f.get(1))
	require.Equal(t, dblock(lb), f.get(2)["__uri__"])
}

// TestLocationLayoutResumesOwnDeleting (invariant 6): a redelivery finds the field in our
// DELETING form and finishes the job.
func TestLocationLayoutResumesOwnDeleting(t *testing.T) {
	f := newDeleterFixture(t, false)
	pa := f.file("a")
	a := lloc("a", kvcm.StatusWriting, pa)
	f.hset(1, "L#a", deleting(t, a), "BP#prev_key", "")
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", ltarget(1, "a", a))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeDeleted, res.Outcome)
	require.True(t, res.Resumed)
	require.NoFileExists(t, pa)
	require.Equal(t, map[string]string{"BP#prev_key": ""}, f.get(1))

	// Someone else's DELETING of other bytes, or a finished write: no-ops.
	f.hset(2, "L#a", lloc("a", kvcm.StatusServing, pa))
	res, err = deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", ltarget(2, "a", a))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopMismatch, res.Outcome)
	res, err = deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", ltarget(3, "a", a))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopGone, res.Outcome)
}

// TestGuardWrittenAfterJudgementPinsItsSource: KVCM started a migration copy after the prober
// judged the source: the target's new guard names it, while the source's own bytes did not
// change. The deleter reads the whole block before its CAS and keeps the source and its data,
// in both layouts.
func TestGuardWrittenAfterJudgementPinsItsSource(t *testing.T) {
	f := newDeleterFixture(t, false)
	ps := f.file("src")
	src := lloc("src", kvcm.StatusServing, ps)
	guarded := `{"id":"dst","status":2,"type":9,"spec_size":0,"create_time":1716345600123456,"location_specs":[],` +
		`"migration_copy_guard":{"schema_version":1,"state":1,"operation_id":"op","source_location_id":"src"}}`
	f.hset(1, "L#src", src, "L#dst", guarded)
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", ltarget(1, "src", src))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopMismatch, res.Outcome)
	require.Contains(t, res.Detail, pipeline.SkipMigrationSource)
	require.Equal(t, map[string]string{"L#src": src, "L#dst": guarded}, f.get(1))
	require.FileExists(t, ps)

	// Legacy: the same block as one __uri__.
	f.put(2, `{"src":`+src+`,"dst":`+guarded+`}`)
	res, err = deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", target(2, "src", src))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopMismatch, res.Outcome)
	require.Contains(t, res.Detail, pipeline.SkipMigrationSource)
	require.FileExists(t, ps)
}
