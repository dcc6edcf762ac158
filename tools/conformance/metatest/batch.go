package metatest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// batchStore returns a store over an empty keyspace.
func (s suite) batchStore(t *testing.T, o Options) meta.Store {
	t.Helper()
	return s.h.NewStore(t, o)
}

// batchGetURIs: one batch read returns every block whole, as the scan reads it, in order,
// duplicates included; a key that is not a hash is an error of its own item only.
func (s suite) batchGetURIs(t *testing.T) {
	st := s.batchStore(t, Options{})
	f := NewFixture()
	s.load(t, f)
	const inst = "inst1"
	blocks := []int64{-7262535415567954716, 42, 43, 44, 46, -9223372036854775808, 77, -1, 9223372036854775807, 1000, 1001, 1003, 1005, -7262535415567954716}
	got, err := st.ReadBlocks(ctx(t), inst, blocks)
	require.NoError(t, err)
	require.Len(t, got, len(blocks))
	for i, b := range blocks {
		if b == 77 { // the fixture's string key
			require.Error(t, got[i].Err, "block %d", b)
			continue
		}
		require.NoError(t, got[i].Err, "block %d", b)
		want, ok := f.Instances[inst].Entries[kvcm.BlockKey(inst, b)]
		require.Equal(t, ok, got[i].Exists, "block %d", b)
		if !ok {
			want = meta.Entry{Key: kvcm.BlockKey(inst, b), Instance: inst, BlockKey: b}
		}
		require.Equal(t, want, got[i].Entry, "block %d", b)
	}
	// Instances are isolated (DESIGN §8.4): the same block keys of another instance.
	other, err := st.ReadBlocks(ctx(t), "inst10", []int64{1, 7, -7262535415567954716})
	require.NoError(t, err)
	require.Equal(t, f.Instances["inst10"].Entries[kvcm.BlockKey("inst10", 1)], other[0].Entry)
	require.False(t, other[2].Exists)

	empty, err := st.ReadBlocks(ctx(t), inst, nil)
	require.NoError(t, err)
	require.Empty(t, empty)
}

// batchCASPerItem: each write of a batch succeeds or conflicts on its own; a conflicting or
// refused write changes nothing, a successful one only __uri__.
func (s suite) batchCASPerItem(t *testing.T) {
	st := s.batchStore(t, Options{})
	orig := fieldMap(casFields())["__uri__"]
	next := URI(Location("a0a0a0a0", kvcm.StatusDeleting, kvcm.TypeHF3FS, "hf3fs://hf3fs_01/3fs/k/cas/tp0/c000000000000000?size=1024"), locServing, locUnknown)
	changed := URI(locServing)
	for b := casBlock; b < casBlock+4; b++ {
		s.h.HSet(t, kvcm.BlockKey(casInst, b), casFields()...)
	}
	s.h.HSet(t, kvcm.BlockKey(casInst, casBlock+1), "__uri__", changed) // a concurrent writer
	writes := []meta.CondWrite{
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock, Expected: []byte(orig), Next: []byte(next)},
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 1, Expected: []byte(orig), Next: []byte(next)},       // conflict
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 2, Expected: nil, Next: []byte(next)},                // no expected bytes
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 3, Expected: []byte(orig), Next: nil},                // empty next
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 9, Expected: []byte(orig), Next: []byte(next)},       // key gone
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 3, Expected: []byte(orig + " "), Next: []byte(next)}, // near miss
	}
	keysBefore := len(s.h.Keys(t))
	errs, err := st.CASMany(ctx(t), casInst, writes)
	require.NoError(t, err)
	require.Len(t, errs, len(writes))
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], meta.ErrConflict)
	for _, i := range []int{2, 3} {
		require.Error(t, errs[i], "write %d", i)
		require.False(t, errors.Is(errs[i], meta.ErrConflict), "an invalid write is not a conflict: %v", errs[i])
	}
	require.ErrorIs(t, errs[4], meta.ErrConflict, "a gone key is a conflict")
	require.ErrorIs(t, errs[5], meta.ErrConflict)

	want := fieldMap(casFields())
	want["__uri__"] = next
	require.Equal(t, want, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock)))
	want["__uri__"] = changed
	require.Equal(t, want, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock+1)))
	for _, b := range []int64{casBlock + 2, casBlock + 3} {
		require.Equal(t, fieldMap(casFields()), s.h.HGetAll(t, kvcm.BlockKey(casInst, b)))
	}
	require.Nil(t, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock+9)), "a CAS created the key")
	require.Len(t, s.h.Keys(t), keysBefore)

	// The batch again: the first write's expected bytes are gone now.
	errs, err = st.CASMany(ctx(t), casInst, writes[:1])
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], meta.ErrConflict)

	none, err := st.CASMany(ctx(t), casInst, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

// batchCASChangesOnlyURI: many blocks written in one batch, every other field and every
// other key byte for byte as it was (DESIGN §8.5).
func (s suite) batchCASChangesOnlyURI(t *testing.T) {
	st := s.batchStore(t, Options{})
	orig := fieldMap(casFields())["__uri__"]
	const n = 50
	writes := make([]meta.CondWrite, n)
	for i := range n {
		b := casBlock + int64(i)
		s.h.HSet(t, kvcm.BlockKey(casInst, b), casFields()...)
		writes[i] = meta.CondWrite{Layout: kvcm.LayoutLegacy, BlockKey: b, Expected: []byte(orig), Next: []byte(URI(locServing, locUnknown))}
	}
	bystander := kvcm.BlockKey(casInst, casBlock+n)
	s.h.HSet(t, bystander, casFields()...)
	errs, err := st.CASMany(ctx(t), casInst, writes)
	require.NoError(t, err)
	want := fieldMap(casFields())
	want["__uri__"] = URI(locServing, locUnknown)
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, want, s.h.HGetAll(t, kvcm.BlockKey(casInst, writes[i].BlockKey)))
	}
	require.Equal(t, fieldMap(casFields()), s.h.HGetAll(t, bystander))
}

