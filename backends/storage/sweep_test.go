package storage_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// sweepFS builds a set holding one file storage whose root_path is dir+suffix, and returns its
// sweep view.
func sweepFS(t *testing.T, dir, suffix string, o storage.Options) *storage.SweepFS {
	t.Helper()
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{
		"nfs": {Type: kvcm.TypeFile, Name: "nfs", RootPath: dir + suffix, KeyCountPerFile: 1},
	}, o)
	require.NoError(t, err)
	f, err := set.SweepFS("nfs")
	require.NoError(t, err)
	return f
}

func writeFiles(t *testing.T, dir string, rels ...string) {
	t.Helper()
	for _, r := range rels {
		p := filepath.Join(dir, r)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("data of "+r), 0o644))
	}
}

func walkAll(t *testing.T, w *storage.TreeWalk) (files []string, errs []string) {
	t.Helper()
	defer w.Close()
	for {
		e, ok := w.Next()
		if !ok {
			return files, errs
		}
		if e.Err != nil {
			errs = append(errs, e.Rel)
			continue
		}
		files = append(files, e.Rel)
	}
}

// TestSweepWalk: a walk visits every entry below the root prefix depth first in sorted order,
// never the quarantine nor other entries of the directory, reports links without following
// them, and resumes after any path it visited.
func TestSweepWalk(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir,
		"store/inst0/tp0/1", "store/inst0/tp0/ff", "store/inst0/tp1/a", "store/inst0-x/tp0/1",
		"store/a/b/c/1", "store/a-b", "store/z",
		"store/"+storage.QuarantineDir+"/bmZz/inst0/tp0/2~1767225600000000")
	require.NoError(t, os.Symlink("/etc", filepath.Join(dir, "store", "inst0", "link")))
	writeFiles(t, dir, "outside/inst0/tp0/1")

	f := sweepFS(t, dir, "/store/", storage.Options{})
	r, err := f.Open()
	require.NoError(t, err)
	defer r.Close()
	files, errs := walkAll(t, r.Walk(""))
	require.Empty(t, errs)
	// Component by component: "a" sorts before "a-b", so a/b/c/1 comes first.
	want := []string{"a/b/c/1", "a-b", "inst0/link", "inst0/tp0/1", "inst0/tp0/ff", "inst0/tp1/a", "inst0-x/tp0/1", "z"}
	require.Equal(t, want, files)
	for i := range want {
		rest, _ := walkAll(t, r.Walk(want[i]))
		require.Equal(t, want[i+1:], append([]string{}, rest...), "resumed after %s", want[i])
	}
	// A path that is gone resumes at the next one in order.
	rest, _ := walkAll(t, r.Walk("inst0/tp0/5"))
	require.Equal(t, []string{"inst0/tp0/ff", "inst0/tp1/a", "inst0-x/tp0/1", "z"}, rest)
	rest, _ = walkAll(t, r.Walk("inst0/tp0"))
	require.Equal(t, []string{"inst0/tp0/1", "inst0/tp0/ff", "inst0/tp1/a", "inst0-x/tp0/1", "z"}, rest)

	st, err := r.Stat("inst0/link")
	require.NoError(t, err)
	require.False(t, st.Regular())
	require.Equal(t, "inst0/tp0/1", f.Object("inst0/tp0/1"))
	require.Equal(t, dir+"/store/inst0/tp0/1", f.DataPath("inst0/tp0/1"))
}

// TestSweepWalkGluedRoot: KVCM's root_path without a trailing '/' glues the first name onto
// it; the walk lists only the entries that extend it.
func TestSweepWalkGluedRoot(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "store/kv_inst0/tp0/1", "store/kv_/x/1", "store/other/tp0/1", "store/kv", "store/kv_inst1/tp0/2")
	f := sweepFS(t, dir, "/store/kv_", storage.Options{})
	require.Equal(t, filepath.Join(dir, "store"), f.LocalDir())
	r, err := f.Open()
	require.NoError(t, err)
	defer r.Close()
	files, _ := walkAll(t, r.Walk(""))
	require.Equal(t, []string{"kv_/x/1", "kv_inst0/tp0/1", "kv_inst1/tp0/2"}, files)
	require.Equal(t, "inst0/tp0/1", f.Object("kv_inst0/tp0/1"))
	require.Equal(t, "/x/1", f.Object("kv_/x/1"), "the object name says nothing KVCM could have written")
	require.Equal(t, "", f.Object("kv_"))
	require.Equal(t, dir+"/store/kv_inst0/tp0/1", f.DataPath("inst0/tp0/1"))
	rel, err := f.Resolve(dir + "/store/kv_inst0/tp0/1")
	require.NoError(t, err)
	require.Equal(t, "kv_inst0/tp0/1", rel)
	_, err = f.Resolve(dir + "/store/other/tp0/1")
	require.ErrorIs(t, err, storage.ErrUnsafePath)
}

