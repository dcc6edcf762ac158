package storage

import (
	"errors"
	"fmt"
	"strings"
)

// Probe modes of the file-system backends (file, hf3fs, vcns_hf3fs).
const (
	// ProbeNone answers Present for every URI of the storage without any I/O. It is KVCM's own
	// behaviour for file storages (their Exist is always true), so with it no SERVING location
	// on the storage is ever judged missing.
	ProbeNone = "none"
	// ProbeStat lstats the local path of each URI: "no such file or directory" is Missing, an
	// existing entry is Present, any other error is Unknown.
	ProbeStat = "stat"
)

// Options configure a Set.
type Options struct {
	// DryRun makes every backend's Delete return ErrDryRun before it looks at anything, so no
	// code path above the backends can remove data by mistake (DESIGN §8.8). Probes still run.
	DryRun bool
	// DefaultProbe is the probe mode of file-system storages without an Override.Probe:
	// ProbeNone or ProbeStat. Empty means ProbeNone, KVCM's own behaviour.
	DefaultProbe string
	// Overrides are local settings by storage global unique name. An override naming a storage
	// that the registry does not list is not an error (the registry may not have it yet); see
	// StaticSet.UnusedOverrides.
	Overrides map[string]Override
}

// Override is the local configuration of one storage.
type Override struct {
	// PathMap remaps URI paths to local paths; the first entry whose From is a prefix of the
	// URI path wins, and a path no entry matches is used as is. Only for file-system storages.
	PathMap []PathMap
	// Probe is ProbeNone or ProbeStat; "" means Options.DefaultProbe. ProbeStat is only valid
	// for file-system storages.
	Probe string
	// Delete switches physical deletes of this storage on or off; nil means on. When off,
	// Delete returns ErrDeleteDisabled and the caller removes metadata only.
	Delete *bool
}

// PathMap replaces the prefix From of a URI path with To. The match is a plain string prefix,
// not a path-segment match, because KVCM builds file paths by string concatenation (root_path +
// object name): From "/tmp/test_storage_01" is a valid prefix of
// "/tmp/test_storage_01test_instance_01/tp0/…". Both must be absolute, free of "." and ".."
// segments and NUL bytes, and either both end in '/' or neither does, so that a replacement
// never glues or splits a path segment by accident.
type PathMap struct {
	From string
	To   string
}

// applyPathMap maps p through pm: the first matching entry wins; no match leaves p unchanged.
func applyPathMap(pm []PathMap, p string) string {
	for _, m := range pm {
		if strings.HasPrefix(p, m.From) {
			return m.To + p[len(m.From):]
		}
	}
	return p
}

func validProbe(mode string) bool { return mode == ProbeNone || mode == ProbeStat }

// validate checks the override of storage name. known is false when the registry does not list
// the storage (only the type-independent checks run then); fsType tells whether it has paths.
func (o Override) validate(name string, fsType, known bool) error {
	var errs []error
	if o.Probe != "" && !validProbe(o.Probe) {
		errs = append(errs, fmt.Errorf("storage %q: probe %q: unknown probe mode (want %q or %q)",
			name, o.Probe, ProbeNone, ProbeStat))
	}
	if known && !fsType && o.Probe == ProbeStat {
		errs = append(errs, fmt.Errorf("storage %q: probe %q: the storage has no local files to stat",
			name, o.Probe))
	}
	if known && !fsType && len(o.PathMap) > 0 {
		errs = append(errs, fmt.Errorf("storage %q: path_map: the storage has no local paths to map", name))
	}
	for i, m := range o.PathMap {
		if err := checkMapPath(m.From); err != nil {
			errs = append(errs, fmt.Errorf("storage %q: path_map[%d].from %q: %w", name, i, m.From, err))
		}
		if err := checkMapPath(m.To); err != nil {
			errs = append(errs, fmt.Errorf("storage %q: path_map[%d].to %q: %w", name, i, m.To, err))
		}
		if strings.HasSuffix(m.From, "/") != strings.HasSuffix(m.To, "/") {
			errs = append(errs, fmt.Errorf("storage %q: path_map[%d]: from %q and to %q must both end in '/' or neither",
				name, i, m.From, m.To))
		}
	}
	return errors.Join(errs...)
}

func checkMapPath(p string) error {
	if p == "" {
		return errors.New("empty")
	}
	return checkPath(p)
}

// checkPath accepts an absolute path without NUL bytes and without "." or ".." segments.
// Empty segments ("a//b") are accepted: they resolve like a single slash.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New("not an absolute path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return errors.New("contains a NUL byte")
	}
	for rest := p; rest != ""; {
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		if seg == "." || seg == ".." {
			return fmt.Errorf("contains a %q segment", seg)
		}
	}
	return nil
}
