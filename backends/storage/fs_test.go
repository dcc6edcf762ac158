package storage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/storagetest"
)

// remapBase is the URI-side directory of remapped storages. It does not exist locally: only a
// working path map can reach the objects.
const remapBase = "/kvcm-gc-conformance"

// fsHarness builds file-system storages on a fresh temporary directory per case. rootOf
// returns the storage config for a URI-side base directory.
type fsHarness struct {
	name   string
	typ    kvcm.StorageType
	rootOf func(base string) kvcm.StorageConfig
}

func fileRoot(suffix string) func(string) kvcm.StorageConfig {
	return func(base string) kvcm.StorageConfig {
		return kvcm.StorageConfig{RootPath: base + suffix}
	}
}

func hf3fsRoot(mount, rootDir string) func(string) kvcm.StorageConfig {
	return func(base string) kvcm.StorageConfig {
		return kvcm.StorageConfig{Mountpoint: base + mount, RootDir: rootDir}
	}
}

var harnesses = []fsHarness{
	{"nfs_01", kvcm.TypeFile, fileRoot("/store/")},
	// KVCM's own tests configure root_path without a trailing '/': data paths then extend the
	// last name ("…/store/kv_inst_a/tp0/…").
	{"nfs_02", kvcm.TypeFile, fileRoot("/store/kv_")},
	{"hf3fs_01", kvcm.TypeHF3FS, hf3fsRoot("/mnt", "kvcm")},
	{"hf3fs_02", kvcm.TypeHF3FS, hf3fsRoot("/mnt", "")},
	{"vcns_01", kvcm.TypeVCNSHF3FS, hf3fsRoot("/mnt/", "vcns/")},
}

func TestConformance(t *testing.T) {
	for _, h := range harnesses {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			storagetest.Run(t, h)
		})
	}
}

type fsFixture struct {
	h       fsHarness
	backend storage.Backend
	base    string // local base directory
	uriBase string // the same directory as URI paths name it
	cfg     kvcm.StorageConfig
}

func (h fsHarness) NewBackend(t *testing.T, o storagetest.Options) storagetest.Fixture {
	return h.newFixture(t, o)
}

func (h fsHarness) newFixture(t *testing.T, o storagetest.Options) *fsFixture {
	t.Helper()
	f := &fsFixture{h: h, base: t.TempDir()}
	f.uriBase = f.base
	var ov storage.Override
	if o.Remap {
		f.uriBase = remapBase
		ov.PathMap = []storage.PathMap{{From: remapBase + "/", To: f.base + "/"}}
	}
	f.cfg = h.rootOf(f.uriBase)
	f.cfg.Type, f.cfg.TypeName, f.cfg.Name = h.typ, h.typ.String(), h.name
	f.cfg.KeyCountPerFile = max(o.KeyCountPerFile, 1)
	// The storage's root directories exist, as a mounted storage's would.
	require.NoError(t, os.MkdirAll(filepath.Dir(f.local(t, f.dataPath("x"))), 0o755))

	ov.Probe = o.Probe
	if ov.Probe == "" {
		ov.Probe = storage.ProbeStat
	}
	if o.DeleteDisabled {
		off := false
		ov.Delete = &off
	}
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{h.name: f.cfg}, storage.Options{
		DryRun:    o.DryRun,
		Overrides: map[string]storage.Override{h.name: ov},
	})
	require.NoError(t, err)
	require.Empty(t, set.Unusable())
	b, ok := set.Lookup(h.name)
	require.True(t, ok)
	f.backend = b
	return f
}

// fsJoin joins like std::filesystem::path's operator/ for a relative right side.
func fsJoin(a, b string) string {
	if a == "" || strings.HasSuffix(a, "/") {
		return a + b
	}
	return a + "/" + b
}

// dataPath is the path KVCM writes for object name.
func (f *fsFixture) dataPath(name string) string {
	if f.h.typ == kvcm.TypeFile {
		return f.cfg.RootPath + name
	}
	base := f.cfg.Mountpoint
	if f.cfg.RootDir != "" {
		base = fsJoin(base, f.cfg.RootDir)
	}
	return fsJoin(base, name)
}

// local maps a URI path to the local path, independently of the backend's path map.
func (f *fsFixture) local(t *testing.T, p string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(p, f.uriBase)
	require.True(t, ok, "path %q outside the fixture", p)
	return f.base + rest
}

