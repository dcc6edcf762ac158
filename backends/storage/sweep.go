package storage

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The sweep (orphan data files, DESIGN §7) sees a file-system storage through SweepFS: it
// walks the storage's files, moves a file into a quarantine directory and back, and unlinks
// what stayed in quarantine. Every path is relative to the directory that holds the storage's
// root prefix (the os.Root of every call), exactly as the probes and unlinks of fsBackend.
//
// The quarantine of storage S is <that directory>/.kvcm-gc-quarantine/<base64url(S)>/, on the
// same file system as the data (a rename there is atomic and never copies). A file at
// <rel> goes to <quarantine>/<rel>~<µs since the epoch>. KVCM's own names end in lower-case
// hex (or hex_hex): a name ending in "~<digits>" is none of them, so KVCM can never write over
// a quarantined file, nor a quarantined file be taken for data, even if an instance id began
// with the quarantine's name. The walk of the data never enters the quarantine.

// QuarantineDir is the name of the quarantine directory beside a swept storage's files.
const QuarantineDir = ".kvcm-gc-quarantine"

// conflictSuffix ends the name of a quarantined file that could not be moved back because
// its data path was taken meanwhile: both are kept, and nothing removes it (an operator does).
const conflictSuffix = ".conflict"

var (
	// ErrNotSweepable: the storage is not registered, is not a file-system storage, cannot
	// be confined safely, or has physical deletes switched off.
	ErrNotSweepable = errors.New("storage cannot be swept")
	// ErrRestoreConflict: a quarantined file could not be moved back because its data path
	// holds another file now; it stays in quarantine under a conflict name.
	ErrRestoreConflict = errors.New("data path taken: quarantined file kept beside it")
	// ErrNotQuarantined: the name is not one Quarantine gives.
	ErrNotQuarantined = errors.New("not a quarantined file name")
)

// SweepFS is a file-system storage as the sweep sees it. It is immutable.
type SweepFS struct {
	b *fsBackend
	// base is the part of the root prefix after the last '/' of its local form: "" when
	// root_path ends in '/', "kv_" for KVCM's "…/store/kv_", which every object name of the
	// storage extends.
	base string
	// qdir is the storage's quarantine, relative to the local directory.
	qdir string
}

// SweepFS returns the sweep view of the registered storage name.
func (s *StaticSet) SweepFS(name string) (*SweepFS, error) {
	be, ok := s.backends[name]
	if !ok {
		return nil, fmt.Errorf("sweep storage %q: not registered: %w", name, ErrNotSweepable)
	}
	b, ok := be.(*fsBackend)
	switch {
	case !ok:
		return nil, fmt.Errorf("sweep storage %q: %s storage has no files: %w", name, be.Type(), ErrNotSweepable)
	case b.bad != nil:
		return nil, fmt.Errorf("sweep storage %q: %v: %w", name, b.bad, ErrNotSweepable)
	case !b.deleteOn:
		return nil, fmt.Errorf("sweep storage %q: physical deletes are off: %w", name, ErrNotSweepable)
	case name == "":
		return nil, fmt.Errorf("sweep storage: empty name: %w", ErrNotSweepable)
	}
	return &SweepFS{
		b:    b,
		base: b.localPrefix[len(strings.TrimSuffix(b.localDir, "/"))+1:],
		qdir: QuarantineDir + "/" + base64.RawURLEncoding.EncodeToString([]byte(name)),
	}, nil
}

// LocalPath maps a data path of the registered file-system storage host (a spec URI's host
// and path) to its local path, with the storage's path map and confinement, and cleaned (KVCM
// accepts "a//b" where "a/b" is meant). An error means the path is no file of that storage
// kvcm-gc can name.
func (s *StaticSet) LocalPath(host, rawPath string) (string, error) {
	be, ok := s.backends[host]
	if !ok {
		return "", fmt.Errorf("local path of %s: storage %q: %w", rawPath, host, ErrForeignURI)
	}
	b, ok := be.(*fsBackend)
	if !ok {
		return "", fmt.Errorf("local path of %s: %s storage %q has no files: %w", rawPath, be.Type(), host, ErrUnsupported)
	}
	rel, err := b.resolvePath(rawPath)
	if err != nil {
		return "", err
	}
	return path.Join(b.localDir, rel), nil
}

