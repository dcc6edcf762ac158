package sweep

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// staticRegistry serves one snapshot.
type staticRegistry struct{ reg *meta.Registry }

func (s staticRegistry) ReadRegistry(context.Context) (*meta.Registry, error) { return s.reg, nil }

// oneStore resolves every name to one store.
type oneStore struct{ st meta.Store }

func (o oneStore) Store(string) (meta.Store, error) { return o.st, nil }

// sweepFixture is a real redis-server holding the blocks, a real directory holding storage
// nfs's files, and a sweeper on them.
type sweepFixture struct {
	t     *testing.T
	r     *testenv.Redis
	dir   string
	root  string // nfs's root_path
	store meta.Store
	reg   *meta.Registry
	sw    *Sweeper
	now   time.Time
}

func newSweepFixture(t *testing.T, dryRun bool) *sweepFixture {
	t.Helper()
	f := &sweepFixture{t: t, r: testenv.StartRedis(t), dir: t.TempDir(), now: time.Now()}
	f.root = f.dir + "/nfs/"
	conn, err := redismeta.ParseURI(f.r.URI())
	require.NoError(t, err)
	st, err := redismeta.OpenStore(context.Background(), conn, redismeta.StoreOptions{DryRun: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	f.store = st
	f.reg = sweepRegistry(t, f.dir)
	cfg := DefaultConfig()
	cfg.Storages = []string{"nfs"}
	f.sw, err = NewSweeper(cfg, SweeperDeps{Names: subjects.Names{Prefix: "kvcmgc", Cluster: "c1"},
		Registry: staticRegistry{f.reg}, Stores: oneStore{st},
		StorageOptions: storage.Options{DryRun: dryRun}, Metrics: NewMetrics(prometheus.NewRegistry()),
		Now: func() time.Time { return f.now }})
	require.NoError(t, err)
	return f
}

// file writes the data file of inst/spec/key, modified age ago, and returns its entry.
func (f *sweepFixture) file(inst, spec string, key int64, age time.Duration) subjects.SweepFile {
	f.t.Helper()
	p := f.root + kvcm.BlockObjectName(inst, spec, key)
	require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(f.t, os.WriteFile(p, []byte("kv of "+p), 0o644))
	mt := f.now.Add(-age)
	require.NoError(f.t, os.Chtimes(p, mt, mt))
	return f.entry(inst, spec, key)
}

func (f *sweepFixture) entry(inst, spec string, key int64) subjects.SweepFile {
	f.t.Helper()
	p := f.root + kvcm.BlockObjectName(inst, spec, key)
	fi, err := os.Lstat(p)
	require.NoError(f.t, err)
	return subjects.SweepFile{Path: subjects.RawText(p), Spec: spec, Key: key, Size: fi.Size(), MtimeUs: fi.ModTime().UnixMicro(),
		Ino: fi.Sys().(*syscall.Stat_t).Ino}
}

func (f *sweepFixture) batch(kind string, files ...subjects.SweepFile) subjects.SweepBatch {
	return subjects.SweepBatch{V: subjects.SchemaVersion, Cluster: "c1", Instance: "inst0", Storage: "nfs", Kind: kind, Files: files}
}

// serving writes a legacy block of inst0 whose one location names uri.
func (f *sweepFixture) block(key int64, status kvcm.Status, path string) {
	f.t.Helper()
	u := metatest.URI(metatest.Location("l1", status, kvcm.TypeFile, "file://nfs"+path+"?size=1024"))
	require.NoError(f.t, f.r.Client().HSet(context.Background(), kvcm.BlockKey("inst0", key), "__uri__", u, "__lru_time__", "1").Err())
}

func (f *sweepFixture) sweep(b subjects.SweepBatch) []Result {
	f.t.Helper()
	res, err := f.sw.Sweep(context.Background(), b)
	require.NoError(f.t, err)
	return res
}

func (f *sweepFixture) quarantine() []string {
	f.t.Helper()
	var out []string
	q := filepath.Join(f.dir, "nfs", storage.QuarantineDir)
	_ = filepath.Walk(q, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(q, p)
			out = append(out, rel[strings.IndexByte(rel, '/')+1:])
		}
		return nil
	})
	return out
}

