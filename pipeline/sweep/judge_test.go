package sweep

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
)

// sweepRegistry is a registry of instances inst0 and inst1 (specs tp0, tp1) in a collected
// group, a/b (spec c) and a (spec b/c) sharing a name, local_inst in a skipped group, and
// the file storages nfs (root dir+"/nfs/"), alias (the same files through a symbolic link),
// twin (the same root) and mc (mooncake).
func sweepRegistry(t *testing.T, dir string) *meta.Registry {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "nfs"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(dir, "nfs"), filepath.Join(dir, "alias")))
	specs := []kvcm.LocationSpecInfo{{Name: "tp0", Size: 1024}, {Name: "tp1", Size: 1024}}
	inst := func(id string, specs ...kvcm.LocationSpecInfo) meta.Instance {
		return meta.Instance{ID: id, Group: "g", Store: "127.0.0.1:1", Info: kvcm.InstanceInfo{InstanceID: id, LocationSpecs: specs}}
	}
	return &meta.Registry{
		Instances: []meta.Instance{inst("inst0", specs...), inst("inst1", specs...),
			inst("a/b", kvcm.LocationSpecInfo{Name: "c"}), inst("a", kvcm.LocationSpecInfo{Name: "b/c"}),
			inst("solo", kvcm.LocationSpecInfo{Name: "x/y"})},
		Skipped: []meta.Skip{{Instance: "local_inst", Group: "gl", Reason: "local meta store"},
			{Instance: "x", Group: "gc", Reason: "cached meta store"}},
		SkippedGroups: map[string]string{"gl": "local meta store", "gc": "cached meta store"},
		Storages: map[string]kvcm.StorageConfig{
			"nfs":   {Type: kvcm.TypeFile, TypeName: "file", Name: "nfs", RootPath: dir + "/nfs/", KeyCountPerFile: 1},
			"twin":  {Type: kvcm.TypeFile, TypeName: "file", Name: "twin", RootPath: dir + "/nfs/", KeyCountPerFile: 1},
			"alias": {Type: kvcm.TypeFile, TypeName: "file", Name: "alias", RootPath: dir + "/alias/", KeyCountPerFile: 1},
			"mc":    {Type: kvcm.TypeMooncake, TypeName: "mooncake", Name: "mc", KeyCountPerFile: 1},
		},
	}
}

func TestSweepResolveName(t *testing.T) {
	v, err := NewView(sweepRegistry(t, t.TempDir()), storage.Options{})
	require.NoError(t, err)
	for _, tc := range []struct {
		object, inst, spec string
		key                int64
		reason             string
	}{
		{object: "inst0/tp0/1f", inst: "inst0", spec: "tp0", key: 0x1f},
		{object: "inst1/tp1/ffffffffffffffff", inst: "inst1", spec: "tp1", key: -1},
		{object: "inst0/tp2/1f", reason: KeptUnknownSpec},
		{object: "ghost/tp0/1f", reason: KeptUnknownInstance},
		{object: "local_inst/tp0/1f", reason: KeptGroupSkipped},
		{object: "a/b/c/1", reason: KeptAmbiguousName},
		{object: "solo/x/y/1", inst: "solo", spec: "x/y", key: 1},
		// A reading that names an instance nothing may be judged of keeps the file, even
		// with another reading registered.
		{object: "x/y/tp0/1", reason: KeptGroupSkipped},
		{object: "inst0/tp0/1f_9c0e77d2b4a1e2f0", reason: KeptShared},
		{object: "inst0/tp0/1F", reason: KeptUnparsable},
		{object: "inst0/tp0/01f", reason: KeptUnparsable},
		{object: "inst0/tp0/1f.tmp", reason: KeptUnparsable},
		// KVMeta's objects, in either form, and anything else below kvmeta/.
		{object: "kvmeta/1a2b3c/" + strings.Repeat("ab", 32) + "/" + strings.Repeat("cd", 16), reason: KeptKVMeta},
		{object: "kvmeta/1a2b3c/9f/" + strings.Repeat("cd", 16), reason: KeptKVMeta},
		{object: "kvmeta/tp0/1f", reason: KeptKVMeta},
	} {
		n, reason, _ := v.ResolveName(tc.object)
		require.Equal(t, tc.reason, reason, tc.object)
		if tc.reason == "" {
			require.Equal(t, tc.inst, n.Instance.ID, tc.object)
			require.Equal(t, tc.spec, n.Spec, tc.object)
			require.Equal(t, tc.key, n.Key, tc.object)
		}
	}
}