// Name is the storage's global unique name.
func (f *SweepFS) Name() string { return f.b.name }

// LocalDir is the directory every relative path is relative to.
func (f *SweepFS) LocalDir() string { return f.b.localDir }

// QuarantinePath is the local path of the storage's quarantine directory.
func (f *SweepFS) QuarantinePath() string { return path.Join(f.b.localDir, f.qdir) }

// DataPath is the path KVCM's URIs name for an object: the root prefix and the name, by plain
// string concatenation as KVCM builds it.
func (f *SweepFS) DataPath(object string) string { return f.b.rootPrefix + object }

// Resolve maps a raw data path (a URI's path, of this storage or of another storage that may
// share its files) through the path map to a path relative to LocalDir, with fsBackend's
// confinement; an error means the path is not a file of this storage.
func (f *SweepFS) Resolve(rawPath string) (string, error) {
	return f.b.resolvePath(rawPath)
}

// Object returns the KVCM object name of a walked path, "" when the path is not below the
// root prefix.
func (f *SweepFS) Object(rel string) string {
	if !strings.HasPrefix(rel, f.base) || len(rel) == len(f.base) {
		return ""
	}
	return rel[len(f.base):]
}

// FileStat is what the sweep reads of a file.
type FileStat struct {
	Mode    os.FileMode
	Size    int64
	ModTime time.Time
	Ino     uint64
	Nlink   uint64
}

// Regular reports a regular file.
func (s FileStat) Regular() bool { return s.Mode.IsRegular() }

func statOf(fi os.FileInfo) FileStat {
	st := FileStat{Mode: fi.Mode(), Size: fi.Size(), ModTime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.Ino, st.Nlink = sys.Ino, uint64(sys.Nlink)
	}
	return st
}

// SweepRoot is the storage's local directory opened for one walk or one batch of sweeps.
// Close it when done. It is safe for concurrent use.
type SweepRoot struct {
	fs     *SweepFS
	root   *os.Root
	dryRun bool
}

// Open opens the storage's local directory. A missing directory (an absent mount) fails.
func (f *SweepFS) Open() (*SweepRoot, error) {
	root, err := os.OpenRoot(f.b.localDir)
	if err != nil {
		return nil, fmt.Errorf("open storage root of %s: %w", f.b.name, err)
	}
	return &SweepRoot{fs: f, root: root, dryRun: f.b.dryRun}, nil
}

// Close closes the root.
func (r *SweepRoot) Close() error { return r.root.Close() }

// Stat lstats rel.
func (r *SweepRoot) Stat(rel string) (FileStat, error) {
	fi, err := r.root.Lstat(rel)
	if err != nil {
		return FileStat{}, err
	}
	return statOf(fi), nil
}

// quarantined is the path, relative to LocalDir, of the quarantine entry qrel.
func (r *SweepRoot) quarantined(qrel string) string { return r.fs.qdir + "/" + qrel }

// Quarantine moves the file at rel into the quarantine with one rename, and returns its name
// there (relative to the quarantine). The caller has checked it is the file it judged; the
// rename moves whatever is at rel at that instant, so the caller checks the entry again.
func (r *SweepRoot) Quarantine(rel string, at time.Time) (string, error) {
	if r.dryRun {
		return "", fmt.Errorf("quarantine %s: %w", rel, ErrDryRun)
	}
	if err := checkRel(rel); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", rel, err)
	}
	qrel := rel + "~" + strconv.FormatInt(at.UnixMicro(), 10)
	q := r.quarantined(qrel)
	if err := r.root.MkdirAll(path.Dir(q), 0o755); err != nil {
		return "", fmt.Errorf("quarantine %s: create quarantine directory: %w", rel, err)
	}
	// Names are unique to the microsecond; never rename over an entry.
	if _, err := r.root.Lstat(q); err == nil {
		return "", fmt.Errorf("quarantine %s: %s exists", rel, qrel)
	} else if !errors.Is(err, syscall.ENOENT) {
		return "", fmt.Errorf("quarantine %s: %w", rel, err)
	}
	if err := r.root.Rename(rel, q); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", rel, err)
	}
	return qrel, nil
}

