// Package storagetest is the conformance suite every storage.Backend that can hold real objects
// runs against the real thing (a real directory, a real mount): the probe answers the prober
// relies on and every refusal that keeps a physical delete from touching what it must not.
package storagetest

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Options configure the backend a Harness builds for one case.
type Options struct {
	// Probe is storage.ProbeStat or storage.ProbeNone; "" means ProbeStat.
	Probe string
	// DryRun builds the backend's set with storage.Options.DryRun.
	DryRun bool
	// DeleteDisabled switches physical deletes off through the storage's override.
	DeleteDisabled bool
	// KeyCountPerFile is the storage's key_count_per_file; 0 means 1.
	KeyCountPerFile uint64
	// Remap makes the storage's URI paths differ from the local paths, which the backend must
	// reach through its path map. The map must also cover OutsideURI's path, so that only the
	// root check (made on the raw path) keeps the backend from reaching that object.
	Remap bool
}

// Harness creates storages for the suite.
type Harness interface {
	// NewBackend creates a fresh, empty storage, and its backend configured by opts. Every case
	// gets its own storage, so cases run in parallel and never see each other's objects.
	NewBackend(t *testing.T, opts Options) Fixture
}

// Fixture is one fresh storage and its backend. Its object methods work on the storage
// directly, never through the backend under test.
type Fixture interface {
	Backend() storage.Backend
	// URIFor returns the URI the storage gives object name ("<instance>/<spec>/<hex>"), as KVCM
	// writes it (with a size parameter).
	URIFor(name string) kvcm.DataURI
	// OutsideURI returns a URI naming this storage whose path is outside the storage's root,
	// in a place CreateObject and ObjectExists can reach.
	OutsideURI(name string) kvcm.DataURI
	// CreateObject creates the object behind uri (and its parent directories).
	CreateObject(t *testing.T, uri kvcm.DataURI)
	// RemoveObject removes the object behind uri; absent is fine.
	RemoveObject(t *testing.T, uri kvcm.DataURI)
	// ObjectExists reports whether the object behind uri exists.
	ObjectExists(t *testing.T, uri kvcm.DataURI) bool
}

// Run runs the suite, every case once with URI paths used as local paths and once through a
// path map.
func Run(t *testing.T, h Harness) {
	for _, remap := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "remapped"}[remap], func(t *testing.T) {
			t.Parallel()
			runCases(t, h, remap)
		})
	}
}

// objName returns a KVCM-style object name: instance/spec/block key in lower-case hex.
func objName(i int) string {
	return fmt.Sprintf("inst_a/tp0/%x", uint64(0x9e3779b97f4a7c15)*uint64(i+1))
}

// refusesDelete creates keep, then checks that a delete of del fails with want and leaves keep
// in place.
func refusesDelete(ctx context.Context, t *testing.T, f Fixture, b storage.Backend, keep, del kvcm.DataURI, want error) {
	t.Helper()
	f.CreateObject(t, keep)
	require.ErrorIs(t, b.Delete(ctx, del), want)
	require.True(t, f.ObjectExists(t, keep))
}

func withParam(u kvcm.DataURI, k, v string) kvcm.DataURI {
	if u.Query != "" {
		u.Query += "&"
	}
	u.Query += k + "=" + v
	return u
}