// qentry is the quarantine entry of a quarantined file, as a look into the quarantine
// publishes it.
func (f *sweepFixture) qentry(e subjects.SweepFile, qrel string) subjects.SweepFile {
	f.t.Helper()
	_, at, err := storage.ParseQuarantined(qrel)
	require.NoError(f.t, err)
	e.Quarantine, e.QuarantinedUs = subjects.RawText(qrel), at.UnixMicro()
	return e
}

func sweepOutcomes(res []Result) []string {
	var out []string
	for _, r := range res {
		s := r.Outcome
		if r.Reason != "" {
			s += " " + r.Reason
		}
		out = append(out, s)
	}
	return out
}

// TestSweeperWalked: of the walked files exactly the orphans go into quarantine; a file a
// location names in any status, a young one, one that changed since the walk stay.
func TestSweeperWalked(t *testing.T) {
	f := newSweepFixture(t, false)
	old := 48 * time.Hour
	orphan := f.file("inst0", "tp0", 1, old)    // no block
	unref := f.file("inst0", "tp1", 2, old)     // its block names tp0 only
	serving := f.file("inst0", "tp0", 3, old)   // named by a SERVING location
	writing := f.file("inst0", "tp0", 4, old)   // named by a WRITING location
	deleting := f.file("inst0", "tp0", -5, old) // named by a DELETING location
	young := f.file("inst0", "tp0", 6, time.Minute)
	changed := f.file("inst0", "tp0", 7, old)
	gone := f.file("inst0", "tp0", 8, old)
	f.block(2, kvcm.StatusServing, f.root+"inst0/tp0/2")
	f.block(3, kvcm.StatusServing, string(serving.Path))
	f.block(4, kvcm.StatusWriting, string(writing.Path))
	f.block(-5, kvcm.StatusDeleting, string(deleting.Path))
	changed.Size++
	require.NoError(t, os.Remove(string(gone.Path)))

	res := f.sweep(f.batch(subjects.SweepWalk, orphan, unref, serving, writing, deleting, young, changed, gone))
	require.Equal(t, []string{"quarantined block_absent", "quarantined no_location_names_it", "kept referenced",
		"kept referenced", "kept referenced", "kept young", "kept changed", "gone"}, sweepOutcomes(res))
	require.NoFileExists(t, string(orphan.Path))
	require.NoFileExists(t, string(unref.Path))
	for _, e := range []subjects.SweepFile{serving, writing, deleting, young, changed} {
		require.FileExists(t, string(e.Path))
	}
	q := f.quarantine()
	require.Len(t, q, 2)
	require.True(t, strings.HasPrefix(q[0], "inst0/tp0/1~"), q[0])
	require.True(t, strings.HasPrefix(q[1], "inst0/tp1/2~"), q[1])

	// A redelivery of the same batch finds the files in quarantine and confirms them again.
	res = f.sweep(f.batch(subjects.SweepWalk, orphan, unref))
	require.Equal(t, []string{"quarantined block_absent", "quarantined no_location_names_it"}, sweepOutcomes(res))
	require.Len(t, f.quarantine(), 2)

	// Before sweep_quarantine nothing is unlinked; after it, the orphans are.
	look := f.batch(subjects.SweepQuarantine, f.qentry(orphan, q[0]), f.qentry(unref, q[1]))
	res = f.sweep(look)
	require.Equal(t, []string{"", ""}, sweepOutcomes(res), "waiting out sweep_quarantine")
	f.now = f.now.Add(f.sw.cfg.Quarantine)
	res = f.sweep(look)
	require.Equal(t, []string{"unlinked block_absent", "unlinked no_location_names_it"}, sweepOutcomes(res))
	require.Equal(t, int64(len("kv of "+string(orphan.Path))), res[0].Freed)
	require.Empty(t, f.quarantine())
	res = f.sweep(look)
	require.Equal(t, []string{"gone", "gone"}, sweepOutcomes(res))
}

// racingStore adds a WRITING location naming a file to its block right after the sweeper's
// first read, as a KVCM StartWriteCache between the read and the rename would.
type racingStore struct {
	meta.Store
	once func()
}

func (r *racingStore) ReadBlocks(ctx context.Context, inst string, keys []int64) ([]meta.BlockRead, error) {
	res, err := r.Store.ReadBlocks(ctx, inst, keys)
	if r.once != nil {
		r.once()
		r.once = nil
	}
	return res, err
}