// QuarantinedStat lstats a quarantine entry.
func (r *SweepRoot) QuarantinedStat(qrel string) (FileStat, error) {
	if _, _, err := ParseQuarantined(qrel); err != nil {
		return FileStat{}, err
	}
	return r.Stat(r.quarantined(qrel))
}

// FindQuarantined looks for the quarantine entry of the file that was at rel with inode ino
// (a sweep interrupted after its rename). found is false when there is none.
func (r *SweepRoot) FindQuarantined(rel string, ino uint64) (qrel string, at time.Time, found bool, err error) {
	if err := checkRel(rel); err != nil {
		return "", time.Time{}, false, fmt.Errorf("find quarantined %s: %w", rel, err)
	}
	dir, base := path.Split(rel)
	d, err := r.root.Open(r.quarantined(dir) + ".")
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
		return "", time.Time{}, false, nil
	}
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("find quarantined %s: %w", rel, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("find quarantined %s: list: %w", rel, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if !strings.HasPrefix(n, base+"~") {
			continue
		}
		q := dir + n
		orig, t, err := ParseQuarantined(q)
		if err != nil || orig != rel {
			continue
		}
		st, err := r.Stat(r.quarantined(q))
		if err != nil {
			continue
		}
		if st.Ino == ino {
			return q, t, true, nil
		}
	}
	return "", time.Time{}, false, nil
}

// Restore moves a quarantined file back to rel, only if rel is free: a hard link, which fails
// rather than replace a file at rel, then the quarantine name is removed (a file KVCM wrote at
// rel meanwhile is never overwritten). When rel holds another file the entry is renamed to a
// conflict name and kept, and the error wraps ErrRestoreConflict. When rel is already the same
// file (a restore interrupted between its two steps), only the quarantine name goes.
func (r *SweepRoot) Restore(qrel, rel string) error {
	if r.dryRun {
		return fmt.Errorf("restore %s: %w", rel, ErrDryRun)
	}
	orig, _, err := ParseQuarantined(qrel)
	if err != nil {
		return fmt.Errorf("restore %s: %w", rel, err)
	}
	if orig != rel {
		return fmt.Errorf("restore %s: quarantine entry %s is of %s", rel, qrel, orig)
	}
	q := r.quarantined(qrel)
	if dir := path.Dir(rel); dir != "." {
		if err := r.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("restore %s: create directory: %w", rel, err)
		}
	}
	err = r.root.Link(q, rel)
	switch {
	case err == nil:
	case errors.Is(err, syscall.EEXIST):
		qs, qerr := r.Stat(q)
		cs, cerr := r.Stat(rel)
		if qerr == nil && cerr == nil && qs.Ino == cs.Ino && qs.Ino != 0 {
			break // restored already; the second step was not done
		}
		if rerr := r.root.Rename(q, q+conflictSuffix); rerr != nil {
			return fmt.Errorf("restore %s: %w; keep it as a conflict: %w", rel, ErrRestoreConflict, rerr)
		}
		return fmt.Errorf("restore %s: %w (%s%s)", rel, ErrRestoreConflict, qrel, conflictSuffix)
	default:
		return fmt.Errorf("restore %s: %w", rel, err)
	}
	if err := r.root.Remove(q); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("restore %s: remove quarantine name: %w", rel, err)
	}
	return nil
}