// TestSweepJudgeFile: a file is an orphan only when its block is absent or decodes without a
// location, in any status, that names it; everything uncertain keeps it.
func TestSweepJudgeFile(t *testing.T) {
	dir := t.TempDir()
	v, err := NewView(sweepRegistry(t, dir), storage.Options{})
	require.NoError(t, err)
	raw := dir + "/nfs/inst0/tp0/1f"
	target := sweepTarget{storage: "nfs", rawPath: raw, local: raw}
	uri := func(host, path string) string { return fmt.Sprintf("file://%s%s?size=1024", host, path) }
	loc := func(id string, st kvcm.Status, uris ...string) string {
		return metatest.Location(id, st, kvcm.TypeFile, uris...)
	}
	legacy := func(locs ...string) meta.BlockRead {
		return meta.BlockRead{Exists: true, Entry: meta.Entry{Layout: kvcm.LayoutLegacy, URI: []byte(metatest.URI(locs...))}}
	}
	location := func(fields ...meta.Field) meta.BlockRead {
		return meta.BlockRead{Exists: true, Entry: meta.Entry{Layout: kvcm.LayoutLocation, Locations: fields}}
	}
	field := func(id, value string) meta.Field { return meta.Field{ID: id, Value: []byte(value)} }
	guarded := func(id string, st kvcm.Status, guard string, uris ...string) string {
		l := loc(id, st, uris...)
		return l[:len(l)-1] + `,"migration_copy_guard":` + guard + "}"
	}
	other := dir + "/nfs/inst0/tp1/1f"

	for _, tc := range []struct {
		name    string
		read    meta.BlockRead
		otherDB bool
		orphan  bool
		reason  string
	}{
		{"absent", meta.BlockRead{}, false, true, orphanAbsent},
		{"absent from another database", meta.BlockRead{}, true, false, KeptAbsentOtherDB},
		{"read error", meta.BlockRead{Err: errors.New("WRONGTYPE")}, false, false, KeptReadError},
		{"no location field", meta.BlockRead{Exists: true, Entry: meta.Entry{Layout: kvcm.LayoutNone, Others: []string{"BP#prev_key"}}}, false, true, orphanNoLocation},
		{"ambiguous", meta.BlockRead{Exists: true, Entry: meta.Entry{Layout: kvcm.LayoutAmbiguous}}, false, false, KeptAmbiguousLayout},
		{"legacy empty __uri__", meta.BlockRead{Exists: true, Entry: meta.Entry{Layout: kvcm.LayoutLegacy}}, false, true, orphanNoLocation},
		{"legacy no location", legacy(), false, true, orphanNoLocation},
		{"legacy serving names it", legacy(loc("a1", kvcm.StatusServing, uri("nfs", raw))), false, false, KeptReferenced},
		{"legacy writing names it", legacy(loc("a1", kvcm.StatusWriting, uri("nfs", raw))), false, false, KeptReferenced},
		{"legacy deleting names it", legacy(loc("a1", kvcm.StatusDeleting, uri("nfs", raw))), false, false, KeptReferenced},
		{"legacy another spec's file", legacy(loc("a1", kvcm.StatusServing, uri("nfs", other))), false, true, orphanUnreferenced},
		{"legacy second spec names it", legacy(loc("a1", kvcm.StatusServing, uri("nfs", other), uri("nfs", raw))), false, false, KeptReferenced},
		{"legacy corrupt", meta.BlockRead{Exists: true, Entry: meta.Entry{Layout: kvcm.LayoutLegacy, URI: []byte(`{"a1":`)}}, false, false, KeptCorrupt},
		{"legacy bad location", legacy(`{"id":"zz","status":"3","location_specs":[]}`), false, false, KeptCorrupt},
		{"bad spec uri", legacy(loc("a1", kvcm.StatusServing, "no scheme")), false, false, KeptBadURI},
		{"mooncake location", legacy(metatest.Location("a1", kvcm.StatusServing, kvcm.TypeMooncake, "mooncake://mc/inst0/tp0/1f")), false, true, orphanUnreferenced},
		{"a double slash", legacy(loc("a1", kvcm.StatusServing, uri("nfs", dir+"/nfs/inst0//tp0/1f"))), false, false, KeptReferenced},
		{"another storage on the same root", legacy(loc("a1", kvcm.StatusServing, uri("twin", raw))), false, false, KeptReferenced},
		{"the same files through a link", legacy(loc("a1", kvcm.StatusServing, uri("alias", dir+"/alias/inst0/tp0/1f"))), false, false, KeptReferenced},
		{"an unregistered storage, the same path", legacy(loc("a1", kvcm.StatusServing, uri("gone", raw))), false, false, KeptReferenced},
		{"an unregistered storage, another path", legacy(loc("a1", kvcm.StatusServing, uri("gone", other))), false, true, orphanUnreferenced},
		{"location layout names it", location(field("a1", loc("a1", kvcm.StatusWriting, uri("nfs", raw)))), false, false, KeptReferenced},
		{"location layout other file", location(field("a1", loc("a1", kvcm.StatusServing, uri("nfs", other)))), false, true, orphanUnreferenced},
		{"location layout tombstone", location(field("a1", loc("a1", kvcm.StatusServing, uri("nfs", other))), field("b2", "")), false, false, KeptTombstone},
		{"location layout corrupt", location(field("a1", `{"id":"a1"`)), false, false, KeptCorrupt},
		// A migration's guarded copy target and the source it names: the files of both stay
		// (the target's guard valid or not).
		{"guarded copy target names it", location(field("d1", guarded("d1", kvcm.StatusWriting, `{"schema_version":1,"state":2,"operation_id":"op","source_location_id":"s1"}`, uri("nfs", raw))),
			field("s1", loc("s1", kvcm.StatusServing, uri("nfs", other)))), false, false, KeptReferenced},
		{"its source names it", location(field("d1", guarded("d1", kvcm.StatusWriting, `{"schema_version":1,"state":2,"operation_id":"op","source_location_id":"s1"}`, uri("nfs", other))),
			field("s1", loc("s1", kvcm.StatusServing, uri("nfs", raw)))), false, false, KeptReferenced},
		{"a malformed guard names it", location(field("d1", guarded("d1", kvcm.StatusDeleting, `"?"`, uri("nfs", raw)))), false, false, KeptReferenced},
		{"location layout inner id differs", location(field("a1", loc("zz", kvcm.StatusServing, uri("nfs", other)))), false, false, KeptCorrupt},
	} {
		orphan, reason, _ := v.judgeFile(tc.read, target, tc.otherDB)
		require.Equal(t, tc.orphan, orphan, tc.name)
		require.Equal(t, tc.reason, reason, tc.name)
	}
}