// TestSweeperRaceWithWrite: a block that gains a WRITING location between the first read and
// the rename gets its file back; so does one re-referenced during the quarantine.
func TestSweeperRaceWithWrite(t *testing.T) {
	f := newSweepFixture(t, false)
	e := f.file("inst0", "tp0", 10, 48*time.Hour)
	f.sw.stores = oneStore{&racingStore{Store: f.store, once: func() { f.block(10, kvcm.StatusWriting, string(e.Path)) }}}
	res := f.sweep(f.batch(subjects.SweepWalk, e))
	require.Equal(t, []string{"restored referenced"}, sweepOutcomes(res))
	data, err := os.ReadFile(string(e.Path))
	require.NoError(t, err)
	require.Equal(t, "kv of "+string(e.Path), string(data))
	require.Empty(t, f.quarantine())

	// Re-referenced during the quarantine: the look moves it back.
	f.sw.stores = oneStore{f.store}
	e2 := f.file("inst0", "tp0", 11, 48*time.Hour)
	res = f.sweep(f.batch(subjects.SweepWalk, e2))
	require.Equal(t, []string{"quarantined block_absent"}, sweepOutcomes(res))
	q := f.quarantine()
	require.Len(t, q, 1)
	f.block(11, kvcm.StatusWriting, string(e2.Path))
	f.now = f.now.Add(2 * f.sw.cfg.Quarantine)
	look := f.batch(subjects.SweepQuarantine, f.qentry(e2, q[0]))
	res = f.sweep(look)
	require.Equal(t, []string{"restored referenced"}, sweepOutcomes(res))
	require.FileExists(t, string(e2.Path))
	require.Empty(t, f.quarantine())
	// The same look again, as a redelivery after a sweeper killed before it stored its event:
	// the file found back at its path is told as restored, judged again to say why.
	res = f.sweep(look)
	require.Equal(t, []string{"restored referenced"}, sweepOutcomes(res))
	require.Contains(t, res[0].Detail, backDetail)
	// Named no longer: still at its path, for the next walk to judge.
	require.NoError(t, f.r.Client().Del(context.Background(), kvcm.BlockKey("inst0", 11)).Err())
	res = f.sweep(look)
	require.Equal(t, []string{"restored changed"}, sweepOutcomes(res))
	require.FileExists(t, string(e2.Path))
	// Another file at the path (another inode): that one was not the quarantined file.
	require.NoError(t, os.WriteFile(string(e2.Path)+".new", []byte("kv of another"), 0o644))
	require.NoError(t, os.Rename(string(e2.Path)+".new", string(e2.Path)))
	require.Equal(t, []string{"gone"}, sweepOutcomes(f.sweep(look)))

	// A client created a new file at the path meanwhile: both are kept.
	e3 := f.file("inst0", "tp0", 12, 48*time.Hour)
	res = f.sweep(f.batch(subjects.SweepWalk, e3))
	require.Equal(t, []string{"quarantined block_absent"}, sweepOutcomes(res))
	q = f.quarantine()
	require.NoError(t, os.WriteFile(string(e3.Path), []byte("new"), 0o644))
	f.block(12, kvcm.StatusWriting, string(e3.Path))
	res = f.sweep(f.batch(subjects.SweepQuarantine, f.qentry(e3, q[0])))
	require.Equal(t, []string{"conflict referenced"}, sweepOutcomes(res))
	data, err = os.ReadFile(string(e3.Path))
	require.NoError(t, err)
	require.Equal(t, "new", string(data))
	require.Equal(t, []string{q[0] + ".conflict"}, f.quarantine())
}

// TestSweeperUndo: a quarantined file whose block can no longer be judged goes back.
func TestSweeperUndo(t *testing.T) {
	f := newSweepFixture(t, false)
	e := f.file("inst0", "tp0", 20, 48*time.Hour)
	require.Equal(t, []string{"quarantined block_absent"}, sweepOutcomes(f.sweep(f.batch(subjects.SweepWalk, e))))
	q := f.quarantine()
	reg := *f.reg
	reg.Instances = reg.Instances[1:] // inst0 unregistered
	f.sw.registry = staticRegistry{&reg}
	f.sw.views = viewCache{}
	f.now = f.now.Add(2 * f.sw.cfg.Quarantine)
	res := f.sweep(f.batch(subjects.SweepQuarantine, f.qentry(e, q[0])))
	require.Equal(t, []string{"restored unknown_instance"}, sweepOutcomes(res))
	require.FileExists(t, string(e.Path))
}