func runCases(t *testing.T, h Harness, remap bool) {
	ctx := context.Background()
	newFixture := func(t *testing.T, o Options) (Fixture, storage.Backend) {
		t.Helper()
		o.Remap = remap
		f := h.NewBackend(t, o)
		return f, f.Backend()
	}
	probe := func(t *testing.T, b storage.Backend, uris ...kvcm.DataURI) []storage.Result {
		t.Helper()
		res, err := b.MightExist(ctx, uris)
		require.NoError(t, err)
		require.Len(t, res, len(uris), "one result per uri")
		return res
	}

	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"identity", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			require.Equal(t, f.URIFor(objName(0)).Host, b.Name())
			require.Equal(t, uint64(1), b.KeyCountPerFile())
		}},
		{"present missing unknown", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			present, missing, removed := f.URIFor(objName(0)), f.URIFor(objName(1)), f.URIFor(objName(2))
			f.CreateObject(t, present)
			f.CreateObject(t, removed)
			f.RemoveObject(t, removed)
			foreign := present
			foreign.Host += "_other"
			outside := f.OutsideURI(objName(3))
			f.CreateObject(t, outside)
			require.Equal(t,
				[]storage.Result{storage.Present, storage.Missing, storage.Missing, storage.Unknown, storage.Unknown},
				probe(t, b, present, missing, removed, foreign, outside))
		}},
		{"bad paths are unknown", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			good := f.URIFor(objName(0))
			f.CreateObject(t, good)
			relative, nul, dot, dotdot, empty := good, good, good, good, good
			relative.Path = good.Path[1:]
			nul.Path = good.Path + "\x00"
			dot.Path = f.URIFor("inst_a/./tp0/x").Path
			dotdot.Path = f.URIFor("inst_a/../inst_a/tp0/x").Path
			empty.Path = ""
			require.Equal(t,
				[]storage.Result{storage.Unknown, storage.Unknown, storage.Unknown, storage.Unknown, storage.Unknown, storage.Present},
				probe(t, b, relative, nul, dot, dotdot, empty, good))
		}},
		{"length and order kept", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			p, m := f.URIFor(objName(0)), f.URIFor(objName(1))
			f.CreateObject(t, p)
			require.Empty(t, probe(t, b))
			require.Equal(t,
				[]storage.Result{storage.Missing, storage.Present, storage.Missing, storage.Missing, storage.Present},
				probe(t, b, m, p, m, m, p))
		}},
		{"mixed full chunk", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			uris := make([]kvcm.DataURI, storage.MaxProbeChunk)
			want := make([]storage.Result, len(uris))
			for i := range uris {
				uris[i] = f.URIFor(objName(i))
				switch i % 3 {
				case 0:
					f.CreateObject(t, uris[i])
					want[i] = storage.Present
				case 1:
					want[i] = storage.Missing
				default:
					uris[i].Host += "_other"
					want[i] = storage.Unknown
				}
			}
			require.Equal(t, want, probe(t, b, uris...))
		}},
		{"too many", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			uris := make([]kvcm.DataURI, storage.MaxProbeChunk+1)
			for i := range uris {
				uris[i] = f.URIFor(objName(i))
			}
			res, err := b.MightExist(ctx, uris)
			require.ErrorIs(t, err, storage.ErrTooMany)
			require.Nil(t, res)
		}},
		{"canceled probe", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err := b.MightExist(cctx, []kvcm.DataURI{f.URIFor(objName(0))})
			require.ErrorIs(t, err, context.Canceled)
		}},
		{"probe none", func(t *testing.T) {
			f, b := newFixture(t, Options{Probe: storage.ProbeNone})
			p, m := f.URIFor(objName(0)), f.URIFor(objName(1))
			f.CreateObject(t, p)
			foreign := p
			foreign.Host += "_other"
			require.Equal(t,
				[]storage.Result{storage.Present, storage.Present, storage.Unknown, storage.Unknown},
				probe(t, b, p, m, foreign, f.OutsideURI(objName(2))))
		}},
		{"delete existing", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			u, other := f.URIFor(objName(0)), f.URIFor(objName(1))
			f.CreateObject(t, u)
			f.CreateObject(t, other)
			require.NoError(t, b.Delete(ctx, u))
			require.False(t, f.ObjectExists(t, u))
			require.True(t, f.ObjectExists(t, other), "a delete touches its own object only")
			require.Equal(t, []storage.Result{storage.Missing, storage.Present}, probe(t, b, u, other))
		}},
		{"delete absent is success", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			u := f.URIFor(objName(0))
			require.NoError(t, b.Delete(ctx, u), "never created")
			require.NoError(t, b.Delete(ctx, f.URIFor("inst_never/tp0/1")), "parent directory absent too")
			f.CreateObject(t, u)
			require.NoError(t, b.Delete(ctx, u))
			require.NoError(t, b.Delete(ctx, u), "second delete of the same object")
		}},
		{"dry-run refuses first and leaves the object", func(t *testing.T) {
			f, b := newFixture(t, Options{DryRun: true, DeleteDisabled: true})
			u := f.URIFor(objName(0))
			f.CreateObject(t, u)
			foreign := u
			foreign.Host += "_other"
			for _, d := range []kvcm.DataURI{u, withParam(u, "blkid", "0"), foreign, f.OutsideURI(objName(1)), {}} {
				require.ErrorIs(t, b.Delete(ctx, d), storage.ErrDryRun, "uri %s", d)
			}
			require.True(t, f.ObjectExists(t, u))
			require.Equal(t, []storage.Result{storage.Present}, probe(t, b, u), "probes still run")
		}},
		{"delete disabled", func(t *testing.T) {
			f, b := newFixture(t, Options{DeleteDisabled: true})
			u := f.URIFor(objName(0))
			refusesDelete(ctx, t, f, b, u, u, storage.ErrDeleteDisabled)
		}},
		{"shared by blkid is never unlinked", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			u := withParam(f.URIFor(objName(0)), "blkid", "3")
			refusesDelete(ctx, t, f, b, u, u, storage.ErrShared)
			require.Equal(t, []storage.Result{storage.Present}, probe(t, b, u), "blkid does not change the probe")
		}},
		{"shared by key_count_per_file is never unlinked", func(t *testing.T) {
			f, b := newFixture(t, Options{KeyCountPerFile: 8})
			require.Equal(t, uint64(8), b.KeyCountPerFile())
			u := f.URIFor(objName(0))
			refusesDelete(ctx, t, f, b, u, u, storage.ErrShared)
		}},
		{"outside the root is refused and left", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			out := f.OutsideURI(objName(0))
			refusesDelete(ctx, t, f, b, out, out, storage.ErrUnsafePath)
		}},
		{"dot-dot escape is refused and left", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			// The path starts with the root but climbs out of it, to where OutsideURI lives.
			target := f.OutsideURI(objName(0))
			f.CreateObject(t, target)
			f.CreateObject(t, f.URIFor("inst_a/tp0/seed")) // the OS resolves ".." only through real directories
			rel, err := filepath.Rel(path.Dir(f.URIFor("inst_a/x").Path), target.Path)
			require.NoError(t, err)
			esc := f.URIFor("inst_a/" + filepath.ToSlash(rel))
			require.True(t, f.ObjectExists(t, esc), "the escape names a real object")
			require.ErrorIs(t, b.Delete(ctx, esc), storage.ErrUnsafePath)
			require.True(t, f.ObjectExists(t, target))
			require.Equal(t, []storage.Result{storage.Unknown}, probe(t, b, esc))
		}},
		{"foreign host is refused and left", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			u := f.URIFor(objName(0))
			foreign := u
			foreign.Host += "_other"
			refusesDelete(ctx, t, f, b, u, foreign, storage.ErrForeignURI)
		}},
		{"canceled delete", func(t *testing.T) {
			f, b := newFixture(t, Options{})
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			u := f.URIFor(objName(0))
			refusesDelete(cctx, t, f, b, u, u, context.Canceled)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}
