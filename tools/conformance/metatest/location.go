package metatest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// The location layout (today's KVCM: one field L#<id> per location) and the keys holding both
// layouts: what the rest of kvcm-gc relies on (DESIGN §2, §8.9, §8.10).

// scanLayouts: the scan tells each key's layout from its field names and returns every
// location field's exact bytes, tombstones included, and the other fields' names.
func (s suite) scanLayouts(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	f := NewFixture()
	s.load(t, f)
	entries, _ := FullScan(t, st, "inst1", 50, 10000)
	for block, want := range map[int64]kvcm.Layout{
		-1:   kvcm.LayoutLegacy,
		43:   kvcm.LayoutLegacy, // an empty __uri__ still names the layout
		44:   kvcm.LayoutNone,
		1000: kvcm.LayoutLocation,
		1001: kvcm.LayoutLocation,
		1002: kvcm.LayoutLocation,
		1003: kvcm.LayoutAmbiguous,
		1004: kvcm.LayoutAmbiguous, // KVCM's interim __loc__ fields
		1005: kvcm.LayoutNone,
	} {
		e, ok := entries[kvcm.BlockKey("inst1", block)]
		require.True(t, ok, "block %d", block)
		require.Equal(t, want, e.Layout, "block %d", block)
	}
	e := entries[kvcm.BlockKey("inst1", 1001)]
	require.Equal(t, []string{kvcm.FieldPrevKey, "__mig_tier_deadline_ms__", "__mig_tier_target__"}, e.Others)
	tomb, ok := e.Location("tomb0000")
	require.True(t, ok)
	require.Empty(t, tomb)
	e = entries[kvcm.BlockKey("inst1", 1002)]
	broken, ok := e.Location("broken00")
	require.True(t, ok)
	require.Equal(t, `{"id":"broken00","status":`, string(broken))
}

// Location-layout blocks of the write tests: everything KVCM writes plus fields kvcm-gc
// does not know.
const locBlock = int64(-4611686018427387000)

var (
	lWriting = LocationField("a0a0a0a0", kvcm.StatusWriting, kvcm.TypeHF3FS, "hf3fs://hf3fs_01/3fs/k/cas/tp0/c000000000000000?size=1024")
	lServing = LocationField("b1b1b1b1", kvcm.StatusServing, kvcm.TypeFile, "file://nfs_01/tmp/nfs/cas/tp0/c000000000000000?size=1024")
)

func locFields() []string {
	return append(LocationBlock("-5", lWriting, lServing),
		"__mig_tier_target__", "cold&01", "L#tomb0000", "", "x-unknown", "keep me\x00\xff")
}

func lwrite(block int64, id, expected, next string) meta.CondWrite {
	w := meta.CondWrite{BlockKey: block, Layout: kvcm.LayoutLocation, Location: id, Expected: []byte(expected)}
	if next != "" {
		w.Next = []byte(next)
	}
	return w
}

// LocationCAS: a CAS changes one location field and nothing else; any other bytes in that
// field, the field or key gone, or a key that turned ambiguous (an __uri__ or an interim
// field next to it) is a conflict or a layout error that writes nothing.
func (s suite) locationCAS(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	deleting := LocationField("a0a0a0a0", kvcm.StatusDeleting, kvcm.TypeHF3FS, "hf3fs://hf3fs_01/3fs/k/cas/tp0/c000000000000000?size=1024")
	for i := range 7 {
		s.h.HSet(t, kvcm.BlockKey(casInst, locBlock+int64(i)), locFields()...)
	}
	s.h.HSet(t, kvcm.BlockKey(casInst, locBlock+1), "L#a0a0a0a0", lWriting+" ")  // other bytes
	s.h.HSet(t, kvcm.BlockKey(casInst, locBlock+2), "__uri__", "{}")             // now ambiguous
	s.h.HSet(t, kvcm.BlockKey(casInst, locBlock+3), "__loc__a0a0a0a0", lWriting) // interim field
	s.h.HSet(t, kvcm.BlockKey(casInst, locBlock+4), "L#a0a0a0a0", lServing)      // a FinishWrite
	writes := []meta.CondWrite{
		lwrite(locBlock, "a0a0a0a0", lWriting, deleting),
		lwrite(locBlock+1, "a0a0a0a0", lWriting, deleting),
		lwrite(locBlock+2, "a0a0a0a0", lWriting, deleting),
		lwrite(locBlock+3, "a0a0a0a0", lWriting, deleting),
		lwrite(locBlock+4, "a0a0a0a0", lWriting, deleting),
		lwrite(locBlock+5, "zzzzzzzz", lWriting, deleting), // no such field
		lwrite(locBlock+9, "a0a0a0a0", lWriting, deleting), // no such key
		lwrite(locBlock+6, "tomb0000", "", deleting),       // a tombstone is never expected
		lwrite(locBlock+6, "a0a0a0a0", lWriting, ""),       // no new value
	}
	before := map[int64]map[string]string{}
	for i := range 7 {
		before[locBlock+int64(i)] = s.h.HGetAll(t, kvcm.BlockKey(casInst, locBlock+int64(i)))
	}
	keysBefore := len(s.h.Keys(t))
	errs, err := st.CASMany(ctx(t), casInst, writes)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], meta.ErrConflict)
	require.ErrorIs(t, errs[2], meta.ErrLayout)
	require.ErrorIs(t, errs[3], meta.ErrLayout)
	require.ErrorIs(t, errs[4], meta.ErrConflict)
	require.ErrorIs(t, errs[5], meta.ErrConflict)
	require.ErrorIs(t, errs[6], meta.ErrConflict)
	for _, i := range []int{7, 8} {
		require.Error(t, errs[i])
		require.False(t, errors.Is(errs[i], meta.ErrConflict), "an invalid write is not a conflict: %v", errs[i])
	}
	want := fieldMap(locFields())
	want["L#a0a0a0a0"] = deleting
	require.Equal(t, want, s.h.HGetAll(t, kvcm.BlockKey(casInst, locBlock)))
	for i := 1; i < 7; i++ {
		require.Equal(t, before[locBlock+int64(i)], s.h.HGetAll(t, kvcm.BlockKey(casInst, locBlock+int64(i))), "block %d", i)
	}
	require.Len(t, s.h.Keys(t), keysBefore, "a CAS created or deleted a key")

	// A legacy CAS on a key holding an L# field is refused the same way.
	s.h.HSet(t, kvcm.BlockKey(casInst, casBlock), casFields()...)
	s.h.HSet(t, kvcm.BlockKey(casInst, casBlock), "L#n3w0n3w0", lServing)
	orig := fieldMap(casFields())["__uri__"]
	legacy := s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock))
	require.ErrorIs(t, CAS(ctx(t), st, casInst, casBlock, []byte(orig), []byte(URI(locServing))), meta.ErrLayout)
	for _, next := range [][]byte{nil, []byte(URI(locServing))} {
		require.ErrorIs(t, CAD(ctx(t), st, casInst, casBlock, []byte(orig), next), meta.ErrLayout)
	}
	require.Equal(t, legacy, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock)))
}