// Unlink removes a quarantine entry and returns the bytes it freed: its size, or 0 when the
// file has other names still (an interrupted restore left it at its data path too).
func (r *SweepRoot) Unlink(qrel string) (int64, error) {
	if r.dryRun {
		return 0, fmt.Errorf("unlink %s: %w", qrel, ErrDryRun)
	}
	if _, _, err := ParseQuarantined(qrel); err != nil {
		return 0, fmt.Errorf("unlink %s: %w", qrel, err)
	}
	q := r.quarantined(qrel)
	st, err := r.Stat(q)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("unlink %s: %w", qrel, err)
	case !st.Regular():
		return 0, fmt.Errorf("unlink %s: not a regular file", qrel)
	}
	if err := r.root.Remove(q); err != nil && !errors.Is(err, syscall.ENOENT) {
		return 0, fmt.Errorf("unlink %s: %w", qrel, err)
	}
	if st.Nlink > 1 {
		return 0, nil
	}
	return st.Size, nil
}

// ParseQuarantined parses a quarantine entry name, "<rel>~<µs>", into the path the file had
// and the time it went in. A conflict name, or anything else, wraps ErrNotQuarantined.
func ParseQuarantined(qrel string) (rel string, at time.Time, err error) {
	i := strings.LastIndexByte(qrel, '~')
	if i <= 0 {
		return "", time.Time{}, fmt.Errorf("%q: %w", qrel, ErrNotQuarantined)
	}
	digits := qrel[i+1:]
	if digits == "" || len(digits) > 19 || digits[0] == '0' ||
		strings.IndexFunc(digits, func(c rune) bool { return c < '0' || c > '9' }) >= 0 {
		return "", time.Time{}, fmt.Errorf("%q: %w", qrel, ErrNotQuarantined)
	}
	us, perr := strconv.ParseInt(digits, 10, 64)
	if perr != nil {
		return "", time.Time{}, fmt.Errorf("%q: %w", qrel, ErrNotQuarantined)
	}
	rel = qrel[:i]
	if checkRel(rel) != nil || strings.HasSuffix(rel, "/") {
		return "", time.Time{}, fmt.Errorf("%q: %w", qrel, ErrNotQuarantined)
	}
	return rel, time.UnixMicro(us), nil
}

// checkRel accepts a clean relative path: no leading '/', no empty, "." or ".." component,
// no NUL, not inside the quarantine.
func checkRel(rel string) error {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.IndexByte(rel, 0) >= 0 {
		return fmt.Errorf("path %q: %w", rel, ErrUnsafePath)
	}
	for c := range strings.SplitSeq(rel, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("path %q: %w", rel, ErrUnsafePath)
		}
	}
	if rel == QuarantineDir || strings.HasPrefix(rel, QuarantineDir+"/") {
		return fmt.Errorf("path %q: inside the quarantine: %w", rel, ErrUnsafePath)
	}
	return nil
}

// maxWalkDepth bounds the directory levels a walk descends (KVCM's names have two, plus one
// per '/' in an instance id or spec name).
const maxWalkDepth = 16

// WalkEntry is one entry a walk visits: a file (or a symbolic link, a device …) with its
// stat, or a directory that could not be read (Err).
type WalkEntry struct {
	// Rel is the path relative to LocalDir.
	Rel  string
	Stat FileStat
	// Err is set for a directory that could not be opened or listed, or is too deep; the walk
	// goes on without it.
	Err error
}

// Walk walks the data files of the storage in a fixed order — depth first, the names of
// each directory sorted bytewise — starting after the path after ("" from the start), so a
// walk interrupted after a path resumes where it was. Only the entries of the local directory
// whose names extend the root prefix are visited, and never the quarantine. Symbolic links
// are reported, never followed; os.Root confines every step.
func (r *SweepRoot) Walk(after string) *TreeWalk {
	w := &TreeWalk{top: r.root, base: r.fs.base}
	if after != "" {
		w.after = strings.Split(after, "/")
	}
	return w
}

// WalkQuarantine walks the storage's quarantine like Walk; entries' Rel are relative to the
// quarantine (what ParseQuarantined reads).
func (r *SweepRoot) WalkQuarantine(after string) (*TreeWalk, error) {
	q, err := r.root.OpenRoot(r.fs.qdir + "/.")
	if errors.Is(err, syscall.ENOENT) {
		return &TreeWalk{done: true}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open quarantine of %s: %w", r.fs.b.name, err)
	}
	w := &TreeWalk{top: q, ownTop: true, quarantine: true}
	if after != "" {
		w.after = strings.Split(after, "/")
	}
	return w, nil
}