// batchCADLastLocation: a CAD whose next is empty deletes the key; one with a next keeps the
// key and its other fields; a conflict in the same batch changes nothing.
func (s suite) batchCADLastLocation(t *testing.T) {
	st := s.batchStore(t, Options{})
	only := URI(Location("d4d4d4d4", kvcm.StatusDeleting, kvcm.TypeFile, "file://nfs_01/d?size=1"))
	orig := fieldMap(casFields())["__uri__"]
	last, one, conflict := kvcm.BlockKey(casInst, casBlock), kvcm.BlockKey(casInst, casBlock+1), kvcm.BlockKey(casInst, casBlock+2)
	s.h.HSet(t, last, "__uri__", only, "__lru_time__", FixtureLRUTime, "_prev_key_", prevKey)
	s.h.HSet(t, one, casFields()...)
	s.h.HSet(t, conflict, casFields()...)
	writes := []meta.CondWrite{
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock, Expected: []byte(only), Next: nil},
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 1, Expected: []byte(orig), Next: []byte(URI(locServing, locUnknown))},
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 2, Expected: []byte(only), Next: nil},
	}
	res, err := st.CADMany(ctx(t), casInst, writes)
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.ErrorIs(t, res[2].Err, meta.ErrConflict)
	require.Equal(t, []bool{false, false, false}, []bool{res[0].KeyDeleted, res[1].KeyDeleted, res[2].KeyDeleted})
	// empty_block: keep — KVCM reads {} as "exists, no location"; its other fields stay.
	require.Equal(t, map[string]string{"__uri__": "{}", "__lru_time__": FixtureLRUTime, "_prev_key_": prevKey}, s.h.HGetAll(t, last))
	want := fieldMap(casFields())
	want["__uri__"] = URI(locServing, locUnknown)
	require.Equal(t, want, s.h.HGetAll(t, one))
	require.Equal(t, fieldMap(casFields()), s.h.HGetAll(t, conflict))

	res, err = st.CADMany(ctx(t), casInst, writes[:1])
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, meta.ErrConflict, "removing again is a conflict (gone)")

	// empty_block: delete — the key goes, and the result says so.
	del := s.batchStore(t, Options{EmptyBlock: meta.EmptyBlockDelete})
	s.h.HSet(t, last, "__uri__", only, "__lru_time__", FixtureLRUTime, "_prev_key_", prevKey)
	res, err = del.CADMany(ctx(t), casInst, writes[:1])
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.True(t, res[0].KeyDeleted)
	require.Nil(t, s.h.HGetAll(t, last), "the last location's CAD deletes the key")
	require.NotContains(t, s.h.Keys(t), last)
}

