package sweep

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// View is what the sweep takes from one registry snapshot: the collected instances and
// their specs, the instances it must not judge, and the storage table (with the local
// overrides) to map the spec URIs of a block to local files. It is immutable.
type View struct {
	reg       *meta.Registry
	set       *storage.StaticSet
	instances map[string]meta.Instance
	specs     map[string]map[string]bool
	// skipped: instance ids nothing may be judged of, with the reason (a group not
	// collected, an instance record that does not decode, an id in two groups).
	skipped map[string]string
	// unreg are the instances the registry no longer lists whose files the sweep judges
	// (Config.CollectUnregistered), unregRefused why each other one the scanners counted is
	// not (withUnregistered).
	unreg        map[string]pipeline.UnregisteredInstance
	unregRefused map[string]string
}

// NewView builds the view of a registry snapshot.
func NewView(reg *meta.Registry, opts storage.Options) (*View, error) {
	set, err := storage.NewSet(reg.Storages, opts)
	if err != nil {
		return nil, err
	}
	v := &View{reg: reg, set: set, instances: map[string]meta.Instance{}, specs: map[string]map[string]bool{},
		skipped: map[string]string{}}
	for _, s := range reg.Skipped {
		if s.Instance != "" {
			v.skipped[s.Instance] = s.Reason
		}
	}
	for _, in := range reg.Instances {
		if _, dup := v.instances[in.ID]; dup {
			v.skipped[in.ID] = "registered in two instance groups"
			continue
		}
		v.instances[in.ID] = in
		specs := map[string]bool{}
		for _, s := range in.Info.LocationSpecs {
			specs[s.Name] = true
		}
		v.specs[in.ID] = specs
	}
	for id := range v.skipped {
		delete(v.instances, id)
	}
	return v, nil
}

// Storages is the storage set of the snapshot.
func (v *View) Storages() *storage.StaticSet { return v.set }

// Instance returns a collected instance.
func (v *View) Instance(id string) (meta.Instance, bool) {
	in, ok := v.instances[id]
	return in, ok
}

// withUnregistered returns a copy of v that also judges the files of the unregistered
// instances ok, and tells why the refused ones are kept.
func (v *View) withUnregistered(ok map[string]pipeline.UnregisteredInstance, refused map[string]string) *View {
	c := *v
	c.unreg, c.unregRefused = ok, refused
	return &c
}

// judged returns the instance whose files the sweep judges: a collected instance, or an
// unregistered one whose keys may be collected.
func (v *View) judged(id string) (meta.Instance, bool) {
	if in, ok := v.instances[id]; ok {
		return in, true
	}
	if u, ok := v.unreg[id]; ok {
		return meta.Instance{ID: u.ID, Group: u.Group, Store: u.Store}, true
	}
	return meta.Instance{}, false
}

// Name is a file name read back as the block whose data it is.
type Name struct {
	Instance meta.Instance
	Spec     string
	Key      int64
}

// ResolveName reads an object name (the path below the storage's root) as the data of one
// block of a collected instance, or of an unregistered instance whose keys may be collected
// (withUnregistered; its specs are no longer known, any spec name reads): KVCM's per-block
// name, exactly one such (instance, spec) reading of it, no other reading that names a
// registered instance, and none that names an instance nothing may be judged of. Else reason
// says why the file is kept (a SweepKept* reason) and detail more.
func (v *View) ResolveName(object string) (n Name, reason, detail string) {
	if strings.HasPrefix(object, kvcm.KVMetaDir+"/") {
		// Even an instance named kvmeta: its files would share the tree with KVMeta's.
		return Name{}, KeptKVMeta, ""
	}
	bf, err := kvcm.ParseBlockFileName(object)
	if err != nil {
		return Name{}, KeptUnparsable, err.Error()
	}
	if bf.Shared {
		return Name{}, KeptShared, ""
	}
	var matches, unreg []Name
	known := false
	for _, s := range bf.Splits() {
		if why, ok := v.skipped[s.Instance]; ok {
			return Name{}, KeptGroupSkipped, fmt.Sprintf("instance %q: %s", s.Instance, why)
		}
		if u, ok := v.unreg[s.Instance]; ok {
			unreg = append(
				unreg,
				Name{Instance: meta.Instance{ID: u.ID, Group: u.Group, Store: u.Store}, Spec: s.Spec, Key: bf.Key},
			)
			continue
		}
		if why, ok := v.unregRefused[s.Instance]; ok && detail == "" {
			detail = fmt.Sprintf("instance %q is not registered, its keys are not collected: %s", s.Instance, why)
		}
		in, ok := v.instances[s.Instance]
		if !ok {
			continue
		}
		known = true
		if v.specs[s.Instance][s.Spec] {
			matches = append(matches, Name{Instance: in, Spec: s.Spec, Key: bf.Key})
		}
	}
	all := append(matches, unreg...)
	switch {
	case len(all) > 1:
		return Name{}, KeptAmbiguousName, fmt.Sprintf("blocks of instances %q and %q", all[0].Instance.ID, all[1].Instance.ID)
	case known && len(unreg) > 0:
		return Name{}, KeptAmbiguousName, fmt.Sprintf("a block of unregistered instance %q, or of a registered one",
			unreg[0].Instance.ID)
	case len(all) == 1:
		return all[0], "", ""
	case known:
		return Name{}, KeptUnknownSpec, ""
	}
	return Name{}, KeptUnknownInstance, detail
}

// sweepTarget is the file a decision is about.
type sweepTarget struct {
	storage string // the swept storage's name
	rawPath string // its data path as KVCM's URIs name it
	local   string // its local path, cleaned
}

