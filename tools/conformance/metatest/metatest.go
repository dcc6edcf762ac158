// Package metatest is the conformance suite every meta.Store implementation runs against
// the real server it talks to. It pins down what the rest of kvcm-gc relies on: a complete,
// instance-isolated, read-only scan of KVCM's exact key format, and conditional writes that
// compare whole __uri__ bytes and never touch another field (DESIGN §8.1, §8.4, §8.5, §8.8).
package metatest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Options are the store settings a subtest asks the harness for.
type Options struct {
	DryRun bool
	// EmptyBlock is what the store's CADs do with a block whose last location goes.
	EmptyBlock meta.EmptyBlock
}

// Harness gives the suite a store and a direct, implementation-independent view of the same
// keyspace. Subtests run one after the other.
type Harness struct {
	// NewStore returns a store over an empty keyspace. It is called once at the start of
	// every subtest, which may rely on nothing written before.
	NewStore func(t *testing.T, o Options) meta.Store
	// HSet writes hash fields, pairs of field and value, in order.
	HSet func(t *testing.T, key string, fieldsAndValues ...string)
	// SetString writes a plain string key.
	SetString func(t *testing.T, key, value string)
	// HGetAll returns every field of a hash key, nil when the key does not exist.
	HGetAll func(t *testing.T, key string) map[string]string
	// Keys returns every key of the keyspace.
	Keys func(t *testing.T) []string
	// Del deletes a key.
	Del func(t *testing.T, key string)

	// ReadOnlyStore, optional, returns a store over the current keyspace whose connection
	// may read but not write (for Redis, an ACL user with only +scan +hmget +hget +ping).
	// The scan must work with it and its writes must fail without changing anything.
	ReadOnlyStore func(t *testing.T) meta.Store
	// CommandCalls, optional, returns the server's cumulative number of calls per command
	// (for Redis, INFO commandstats). The suite compares two snapshots to prove that a scan
	// and a dry-run store send no write.
	CommandCalls func(t *testing.T) map[string]int64
	// ReadCommands lists the commands CommandCalls may show during a scan. Nil means the Redis
	// set: scan, hmget, hget, ping, hello, auth, select, info and client subcommands.
	ReadCommands []string
	// FlushScripts, optional, empties the server's script cache (for Redis, SCRIPT FLUSH), as
	// a restart does: the batch writes must still work afterwards.
	FlushScripts func(t *testing.T)
}

var redisReadCommands = []string{
	"scan", "hgetall", "hmget", "hget", "ping", "hello", "auth", "select", "info",
	"client|setinfo", "client|setname", "readonly",
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	require.NotNil(t, h.NewStore, "Harness.NewStore")
	require.NotNil(t, h.HSet, "Harness.HSet")
	require.NotNil(t, h.SetString, "Harness.SetString")
	require.NotNil(t, h.HGetAll, "Harness.HGetAll")
	require.NotNil(t, h.Keys, "Harness.Keys")
	require.NotNil(t, h.Del, "Harness.Del")
	s := suite{h: h}
	t.Run("ScanFixture", s.scanFixture)
	t.Run("ScanPageSizes", s.scanPageSizes)
	t.Run("ScanSendsNoWrite", s.scanSendsNoWrite)
	t.Run("ScanReadOnlyUser", s.scanReadOnlyUser)
	t.Run("ScanStore", s.scanStore)
	t.Run("ScanLayouts", s.scanLayouts)
	t.Run("GetURI", s.getURI)
	t.Run("CASChangesOnlyURI", s.casChangesOnlyURI)
	t.Run("CASConflict", s.casConflict)
	t.Run("CASRace", s.casRace)
	t.Run("CADLastLocation", s.cadLastLocation)
	t.Run("CADOneLocation", s.cadOneLocation)
	t.Run("CADConflict", s.cadConflict)
	t.Run("DryRun", s.dryRun)
	// The batch methods of a meta.BatchStore (skipped when the store has none).
	t.Run("BatchGetURIs", s.batchGetURIs)
	t.Run("BatchCASPerItem", s.batchCASPerItem)
	t.Run("BatchCASChangesOnlyURI", s.batchCASChangesOnlyURI)
	t.Run("BatchCADLastLocation", s.batchCADLastLocation)
	t.Run("BatchConflictKinds", s.batchConflictKinds)
	t.Run("BatchDryRun", s.batchDryRun)
	t.Run("BatchReadOnlyUser", s.batchReadOnlyUser)
	t.Run("BatchScriptCacheLoss", s.batchScriptCacheLoss)
	// The location layout, and keys of both layouts.
	t.Run("LocationCAS", s.locationCAS)
	t.Run("LocationCAD", s.locationCAD)
	t.Run("LocationDryRun", s.locationDryRun)
}

