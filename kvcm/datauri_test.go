package kvcm

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDataURI(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want DataURI
	}{
		{
			name: "nfs shared file",
			in:   "file://nfs_01/tmp/nfs/inst0/tp0/499602d2_3c1a9f0e77d2b4a1?blkid=0&size=1024",
			want: DataURI{Scheme: "file", Host: "nfs_01", Path: "/tmp/nfs/inst0/tp0/499602d2_3c1a9f0e77d2b4a1",
				Query: "blkid=0&size=1024"},
		},
		{
			name: "hf3fs",
			in:   "hf3fs://hf3fs_01/3fs/stage/kvcm/inst0/tp0/499602d2?size=1024",
			want: DataURI{Scheme: "hf3fs", Host: "hf3fs_01", Path: "/3fs/stage/kvcm/inst0/tp0/499602d2",
				Query: "size=1024"},
		},
		{
			name: "mooncake key with slashes",
			in:   "mooncake://mc_01/?key=inst0/tp0/ffffffffffffffff&size=4096",
			want: DataURI{Scheme: "mooncake", Host: "mc_01", Path: "/",
				Query: "key=inst0/tp0/ffffffffffffffff&size=4096"},
		},
		{
			name: "redis with userinfo and port",
			in:   "redis://test_redis_user:test_redis_password@localhost:6379/",
			want: DataURI{Scheme: "redis", UserInfo: "test_redis_user:test_redis_password", Host: "localhost", Port: 6379, Path: "/"},
		},
		{
			name: "port zero is absent",
			in:   "redis://h:0",
			want: DataURI{Scheme: "redis", Host: "h"},
		},
		{
			name: "max port",
			in:   "redis://h:65535",
			want: DataURI{Scheme: "redis", Host: "h", Port: 65535},
		},
		{
			name: "pace",
			in:   "pace://pace_01/4096?media_type=1&node_id=n1&range_id=3&size=4096",
			want: DataURI{Scheme: "pace", Host: "pace_01", Path: "/4096",
				Query: "media_type=1&node_id=n1&range_id=3&size=4096"},
		},
		{
			name: "params: no value, empty, repeated, = in value, empty name",
			in:   "file://h/p?a&&b=1=2&a=x&=v&",
			want: DataURI{Scheme: "file", Host: "h", Path: "/p",
				Query: "a&&b=1=2&a=x&=v&"},
		},
		{
			name: "empty query",
			in:   "file://h/p?",
			want: DataURI{Scheme: "file", Host: "h", Path: "/p"},
		},
		{
			name: "no percent decoding",
			in:   "file://h/a%20b?k=%41",
			want: DataURI{Scheme: "file", Host: "h", Path: "/a%20b",
				Query: "k=%41"},
		},
		{
			name: "first :// ends the scheme",
			in:   "x://h/a://b",
			want: DataURI{Scheme: "x", Host: "h", Path: "/a://b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDataURI(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			again, err := ParseDataURI(got.String())
			require.NoError(t, err)
			require.Equal(t, got, again)
		})
	}
}

func TestParseDataURIRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"nfs_01/tmp/x",
		"://h/x",
		"file:/h/x",
		"file://",
		"file:///tmp/x",
		"file://?a=1",
		"file://user@/x",
		"file://:80/x",
		"redis://h:",
		"redis://h:65536",
		"redis://h:-1",
		"redis://h:+1",
		"redis://h: 1",
		"redis://h:1:2",
		"redis://h:0x10",
		// The KVCM versions read these differently (f6aa2b2 garbles the host, or takes the
		// query for a path): refused.
		"mooncake://mc_01?key=a/b",
		"redis://a@b:pw@h:1/x@y",
		"redis://a@b:pw@h:1/x",
		"file://nfs_01/tmp/inst@0/tp0/1",
		"file://nfs_01/p?owner=a@b&size=1",
	} {
		_, err := ParseDataURI(in)
		require.ErrorIs(t, err, ErrBadDataURI, in)
	}
}

func TestDataURIUint(t *testing.T) {
	u, err := ParseDataURI("file://h/p?size=1024&blkid=0&zero=007&max=18446744073709551615&over=18446744073709551616" +
		"&neg=-1&plus=+1&sp=%201&hex=0x10&empty=&flag&frac=1.5&trail=12a")
	require.NoError(t, err)
	tests := []struct {
		name    string
		want    uint64
		ok      bool
		wantErr bool
	}{
		{name: "size", want: 1024, ok: true},
		{name: "blkid", want: 0, ok: true},
		{name: "zero", want: 7, ok: true},
		{name: "max", want: math.MaxUint64, ok: true},
		{name: "absent"},
		{name: "over", ok: true, wantErr: true},
		{name: "neg", ok: true, wantErr: true},
		{name: "plus", ok: true, wantErr: true},
		{name: "sp", ok: true, wantErr: true},
		{name: "hex", ok: true, wantErr: true},
		{name: "empty", ok: true, wantErr: true},
		{name: "flag", ok: true, wantErr: true},
		{name: "frac", ok: true, wantErr: true},
		{name: "trail", ok: true, wantErr: true},
	}
	for _, tt := range tests {
		v, ok, err := u.Uint(tt.name)
		require.Equal(t, tt.ok, ok, tt.name)
		if tt.wantErr {
			require.ErrorIs(t, err, ErrBadDataURI, tt.name)
			continue
		}
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, v, tt.name)
	}
}