// Orphan reasons (Event.Reason of a quarantine): why no location names the file.
const (
	orphanAbsent       = "block_absent"
	orphanNoLocation   = "no_location"
	orphanUnreferenced = "no_location_names_it"
)

// judgeFile decides whether the file t is an orphan by the block read r: only if the block is
// absent, or decodes and no location of it, in any status, has a spec URI that names t (on
// its storage, or on any registered storage whose files are t's). Everything uncertain keeps
// it: a read error, a corrupt value or a bad location, a tombstone, an ambiguous key, a spec
// URI that does not parse, and an absent key in a database other than 0 (otherDB). reason is
// an orphan reason when orphan, a SweepKept* reason otherwise.
func (v *View) judgeFile(r meta.BlockRead, t sweepTarget, otherDB bool) (orphan bool, reason, detail string) {
	switch {
	case r.Err != nil:
		return false, KeptReadError, r.Err.Error()
	case !r.Exists && otherDB:
		return false, KeptAbsentOtherDB, ""
	case !r.Exists:
		return true, orphanAbsent, ""
	}
	ps := r.Entry.Parts()
	layout := ps.Layout()
	switch layout {
	case kvcm.LayoutNone:
		return true, orphanNoLocation, "" // no location field, or an empty __uri__: absent to KVCM
	case kvcm.LayoutAmbiguous:
		return false, KeptAmbiguousLayout, ""
	}
	var locs []kvcm.Location
	for p := range ps.All() {
		switch p.Kind {
		case kvcm.PartTombstone:
			return false, KeptTombstone, kvcm.LocationField(p.ID)
		case kvcm.PartCorrupt:
			return false, KeptCorrupt, p.Err.Error()
		}
		locs = append(locs, p.Loc)
	}
	dirs := map[string]string{}
	for i := range locs {
		l := &locs[i]
		if l.Err != nil {
			return false, KeptCorrupt, l.Err.Error()
		}
		for _, s := range l.Specs {
			u, err := kvcm.ParseDataURI(s.URI)
			if err != nil {
				return false, KeptBadURI, err.Error()
			}
			if v.names(u, t, dirs) {
				return false, KeptReferenced, fmt.Sprintf("location %s (%s)", l.ID, l.Status)
			}
		}
	}
	if len(locs) == 0 {
		return true, orphanNoLocation, ""
	}
	return true, orphanUnreferenced, ""
}

// names reports whether spec URI u names the file t: the same storage and path, the same
// path of a storage that is not registered (nothing tells it apart), or a data path of a
// registered file storage that is t's local file, directly or through symbolic links in its
// directories (two storages sharing a file system). dirs caches resolved directories.
func (v *View) names(u kvcm.DataURI, t sweepTarget, dirs map[string]string) bool {
	if path.Clean(u.Path) == path.Clean(t.rawPath) {
		if u.Host == t.storage {
			return true
		}
		if _, ok := v.reg.Storages[u.Host]; !ok {
			return true
		}
	}
	lp, err := v.set.LocalPath(u.Host, u.Path)
	if err != nil {
		return false
	}
	if lp == t.local {
		return true
	}
	if path.Base(lp) != path.Base(t.local) {
		return false
	}
	return realDir(dirs, path.Dir(lp)) == realDir(dirs, path.Dir(t.local))
}

// realDir is dir with the symbolic links of its deepest existing ancestor resolved (the
// rest, which does not exist, cannot hold one).
func realDir(cache map[string]string, dir string) string {
	if r, ok := cache[dir]; ok {
		return r
	}
	r, err := filepath.EvalSymlinks(dir)
	if err != nil {
		parent := path.Dir(dir)
		if parent == dir {
			r = dir
		} else {
			r = path.Join(realDir(cache, parent), path.Base(dir))
		}
	}
	cache[dir] = r
	return r
}

// viewCache keeps the last registry view for refresh (a pipeline.RegistryCache, built on its
// first get); a failed read keeps the previous view (stale) when there is one: the walker
// only publishes less or more for the sweepers to judge with their own, and a sweeper's stale
// view can only keep files of instances or storages registered since. A stale view judges no
// unregistered instance: their files wait for a registry read that answers. unreg, when set,
// adds those instances to a fresh view.
type viewCache struct {
	unreg *unregReader

	mu sync.Mutex
	rc *pipeline.RegistryCache[*View]
}

type cachedView struct {
	view  *View
	stale bool
	err   error // why it is stale
}

func (c *viewCache) get(
	ctx context.Context,
	reg meta.RegistryReader,
	opts storage.Options,
	refresh time.Duration,
	now time.Time,
) (cachedView, error) {
	c.mu.Lock()
	if c.rc == nil {
		c.rc = pipeline.NewRegistryCache(pipeline.RegistryCacheConfig[*View]{Reader: reg, Refresh: refresh, ServeStale: true,
			Build: func(ctx context.Context, r *meta.Registry, now time.Time) (*View, error) {
				v, err := NewView(r, opts)
				if err != nil {
					return nil, err
				}
				if c.unreg != nil {
					v = c.unreg.add(ctx, v, r, now)
				}
				return v, nil
			}})
	}
	rc := c.rc
	c.mu.Unlock()
	v, info, err := rc.Get(ctx, now)
	if err != nil {
		return cachedView{}, err
	}
	if info.Stale {
		return cachedView{view: v.withUnregistered(nil, nil), stale: true, err: info.Err}, nil
	}
	return cachedView{view: v}, nil
}