type suite struct{ h Harness }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func (s suite) load(t *testing.T, f Fixture) {
	t.Helper()
	for _, k := range f.Keys {
		if k.IsString {
			s.h.SetString(t, k.Key, k.String)
		} else {
			s.h.HSet(t, k.Key, k.Fields...)
		}
	}
}

// FullScan walks a store from cursor 0 back to 0 with the given COUNT reading the keys of one
// instance only, and returns every entry by key and every bad key. SCAN may return a key
// twice; a duplicate must carry the same values. It fails the test after maxPages pages.
func FullScan(t *testing.T, sc meta.Scanner, instanceID string, count, maxPages int) (map[string]meta.Entry, map[string]bool) {
	t.Helper()
	entries, bad, _ := FullStoreScan(t, sc, []string{instanceID}, count, maxPages)
	return entries, bad
}

func (s suite) requireScan(t *testing.T, sc meta.Scanner, f Fixture, count int) {
	t.Helper()
	for _, inst := range slices.Sorted(maps.Keys(f.Instances)) {
		want := f.Instances[inst]
		entries, bad := FullScan(t, sc, inst, count, 100000)
		require.Equal(t, slices.Sorted(maps.Keys(want.Entries)), slices.Sorted(maps.Keys(entries)), "entry keys of %q", inst)
		for k, e := range want.Entries {
			require.Equal(t, e, entries[k], "entry %q", k)
			require.Equal(t, want.Entries[k].URI == nil, entries[k].URI == nil, "entry %q nil URI", k)
		}
		require.Equal(t, slices.Sorted(maps.Keys(want.BadKeys)), slices.Sorted(maps.Keys(bad)), "bad keys of %q", inst)
	}
}

// scanFixture: the whole fixture, every instance, COUNT small so that many pages are needed.
func (s suite) scanFixture(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	f := NewFixture()
	s.load(t, f)
	s.requireScan(t, st, f, 3)
}

func (s suite) scanPageSizes(t *testing.T) {
	tests := []struct {
		name  string
		count int
	}{
		{"count 1", 1},
		{"count 10", 10},
		{"count 1000", 1000},
	}
	st := s.h.NewStore(t, Options{})
	f := NewFixture()
	s.load(t, f)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { s.requireScan(t, st, f, tc.count) })
	}
	t.Run("empty instance", func(t *testing.T) {
		entries, bad := FullScan(t, st, "no-such-instance", 100, 1000)
		require.Empty(t, entries)
		require.Empty(t, bad)
	})
}

// scanSendsNoWrite: a full scan's commands are read commands only (DESIGN §8.5).
func (s suite) scanSendsNoWrite(t *testing.T) {
	if s.h.CommandCalls == nil {
		t.Skip("harness has no CommandCalls")
	}
	allowed := s.h.ReadCommands
	if allowed == nil {
		allowed = redisReadCommands
	}
	st := s.h.NewStore(t, Options{})
	f := NewFixture()
	s.load(t, f)
	before := s.h.CommandCalls(t)
	s.requireScan(t, st, f, 7)
	requireStoreScan(t, st, f, slices.Collect(maps.Keys(f.Instances)), 7)
	after := s.h.CommandCalls(t)
	sent := commandDelta(before, after)
	require.NotEmpty(t, sent, "the scan sent nothing?")
	for cmd := range sent {
		require.Contains(t, allowed, cmd, "scan sent %q (calls: %v)", cmd, sent)
	}
}

// requireNothingSent checks that no command reached the server since the counts before,
// when the harness can count them: a dry-run store sends nothing for the writes it refuses.
func (s suite) requireNothingSent(t *testing.T, before map[string]int64) {
	t.Helper()
	if s.h.CommandCalls == nil {
		return
	}
	sent := commandDelta(before, s.h.CommandCalls(t))
	// The snapshot itself, and connection set-up of the harness's own client.
	for _, cmd := range []string{"info", "hello", "auth", "ping", "client|setinfo"} {
		delete(sent, cmd)
	}
	require.Empty(t, sent, "a dry-run store sent commands for refused writes")
}

