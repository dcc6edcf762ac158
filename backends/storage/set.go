package storage

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// StaticSet is the Set built once from a registry snapshot of the storage table and the local
// overrides. It is immutable and safe for concurrent use.
type StaticSet struct {
	backends map[string]Backend
	unused   []string
	unusable map[string]error
}

var _ Set = (*StaticSet)(nil)

// NewSet builds one Backend per registered storage (the map key is the storage's global unique
// name, as in the registry hash):
//   - file, hf3fs, vcns_hf3fs: local files, probed per the probe mode, unlinked on delete;
//   - mooncake, pace and unknown types: every probe Unknown, deletes ErrUnsupported.
//
// It fails, naming the storage and the field, on an invalid option: an unknown probe mode, a
// path map entry that is not a clean absolute path, ProbeStat or a path map on a storage without
// local files. Everything wrong is reported at once (errors.Join).
//
// Registry entries are outside data and do not fail the set: an entry that cannot be confined
// safely (an empty or relative root, an absolute hf3fs root_dir, a global_unique_name that
// differs from its registry field) still gets a backend, one that answers Unknown and refuses
// every delete; Unusable lists them.
func NewSet(storages map[string]kvcm.StorageConfig, opts Options) (*StaticSet, error) {
	var errs []error
	defaultProbe := opts.DefaultProbe
	if defaultProbe == "" {
		defaultProbe = ProbeNone
	}
	if !validProbe(defaultProbe) {
		errs = append(errs, fmt.Errorf("default probe %q: unknown probe mode (want %q or %q)",
			opts.DefaultProbe, ProbeNone, ProbeStat))
	}

	s := &StaticSet{
		backends: make(map[string]Backend, len(storages)),
		unusable: make(map[string]error),
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Overrides)) {
		cfg, known := storages[name]
		if !known {
			s.unused = append(s.unused, name)
		}
		if err := opts.Overrides[name].validate(name, isFS(cfg.Type), known); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("build storage set: %w", err)
	}

	for _, name := range slices.Sorted(maps.Keys(storages)) {
		cfg := storages[name]
		o := opts.Overrides[name]
		var b Backend
		if isFS(cfg.Type) {
			probe := o.Probe
			if probe == "" {
				probe = defaultProbe
			}
			fb := newFSBackend(cfg, name, o, opts, probe)
			if cfg.Name != "" && cfg.Name != name {
				fb.bad = fmt.Errorf("global_unique_name %q differs from its registry field", cfg.Name)
			}
			if fb.bad != nil {
				s.unusable[name] = fmt.Errorf("storage %q: %w", name, fb.bad)
			}
			b = fb
		} else {
			b = &noClientBackend{
				name:     name,
				typ:      cfg.Type,
				keyCount: max(cfg.KeyCountPerFile, 1),
				dryRun:   opts.DryRun,
			}
		}
		s.backends[name] = b
	}
	return s, nil
}

// isFS reports whether t's storages hold files kvcm-gc can stat and unlink: the types whose
// rule lets them be swept (kvcm.TypeRule).
func isFS(t kvcm.StorageType) bool { return t.Rule().Sweep }

// Lookup returns the backend of a registered storage.
func (s *StaticSet) Lookup(name string) (Backend, bool) {
	b, ok := s.backends[name]
	return b, ok
}

// Names returns the registered storages' names, sorted.
func (s *StaticSet) Names() []string { return slices.Sorted(maps.Keys(s.backends)) }

// UnusedOverrides returns the names, sorted, of overrides whose storage is not registered:
// usually a typo, or a storage the registry does not list yet. Worth a warning at startup.
func (s *StaticSet) UnusedOverrides() []string { return slices.Clone(s.unused) }

// Unusable returns, by name, the file-system storages whose registry entry (or path map) cannot
// be confined safely, with the reason. Their backends answer Unknown and refuse every delete.
func (s *StaticSet) Unusable() map[string]error { return maps.Clone(s.unusable) }