// TreeWalk is a walk in progress. It is not safe for concurrent use; Close it when done.
type TreeWalk struct {
	top        *os.Root
	ownTop     bool
	base       string
	quarantine bool
	after      []string // components of the path to resume after; nil: from the start
	stack      []walkFrame
	started    bool
	done       bool
}

type walkFrame struct {
	root  *os.Root
	rel   string // of the directory, "" for the top, else ending in '/'
	names []string
	i     int
	// bound: the frame is on the path to resume after; its names before after[depth] are done.
	bound bool
}

// Next returns the next entry; ok is false at the end of the walk.
func (w *TreeWalk) Next() (e WalkEntry, ok bool) {
	if w.done {
		return WalkEntry{}, false
	}
	if !w.started {
		w.started = true
		if fe, err := w.push(w.top, "", false, true); err != nil {
			w.done = true
			return fe, true
		}
	}
	for len(w.stack) > 0 {
		depth := len(w.stack) - 1
		f := &w.stack[depth]
		if f.i >= len(f.names) {
			w.pop()
			continue
		}
		name := f.names[f.i]
		f.i++
		rel := f.rel + name
		onPath := f.bound && depth < len(w.after) && name == w.after[depth]
		fi, err := f.root.Lstat(name)
		if err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue // gone since the listing
			}
			return WalkEntry{Rel: rel, Err: err}, true
		}
		st := statOf(fi)
		if st.Mode.IsDir() {
			if depth+1 >= maxWalkDepth {
				return WalkEntry{Rel: rel, Err: fmt.Errorf("more than %d directory levels", maxWalkDepth)}, true
			}
			sub, err := f.root.OpenRoot(name + "/.")
			if err != nil {
				if errors.Is(err, syscall.ENOENT) {
					continue
				}
				return WalkEntry{Rel: rel, Err: err}, true
			}
			if fe, err := w.push(sub, rel+"/", onPath, false); err != nil {
				return fe, true
			}
			continue
		}
		if onPath && depth == len(w.after)-1 {
			continue // the entry resumed after
		}
		return WalkEntry{Rel: rel, Stat: st}, true
	}
	w.done = true
	return WalkEntry{}, false
}

// push lists a directory and puts it on the stack. Names at the top of a data walk must
// extend the root prefix, and the quarantine is never entered. On the path to resume after,
// names before it are dropped.
func (w *TreeWalk) push(root *os.Root, rel string, onPath, top bool) (WalkEntry, error) {
	d, err := root.Open(".")
	var names []string
	if err == nil {
		names, err = d.Readdirnames(-1)
		_ = d.Close()
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	if err != nil {
		if root != w.top {
			_ = root.Close()
		}
		return WalkEntry{Rel: strings.TrimSuffix(rel, "/"), Err: err}, err
	}
	if top && !w.quarantine {
		names = slices.DeleteFunc(names, func(n string) bool {
			return n == QuarantineDir || !strings.HasPrefix(n, w.base)
		})
	}
	slices.Sort(names)
	depth := len(w.stack)
	bound := (top && w.after != nil) || onPath
	if bound && depth < len(w.after) {
		i, _ := slices.BinarySearch(names, w.after[depth])
		names = names[i:]
	}
	w.stack = append(w.stack, walkFrame{root: root, rel: rel, names: names, bound: bound})
	return WalkEntry{}, nil
}

func (w *TreeWalk) pop() {
	f := w.stack[len(w.stack)-1]
	w.stack = w.stack[:len(w.stack)-1]
	if f.root != w.top {
		_ = f.root.Close()
	}
}

// Close releases the walk's directories.
func (w *TreeWalk) Close() {
	for len(w.stack) > 0 {
		w.pop()
	}
	if w.ownTop && w.top != nil {
		_ = w.top.Close()
	}
	w.done = true
}

// IsConflict reports whether a quarantine entry is a conflict copy (kept for an operator).
func IsConflict(qrel string) bool { return strings.HasSuffix(qrel, conflictSuffix) }
