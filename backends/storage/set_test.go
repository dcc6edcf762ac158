package storage_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

func registry() map[string]kvcm.StorageConfig {
	return map[string]kvcm.StorageConfig{
		"nfs_01":   {Type: kvcm.TypeFile, Name: "nfs_01", RootPath: "/tmp/nfs/", KeyCountPerFile: 8},
		"hf3fs_01": {Type: kvcm.TypeHF3FS, Name: "hf3fs_01", Mountpoint: "/3fs/stage", RootDir: "kvcm", KeyCountPerFile: 1},
		"vcns_01":  {Type: kvcm.TypeVCNSHF3FS, Name: "vcns_01", Mountpoint: "/3fs/vcns"},
		"mc_01":    {Type: kvcm.TypeMooncake, Name: "mc_01"},
		"pace_01":  {Type: kvcm.TypePace, Name: "pace_01"},
		"odd_01":   {Type: kvcm.TypeUnknown, TypeName: "vineyard", Name: "odd_01"},
	}
}

func TestNewSetValidation(t *testing.T) {
	off := false
	cases := []struct {
		name    string
		opts    storage.Options
		wantErr []string // substrings of the error; nil means success
		unused  []string
	}{
		{name: "empty options", opts: storage.Options{}},
		{name: "full valid", opts: storage.Options{
			DryRun:       true,
			DefaultProbe: storage.ProbeStat,
			Overrides: map[string]storage.Override{
				"nfs_01":   {PathMap: []storage.PathMap{{From: "/tmp/nfs/", To: "/mnt/nfs/"}}, Probe: storage.ProbeNone},
				"hf3fs_01": {PathMap: []storage.PathMap{{From: "/3fs", To: "/mnt/3fs"}}, Delete: &off},
				"mc_01":    {Probe: storage.ProbeNone, Delete: &off},
			},
		}},
		{name: "unknown default probe", opts: storage.Options{DefaultProbe: "exists"},
			wantErr: []string{`default probe "exists": unknown probe mode`}},
		{name: "unknown override probe", opts: storage.Options{Overrides: map[string]storage.Override{
			"nfs_01": {Probe: "Stat"}}},
			wantErr: []string{`storage "nfs_01": probe "Stat": unknown probe mode`}},
		{name: "relative from", opts: storage.Options{Overrides: map[string]storage.Override{
			"nfs_01": {PathMap: []storage.PathMap{{From: "tmp/nfs/", To: "/mnt/nfs/"}}}}},
			wantErr: []string{`storage "nfs_01": path_map[0].from "tmp/nfs/": not an absolute path`}},
		{name: "relative to", opts: storage.Options{Overrides: map[string]storage.Override{
			"hf3fs_01": {PathMap: []storage.PathMap{{From: "/3fs/", To: "/mnt/"}, {From: "/a", To: "mnt"}}}}},
			wantErr: []string{`storage "hf3fs_01": path_map[1].to "mnt": not an absolute path`}},
		{name: "dot-dot in a map", opts: storage.Options{Overrides: map[string]storage.Override{
			"nfs_01": {PathMap: []storage.PathMap{{From: "/tmp/nfs/", To: "/mnt/../etc/"}}}}},
			wantErr: []string{`path_map[0].to "/mnt/../etc/": contains a ".." segment`}},
		{name: "NUL in a map", opts: storage.Options{Overrides: map[string]storage.Override{
			"nfs_01": {PathMap: []storage.PathMap{{From: "/tmp/\x00", To: "/mnt/x"}}}}},
			wantErr: []string{`path_map[0].from`, "NUL"}},
		{name: "empty from", opts: storage.Options{Overrides: map[string]storage.Override{
			"nfs_01": {PathMap: []storage.PathMap{{From: "", To: ""}}}}},
			wantErr: []string{`path_map[0].from "": empty`, `path_map[0].to "": empty`}},
		{name: "trailing slash mismatch", opts: storage.Options{Overrides: map[string]storage.Override{
			"nfs_01": {PathMap: []storage.PathMap{{From: "/tmp/nfs/", To: "/mnt/nfs"}}}}},
			wantErr: []string{`storage "nfs_01": path_map[0]: from "/tmp/nfs/" and to "/mnt/nfs" must both end in '/' or neither`}},
		{name: "stat on mooncake", opts: storage.Options{Overrides: map[string]storage.Override{
			"mc_01": {Probe: storage.ProbeStat}}},
			wantErr: []string{`storage "mc_01": probe "stat": the storage has no local files to stat`}},
		{name: "path map on pace", opts: storage.Options{Overrides: map[string]storage.Override{
			"pace_01": {PathMap: []storage.PathMap{{From: "/", To: "/"}}}}},
			wantErr: []string{`storage "pace_01": path_map: the storage has no local paths to map`}},
		{name: "every error at once", opts: storage.Options{DefaultProbe: "x", Overrides: map[string]storage.Override{
			"nfs_01": {Probe: "y"}, "hf3fs_01": {PathMap: []storage.PathMap{{From: "a", To: "/b"}}}}},
			wantErr: []string{`default probe "x"`, `storage "nfs_01": probe "y"`, `storage "hf3fs_01": path_map[0].from "a"`}},
		{name: "override of an unregistered storage is reported, not an error",
			opts: storage.Options{Overrides: map[string]storage.Override{
				"nfs_02": {Probe: storage.ProbeStat}, "nfs_01": {}, "a_typo": {}}},
			unused: []string{"a_typo", "nfs_02"}},
		{name: "an unregistered storage's override is still validated",
			opts: storage.Options{Overrides: map[string]storage.Override{
				"nfs_02": {Probe: "bogus"}}},
			wantErr: []string{`storage "nfs_02": probe "bogus"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set, err := storage.NewSet(registry(), c.opts)
			if c.wantErr != nil {
				require.Error(t, err)
				require.Nil(t, set)
				for _, w := range c.wantErr {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.unused, set.UnusedOverrides())
			require.Empty(t, set.Unusable())
			require.Equal(t, []string{"hf3fs_01", "mc_01", "nfs_01", "odd_01", "pace_01", "vcns_01"}, set.Names())
		})
	}
}

func TestNewSetBackends(t *testing.T) {
	reg := registry()
	reg["zero_kcpf"] = kvcm.StorageConfig{Type: kvcm.TypeFile, Name: "zero_kcpf", RootPath: "/x/"}
	set, err := storage.NewSet(reg, storage.Options{})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		typ  kvcm.StorageType
		kcpf uint64
	}{
		{"nfs_01", kvcm.TypeFile, 8},
		{"hf3fs_01", kvcm.TypeHF3FS, 1},
		{"vcns_01", kvcm.TypeVCNSHF3FS, 1},
		{"mc_01", kvcm.TypeMooncake, 1},
		{"pace_01", kvcm.TypePace, 1},
		{"odd_01", kvcm.TypeUnknown, 1},
		{"zero_kcpf", kvcm.TypeFile, 1}, // KVCM treats key_count_per_file <= 0 as 1
	} {
		b, ok := set.Lookup(c.name)
		require.True(t, ok, c.name)
		require.Equal(t, c.name, b.Name())
		require.Equal(t, c.typ, b.Type(), c.name)
		require.Equal(t, c.kcpf, b.KeyCountPerFile(), c.name)
	}
	_, ok := set.Lookup("nfs_99")
	require.False(t, ok)
}

// TestNoClientBackends: mooncake, pace and unknown types never guess: every answer is Unknown
// and a delete is unsupported (dry-run still refuses first).
func TestNoClientBackends(t *testing.T) {
	ctx := context.Background()
	for _, dry := range []bool{false, true} {
		set, err := storage.NewSet(registry(), storage.Options{DryRun: dry, DefaultProbe: storage.ProbeStat})
		require.NoError(t, err)
		for _, name := range []string{"mc_01", "pace_01", "odd_01"} {
			b, _ := set.Lookup(name)
			u, err := kvcm.ParseDataURI("mooncake://" + name + "/?key=inst/tp0/1f&size=4096")
			require.NoError(t, err)
			uris := make([]kvcm.DataURI, storage.MaxProbeChunk)
			for i := range uris {
				uris[i] = u
			}
			res, err := b.MightExist(ctx, uris)
			require.NoError(t, err)
			require.Equal(t, make([]storage.Result, storage.MaxProbeChunk), res, "all unknown")
			require.Equal(t, storage.Unknown, res[0])

			_, err = b.MightExist(ctx, append(uris, u))
			require.ErrorIs(t, err, storage.ErrTooMany)

			want := storage.ErrUnsupported
			if dry {
				want = storage.ErrDryRun
			}
			require.ErrorIs(t, b.Delete(ctx, u), want, name)
		}
	}
}

// TestUnusableStorages: registry entries that cannot be confined get backends that answer
// Unknown and refuse deletes, and are listed, instead of failing the whole set.
func TestUnusableStorages(t *testing.T) {
	ctx := context.Background()
	reg := map[string]kvcm.StorageConfig{
		"empty_root":    {Type: kvcm.TypeFile, Name: "empty_root"},
		"relative_root": {Type: kvcm.TypeFile, Name: "relative_root", RootPath: "tmp/nfs/"},
		"dotdot_root":   {Type: kvcm.TypeFile, Name: "dotdot_root", RootPath: "/tmp/../nfs/"},
		"no_mount":      {Type: kvcm.TypeHF3FS, Name: "no_mount", RootDir: "kvcm"},
		"abs_root_dir":  {Type: kvcm.TypeHF3FS, Name: "abs_root_dir", Mountpoint: "/3fs", RootDir: "/kvcm"},
		"renamed":       {Type: kvcm.TypeFile, Name: "other_name", RootPath: "/tmp/nfs/"},
	}
	set, err := storage.NewSet(reg, storage.Options{
		DefaultProbe: storage.ProbeNone, // would answer Present for any usable storage
	})
	require.NoError(t, err)
	unusable := set.Unusable()
	require.Len(t, unusable, len(reg))
	for _, c := range []struct{ name, reason string }{
		{"empty_root", "root_path is empty"},
		{"relative_root", "not an absolute path"},
		{"dotdot_root", `".." segment`},
		{"no_mount", `mountpoint "": not an absolute path`},
		{"abs_root_dir", `root_dir "/kvcm": absolute`},
		{"renamed", `global_unique_name "other_name" differs`},
	} {
		require.ErrorContains(t, unusable[c.name], c.reason, c.name)
		require.ErrorContains(t, unusable[c.name], `storage "`+c.name+`"`)
		b, _ := set.Lookup(c.name)
		u, err := kvcm.ParseDataURI("file://" + c.name + "/tmp/nfs/inst/tp0/1?size=1")
		require.NoError(t, err)
		res, err := b.MightExist(ctx, []kvcm.DataURI{u})
		require.NoError(t, err)
		require.Equal(t, []storage.Result{storage.Unknown}, res, c.name)
		require.ErrorIs(t, b.Delete(ctx, u), storage.ErrUnsafePath, c.name)
	}
}