// batchConflictKinds: the single-block conflict table, as one batch of CAS and one of CAD.
func (s suite) batchConflictKinds(t *testing.T) {
	st := s.batchStore(t, Options{})
	orig := URI(locWriting, locServing, locUnknown)
	currents := [][]string{
		{"__uri__", URI(Location("a0a0a0a0", kvcm.StatusServing, kvcm.TypeHF3FS, "hf3fs://hf3fs_01/3fs/k/cas/tp0/c000000000000000?size=1024"), locServing, locUnknown), "__lru_time__", "1767225699999999"},
		{"__uri__", URI(locServing, locWriting, locUnknown), "__lru_time__", FixtureLRUTime},
		{"__uri__", orig + " ", "__lru_time__", FixtureLRUTime},
		{"__lru_time__", FixtureLRUTime, "_prev_key_", prevKey},
		{"__uri__", "", "__lru_time__", FixtureLRUTime},
		nil, // key absent
	}
	var cas, cad []meta.CondWrite
	for i, cur := range currents {
		b := casBlock + int64(i)
		if cur != nil {
			s.h.HSet(t, kvcm.BlockKey(casInst, b), cur...)
		}
		cas = append(cas, meta.CondWrite{Layout: kvcm.LayoutLegacy, BlockKey: b, Expected: []byte(orig), Next: []byte(URI(locServing))})
		cad = append(cad, meta.CondWrite{Layout: kvcm.LayoutLegacy, BlockKey: b, Expected: []byte(orig), Next: nil})
	}
	keysBefore := len(s.h.Keys(t))
	for name, call := range map[string]func() ([]error, error){
		"cas": func() ([]error, error) { return st.CASMany(ctx(t), casInst, cas) },
		"cad": func() ([]error, error) { return CADErrs(st.CADMany(ctx(t), casInst, cad)) },
	} {
		errs, err := call()
		require.NoError(t, err, name)
		for i, cur := range currents {
			require.ErrorIs(t, errs[i], meta.ErrConflict, "%s %d", name, i)
			got := s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock+int64(i)))
			if cur == nil {
				require.Nil(t, got, "%s created the key", name)
			} else {
				require.Equal(t, fieldMap(cur), got, "%s %d", name, i)
			}
		}
		require.Len(t, s.h.Keys(t), keysBefore, name)
	}
}

// batchDryRun: every batch write is refused with ErrDryRun, nothing is sent for it and
// nothing changes (DESIGN §8.8); batch reads still work.
func (s suite) batchDryRun(t *testing.T) {
	st := s.batchStore(t, Options{DryRun: true})
	key := kvcm.BlockKey(casInst, casBlock)
	s.h.HSet(t, key, casFields()...)
	expected := []byte(fieldMap(casFields())["__uri__"])
	writes := []meta.CondWrite{
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock, Expected: expected, Next: []byte(URI(locServing))},
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock, Expected: expected, Next: nil},
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 1, Expected: expected, Next: []byte(URI(locServing))},
	}
	var before map[string]int64
	if s.h.CommandCalls != nil {
		before = s.h.CommandCalls(t)
	}
	for name, call := range map[string]func() ([]error, error){
		"cas": func() ([]error, error) { return st.CASMany(ctx(t), casInst, writes) },
		"cad": func() ([]error, error) { return CADErrs(st.CADMany(ctx(t), casInst, writes)) },
	} {
		errs, err := call()
		require.NoError(t, err, name)
		require.Len(t, errs, len(writes))
		for i, e := range errs {
			require.ErrorIs(t, e, meta.ErrDryRun, "%s %d", name, i)
			require.False(t, errors.Is(e, meta.ErrConflict), "%s %d", name, i)
		}
	}
	s.requireNothingSent(t, before)
	require.Equal(t, fieldMap(casFields()), s.h.HGetAll(t, key))
	require.Nil(t, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock+1)))

	got, err := st.ReadBlocks(ctx(t), casInst, []int64{casBlock, casBlock + 1})
	require.NoError(t, err)
	require.Equal(t, expected, got[0].Entry.URI)
	require.False(t, got[1].Exists)
}

