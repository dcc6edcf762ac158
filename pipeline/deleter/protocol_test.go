package deleter

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

type deleterFixture struct {
	t     testing.TB
	r     *testenv.Redis
	store *redismeta.Store
	set   *storage.StaticSet
	root  string
}

func newDeleterFixture(t testing.TB, dryRun bool) *deleterFixture {
	return newDeleterFixtureWith(t, redismeta.StoreOptions{DryRun: dryRun})
}

func newDeleterFixtureWith(t testing.TB, o redismeta.StoreOptions) *deleterFixture {
	dryRun := o.DryRun
	r := testenv.StartRedis(t)
	conn, err := redismeta.ParseURI(r.URI())
	require.NoError(t, err)
	st, err := redismeta.OpenStore(context.Background(), conn, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	root := t.TempDir() + "/"
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{
		"nfs": {Type: kvcm.TypeFile, TypeName: "file", Name: "nfs", RootPath: root, KeyCountPerFile: 1},
		"shr": {Type: kvcm.TypeFile, TypeName: "file", Name: "shr", RootPath: root, KeyCountPerFile: 8},
		"mc":  {Type: kvcm.TypeMooncake, TypeName: "mooncake", Name: "mc", KeyCountPerFile: 1},
	}, storage.Options{DryRun: dryRun, DefaultProbe: storage.ProbeStat})
	require.NoError(t, err)
	return &deleterFixture{t: t, r: r, store: st, set: set, root: root}
}

func (f *deleterFixture) file(name string) string {
	p := filepath.Join(f.root, name)
	require.NoError(f.t, os.WriteFile(p, []byte("x"), 0o644))
	return p
}

func (f *deleterFixture) put(key int64, uri string) {
	require.NoError(f.t, f.r.Client().HSet(context.Background(), kvcm.BlockKey("i", key), "__uri__", uri, "__lru_time__", "123", "_prev_key_", "").Err())
}

// requireKeptEmpty checks a legacy block whose last location went under empty_block: keep:
// __uri__ is {} and the fields KVCM wrote are untouched (DESIGN §8.10).
func (f *deleterFixture) requireKeptEmpty(key int64) {
	f.t.Helper()
	require.Equal(f.t, map[string]string{"__uri__": "{}", "__lru_time__": "123", "_prev_key_": ""}, f.get(key),
		"the last location's CAD keeps the key as KVCM reads 'exists, no location'")
}

func (f *deleterFixture) get(key int64) map[string]string {
	m, err := f.r.Client().HGetAll(context.Background(), kvcm.BlockKey("i", key)).Result()
	require.NoError(f.t, err)
	return m
}

// deleteOne runs the protocol for one target.
func deleteOne(p Protocol, ctx context.Context, st meta.Store, set storage.Set, inst string, t subjects.Target) (TargetResult, error) {
	res, err := p.DeleteAll(ctx, st, set, inst, []subjects.Target{t})
	return res[0], err
}

func target(key int64, id, raw string) subjects.Target {
	return subjects.Target{Key: key, Location: id, Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(raw)}
}

func TestProtocolDeletesAndKeepsTheRest(t *testing.T) {
	f := newDeleterFixture(t, false)
	p1 := f.file("a1")
	a := `{"id":"a","status":2,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://nfs` + p1 + `?size=1"}],"zz":[1,"&"]}`
	b := `{"id":"b","status":3,"type":4,"spec_size":0,"location_specs":[],"x":"<&>"}`
	f.put(1, `{"a":`+a+`,"b":`+b+`}`)
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", target(1, "a", a))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeDeleted, res.Outcome)
	require.NoFileExists(t, p1)
	require.Equal(t, map[string]string{"__uri__": `{"b":` + b + `}`, "__lru_time__": "123", "_prev_key_": ""}, f.get(1))

	res, err = deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", target(1, "b", b))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeDeleted, res.Outcome)
	f.requireKeptEmpty(1)

	res, err = deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", target(1, "b", b))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopGone, res.Outcome, "a redelivery after completion is a no-op")
}