func (f *fsFixture) Backend() storage.Backend { return f.backend }

func (f *fsFixture) URIFor(name string) kvcm.DataURI {
	u, err := kvcm.ParseDataURI(fmt.Sprintf("%s://%s%s?size=4096", f.h.typ, f.h.name, f.dataPath(name)))
	if err != nil {
		panic(err) // the fixture's own URIs always parse
	}
	return u
}

func (f *fsFixture) OutsideURI(name string) kvcm.DataURI {
	u := f.URIFor("x")
	u.Path = f.uriBase + "/outside/" + name
	return u
}

func (f *fsFixture) CreateObject(t *testing.T, uri kvcm.DataURI) {
	t.Helper()
	p := f.local(t, uri.Path)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte("kv"), 0o644))
}

func (f *fsFixture) RemoveObject(t *testing.T, uri kvcm.DataURI) {
	t.Helper()
	err := os.Remove(f.local(t, uri.Path))
	if !os.IsNotExist(err) {
		require.NoError(t, err)
	}
}

func (f *fsFixture) ObjectExists(t *testing.T, uri kvcm.DataURI) bool {
	t.Helper()
	_, err := os.Lstat(f.local(t, uri.Path))
	if os.IsNotExist(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// eachHarness runs check, in parallel, on a new fixture of every harness and its backend.
func eachHarness(t *testing.T, check func(t *testing.T, f *fsFixture, b storage.Backend)) {
	for _, h := range harnesses {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			f := h.newFixture(t, storagetest.Options{})
			check(t, f, f.Backend())
		})
	}
}

// statBackend is the backend of the one storage cfg, probing with stat.
func statBackend(tb testing.TB, cfg kvcm.StorageConfig) storage.Backend {
	tb.Helper()
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{cfg.Name: cfg}, storage.Options{DefaultProbe: storage.ProbeStat})
	require.NoError(tb, err)
	b, _ := set.Lookup(cfg.Name)
	return b
}

// The cases below depend on file-system details the generic suite does not know.

func TestFSUnknownAnswers(t *testing.T) {
	ctx := context.Background()
	eachHarness(t, func(t *testing.T, f *fsFixture, b storage.Backend) {
		file := f.URIFor("inst_a/tp0/f")
		f.CreateObject(t, file)

		// ENOTDIR: a file where the layout has a directory. Not proof of absence.
		under := f.URIFor("inst_a/tp0/f/g")
		res, err := b.MightExist(ctx, []kvcm.DataURI{under})
		require.NoError(t, err)
		require.Equal(t, []storage.Result{storage.Unknown}, res)
		require.Error(t, b.Delete(ctx, under), "ENOTDIR is not 'already absent'")
		require.True(t, f.ObjectExists(t, file))

		// A directory at a data path is present, and never removed.
		dir := f.URIFor("inst_a/tp0/d")
		require.NoError(t, os.MkdirAll(f.local(t, dir.Path), 0o755))
		res, err = b.MightExist(ctx, []kvcm.DataURI{dir})
		require.NoError(t, err)
		require.Equal(t, []storage.Result{storage.Present}, res)
		require.ErrorContains(t, b.Delete(ctx, dir), "is a directory")
		require.DirExists(t, f.local(t, dir.Path))
	})
}

// TestFSPermissionUnknown: a directory without search permission hides whether the object
// exists, so the answer is Unknown and a delete fails. Root bypasses permission checks, so
// the case cannot be built when the tests run as root.
func TestFSPermissionUnknown(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root: permission bits are not enforced, no EACCES to observe")
	}
	ctx := context.Background()
	f := harnesses[0].newFixture(t, storagetest.Options{})
	b := f.Backend()
	u := f.URIFor("inst_a/tp0/f")
	f.CreateObject(t, u)
	dir := filepath.Dir(f.local(t, u.Path))
	require.NoError(t, os.Chmod(dir, 0o600)) // read but no search
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })

	res, err := b.MightExist(ctx, []kvcm.DataURI{u, f.URIFor("inst_a/tp0/absent")})
	require.NoError(t, err)
	require.Equal(t, []storage.Result{storage.Unknown, storage.Unknown}, res)
	require.ErrorIs(t, b.Delete(ctx, u), os.ErrPermission)
	require.NoError(t, os.Chmod(dir, 0o755))
	require.True(t, f.ObjectExists(t, u))
}