// batchReadOnlyUser: batch reads work where writing is forbidden; batch writes fail there,
// per item, with an error that is not a conflict, and change nothing.
func (s suite) batchReadOnlyUser(t *testing.T) {
	if s.h.ReadOnlyStore == nil {
		t.Skip("harness has no ReadOnlyStore")
	}
	s.h.NewStore(t, Options{})
	key := kvcm.BlockKey(casInst, casBlock)
	s.h.HSet(t, key, casFields()...)
	ro := s.h.ReadOnlyStore(t)
	got, err := ro.ReadBlocks(ctx(t), casInst, []int64{casBlock})
	require.NoError(t, err)
	require.NoError(t, got[0].Err)
	expected := []byte(fieldMap(casFields())["__uri__"])
	require.Equal(t, expected, got[0].Entry.URI)
	w := []meta.CondWrite{{Layout: kvcm.LayoutLegacy, BlockKey: casBlock, Expected: expected, Next: []byte(URI(locServing))}}
	for name, call := range map[string]func() ([]error, error){
		"cas": func() ([]error, error) { return ro.CASMany(ctx(t), casInst, w) },
		"cad": func() ([]error, error) { return CADErrs(ro.CADMany(ctx(t), casInst, w)) },
	} {
		errs, err := call()
		if err == nil {
			require.Error(t, errs[0], name)
			err = errs[0]
		}
		require.NotErrorIs(t, err, meta.ErrConflict, "%s: a refused write is not a conflict", name)
		require.Equal(t, fieldMap(casFields()), s.h.HGetAll(t, key), name)
	}
}

// batchScriptCacheLoss: after the server forgot its scripts (restart, SCRIPT FLUSH), batch
// writes still run, once each.
func (s suite) batchScriptCacheLoss(t *testing.T) {
	if s.h.FlushScripts == nil {
		t.Skip("harness has no FlushScripts")
	}
	st := s.batchStore(t, Options{})
	only := URI(Location("d4d4d4d4", kvcm.StatusDeleting, kvcm.TypeFile, "file://nfs_01/d?size=1"))
	for i := range 3 {
		s.h.HSet(t, kvcm.BlockKey(casInst, casBlock+int64(i)), "__uri__", only, "__lru_time__", FixtureLRUTime)
	}
	s.h.FlushScripts(t)
	var before map[string]int64
	if s.h.CommandCalls != nil {
		before = s.h.CommandCalls(t)
	}
	errs, err := st.CASMany(ctx(t), casInst, []meta.CondWrite{
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock, Expected: []byte(only), Next: []byte("v1")},
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 1, Expected: []byte("other"), Next: []byte("v1")},
	})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], meta.ErrConflict)
	require.Equal(t, map[string]string{"__uri__": "v1", "__lru_time__": FixtureLRUTime}, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock)))
	if s.h.CommandCalls != nil {
		// Redis: the scripts were not cached, so the writes ran as EVAL, each once.
		require.Equal(t, int64(2), commandDelta(before, s.h.CommandCalls(t))["eval"])
	}

	s.h.FlushScripts(t)
	errs, err = CADErrs(st.CADMany(ctx(t), casInst, []meta.CondWrite{
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock, Expected: []byte("v1"), Next: nil},
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 1, Expected: []byte(only), Next: []byte("v2")},
		{Layout: kvcm.LayoutLegacy, BlockKey: casBlock + 2, Expected: []byte("v1"), Next: nil},
	}))
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], meta.ErrConflict)
	require.Equal(t, map[string]string{"__uri__": "{}", "__lru_time__": FixtureLRUTime}, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock)))
	require.Equal(t, map[string]string{"__uri__": "v2", "__lru_time__": FixtureLRUTime}, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock+1)))
	require.Equal(t, map[string]string{"__uri__": only, "__lru_time__": FixtureLRUTime}, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock+2)))
}