func TestProtocolPhysicalSkips(t *testing.T) {
	f := newDeleterFixture(t, false)
	shared := f.file("shared")
	blk := f.file("blk")
	dummy, mismatch, unknown := f.file("dummy"), f.file("mismatch"), f.file("unknown")
	cases := []struct {
		name, uri, skip, outcome string
		keep                     string
		typ                      kvcm.StorageType
	}{
		{"shared by key_count_per_file", "file://shr" + shared + "?size=1", PhysSkipShared, subjects.OutcomeDeleted, shared, kvcm.TypeFile},
		{"shared by blkid", "file://nfs" + blk + "?blkid=3&size=1", PhysSkipShared, subjects.OutcomeDeleted, blk, kvcm.TypeFile},
		{"no client", "mooncake://mc/?key=i/tp0/1&size=1", PhysSkipUnsupported, subjects.OutcomePartial, "", kvcm.TypeMooncake},
		{"unknown storage", "file://nope/x?size=1", PhysSkipUnknownStorage, subjects.OutcomePartial, "", kvcm.TypeFile},
		{"bad uri", "::", PhysSkipBadURI, subjects.OutcomePartial, "", kvcm.TypeFile},
		{"already absent", "file://nfs" + f.root + "gone?size=1", "", subjects.OutcomeDeleted, "", kvcm.TypeFile},
		// The type decides what may be deleted, never the URI's storage alone.
		{"a type with no data", "file://nfs" + dummy + "?size=1", PhysSkipType, subjects.OutcomeDeleted, dummy, kvcm.TypeDummy},
		{"an EventReport type", "file://nfs" + dummy + "?size=1", PhysSkipType, subjects.OutcomeDeleted, dummy, kvcm.TypeEventReportL1P5},
		{"a type kvcm-gc does not know", "file://nfs" + unknown + "?size=1", PhysSkipType, subjects.OutcomeDeleted, unknown, 200},
		{"a storage of another type", "file://nfs" + mismatch + "?size=1", PhysSkipType, subjects.OutcomeDeleted, mismatch, kvcm.TypeHF3FS},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loc := `{"id":"a","status":2,"type":` + strconv.FormatUint(uint64(tc.typ), 10) + `,"spec_size":1,"location_specs":[{"name":"tp0","uri":"` + tc.uri + `"}]}`
			f.put(int64(i), `{"a":`+loc+`}`)
			res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", target(int64(i), "a", loc))
			require.NoError(t, err)
			require.Equal(t, tc.outcome, res.Outcome)
			if tc.skip != "" {
				require.Equal(t, 1, res.PhysicalSkips[tc.skip], "%v", res.PhysicalSkips)
			} else {
				require.Empty(t, res.PhysicalSkips)
			}
			if tc.keep != "" {
				require.FileExists(t, tc.keep, "a shared file is never unlinked")
			}
			f.requireKeptEmpty(int64(i))
		})
	}
}

func TestProtocolResumesFromOwnDeleting(t *testing.T) {
	f := newDeleterFixture(t, false)
	p := f.file("r")
	loc := `{"id":"a","status":3,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://nfs` + p + `?size=1"}]}`
	deleting, err := kvcm.LocationWithStatus([]byte(loc), kvcm.StatusDeleting)
	require.NoError(t, err)
	f.put(1, `{"a":`+string(deleting)+`,"b":{"id":"b","status":3}}`) // an earlier delivery's CAS, then a crash
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", target(1, "a", loc))
	require.NoError(t, err)
	require.True(t, res.Resumed)
	require.Equal(t, subjects.OutcomeDeleted, res.Outcome)
	require.NoFileExists(t, p)
	require.Equal(t, `{"b":{"id":"b","status":3}}`, f.get(1)["__uri__"])
}

func TestProtocolDeletingOfSomeoneElseIsNotOurs(t *testing.T) {
	f := newDeleterFixture(t, false)
	// A DELETING location whose bytes differ from ours in more than the status: never resumed.
	loc := `{"id":"a","status":3,"type":4,"spec_size":0,"location_specs":[]}`
	other := `{"id":"a","status":4,"type":4,"spec_size":0,"location_specs":[],"by":"reclaimer"}`
	f.put(1, `{"a":`+other+`}`)
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", target(1, "a", loc))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopMismatch, res.Outcome)
	require.Equal(t, `{"a":`+other+`}`, f.get(1)["__uri__"])
}

