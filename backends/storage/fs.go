package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// fsBackend serves the storages whose URI path is the full path of a data file: file (NFS)
// and hf3fs/vcns_hf3fs. It is immutable and safe for concurrent use.
//
// Confinement, in three layers, because a wrong unlink cannot be undone:
//  1. the raw URI path (before any remapping) must be a clean absolute path that starts with
//     the storage's root prefix and is longer than it;
//  2. its local form (after the path map) must start with the local form of the root prefix;
//  3. every probe and unlink goes through an os.Root opened at the directory that holds the
//     root prefix, so a symbolic link below it cannot lead out of it.
//
// For file storages the root prefix is KVCM's root_path as configured. KVCM builds data paths
// as root_path + object name, by string concatenation, and root_path may lack a trailing '/'
// (KVCM's own tests use "/tmp/test_storage_01", giving "/tmp/test_storage_01test_instance_01/
// tp0/…"); a plain string-prefix check is therefore exactly what KVCM's layout implies, and
// the os.Root is opened at the directory containing the prefix ("/tmp" there). For hf3fs the
// root prefix is mountpoint/root_dir/ (KVCM joins them with path separators).
type fsBackend struct {
	name     string
	typ      kvcm.StorageType
	keyCount uint64
	probe    string
	deleteOn bool
	dryRun   bool
	pathMap  []PathMap

	rootPrefix  string // every raw URI path must start with it
	localPrefix string // rootPrefix after the path map
	localDir    string // the directory holding localPrefix; os.Root confinement
	// bad is non-nil when the storage's registry entry or its path map cannot be confined
	// safely: every probe then answers Unknown and every delete is refused.
	bad error
}

func newFSBackend(cfg kvcm.StorageConfig, name string, o Override, opts Options, probe string) *fsBackend {
	b := &fsBackend{
		name:     name,
		typ:      cfg.Type,
		keyCount: max(cfg.KeyCountPerFile, 1), // KVCM treats key_count_per_file <= 0 as 1
		probe:    probe,
		deleteOn: o.Delete == nil || *o.Delete,
		dryRun:   opts.DryRun,
		pathMap:  slices.Clone(o.PathMap), // the caller keeps its slice
	}
	b.rootPrefix, b.bad = rootPrefix(cfg)
	if b.bad != nil {
		return b
	}
	// With validated path maps this cannot fail; it is checked because os.Root is opened there.
	b.localPrefix = applyPathMap(b.pathMap, b.rootPrefix)
	slash := strings.LastIndexByte(b.localPrefix, '/')
	if err := checkPath(b.localPrefix[:slash+1]); err != nil {
		b.bad = fmt.Errorf("root %q maps to %q: %w", b.rootPrefix, b.localPrefix, err)
		return b
	}
	b.localDir = b.localPrefix[:slash]
	if b.localDir == "" {
		b.localDir = "/"
	}
	return b
}

// rootPrefix returns the raw path prefix of every data path of the storage.
func rootPrefix(cfg kvcm.StorageConfig) (string, error) {
	if cfg.Type == kvcm.TypeFile {
		if cfg.RootPath == "" {
			return "", errors.New("root_path is empty")
		}
		// Only the directory part must be clean: the rest is a name prefix ("…/kv_" is valid).
		dir := cfg.RootPath[:strings.LastIndexByte(cfg.RootPath, '/')+1]
		if err := checkPath(dir); err != nil {
			return "", fmt.Errorf("root_path %q: %w", cfg.RootPath, err)
		}
		if strings.IndexByte(cfg.RootPath, 0) >= 0 {
			return "", fmt.Errorf("root_path %q: contains a NUL byte", cfg.RootPath)
		}
		return cfg.RootPath, nil
	}
	if err := checkPath(cfg.Mountpoint); err != nil {
		return "", fmt.Errorf("mountpoint %q: %w", cfg.Mountpoint, err)
	}
	if cfg.RootDir == "" {
		return strings.TrimSuffix(path.Clean(cfg.Mountpoint), "/") + "/", nil
	}
	// KVCM joins with std::filesystem::path, where an absolute root_dir replaces the
	// mountpoint; a lexical join would name another directory, so such a storage is refused.
	if strings.HasPrefix(cfg.RootDir, "/") {
		return "", fmt.Errorf("root_dir %q: absolute (KVCM would ignore the mountpoint)", cfg.RootDir)
	}
	if err := checkPath("/" + cfg.RootDir); err != nil {
		return "", fmt.Errorf("root_dir %q: %w", cfg.RootDir, err)
	}
	return strings.TrimSuffix(path.Join(cfg.Mountpoint, cfg.RootDir), "/") + "/", nil
}

func (b *fsBackend) Name() string            { return b.name }
func (b *fsBackend) Type() kvcm.StorageType  { return b.typ }
func (b *fsBackend) KeyCountPerFile() uint64 { return b.keyCount }

// resolve returns the path of uri's object relative to b.localDir, or an error wrapping
// ErrForeignURI or ErrUnsafePath. The scheme is not checked: KVCM routes by host alone.
func (b *fsBackend) resolve(uri kvcm.DataURI) (string, error) {
	if uri.Host != b.name {
		return "", fmt.Errorf("host %q: %w", uri.Host, ErrForeignURI)
	}
	return b.resolvePath(uri.Path)
}