// locationCAD: a CAD removes one location field and nothing else. With empty_block: keep the
// key never goes: when the field was its only one, BP#prev_key = "" is left (KVCM's own
// first-block form), never an empty L# value. With delete, the key goes once no non-empty
// location field is left (tombstones and properties do not keep it), as KVCM's recycle does.
func (s suite) locationCAD(t *testing.T) {
	for _, mode := range []meta.EmptyBlock{meta.EmptyBlockKeep, meta.EmptyBlockDelete} {
		st := s.h.NewStore(t, Options{EmptyBlock: mode})
		key := func(i int) string { return kvcm.BlockKey(casInst, locBlock+int64(i)) }
		s.h.HSet(t, key(0), locFields()...)
		s.h.HSet(t, key(1), "L#a0a0a0a0", lWriting)
		s.h.HSet(t, key(2), "L#a0a0a0a0", lWriting, "__mig_tier_target__", "cold_01", "L#tomb0000", "")
		s.h.HSet(t, key(3), locFields()...)
		s.h.HSet(t, key(3), "__uri__", URI(locServing)) // ambiguous now
		ambiguous := s.h.HGetAll(t, key(3))
		res, err := st.CADMany(ctx(t), casInst, []meta.CondWrite{
			lwrite(locBlock, "a0a0a0a0", lWriting, ""),
			lwrite(locBlock+1, "a0a0a0a0", lWriting, ""),
			lwrite(locBlock+2, "a0a0a0a0", lWriting, ""),
			lwrite(locBlock+3, "a0a0a0a0", lWriting, ""),
			lwrite(locBlock+4, "a0a0a0a0", lWriting, ""), // no such key
			lwrite(locBlock, "b1b1b1b1", lWriting, ""),   // other bytes
			lwrite(locBlock, "b1b1b1b1", lServing, URI(locServing)),
		})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.NoError(t, res[1].Err)
		require.NoError(t, res[2].Err)
		require.ErrorIs(t, res[3].Err, meta.ErrLayout)
		require.ErrorIs(t, res[4].Err, meta.ErrConflict)
		require.ErrorIs(t, res[5].Err, meta.ErrConflict)
		require.Error(t, res[6].Err, "a CAD of a location field takes no new value")
		require.False(t, errors.Is(res[6].Err, meta.ErrConflict))

		want := fieldMap(locFields())
		delete(want, "L#a0a0a0a0")
		require.Equal(t, want, s.h.HGetAll(t, key(0)), "one field removed, the rest byte for byte")
		require.False(t, res[0].KeyDeleted)
		require.Equal(t, ambiguous, s.h.HGetAll(t, key(3)))
		require.Nil(t, s.h.HGetAll(t, kvcm.BlockKey(casInst, locBlock+4)), "a CAD created the key")
		if mode == meta.EmptyBlockKeep {
			require.Equal(t, map[string]string{kvcm.FieldPrevKey: ""}, s.h.HGetAll(t, key(1)))
			require.Equal(t, map[string]string{"__mig_tier_target__": "cold_01", "L#tomb0000": ""}, s.h.HGetAll(t, key(2)))
			require.False(t, res[1].KeyDeleted || res[2].KeyDeleted)
		} else {
			require.Nil(t, s.h.HGetAll(t, key(1)))
			require.Nil(t, s.h.HGetAll(t, key(2)))
			require.True(t, res[1].KeyDeleted && res[2].KeyDeleted)
		}
		for i := range 5 {
			s.h.Del(t, key(i))
		}
	}
}

// locationDryRun: a dry-run store refuses every location-layout write and sends nothing.
func (s suite) locationDryRun(t *testing.T) {
	st := s.h.NewStore(t, Options{DryRun: true})
	key := kvcm.BlockKey(casInst, locBlock)
	s.h.HSet(t, key, locFields()...)
	var before map[string]int64
	if s.h.CommandCalls != nil {
		before = s.h.CommandCalls(t)
	}
	errs, err := st.CASMany(ctx(t), casInst, []meta.CondWrite{lwrite(locBlock, "a0a0a0a0", lWriting, lServing)})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], meta.ErrDryRun)
	res, err := st.CADMany(ctx(t), casInst, []meta.CondWrite{lwrite(locBlock, "a0a0a0a0", lWriting, "")})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, meta.ErrDryRun)
	s.requireNothingSent(t, before)
	require.Equal(t, fieldMap(locFields()), s.h.HGetAll(t, key))
}