func TestDataURIShared(t *testing.T) {
	for in, want := range map[string]bool{
		"file://nfs_01/a?blkid=0&size=1": true,
		"file://nfs_01/a?blkid":          true,
		"file://nfs_01/a?size=1":         false,
		"file://nfs_01/a":                false,
		"file://nfs_01/a?BLKID=1":        false,
	} {
		u, err := ParseDataURI(in)
		require.NoError(t, err)
		require.Equal(t, want, u.Shared(), in)
	}
}

func FuzzParseDataURI(f *testing.F) {
	for _, s := range []string{
		"file://nfs_01/tmp/nfs/inst0/tp0/499602d2_3c1a9f0e77d2b4a1?blkid=0&size=1024",
		"hf3fs://hf3fs_01/3fs/stage/kvcm/inst0/tp0/499602d2?size=1024",
		"mooncake://mc_01/?key=inst0/tp0/ffffffffffffffff&size=4096",
		"redis://test_redis_user:test_redis_password@localhost:6379/",
		"redis://h:0?timeout_ms=100&&x",
		"a://@:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseDataURI(s)
		if err != nil {
			require.ErrorIs(t, err, ErrBadDataURI)
			return
		}
		require.NotEmpty(t, u.Scheme)
		require.NotEmpty(t, u.Host)
		again, err := ParseDataURI(u.String())
		require.NoError(t, err)
		require.Equal(t, u, again)
		for k, v := range u.Params() {
			got, ok := u.Param(k)
			require.True(t, ok)
			require.Equal(t, v, got)
			_, _, _ = u.Uint(k)
		}
	})
}

func BenchmarkParseDataURI(b *testing.B) {
	b.ReportAllocs()
	const s = "file://nfs_01/tmp/nfs/inst0/tp0/499602d2_3c1a9f0e77d2b4a1?blkid=0&size=1024"
	for b.Loop() {
		if _, err := ParseDataURI(s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDataURIParam: parameters as KVCM's std::map holds them: the last value of a repeated
// name, the empty value of a name without '=', empty items skipped.
func TestDataURIParam(t *testing.T) {
	u, err := ParseDataURI("file://h/p?a&&b=1=2&a=x&=v&size=7&size=8")
	require.NoError(t, err)
	for name, want := range map[string]string{"a": "x", "b": "1=2", "": "v", "size": "8"} {
		got, ok := u.Param(name)
		require.True(t, ok, name)
		require.Equal(t, want, got, name)
	}
	_, ok := u.Param("blkid")
	require.False(t, ok)
	require.False(t, u.Shared())
	require.Equal(t, map[string]string{"a": "x", "b": "1=2", "": "v", "size": "8"}, u.Params())
	v, ok, err := u.Uint("size")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(8), v)
}

func BenchmarkParseDataURIShared(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		u, err := ParseDataURI("file://nfs_01/tmp/nfs/inst0/tp0/499602d2_3c1a9f0e77d2b4a1?blkid=0&size=1024")
		if err != nil || !u.Shared() {
			b.Fatal(err)
		}
	}
}

func TestSpecBytes(t *testing.T) {
	n, unknown := SpecBytes([]Spec{{URI: "file://nfs_01/r/i/tp0/1?size=1024"}, {URI: "pace://ssd_01/4096?media_type=5&size=2048"}})
	require.Equal(t, uint64(3072), n)
	require.Zero(t, unknown)
	n, unknown = SpecBytes([]Spec{{URI: "file://nfs_01/r/i/tp0/1"}, {URI: "::"}, {URI: "file://h/x?size=-1"}, {URI: "file://h/x?size=7"}})
	require.Equal(t, uint64(7), n)
	require.Equal(t, 3, unknown)
	n, _ = SpecBytes([]Spec{{URI: "file://h/x?size=18446744073709551615"}, {URI: "file://h/y?size=2"}})
	require.Equal(t, uint64(math.MaxUint64), n)
	n, unknown = SpecBytes(nil)
	require.Zero(t, n)
	require.Zero(t, unknown)
}