// TestFSSymlinks: a symbolic link below the root that leads out of it is never followed; a
// symbolic link at the data path itself is the object (only the link is removed).
func TestFSSymlinks(t *testing.T) {
	ctx := context.Background()
	f := harnesses[0].newFixture(t, storagetest.Options{})
	b := f.Backend()
	outside := f.OutsideURI("inst_x/tp0/1")
	f.CreateObject(t, outside)
	outsideDir := filepath.Dir(filepath.Dir(f.local(t, outside.Path))) // …/outside/inst_x

	// inst_abs -> /abs/…/outside/inst_x, inst_rel -> ../outside/inst_x
	require.NoError(t, os.Symlink(outsideDir, f.local(t, f.dataPath("inst_abs"))))
	require.NoError(t, os.Symlink("../outside/inst_x", f.local(t, f.dataPath("inst_rel"))))
	for _, inst := range []string{"inst_abs", "inst_rel"} {
		u := f.URIFor(inst + "/tp0/1")
		res, err := b.MightExist(ctx, []kvcm.DataURI{u})
		require.NoError(t, err)
		require.Equal(t, []storage.Result{storage.Unknown}, res, inst)
		require.Error(t, b.Delete(ctx, u), inst)
		require.True(t, f.ObjectExists(t, outside), inst)
	}

	link := f.URIFor("inst_a/tp0/link")
	require.NoError(t, os.MkdirAll(filepath.Dir(f.local(t, link.Path)), 0o755))
	require.NoError(t, os.Symlink(f.local(t, outside.Path), f.local(t, link.Path)))
	require.NoError(t, b.Delete(ctx, link))
	require.False(t, f.ObjectExists(t, link))
	require.True(t, f.ObjectExists(t, outside), "unlink removes the link, not its target")
}

// TestFSRootPrefix: with KVCM's slash-less root_path, a sibling name in the same directory is
// not the storage's, even though both live in one directory.
func TestFSRootPrefix(t *testing.T) {
	ctx := context.Background()
	f := harnesses[1].newFixture(t, storagetest.Options{}) // root_path …/store/kv_
	b := f.Backend()
	sibling := f.URIFor("x")
	sibling.Path = f.uriBase + "/store/other/tp0/1"
	f.CreateObject(t, sibling)
	rootItself := f.URIFor("")

	res, err := b.MightExist(ctx, []kvcm.DataURI{sibling, rootItself})
	require.NoError(t, err)
	require.Equal(t, []storage.Result{storage.Unknown, storage.Unknown}, res)
	require.ErrorIs(t, b.Delete(ctx, sibling), storage.ErrUnsafePath)
	require.ErrorIs(t, b.Delete(ctx, rootItself), storage.ErrUnsafePath)
	require.True(t, f.ObjectExists(t, sibling))
}

// TestFSRemap: the URI paths do not exist here; the objects are reached through the path map
// only, and a map that sends a data path outside the root's local path is refused.
func TestFSRemap(t *testing.T) {
	ctx := context.Background()
	f := harnesses[0].newFixture(t, storagetest.Options{Remap: true})
	u := f.URIFor("inst_a/tp0/1")
	f.CreateObject(t, u)
	_, err := os.Lstat(u.Path)
	require.ErrorIs(t, err, os.ErrNotExist, "the raw URI path must not exist locally")
	res, err := f.Backend().MightExist(ctx, []kvcm.DataURI{u})
	require.NoError(t, err)
	require.Equal(t, []storage.Result{storage.Present}, res)

	// A more specific first entry sends inst_b elsewhere than the root's local path.
	elsewhere := t.TempDir()
	cfg := f.cfg
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{cfg.Name: cfg}, storage.Options{
		DefaultProbe: storage.ProbeStat,
		Overrides: map[string]storage.Override{cfg.Name: {PathMap: []storage.PathMap{
			{From: remapBase + "/store/inst_b/", To: elsewhere + "/"},
			{From: remapBase + "/", To: f.base + "/"},
		}}},
	})
	require.NoError(t, err)
	b, _ := set.Lookup(cfg.Name)
	ub := f.URIFor("inst_b/tp0/1")
	require.NoError(t, os.MkdirAll(filepath.Join(elsewhere, "tp0"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(elsewhere, "tp0", "1"), nil, 0o644))
	res, err = b.MightExist(ctx, []kvcm.DataURI{ub, u})
	require.NoError(t, err)
	require.Equal(t, []storage.Result{storage.Unknown, storage.Present}, res)
	require.ErrorIs(t, b.Delete(ctx, ub), storage.ErrUnsafePath)
	require.FileExists(t, filepath.Join(elsewhere, "tp0", "1"))
}