// resolvePath is resolve for the raw path of a URI of this storage.
func (b *fsBackend) resolvePath(p string) (string, error) {
	if b.bad != nil {
		return "", fmt.Errorf("storage %q unusable: %v: %w", b.name, b.bad, ErrUnsafePath)
	}
	if err := checkPath(p); err != nil {
		return "", fmt.Errorf("path %q: %v: %w", p, err, ErrUnsafePath)
	}
	// On the raw path, before remapping: the path map must never widen what may be touched.
	if len(p) <= len(b.rootPrefix) || !strings.HasPrefix(p, b.rootPrefix) {
		return "", fmt.Errorf("path %q: not under root %q: %w", p, b.rootPrefix, ErrUnsafePath)
	}
	local := applyPathMap(b.pathMap, p)
	if err := checkPath(local); err != nil {
		return "", fmt.Errorf("path %q maps to %q: %v: %w", p, local, err, ErrUnsafePath)
	}
	if len(local) <= len(b.localPrefix) || !strings.HasPrefix(local, b.localPrefix) {
		return "", fmt.Errorf("path %q maps to %q, outside the root's local path %q: %w",
			p, local, b.localPrefix, ErrUnsafePath)
	}
	rel := strings.TrimLeft(local[len(b.localDir):], "/")
	if rel == "" {
		return "", fmt.Errorf("path %q: names the root itself: %w", p, ErrUnsafePath)
	}
	return rel, nil
}

// MightExist answers Unknown for a URI of another storage or with an unsafe path, Present for
// every other URI in ProbeNone mode, and in ProbeStat mode the lstat result (see probeResult).
// The storage root not opening (an absent mount, say) fails the whole call: answering Missing
// for every object of an unmounted storage would turn an outage into mass deletion.
func (b *fsBackend) MightExist(ctx context.Context, uris []kvcm.DataURI) ([]Result, error) {
	if len(uris) > MaxProbeChunk {
		return nil, fmt.Errorf("probe %d uris on %s: %w", len(uris), b.name, ErrTooMany)
	}
	out := make([]Result, len(uris))
	// The paths of a chunk share a few directories (KVCM writes <instance>/<spec>/<file>), so
	// each file is looked up through a root opened once per chunk at its directory (dirRoots).
	var roots dirRoots
	defer roots.close()
	for i, u := range uris {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("probe %s: %w", b.name, err)
		}
		rel, err := b.resolve(u)
		if err != nil {
			out[i] = Unknown
			continue
		}
		if b.probe != ProbeStat {
			out[i] = Present
			continue
		}
		if roots.root == nil {
			if err := roots.open(b.localDir); err != nil {
				return nil, fmt.Errorf("probe %s: open storage root: %w", b.name, err)
			}
			// An empty root is what an unmounted file system looks like: every object would read
			// as missing and every SERVING location would become a candidate. Refuse to judge.
			if err := checkNotEmpty(roots.root); err != nil {
				return nil, fmt.Errorf("probe %s: %w", b.name, err)
			}
		}
		out[i] = probeResult(roots.lstat(rel))
	}
	return out, nil
}

// maxDirRoots bounds the directories one call keeps open (file descriptors): KVCM's layout
// puts a chunk's or a request's files in a few directories; files of further ones are looked
// up from the storage root.
const maxDirRoots = 64

// dirRoots is a storage root and the roots of its directories opened through it, kept for one
// call. Through a root at a file's directory, an lstat or an unlink is one system call; from
// the storage root, os.Root opens and closes every directory on the path on top (five system
// calls for KVCM's two levels). The directory roots are opened through the storage root, so the
// confinement is the same.
type dirRoots struct {
	root *os.Root
	dirs map[string]dirRoot
}

// dirRoot is a directory of the storage opened as a root, or why it could not be.
type dirRoot struct {
	root *os.Root
	err  error
}

func (r *dirRoots) open(localDir string) error {
	root, err := os.OpenRoot(localDir)
	if err != nil {
		return err
	}
	r.root, r.dirs = root, map[string]dirRoot{}
	return nil
}

func (r *dirRoots) close() {
	for _, d := range r.dirs {
		if d.root != nil {
			_ = d.root.Close()
		}
	}
	if r.root != nil {
		_ = r.root.Close()
	}
}

// dir returns the root of directory dir ("a/b/"), opened on first use; false when too many are
// open already.
func (r *dirRoots) dir(dir string) (dirRoot, bool) {
	d, ok := r.dirs[dir]
	if !ok {
		if len(r.dirs) >= maxDirRoots {
			return dirRoot{}, false
		}
		// "dir/." and not "dir": the last component is then opened as a directory like every
		// other one (O_DIRECTORY), so a FIFO or a device there is never opened.
		d.root, d.err = r.root.OpenRoot(dir + ".")
		r.dirs[dir] = d
	}
	return d, true
}