func TestProtocolDryRunWritesNothing(t *testing.T) {
	f := newDeleterFixture(t, true)
	p := f.file("d")
	loc := `{"id":"a","status":2,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://nfs` + p + `?size=1"}]}`
	f.put(1, `{"a":`+loc+`}`)
	before := f.get(1)
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), f.store, f.set, "i", target(1, "a", loc))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeWouldDelete, res.Outcome)
	require.Equal(t, before, f.get(1))
	require.FileExists(t, p)
	// The storage deleter refuses on its own too (enforced at the bottom).
	u, err := kvcm.ParseDataURI("file://nfs" + p + "?size=1")
	require.NoError(t, err)
	be, _ := f.set.Lookup("nfs")
	require.ErrorIs(t, be.Delete(context.Background(), u), storage.ErrDryRun)
	res2, err := f.store.CADMany(context.Background(), "i", []meta.CondWrite{{BlockKey: 1, Layout: kvcm.LayoutLegacy, Expected: []byte(before["__uri__"])}})
	require.NoError(t, err)
	require.ErrorIs(t, res2[0].Err, meta.ErrDryRun)
}

// conflictStore makes the first n CAS/CAD calls conflict, as a concurrent writer would.
type conflictStore struct {
	meta.Store
	conflicts int
	calls     int
}

func (c *conflictStore) CASMany(ctx context.Context, inst string, ws []meta.CondWrite) ([]error, error) {
	c.calls++
	if c.conflicts > 0 {
		c.conflicts--
		errs := make([]error, len(ws))
		for i := range errs {
			errs[i] = meta.ErrConflict
		}
		return errs, nil
	}
	return c.Store.CASMany(ctx, inst, ws)
}

func TestProtocolBoundedConflictRetries(t *testing.T) {
	f := newDeleterFixture(t, false)
	loc := `{"id":"a","status":2,"type":4,"spec_size":0,"location_specs":[]}`
	f.put(1, `{"a":`+loc+`}`)
	cs := &conflictStore{Store: f.store, conflicts: 2}
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), cs, f.set, "i", target(1, "a", loc))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeDeleted, res.Outcome, "a conflict re-reads and retries")
	require.Equal(t, 3, cs.calls)

	f.put(2, `{"a":`+loc+`}`)
	cs = &conflictStore{Store: f.store, conflicts: 100}
	res, err = deleteOne(NewProtocol(DefaultConfig()), context.Background(), cs, f.set, "i", target(2, "a", loc))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopMismatch, res.Outcome)
	require.Equal(t, DefaultConfig().CASRetries, cs.calls, "retries are bounded")
	require.Equal(t, `{"a":`+loc+`}`, f.get(2)["__uri__"])
}

// KVCM's FinishWrite sets SERVING unconditionally, also over our DELETING mark: the deleter
// re-reads after its delay and leaves the data and the metadata alone.
func TestProtocolFinishedOverOurMarkKeepsData(t *testing.T) {
	f := newDeleterFixture(t, false)
	p := f.file("fw")
	loc := `{"id":"a","status":2,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://nfs` + p + `?size=1"}]}`
	f.put(1, `{"a":`+loc+`}`)
	serving, err := kvcm.LocationWithStatus([]byte(loc), kvcm.StatusServing)
	require.NoError(t, err)
	// FinishWrite during delete_delay: after our CAS, before the re-read.
	spy := &spyStore{Store: f.store, afterCAS: func() { f.put(1, `{"a":`+string(serving)+`}`) }}
	res, err := deleteOne(NewProtocol(DefaultConfig()), context.Background(), spy, f.set, "i", target(1, "a", loc))
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopMismatch, res.Outcome)
	require.FileExists(t, p)
	require.Equal(t, `{"a":`+string(serving)+`}`, f.get(1)["__uri__"])
}

func osMkdirAll(p string) error { return os.MkdirAll(p, 0o755) }
func osWrite(p string) error    { return os.WriteFile(p, []byte("x"), 0o644) }