func TestSweepResolvePathMap(t *testing.T) {
	dir := t.TempDir()
	f := sweepFS(t, "/mnt/nfs", "/kvcm/", storage.Options{Overrides: map[string]storage.Override{
		"nfs": {PathMap: []storage.PathMap{{From: "/mnt/nfs/", To: dir + "/"}}},
	}})
	require.Equal(t, filepath.Join(dir, "kvcm"), f.LocalDir())
	require.Equal(t, "/mnt/nfs/kvcm/inst0/tp0/1", f.DataPath("inst0/tp0/1"))
	rel, err := f.Resolve("/mnt/nfs/kvcm/inst0/tp0/1")
	require.NoError(t, err)
	require.Equal(t, "inst0/tp0/1", rel)
	for _, bad := range []string{"/mnt/nfs/kvcm/../x", "/mnt/nfs/kvcm/", "/other/kvcm/inst0/tp0/1", "relative"} {
		_, err := f.Resolve(bad)
		require.ErrorIs(t, err, storage.ErrUnsafePath, bad)
	}
}

func TestSweepNotSweepable(t *testing.T) {
	off := false
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{
		"mc":    {Type: kvcm.TypeMooncake, Name: "mc"},
		"bad":   {Type: kvcm.TypeFile, Name: "bad", RootPath: "relative/"},
		"nodel": {Type: kvcm.TypeFile, Name: "nodel", RootPath: "/tmp/x/"},
	}, storage.Options{Overrides: map[string]storage.Override{"nodel": {Delete: &off}}})
	require.NoError(t, err)
	for _, name := range []string{"mc", "bad", "nodel", "unregistered"} {
		_, err := set.SweepFS(name)
		require.ErrorIs(t, err, storage.ErrNotSweepable, name)
	}
}

// TestSweepQuarantine: a file goes into the quarantine with one rename, is found there again
// by its inode, comes back only to a free path, and is unlinked from there.
func TestSweepQuarantine(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "store/inst0/tp0/1f", "store/inst0/tp0/2f", "store/inst0/tp0/3f")
	f := sweepFS(t, dir, "/store/", storage.Options{})
	r, err := f.Open()
	require.NoError(t, err)
	defer r.Close()
	local := func(rel string) string { return filepath.Join(dir, "store", rel) }

	st, err := r.Stat("inst0/tp0/1f")
	require.NoError(t, err)
	at := time.UnixMicro(1767225600123456)
	qrel, err := r.Quarantine("inst0/tp0/1f", at)
	require.NoError(t, err)
	require.Equal(t, "inst0/tp0/1f~1767225600123456", qrel)
	require.NoFileExists(t, local("inst0/tp0/1f"))
	require.FileExists(t, filepath.Join(f.QuarantinePath(), qrel))
	require.True(t, strings.HasPrefix(f.QuarantinePath(), filepath.Join(dir, "store", storage.QuarantineDir)+"/"))
	rel, when, err := storage.ParseQuarantined(qrel)
	require.NoError(t, err)
	require.Equal(t, "inst0/tp0/1f", rel)
	require.True(t, at.Equal(when))

	// The walk of the data never sees it; the walk of the quarantine does.
	files, _ := walkAll(t, r.Walk(""))
	require.Equal(t, []string{"inst0/tp0/2f", "inst0/tp0/3f"}, files)
	qw, err := r.WalkQuarantine("")
	require.NoError(t, err)
	qfiles, _ := walkAll(t, qw)
	require.Equal(t, []string{qrel}, qfiles)

	got, gotAt, found, err := r.FindQuarantined("inst0/tp0/1f", st.Ino)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, qrel, got)
	require.True(t, at.Equal(gotAt))
	_, _, found, err = r.FindQuarantined("inst0/tp0/1f", st.Ino+1)
	require.NoError(t, err)
	require.False(t, found)
	_, _, found, err = r.FindQuarantined("inst9/tp0/1f", st.Ino)
	require.NoError(t, err)
	require.False(t, found)

	// Restore to a free path.
	require.NoError(t, r.Restore(qrel, "inst0/tp0/1f"))
	data, err := os.ReadFile(local("inst0/tp0/1f"))
	require.NoError(t, err)
	require.Equal(t, "data of store/inst0/tp0/1f", string(data))
	require.NoFileExists(t, filepath.Join(f.QuarantinePath(), qrel))

	// A restore interrupted after its link: both names; the second restore drops the extra.
	qrel, err = r.Quarantine("inst0/tp0/1f", at.Add(time.Second))
	require.NoError(t, err)
	require.NoError(t, os.Link(filepath.Join(f.QuarantinePath(), qrel), local("inst0/tp0/1f")))
	require.NoError(t, r.Restore(qrel, "inst0/tp0/1f"))
	require.NoFileExists(t, filepath.Join(f.QuarantinePath(), qrel))
	require.FileExists(t, local("inst0/tp0/1f"))

	// Restore to a taken path: both kept, the quarantined one under a conflict name.
	qrel, err = r.Quarantine("inst0/tp0/2f", at)
	require.NoError(t, err)
	writeFiles(t, dir, "store/inst0/tp0/2f")
	require.NoError(t, os.WriteFile(local("inst0/tp0/2f"), []byte("new"), 0o644))
	err = r.Restore(qrel, "inst0/tp0/2f")
	require.ErrorIs(t, err, storage.ErrRestoreConflict)
	data, err = os.ReadFile(local("inst0/tp0/2f"))
	require.NoError(t, err)
	require.Equal(t, "new", string(data), "the file written meanwhile is never replaced")
	conflict := filepath.Join(f.QuarantinePath(), qrel) + ".conflict"
	data, err = os.ReadFile(conflict)
	require.NoError(t, err)
	require.Equal(t, "data of store/inst0/tp0/2f", string(data))
	qw, err = r.WalkQuarantine("")
	require.NoError(t, err)
	qfiles, _ = walkAll(t, qw)
	require.Equal(t, []string{qrel + ".conflict"}, qfiles)
	require.True(t, storage.IsConflict(qfiles[0]))
	_, _, err = storage.ParseQuarantined(qfiles[0])
	require.ErrorIs(t, err, storage.ErrNotQuarantined)
	_, err = r.Unlink(qfiles[0])
	require.ErrorIs(t, err, storage.ErrNotQuarantined, "a conflict copy is never unlinked")
	require.FileExists(t, conflict)

	// Unlink frees the file's bytes; a file with another name frees none.
	qrel, err = r.Quarantine("inst0/tp0/3f", at)
	require.NoError(t, err)
	n, err := r.Unlink(qrel)
	require.NoError(t, err)
	require.Equal(t, int64(len("data of store/inst0/tp0/3f")), n)
	require.NoFileExists(t, filepath.Join(f.QuarantinePath(), qrel))
	n, err = r.Unlink(qrel)
	require.NoError(t, err, "already gone")
	require.Zero(t, n)
	qrel, err = r.Quarantine("inst0/tp0/1f", at.Add(2*time.Second))
	require.NoError(t, err)
	require.NoError(t, os.Link(filepath.Join(f.QuarantinePath(), qrel), local("inst0/tp0/1f")))
	n, err = r.Unlink(qrel)
	require.NoError(t, err)
	require.Zero(t, n)
	require.FileExists(t, local("inst0/tp0/1f"))

	// Names outside what the sweep may touch are refused.
	for _, bad := range []string{"", "/abs", "../x", "a//b", storage.QuarantineDir + "/x"} {
		_, err := r.Quarantine(bad, at)
		require.ErrorIs(t, err, storage.ErrUnsafePath, bad)
	}
	_, err = r.Quarantine("inst0/tp0/missing", at)
	require.ErrorIs(t, err, syscall.ENOENT)
}