func commandDelta(before, after map[string]int64) map[string]int64 {
	d := make(map[string]int64)
	for cmd, n := range after {
		if n > before[cmd] {
			d[cmd] = n - before[cmd]
		}
	}
	return d
}

// scanReadOnlyUser: the scan works where writing is forbidden, and a write attempt there
// fails without changing anything.
func (s suite) scanReadOnlyUser(t *testing.T) {
	if s.h.ReadOnlyStore == nil {
		t.Skip("harness has no ReadOnlyStore")
	}
	s.h.NewStore(t, Options{})
	f := NewFixture()
	s.load(t, f)
	ro := s.h.ReadOnlyStore(t)
	s.requireScan(t, ro, f, 5)
	requireStoreScan(t, ro, f, slices.Collect(maps.Keys(f.Instances)), 5)

	key := kvcm.BlockKey("inst1", -7262535415567954716)
	before := s.h.HGetAll(t, key)
	uri, ok, err := GetURI(ctx(t), ro, "inst1", -7262535415567954716)
	require.NoError(t, err)
	require.True(t, ok)
	err = CAS(ctx(t), ro, "inst1", -7262535415567954716, uri, []byte(`{}`))
	require.Error(t, err)
	require.NotErrorIs(t, err, meta.ErrConflict, "a refused write is not a conflict")
	err = CAD(ctx(t), ro, "inst1", -7262535415567954716, uri, nil)
	require.Error(t, err)
	require.Equal(t, before, s.h.HGetAll(t, key))
}

func (s suite) getURI(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	f := NewFixture()
	s.load(t, f)
	tests := []struct {
		name  string
		inst  string
		block int64
		ok    bool
	}{
		{"several locations", "inst1", -7262535415567954716, true},
		{"min int64", "inst1", -9223372036854775808, true},
		{"unknown members", "inst1", -1, true},
		{"corrupt json", "inst1", 42, true},
		{"empty field", "inst1", 43, false},
		{"absent field", "inst1", 44, false},
		{"absent key", "inst1", 46, false},
		{"glob id", "a[1]*", 3, true},
		{"unicode id", "m.v 1 ü漢", -3, true},
		{"absent instance", "inst", 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			uri, ok, err := GetURI(ctx(t), st, tc.inst, tc.block)
			require.NoError(t, err)
			require.Equal(t, tc.ok, ok)
			key := kvcm.BlockKey(tc.inst, tc.block)
			if tc.ok {
				require.Equal(t, []byte(f.Instances[tc.inst].Entries[key].URI), uri)
			} else {
				require.Nil(t, uri)
			}
		})
	}
}

// A block with everything KVCM writes plus a field kvcm-gc does not know: a CAS or CAD must
// leave all but __uri__ byte-for-byte as they were.
const (
	casInst  = "cas&inst ü"
	casBlock = int64(-4611686018427387904)
	prevKey  = "-7262535415567954716"
)

var (
	locWriting = Location("a0a0a0a0", kvcm.StatusWriting, kvcm.TypeHF3FS, "hf3fs://hf3fs_01/3fs/k/cas/tp0/c000000000000000?size=1024")
	locServing = Location("b1b1b1b1", kvcm.StatusServing, kvcm.TypeFile,
		"file://nfs_01/tmp/nfs/cas/tp0/c000000000000000_3c1a9f0e77d2b4a1?blkid=3&size=1024")
	locUnknown = `{"id":"c2c2c2c2","status":3,"type":2,"spec_size":1,"location_specs":[{"name":"tp0","uri":"mooncake://mc/?key=a&size=1"}],"create_time":1767225600000000,"zz":[{"x":"<&>"}]}`
)

func casFields() []string {
	return []string{
		"__uri__", URI(locWriting, locServing, locUnknown),
		"__lru_time__", FixtureLRUTime,
		"_prev_key_", prevKey,
		"x-unknown", "keep me\x00\xff",
	}
}