// lstat is root.Lstat(rel) through the root at rel's directory. A directory that cannot be
// opened answers for its files as a lookup from the storage root would: ENOENT (no directory,
// so no file) for all of them; any other error (EACCES, ENOTDIR, a symbolic link out of the
// root, ESTALE …) is not cached, and each file is then looked up from the storage root, whose
// error is the answer.
func (r *dirRoots) lstat(rel string) error {
	dir, base := path.Split(rel)
	if dir != "" {
		if d, ok := r.dir(dir); ok {
			switch {
			case d.err == nil:
				_, err := d.root.Lstat(base)
				return err
			case errors.Is(d.err, syscall.ENOENT):
				return d.err
			}
		}
	}
	_, err := r.root.Lstat(rel)
	return err
}

// unlink unlinks rel through the root at its directory: the lstat and the unlink then name the
// same directory. A missing directory means a missing file; a directory that cannot be opened
// for another reason fails the unlink. A directory at the path is refused: KVCM never puts one
// there, so it is not ours to remove.
func (r *dirRoots) unlink(rel, localPath string) error {
	in, base := r.root, rel
	if dir, file := path.Split(rel); dir != "" {
		if d, ok := r.dir(dir); ok {
			switch {
			case d.err == nil:
				in, base = d.root, file
			case errors.Is(d.err, syscall.ENOENT):
				return nil // no directory, no file
			default:
				return fmt.Errorf("lstat %s: %w", localPath, d.err)
			}
		}
	}
	fi, err := in.Lstat(base)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return nil
	case err != nil:
		return fmt.Errorf("lstat %s: %w", localPath, err)
	case fi.IsDir():
		return fmt.Errorf("unlink %s: is a directory, not a data file", localPath)
	}
	if err := in.Remove(base); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unlink %s: %w", localPath, err)
	}
	return nil
}

// errEmptyRoot: the storage root holds nothing, which is how an unmounted share looks.
var errEmptyRoot = errors.New("storage root is empty (not mounted?): every answer would be missing")

func checkNotEmpty(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("open storage root: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if len(names) == 0 {
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("list storage root: %w", err)
		}
		return errEmptyRoot
	}
	return nil
}

// probeResult turns an lstat error into an answer. Only ENOENT proves the object is gone.
// Everything else is Unknown because it says nothing about the object: EACCES (we may not look),
// ENOTDIR (a path component is a file where KVCM's layout has a directory, so the tree is not
// what we think it is, e.g. a wrong path map), ESTALE/EIO (the file server is in trouble), and
// os.Root's refusal of a symbolic link that leaves the root. fs.ErrNotExist is not used on
// purpose: the exact errno is what the rule promises, whatever a platform maps to "not exist".
func probeResult(err error) Result {
	switch {
	case err == nil:
		return Present
	case errors.Is(err, syscall.ENOENT):
		return Missing
	default:
		return Unknown
	}
}

// Delete unlinks the file behind uri. The order of the refusals matters: dry-run comes first,
// before anything else is looked at (DESIGN §8.8), then the configuration switch, then the
// URI's ownership and path safety, then sharing. A shared file (blkid parameter, or
// key_count_per_file > 1) is never unlinked: it holds other blocks whose metadata may still be
// SERVING, and only a full scan could prove none remains (reference §8.10). A directory at the
// data path is refused: KVCM never puts one there, so it is not ours to remove.
//
// Between the lstat and the unlink a directory could appear at the path; os.Root's Remove would
// then remove it only if it is empty, which loses nothing.
func (b *fsBackend) Delete(ctx context.Context, uri kvcm.DataURI) error {
	return b.DeleteMany(ctx, []kvcm.DataURI{uri})[0]
}

// DeleteMany implements BatchDeleter: Delete for each URI, in order, with one storage root and
// one root per directory for the whole call (KVCM puts a request's files in a few
// directories), so a file costs an lstat and an unlink rather than an open and a close of every
// directory on its path as well.
func (b *fsBackend) DeleteMany(ctx context.Context, uris []kvcm.DataURI) []error {
	errs := make([]error, len(uris))
	var roots dirRoots
	defer roots.close()
	for i, uri := range uris {
		if b.dryRun {
			errs[i] = fmt.Errorf("delete %s: %w", uri, ErrDryRun)
			continue
		}
		if !b.deleteOn {
			errs[i] = fmt.Errorf("delete %s: %w", uri, ErrDeleteDisabled)
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("delete %s: %w", uri, err)
			continue
		}
		rel, err := b.resolve(uri)
		if err != nil {
			errs[i] = fmt.Errorf("delete %s: %w", uri, err)
			continue
		}
		if uri.Shared() || b.keyCount > 1 {
			errs[i] = fmt.Errorf("delete %s: %w", uri, ErrShared)
			continue
		}
		if roots.root == nil {
			if err := roots.open(b.localDir); err != nil {
				// Not "already absent": a missing root is a mount or configuration problem.
				errs[i] = fmt.Errorf("delete %s: open storage root: %w", uri, err)
				continue
			}
		}
		errs[i] = roots.unlink(rel, path.Join(b.localDir, rel))
	}
	return errs
}