func TestSweeperDryRun(t *testing.T) {
	f := newSweepFixture(t, true)
	e := f.file("inst0", "tp0", 30, 48*time.Hour)
	res := f.sweep(f.batch(subjects.SweepWalk, e))
	require.Equal(t, []string{"would_quarantine block_absent"}, sweepOutcomes(res))
	require.FileExists(t, string(e.Path))
	require.Empty(t, f.quarantine())
}

func TestSweeperNotSwept(t *testing.T) {
	f := newSweepFixture(t, false)
	e := f.file("inst0", "tp0", 40, 48*time.Hour)
	f.sw.cfg.Storages = []string{"other"}
	require.Equal(t, []string{"kept not_swept"}, sweepOutcomes(f.sweep(f.batch(subjects.SweepWalk, e))))
	f.sw.cfg.Storages = []string{"nfs"}
	b := f.batch(subjects.SweepWalk, e)
	b.Instance = "local_inst"
	require.Equal(t, []string{"kept group_skipped"}, sweepOutcomes(f.sweep(b)))
	b.Instance = "ghost"
	require.Equal(t, []string{"kept unknown_instance"}, sweepOutcomes(f.sweep(b)))
	require.FileExists(t, string(e.Path))
	// An entry that does not name KVCM's file of its block.
	bad := e
	bad.Key = 41
	require.Equal(t, []string{"kept bad_entry"}, sweepOutcomes(f.sweep(f.batch(subjects.SweepWalk, bad))))
}

// TestSweeperDryRunQuarantine: in dry-run a look into the quarantine says what it would do.
func TestSweeperDryRunQuarantine(t *testing.T) {
	f := newSweepFixture(t, false)
	a := f.file("inst0", "tp0", 50, 48*time.Hour)
	b := f.file("inst0", "tp0", 51, 48*time.Hour)
	require.Equal(t, []string{"quarantined block_absent", "quarantined block_absent"}, sweepOutcomes(f.sweep(f.batch(subjects.SweepWalk, a, b))))
	q := f.quarantine()
	f.block(51, kvcm.StatusServing, string(b.Path))
	f.sw.storageOp.DryRun = true
	f.now = f.now.Add(2 * f.sw.cfg.Quarantine)
	res := f.sweep(f.batch(subjects.SweepQuarantine, f.qentry(a, q[0]), f.qentry(b, q[1])))
	require.Equal(t, []string{"would_unlink block_absent", "would_restore referenced"}, sweepOutcomes(res))
	require.Len(t, f.quarantine(), 2, "nothing moved")
}

// TestSweeperBadQuarantineEntry: a look into the quarantine whose entry names a quarantined
// file that is not its path's, or a quarantine name that does not parse, unlinks nothing and
// moves nothing back, however long the file has waited.
func TestSweeperBadQuarantineEntry(t *testing.T) {
	f := newSweepFixture(t, false)
	e1 := f.file("inst0", "tp0", 30, 48*time.Hour)
	e2 := f.file("inst0", "tp0", 31, 48*time.Hour)
	require.Equal(t, []string{"quarantined block_absent"}, sweepOutcomes(f.sweep(f.batch(subjects.SweepWalk, e2))))
	q := f.quarantine()
	require.Len(t, q, 1)
	f.now = f.now.Add(2 * f.sw.cfg.Quarantine)

	unparsable := e2
	unparsable.Quarantine = subjects.RawText("not a quarantine name")
	res := f.sweep(f.batch(subjects.SweepQuarantine, f.qentry(e1, q[0]), unparsable))
	require.Equal(t, []string{"kept " + KeptBadEntry, "kept " + KeptBadEntry}, sweepOutcomes(res))
	require.Equal(t, "quarantine name of another path", res[0].Detail)
	require.FileExists(t, string(e1.Path), "the file at the entry's path stays")
	require.NoFileExists(t, string(e2.Path), "nothing moved back")
	require.Equal(t, q, f.quarantine(), "the quarantined file stays")
}