func fieldMap(kv []string) map[string]string {
	m := make(map[string]string)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func (s suite) casChangesOnlyURI(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	key := kvcm.BlockKey(casInst, casBlock)
	s.h.HSet(t, key, casFields()...)
	// Status 2 → 4 of one location, the others written back byte for byte.
	next := URI(Location("a0a0a0a0", kvcm.StatusDeleting, kvcm.TypeHF3FS, "hf3fs://hf3fs_01/3fs/k/cas/tp0/c000000000000000?size=1024"), locServing, locUnknown)

	uri, ok, err := GetURI(ctx(t), st, casInst, casBlock)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, CAS(ctx(t), st, casInst, casBlock, uri, []byte(next)))

	want := fieldMap(casFields())
	want["__uri__"] = next
	require.Equal(t, want, s.h.HGetAll(t, key))

	// The same CAS again is now a conflict: the bytes it expects are gone.
	require.ErrorIs(t, CAS(ctx(t), st, casInst, casBlock, uri, []byte(next)), meta.ErrConflict)
	require.Equal(t, want, s.h.HGetAll(t, key))
}

func (s suite) casConflict(t *testing.T) {
	orig := URI(locWriting, locServing, locUnknown)
	next := []byte(URI(locServing, locUnknown))
	tests := []struct {
		name string
		// setup writes the block (or not) after orig was read; nil fields leave the key absent.
		current  []string
		expected string
	}{
		{"concurrent writer changed a status", []string{"__uri__", URI(Location("a0a0a0a0", kvcm.StatusServing, kvcm.TypeHF3FS, "hf3fs://hf3fs_01/3fs/k/cas/tp0/c000000000000000?size=1024"), locServing, locUnknown), "__lru_time__", "1767225699999999"}, orig},
		{"same locations reordered", []string{"__uri__", URI(locServing, locWriting, locUnknown), "__lru_time__", FixtureLRUTime}, orig},
		{"whitespace only", []string{"__uri__", orig + " ", "__lru_time__", FixtureLRUTime}, orig},
		{"expected is a prefix", []string{"__uri__", orig, "__lru_time__", FixtureLRUTime}, orig[:len(orig)-1]},
		{"field absent", []string{"__lru_time__", FixtureLRUTime, "_prev_key_", prevKey}, orig},
		{"field empty", []string{"__uri__", "", "__lru_time__", FixtureLRUTime}, orig},
		{"key absent", nil, orig},
	}
	st := s.h.NewStore(t, Options{})
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			block := casBlock + int64(i)
			key := kvcm.BlockKey(casInst, block)
			keysBefore := len(s.h.Keys(t))
			if tc.current != nil {
				s.h.HSet(t, key, tc.current...)
				keysBefore++
			}
			for _, op := range []struct {
				name string
				fn   func(context.Context, meta.Store, string, int64, []byte, []byte) error
				next []byte
			}{{"cas", CAS, next}, {"cad", CAD, next}, {"cad delete", CAD, nil}} {
				err := op.fn(ctx(t), st, casInst, block, []byte(tc.expected), op.next)
				require.ErrorIs(t, err, meta.ErrConflict, op.name)
				if tc.current == nil {
					require.Nil(t, s.h.HGetAll(t, key), "%s created the key", op.name)
				} else {
					require.Equal(t, fieldMap(tc.current), s.h.HGetAll(t, key), op.name)
				}
				require.Len(t, s.h.Keys(t), keysBefore, "%s created or deleted a key", op.name)
			}
		})
	}
}

// casRace: of many CAS from the same expected bytes, exactly one wins.
func (s suite) casRace(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	key := kvcm.BlockKey(casInst, casBlock)
	s.h.HSet(t, key, casFields()...)
	expected := []byte(fieldMap(casFields())["__uri__"])
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = CAS(ctx(t), st, casInst, casBlock, expected, []byte(URI(Location(fmt.Sprintf("r%07d", i), kvcm.StatusDeleting, kvcm.TypeFile, "file://x/y?size=1"))))
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two CAS won")
			winner = i
			continue
		}
		require.ErrorIs(t, err, meta.ErrConflict)
	}
	require.NotEqual(t, -1, winner, "no CAS won")
	want := fieldMap(casFields())
	want["__uri__"] = URI(Location(fmt.Sprintf("r%07d", winner), kvcm.StatusDeleting, kvcm.TypeFile, "file://x/y?size=1"))
	require.Equal(t, want, s.h.HGetAll(t, key))
}