// TestFSRawRootCheck: the root check is made on the raw URI path, before remapping, so a path
// map that folds another directory onto the storage's local root cannot widen what the
// backend touches.
func TestFSRawRootCheck(t *testing.T) {
	ctx := context.Background()
	f := harnesses[0].newFixture(t, storagetest.Options{Remap: true})
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{f.cfg.Name: f.cfg}, storage.Options{
		DefaultProbe: storage.ProbeStat,
		Overrides: map[string]storage.Override{f.cfg.Name: {PathMap: []storage.PathMap{
			{From: remapBase + "/outside/", To: f.base + "/store/"},
			{From: remapBase + "/", To: f.base + "/"},
		}}},
	})
	require.NoError(t, err)
	b, _ := set.Lookup(f.cfg.Name)
	outside := f.OutsideURI("inst_a/tp0/1") // raw path outside the root…
	inRoot := f.URIFor("inst_a/tp0/1")      // …mapped onto this object's local path
	f.CreateObject(t, inRoot)
	res, err := b.MightExist(ctx, []kvcm.DataURI{outside, inRoot})
	require.NoError(t, err)
	require.Equal(t, []storage.Result{storage.Unknown, storage.Present}, res)
	require.ErrorIs(t, b.Delete(ctx, outside), storage.ErrUnsafePath)
	require.True(t, f.ObjectExists(t, inRoot))
}

// TestFSMissingRoot: a storage root that is not there (an absent mount) makes the whole probe
// fail instead of answering Missing for everything, and a delete is an error, not "absent".
func TestFSMissingRoot(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	cfg := kvcm.StorageConfig{Type: kvcm.TypeHF3FS, Name: "hf3fs_01", Mountpoint: base + "/absent", RootDir: "kvcm"}
	b := statBackend(t, cfg)
	u, err := kvcm.ParseDataURI("hf3fs://hf3fs_01" + base + "/absent/kvcm/inst/tp0/1?size=1")
	require.NoError(t, err)
	_, err = b.MightExist(ctx, []kvcm.DataURI{u})
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorIs(t, b.Delete(ctx, u), os.ErrNotExist)
}

// TestFSEmptyRoot: an empty storage root (an unmounted share's mount point) makes the whole
// probe fail: without it every SERVING location on the storage would read as missing.
func TestFSEmptyRoot(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	cfg := kvcm.StorageConfig{Type: kvcm.TypeFile, Name: "nfs_01", RootPath: base + "/", KeyCountPerFile: 1}
	b := statBackend(t, cfg)
	u, err := kvcm.ParseDataURI("file://nfs_01" + base + "/inst/tp0/1?size=1")
	require.NoError(t, err)
	_, err = b.MightExist(ctx, []kvcm.DataURI{u})
	require.ErrorContains(t, err, "storage root is empty")

	require.NoError(t, os.WriteFile(filepath.Join(base, "other"), nil, 0o644)) // mounted: something is there
	res, err := b.MightExist(ctx, []kvcm.DataURI{u})
	require.NoError(t, err)
	require.Equal(t, []storage.Result{storage.Missing}, res)
}