func TestSweepDryRun(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "store/inst0/tp0/1f")
	f := sweepFS(t, dir, "/store/", storage.Options{DryRun: true})
	r, err := f.Open()
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Quarantine("inst0/tp0/1f", time.Now())
	require.ErrorIs(t, err, storage.ErrDryRun)
	require.ErrorIs(t, r.Restore("inst0/tp0/1f~1", "inst0/tp0/1f"), storage.ErrDryRun)
	_, err = r.Unlink("inst0/tp0/1f~1")
	require.ErrorIs(t, err, storage.ErrDryRun)
	require.FileExists(t, filepath.Join(dir, "store/inst0/tp0/1f"))
	_, err = os.Stat(filepath.Join(dir, "store", storage.QuarantineDir))
	require.ErrorIs(t, err, os.ErrNotExist, "dry-run creates nothing")
}

func TestParseQuarantined(t *testing.T) {
	for in, want := range map[string]string{
		"inst0/tp0/1f~1767225600123456": "inst0/tp0/1f",
		"a/b~c/d~1":                     "a/b~c/d",
		"x~9223372036854775807":         "x",
	} {
		rel, _, err := storage.ParseQuarantined(in)
		require.NoError(t, err, in)
		require.Equal(t, want, rel)
	}
	for _, bad := range []string{"", "x", "x~", "~1", "x~01", "x~-1", "x~1a", "x~1.conflict", "x~99999999999999999999",
		"/x~1", "a//b~1", "../a~1", "a/~1", storage.QuarantineDir + "/a~1"} {
		_, _, err := storage.ParseQuarantined(bad)
		require.ErrorIs(t, err, storage.ErrNotQuarantined, bad)
	}
}

func FuzzParseQuarantined(f *testing.F) {
	for _, s := range []string{"inst0/tp0/1f~1767225600123456", "x~1", "a/b~c/d~1", "x~01", "x~1.conflict"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rel, at, err := storage.ParseQuarantined(s)
		if err != nil {
			return
		}
		if back := rel + "~" + strconvFormat(at.UnixMicro()); back != s {
			t.Fatalf("%q parses to %q at %d, which names %q", s, rel, at.UnixMicro(), back)
		}
	})
}

func strconvFormat(v int64) string { return strconv.FormatInt(v, 10) }