func (s suite) cadLastLocation(t *testing.T) {
	for _, mode := range []meta.EmptyBlock{meta.EmptyBlockKeep, meta.EmptyBlockDelete} {
		st := s.h.NewStore(t, Options{EmptyBlock: mode})
		key := kvcm.BlockKey(casInst, casBlock)
		other := kvcm.BlockKey(casInst, casBlock+1)
		only := URI(Location("d4d4d4d4", kvcm.StatusDeleting, kvcm.TypeFile, "file://nfs_01/d?size=1"))
		s.h.HSet(t, key, "__uri__", only, "__lru_time__", FixtureLRUTime, "_prev_key_", prevKey)
		s.h.HSet(t, other, "__uri__", only, "__lru_time__", FixtureLRUTime)
		require.NoError(t, CAD(ctx(t), st, casInst, casBlock, []byte(only), nil))
		if mode == meta.EmptyBlockKeep {
			// KVCM reads {} as "exists, no location"; every other field stays.
			require.Equal(t, map[string]string{"__uri__": "{}", "__lru_time__": FixtureLRUTime, "_prev_key_": prevKey}, s.h.HGetAll(t, key))
		} else {
			require.Nil(t, s.h.HGetAll(t, key), "the key must be gone")
			require.NotContains(t, s.h.Keys(t), key)
		}
		require.Equal(t, map[string]string{"__uri__": only, "__lru_time__": FixtureLRUTime}, s.h.HGetAll(t, other))
		// Removing again is a conflict (gone), not an error of another kind.
		require.ErrorIs(t, CAD(ctx(t), st, casInst, casBlock, []byte(only), nil), meta.ErrConflict)
	}
}

func (s suite) cadOneLocation(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	key := kvcm.BlockKey(casInst, casBlock)
	s.h.HSet(t, key, casFields()...)
	expected := fieldMap(casFields())["__uri__"]
	next := URI(locServing, locUnknown) // a0a0a0a0 removed, the others byte for byte
	require.NoError(t, CAD(ctx(t), st, casInst, casBlock, []byte(expected), []byte(next)))
	want := fieldMap(casFields())
	want["__uri__"] = next
	require.Equal(t, want, s.h.HGetAll(t, key))
}

func (s suite) cadConflict(t *testing.T) {
	st := s.h.NewStore(t, Options{})
	key := kvcm.BlockKey(casInst, casBlock)
	s.h.HSet(t, key, casFields()...)
	expected := fieldMap(casFields())["__uri__"]
	// KVCM's FinishWrite flipped a0a0a0a0 to SERVING between our read and our CAD.
	flipped := URI(Location("a0a0a0a0", kvcm.StatusServing, kvcm.TypeHF3FS, "hf3fs://hf3fs_01/3fs/k/cas/tp0/c000000000000000?size=1024"), locServing, locUnknown)
	s.h.HSet(t, key, "__uri__", flipped)
	want := fieldMap(casFields())
	want["__uri__"] = flipped
	for _, next := range [][]byte{nil, []byte(URI(locServing, locUnknown))} {
		require.ErrorIs(t, CAD(ctx(t), st, casInst, casBlock, []byte(expected), next), meta.ErrConflict)
		require.Equal(t, want, s.h.HGetAll(t, key))
	}
}

// dryRun: every write is refused with ErrDryRun, nothing changes, and (when the harness can
// tell) nothing at all is sent for the refused writes (DESIGN §8.8).
func (s suite) dryRun(t *testing.T) {
	st := s.h.NewStore(t, Options{DryRun: true})
	key := kvcm.BlockKey(casInst, casBlock)
	s.h.HSet(t, key, casFields()...)
	expected := []byte(fieldMap(casFields())["__uri__"])
	var before map[string]int64
	if s.h.CommandCalls != nil {
		before = s.h.CommandCalls(t)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"cas", CAS(ctx(t), st, casInst, casBlock, expected, []byte(URI(locServing)))},
		{"cad", CAD(ctx(t), st, casInst, casBlock, expected, []byte(URI(locServing)))},
		{"cad delete", CAD(ctx(t), st, casInst, casBlock, expected, nil)},
		{"cas absent key", CAS(ctx(t), st, casInst, casBlock+1, expected, []byte(URI(locServing)))},
	} {
		require.ErrorIs(t, tc.err, meta.ErrDryRun, tc.name)
		require.False(t, errors.Is(tc.err, meta.ErrConflict), tc.name)
	}
	s.requireNothingSent(t, before)
	require.Equal(t, fieldMap(casFields()), s.h.HGetAll(t, key))
	require.Nil(t, s.h.HGetAll(t, kvcm.BlockKey(casInst, casBlock+1)))

	// Reads still work in dry-run.
	uri, ok, err := GetURI(ctx(t), st, casInst, casBlock)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, expected, uri)
}