// BenchmarkStatProbe probes a full chunk of which half the objects exist.
func BenchmarkStatProbe(b *testing.B) {
	base := b.TempDir()
	cfg := kvcm.StorageConfig{Type: kvcm.TypeFile, Name: "nfs_01", RootPath: base + "/", KeyCountPerFile: 1}
	backend := statBackend(b, cfg)
	uris := make([]kvcm.DataURI, storage.MaxProbeChunk)
	for i := range uris {
		p := fmt.Sprintf("%sinst_a/tp%d/%x", cfg.RootPath, i%4, uint64(i)*0x9e3779b97f4a7c15)
		var err error
		uris[i], err = kvcm.ParseDataURI("file://nfs_01" + p + "?size=4096")
		require.NoError(b, err)
		if i%2 == 0 {
			require.NoError(b, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(b, os.WriteFile(p, nil, 0o644))
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := backend.MightExist(ctx, uris)
		if err != nil || res[0] != storage.Present || res[1] != storage.Missing {
			b.Fatalf("probe: %v %v", res[:2], err)
		}
	}
}

// TestFSDirRoots: a chunk is probed through one root per directory; every file answers as a
// lookup from the storage root would, whatever stands at its directory's place.
func TestFSDirRoots(t *testing.T) {
	ctx := context.Background()
	eachHarness(t, func(t *testing.T, f *fsFixture, b storage.Backend) {
		mk := func(name string) kvcm.DataURI {
			u := f.URIFor(name)
			f.CreateObject(t, u)
			return u
		}
		local := func(name string) string { return f.local(t, f.dataPath(name)) }
		outside := f.OutsideURI("inst_x/tp0/1")
		f.CreateObject(t, outside)

		// inst_file/tp0 is a file, inst_fifo/tp0 a FIFO, inst_link a link to inst_a (inside
		// the root), inst_out a link out of the root.
		require.NoError(t, os.MkdirAll(local("inst_file"), 0o755))
		require.NoError(t, os.WriteFile(local("inst_file/tp0"), nil, 0o644))
		require.NoError(t, os.MkdirAll(local("inst_fifo"), 0o755))
		require.NoError(t, syscall.Mkfifo(local("inst_fifo/tp0"), 0o644))
		mk("inst_a/tp0/keep")
		require.NoError(t, os.Symlink(filepath.Base(local("inst_a")), local("inst_link")))
		require.NoError(t, os.Symlink(filepath.Dir(filepath.Dir(f.local(t, outside.Path))), local("inst_out")))

		cases := []struct {
			uri  kvcm.DataURI
			want storage.Result
		}{
			{mk("inst_a/tp0/1"), storage.Present},
			{f.URIFor("inst_a/tp0/2"), storage.Missing},
			{mk("inst_a/tp1/1"), storage.Present},
			{f.URIFor("inst_gone/tp0/1"), storage.Missing}, // no directory: missing
			{f.URIFor("inst_gone/tp0/2"), storage.Missing},
			{f.URIFor("inst_a/tp9/1"), storage.Missing},
			{f.URIFor("inst_file/tp0/1"), storage.Unknown}, // ENOTDIR
			{f.URIFor("inst_file/tp0/2"), storage.Unknown},
			{f.URIFor("inst_fifo/tp0/1"), storage.Unknown}, // never opened, so never blocks
			{f.URIFor("inst_link/tp0/keep"), storage.Present},
			{f.URIFor("inst_link/tp0/absent"), storage.Missing},
			{f.URIFor("inst_out/tp0/1"), storage.Unknown}, // escapes the root
			{f.URIFor("inst_out/tp0/2"), storage.Unknown},
			{mk("inst_a/tp0/3"), storage.Present}, // back to a directory opened before
			{f.URIFor("inst_a/tp0/"), storage.Unknown},
			{mk("top"), storage.Present}, // a file right under the root prefix
			{f.URIFor("top2"), storage.Missing},
		}
		uris := make([]kvcm.DataURI, len(cases))
		want := make([]storage.Result, len(cases))
		for i, c := range cases {
			uris[i], want[i] = c.uri, c.want
		}
		done := make(chan struct{})
		var res []storage.Result
		var err error
		go func() {
			defer close(done)
			res, err = b.MightExist(ctx, uris)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("probe blocked (a FIFO opened?)")
		}
		require.NoError(t, err)
		for i, c := range cases {
			require.Equal(t, c.want, res[i], "%s", c.uri.Path)
			// The same answer alone in a chunk.
			one, err := b.MightExist(ctx, []kvcm.DataURI{c.uri})
			require.NoError(t, err)
			require.Equal(t, []storage.Result{c.want}, one, "%s alone", c.uri.Path)
		}

		// Deletes through a root at the file's directory.
		require.NoError(t, b.Delete(ctx, f.URIFor("inst_gone/tp0/1")), "no directory, no file")
		require.NoError(t, b.Delete(ctx, f.URIFor("inst_a/tp0/2")))
		require.Error(t, b.Delete(ctx, f.URIFor("inst_file/tp0/1")))
		require.Error(t, b.Delete(ctx, f.URIFor("inst_fifo/tp0/1")))
		require.Error(t, b.Delete(ctx, f.URIFor("inst_out/tp0/1")))
		require.True(t, f.ObjectExists(t, outside))
		require.NoError(t, b.Delete(ctx, f.URIFor("inst_link/tp0/keep")))
		require.False(t, f.ObjectExists(t, f.URIFor("inst_a/tp0/keep")))
		require.NoError(t, b.Delete(ctx, f.URIFor("top")))
		require.False(t, f.ObjectExists(t, f.URIFor("top")))
		require.NoError(t, b.Delete(ctx, uris[0]))
		require.False(t, f.ObjectExists(t, uris[0]))
		require.True(t, f.ObjectExists(t, uris[2]))
	})
}

// TestFSDirRootsPermission: directories that may not be searched or read answer for their
// files what a lookup from the storage root answers (Unknown), present and absent files alike.
// Run it as another user than root to see it run (setpriv --reuid=65534 … storage.test).
// Root bypasses permission checks, so the case cannot be built when the tests run as root.
func TestFSDirRootsPermission(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root: permission bits are not enforced, no EACCES to observe")
	}
	ctx := context.Background()
	f := harnesses[0].newFixture(t, storagetest.Options{}) // root_path <base>/store/
	root, err := os.OpenRoot(filepath.Join(f.base, "store"))
	require.NoError(t, err)
	defer root.Close()
	fromRoot := func(u kvcm.DataURI) storage.Result {
		_, err := root.Lstat(strings.TrimPrefix(u.Path, f.cfg.RootPath))
		switch {
		case err == nil:
			return storage.Present
		case errors.Is(err, syscall.ENOENT):
			return storage.Missing
		}
		return storage.Unknown
	}
	var uris []kvcm.DataURI
	for _, mode := range []os.FileMode{0o600, 0o300, 0o100, 0o000} {
		inst := fmt.Sprintf("inst_%o", mode)
		present := f.URIFor(inst + "/tp0/f")
		f.CreateObject(t, present)
		uris = append(uris, present, f.URIFor(inst+"/tp0/absent"), f.URIFor(inst+"/tp0/sub/absent"))
		dir := filepath.Dir(f.local(t, present.Path))
		require.NoError(t, os.Chmod(dir, mode))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	}
	res, err := f.Backend().MightExist(ctx, uris)
	require.NoError(t, err)
	for i, u := range uris {
		require.Equal(t, fromRoot(u), res[i], "%s", u.Path)
		// os.Root opens every directory on the way for reading: without read or without search
		// permission nothing is definite.
		require.Equal(t, storage.Unknown, res[i], "%s", u.Path)
	}
}

// TestFSDirRootsMany: a chunk spread over more directories than the backend keeps open at once
// answers the same as one over few.
func TestFSDirRootsMany(t *testing.T) {
	ctx := context.Background()
	f := harnesses[0].newFixture(t, storagetest.Options{})
	var uris []kvcm.DataURI
	var want []storage.Result
	for i := range 150 {
		present := f.URIFor(fmt.Sprintf("inst_a/tp%d/f", i))
		f.CreateObject(t, present)
		uris = append(uris, present, f.URIFor(fmt.Sprintf("inst_a/tp%d/absent", i)), f.URIFor(fmt.Sprintf("inst_b/tp%d/f", i)))
		want = append(want, storage.Present, storage.Missing, storage.Missing)
	}
	res, err := f.Backend().MightExist(ctx, uris)
	require.NoError(t, err)
	require.Equal(t, want, res)
}

// BenchmarkDelete unlinks one file per iteration (created while the timer is stopped).
func BenchmarkDelete(b *testing.B) {
	base := b.TempDir()
	cfg := kvcm.StorageConfig{Type: kvcm.TypeFile, Name: "nfs_01", RootPath: base + "/", KeyCountPerFile: 1}
	backend := statBackend(b, cfg)
	p := cfg.RootPath + "inst_a/tp0/f"
	require.NoError(b, os.MkdirAll(filepath.Dir(p), 0o755))
	u, err := kvcm.ParseDataURI("file://nfs_01" + p + "?size=4096")
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		require.NoError(b, os.WriteFile(p, nil, 0o644))
		b.StartTimer()
		if err := backend.Delete(ctx, u); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFSDeleteMany: one DeleteMany call answers, for every URI, what Delete alone answers,
// and leaves the same files behind: the same layout is built twice, deleted once in one call
// and once file by file. Dry-run and disabled deletes refuse every URI and remove nothing.
func TestFSDeleteMany(t *testing.T) {
	ctx := context.Background()
	for _, h := range harnesses {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			names := []string{"inst_a/tp0/1", "inst_a/tp0/2", "inst_a/tp1/1", "inst_b/tp0/1", "top"}
			build := func(o storagetest.Options) (*fsFixture, []kvcm.DataURI, kvcm.DataURI) {
				f := h.newFixture(t, o)
				local := func(name string) string { return f.local(t, f.dataPath(name)) }
				for _, n := range names {
					f.CreateObject(t, f.URIFor(n))
				}
				outside := f.OutsideURI("inst_x/tp0/1")
				f.CreateObject(t, outside)
				require.NoError(t, os.MkdirAll(local("inst_file"), 0o755))
				require.NoError(t, os.WriteFile(local("inst_file/tp0"), nil, 0o644))
				require.NoError(t, os.MkdirAll(local("inst_a/tp0/subdir"), 0o755))
				require.NoError(t, os.Symlink(filepath.Dir(filepath.Dir(f.local(t, outside.Path))), local("inst_out")))
				shared := f.URIFor("inst_a/tp0/shared")
				shared.Query = "blkid=3"
				f.CreateObject(t, shared)
				uris := []kvcm.DataURI{
					f.URIFor("inst_a/tp0/1"), f.URIFor("inst_a/tp0/absent"), f.URIFor("inst_gone/tp0/1"),
					f.URIFor("inst_file/tp0/1"), f.URIFor("inst_out/tp0/1"), f.URIFor("inst_a/tp0/subdir"),
					shared, f.URIFor("inst_b/tp0/1"), f.URIFor("inst_a/tp1/1"), f.URIFor("inst_a/tp0/2"), f.URIFor("top"),
				}
				return f, uris, outside
			}
			fa, many, outA := build(storagetest.Options{})
			fb, one, outB := build(storagetest.Options{})
			got := fa.Backend().(storage.BatchDeleter).DeleteMany(ctx, many)
			require.Len(t, got, len(many))
			for i := range one {
				want := fb.Backend().Delete(ctx, one[i])
				require.Equal(t, want == nil, got[i] == nil, "%s: %v / %v", one[i].Path, got[i], want)
				require.Equal(t, errors.Is(want, storage.ErrShared), errors.Is(got[i], storage.ErrShared), one[i].Path)
				if i < 3 || i > 5 { // not ENOTDIR, the link out of the root or the directory
					require.Equal(t, fb.ObjectExists(t, one[i]), fa.ObjectExists(t, many[i]), one[i].Path)
				}
			}
			require.DirExists(t, fa.local(t, fa.dataPath("inst_a/tp0/subdir")))
			require.Error(t, got[3], "ENOTDIR")
			require.Error(t, got[4], "out of the root")
			require.Error(t, got[5], "a directory")
			require.ErrorIs(t, got[6], storage.ErrShared)
			require.True(t, fa.ObjectExists(t, outA))
			require.True(t, fb.ObjectExists(t, outB))
			for _, i := range []int{0, 7, 8, 9, 10} {
				require.NoError(t, got[i])
				require.False(t, fa.ObjectExists(t, many[i]), many[i].Path)
			}

			for _, o := range []storagetest.Options{{DryRun: true}, {DeleteDisabled: true}} {
				f, uris, _ := build(o)
				errs := f.Backend().(storage.BatchDeleter).DeleteMany(ctx, uris)
				for i, err := range errs {
					require.Error(t, err, uris[i].Path)
					require.True(t, errors.Is(err, storage.ErrDryRun) || errors.Is(err, storage.ErrDeleteDisabled), "%s: %v", uris[i].Path, err)
				}
				for _, n := range names {
					require.True(t, f.ObjectExists(t, f.URIFor(n)), n)
				}
			}
		})
	}
}
