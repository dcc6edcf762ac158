package kvcm

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A group as KVCM writes it: quota_config items carry "storage_type" twice and max_key_count
// is 2^64-1.
const groupRedisJSON = `{"name":"group_a","storage_candidates":["nfs_01","hf3fs_01"],` +
	`"global_quota_group_name":"gq","max_instance_count":100,` +
	`"quota":{"capacity":107374182400,"quota_config":[{"storage_type":"file","capacity":1024,"storage_type":4},` +
	`{"storage_type":"hf3fs","capacity":2048,"storage_type":1}]},` +
	`"cache_config":{"reclaim_strategy":{"storage_unique_name":"","reclaim_policy":1,` +
	`"trigger_strategy":{"used_size":0,"used_percentage":0.8},"trigger_period_seconds":60,` +
	`"reclaim_step_size":0,"reclaim_step_percentage":10,"delay_before_delete_ms":5000},` +
	`"cache_prefer_strategy":2,"meta_indexer_config":{"max_key_count":18446744073709551615,` +
	`"mutex_shard_num":16,"batch_key_size":16,"meta_storage_backend_config":{"storage_type":"redis",` +
	`"storage_uri":"redis://test_redis_user:test_redis_password@localhost:6379/"},` +
	`"meta_cache_policy_config":{"capacity":1024}}},"user_data":"","version":3}`

// decodeCase is one row of a decoder's table: in decodes to want, or fails when wantErr.
type decodeCase[T any] struct {
	name    string
	in      string
	want    T
	wantErr bool
}

// testDecode runs each case through decode as a subtest.
func testDecode[T any](t *testing.T, decode func([]byte) (T, error), tests []decodeCase[T]) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decode([]byte(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeInstanceGroup(t *testing.T) {
	testDecode(t, DecodeInstanceGroup, []decodeCase[InstanceGroup]{
		{
			name: "redis group with quota quirks",
			in:   groupRedisJSON,
			want: InstanceGroup{Name: "group_a", StorageCandidates: []string{"nfs_01", "hf3fs_01"},
				MetaStorageType: "redis", MetaStorageURI: "redis://test_redis_user:test_redis_password@localhost:6379/",
				DelayBeforeDeleteMs: 5000, QuotaCapacity: 107374182400},
		},
		{
			name: "a quota kvcm-gc cannot read is 0, the group still decodes",
			in:   `{"name":"g","quota":{"capacity":-1}}`,
			want: InstanceGroup{Name: "g", MetaStorageType: "local"},
		},
		{
			name: "no meta storage backend config",
			in:   `{"name":"g","storage_candidates":["nfs_01"],"cache_config":{"meta_indexer_config":{"max_key_count":18446744073709551615}}}`,
			want: InstanceGroup{Name: "g", StorageCandidates: []string{"nfs_01"}, MetaStorageType: "local"},
		},
		{
			name: "no cache config",
			in:   `{"name":"g"}`,
			want: InstanceGroup{Name: "g", MetaStorageType: "local"},
		},
		{
			name: "local with uri",
			in:   `{"name":"g","cache_config":{"meta_indexer_config":{"meta_storage_backend_config":{"storage_type":"local","storage_uri":"file:///w/meta_storage"}}}}`,
			want: InstanceGroup{Name: "g", MetaStorageType: "local", MetaStorageURI: "file:///w/meta_storage"},
		},
		{
			name: "dummy",
			in:   `{"name":"g","cache_config":{"meta_indexer_config":{"meta_storage_backend_config":{"storage_type":"dummy","storage_uri":""}}}}`,
			want: InstanceGroup{Name: "g", MetaStorageType: "dummy"},
		},
		{
			name: "cached over async redis",
			in: `{"name":"g","cache_config":{"meta_indexer_config":{"meta_storage_backend_config":{"storage_type":"cached",` +
				`"storage_uri":"redis://tok@10.0.0.5:6379/?db=3&persistent_type=async_redis&cache_type=local&async_queue_count=8"}}}}`,
			want: InstanceGroup{Name: "g", MetaStorageType: "cached",
				MetaStorageURI:     "redis://tok@10.0.0.5:6379/?db=3&persistent_type=async_redis&cache_type=local&async_queue_count=8",
				MetaPersistentType: "async_redis", MetaCacheType: "local"},
		},
		{
			name: "cached with KVCM's defaults",
			in:   `{"name":"g","cache_config":{"meta_indexer_config":{"meta_storage_backend_config":{"storage_type":"cached","storage_uri":"redis://h:1?persistent_type="}}}}`,
			want: InstanceGroup{Name: "g", MetaStorageType: "cached", MetaStorageURI: "redis://h:1?persistent_type=",
				MetaPersistentType: "redis", MetaCacheType: "local"},
		},
		{
			name: "cached, a URI KVCM cannot read: the defaults",
			in:   `{"name":"g","cache_config":{"meta_indexer_config":{"meta_storage_backend_config":{"storage_type":"cached","storage_uri":"redis://h:x?persistent_type=dummy"}}}}`,
			want: InstanceGroup{Name: "g", MetaStorageType: "cached", MetaStorageURI: "redis://h:x?persistent_type=dummy",
				MetaPersistentType: "redis", MetaCacheType: "local"},
		},
		{
			name: "unknown type kept as is",
			in:   `{"name":"g","cache_config":{"meta_indexer_config":{"meta_storage_backend_config":{"storage_type":"Redis"}}}}`,
			want: InstanceGroup{Name: "g", MetaStorageType: "Redis"},
		},
		{
			name: "empty type is not the default",
			in:   `{"name":"g","cache_config":{"meta_indexer_config":{"meta_storage_backend_config":{"storage_type":""}}}}`,
			want: InstanceGroup{Name: "g", MetaStorageType: ""},
		},
		{name: "not json", in: `{"name":`, wantErr: true},
		{name: "not an object", in: `[]`, wantErr: true},
		{name: "wrong type", in: `{"name":1}`, wantErr: true},
		{name: "trailing garbage", in: `{"name":"g"} x`, wantErr: true},
	})
}

func TestDecodeStorageConfig(t *testing.T) {
	testDecode(t, DecodeStorageConfig, []decodeCase[StorageConfig]{
		{
			name: "file",
			in:   `{"type":"file","is_available":true,"global_unique_name":"nfs_01","storage_spec":{"root_path":"/tmp/nfs/","key_count_per_file":8}}`,
			want: StorageConfig{Type: TypeFile, TypeName: "file", Available: true, Name: "nfs_01", RootPath: "/tmp/nfs/",
				KeyCountPerFile: 8, Spec: []byte(`{"root_path":"/tmp/nfs/","key_count_per_file":8}`)},
		},
		{
			name: "file without key_count_per_file",
			in:   `{"type":"file","is_available":false,"global_unique_name":"test_storage_01","storage_spec":{"root_path":"/tmp/test_storage_01"}}`,
			want: StorageConfig{Type: TypeFile, TypeName: "file", Name: "test_storage_01", RootPath: "/tmp/test_storage_01",
				KeyCountPerFile: 1, Spec: []byte(`{"root_path":"/tmp/test_storage_01"}`)},
		},
		{
			name: "hf3fs",
			in: `{"type":"hf3fs","is_available":true,"global_unique_name":"hf3fs_01","storage_spec":` +
				`{"cluster_name":"c","mountpoint":"/3fs/stage","root_dir":"kvcm/","key_count_per_file":1}}`,
			want: StorageConfig{Type: TypeHF3FS, TypeName: "hf3fs", Available: true, Name: "hf3fs_01",
				Mountpoint: "/3fs/stage", RootDir: "kvcm/", KeyCountPerFile: 1,
				Spec: []byte(`{"cluster_name":"c","mountpoint":"/3fs/stage","root_dir":"kvcm/","key_count_per_file":1}`)},
		},
		{
			name: "mooncake",
			in: `{"type":"mooncake","is_available":true,"global_unique_name":"mc_01","storage_spec":` +
				`{"local_hostname":"10.0.0.1","metadata_connstring":"http://m:8080/metadata","protocol":"rdma",` +
				`"rdma_device":"mlx5_0","master_server_entry":"10.0.0.2:50051"}}`,
			want: StorageConfig{Type: TypeMooncake, TypeName: "mooncake", Available: true, Name: "mc_01", KeyCountPerFile: 1,
				Spec: []byte(`{"local_hostname":"10.0.0.1","metadata_connstring":"http://m:8080/metadata","protocol":"rdma",` +
					`"rdma_device":"mlx5_0","master_server_entry":"10.0.0.2:50051"}`)},
		},
		{
			name: "unknown type, unknown members, no spec",
			in:   `{"type":"s3","is_available":true,"global_unique_name":"s","future":[1,{"a":null}]}`,
			want: StorageConfig{Type: TypeUnknown, TypeName: "s3", Available: true, Name: "s", KeyCountPerFile: 1},
		},
		{name: "not json", in: `{`, wantErr: true},
		{name: "spec not an object", in: `{"type":"file","storage_spec":[1]}`, wantErr: true},
		{name: "negative key count", in: `{"type":"file","storage_spec":{"key_count_per_file":-1}}`, wantErr: true},
	})
}

func TestDecodeInstanceInfo(t *testing.T) {
	testDecode(t, DecodeInstanceInfo, []decodeCase[InstanceInfo]{
		{
			name: "full",
			in: `{"quota_group_name":"q","instance_group_name":"group_a","instance_id":"inst0","block_size":64,` +
				`"location_spec_infos":[{"name":"tp0","size":1048576},{"name":"tp1","size":1048576}],` +
				`"model_deployment":{"model_name":"m","dtype":"bf16","use_mla":false,"tp_size":2,"dp_size":1,` +
				`"lora_name":"","pp_size":1,"extra":"","user_data":""},"location_spec_groups":[{"name":"g","spec_names":["tp0","tp1"]}]}`,
			want: InstanceInfo{InstanceID: "inst0", InstanceGroupName: "group_a", QuotaGroupName: "q", BlockSize: 64,
				LocationSpecs: []LocationSpecInfo{{Name: "tp0", Size: 1048576}, {Name: "tp1", Size: 1048576}},
				ModelName:     "m", Dtype: "bf16"},
		},
		{
			name: "model_deployment of the wrong shape",
			in:   `{"instance_id":"inst0","model_deployment":{"model_name":7}}`,
			want: InstanceInfo{InstanceID: "inst0", BlockSize: -1, DeploymentUnreadable: true},
		},
		{
			name: "defaults",
			in:   `{"instance_id":"inst0"}`,
			want: InstanceInfo{InstanceID: "inst0", BlockSize: -1},
		},
		{name: "block size overflow", in: `{"block_size":4294967296}`, wantErr: true},
		{name: "not json", in: `nope`, wantErr: true},
	})
}

func FuzzDecodeStorageConfig(f *testing.F) {
	f.Add([]byte(`{"type":"file","is_available":true,"global_unique_name":"nfs_01","storage_spec":{"root_path":"/tmp/nfs/","key_count_per_file":8}}`))
	f.Add([]byte(`{"type":"hf3fs","global_unique_name":"h","storage_spec":{"mountpoint":"/3fs","root_dir":"x"}}`))
	f.Add([]byte(`{"type":"mooncake","storage_spec":null}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := DecodeStorageConfig(raw)
		if err == nil {
			st, _ := ParseStorageType(c.TypeName)
			require.Equal(t, st, c.Type)
		}
	})
}

func FuzzDecodeInstanceGroup(f *testing.F) {
	f.Add([]byte(groupRedisJSON))
	f.Add([]byte(`{"name":"g","cache_config":{"meta_indexer_config":{}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = DecodeInstanceGroup(raw)
	})
}

func FuzzDecodeInstanceInfo(f *testing.F) {
	f.Add([]byte(`{"quota_group_name":"q","instance_group_name":"group_a","instance_id":"inst0","block_size":64,"location_spec_infos":[{"name":"tp0","size":1048576}]}`))
	f.Add([]byte(`{"instance_id":"inst0"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = DecodeInstanceInfo(raw)
	})
}

// TestParseStoreURI: each form of a metadata store URI and what KVCM's parser makes of it
// (host, port, the userinfo AUTH gets, the parameters), or why it is refused.
func TestParseStoreURI(t *testing.T) {
	tests := []struct {
		uri     string
		want    StoreURI
		wantErr string // substring of the reason; "" means success
	}{
		{uri: "redis://h:6379", want: StoreURI{Host: "h", Port: 6379}},
		{uri: "redis://h", want: StoreURI{Host: "h"}},
		{uri: "tcp://h:6379", want: StoreURI{Host: "h", Port: 6379}},
		{uri: "rediss://h:6379", want: StoreURI{Host: "h", Port: 6379}},
		{uri: "x://h:6379", want: StoreURI{Host: "h", Port: 6379}},
		{uri: "redis://user:pw@h:6379", want: StoreURI{UserInfo: "user:pw", Host: "h", Port: 6379}},
		{uri: "redis://tok@h:6379/?db=3&timeout_ms=500",
			want: StoreURI{UserInfo: "tok", Host: "h", Port: 6379, Params: map[string]string{"db": "3", "timeout_ms": "500"}}},
		{uri: "redis://h:6379/3", want: StoreURI{Host: "h", Port: 6379}},
		// A '/' or '?' in the password: host and port run to the end of the string.
		{uri: "redis://user:pa/ss@h:6379", want: StoreURI{UserInfo: "user:pa/ss", Host: "h", Port: 6379}},
		{uri: "redis://user:pa?ss@h:6379", want: StoreURI{UserInfo: "user:pa?ss", Host: "h", Port: 6379,
			Params: map[string]string{"ss@h:6379": ""}}},
		{uri: "redis://user:pa/ss@h:6379/", wantErr: "a '/' or '?' in the userinfo"},
		{uri: "redis://user:pa/ss@h:6379?db=1", wantErr: "a '/' or '?' in the userinfo"},
		{uri: "redis://user:pa?ss@h:6379/?db=2", wantErr: "a '/' or '?' in the userinfo"},
		// The first '@' wins.
		{uri: "redis://user:p@ss@h:6379", want: StoreURI{UserInfo: "user:p", Host: "ss@h", Port: 6379}},
		// strtoll: a sign and leading spaces are read, the whole text must be taken.
		{uri: "redis://h:+6379", want: StoreURI{Host: "h", Port: 6379}},
		{uri: "redis://h: 6379", want: StoreURI{Host: "h", Port: 6379}},
		{uri: "redis://h:-1", want: StoreURI{Host: "h", Port: -1}},
		{uri: "redis://h:99999", want: StoreURI{Host: "h", Port: 99999}},
		{uri: "redis://h:0", want: StoreURI{Host: "h"}},
		{uri: "redis://h:", wantErr: "not a decimal"},
		{uri: "redis://h:6379x", wantErr: "not a decimal"},
		{uri: "redis://h:6379 ", wantErr: "not a decimal"},
		{uri: "redis://h:99999999999999999999", wantErr: "not a decimal"},
		{uri: "redis://[::1]:6379", wantErr: "not a decimal"},
		// Parameters: '&' and the first '='; duplicates keep the last; no decoding.
		{uri: "redis://h:1?a=b=c&db=1&db=2&flag&&x=%31",
			want: StoreURI{Host: "h", Port: 1, Params: map[string]string{"a": "b=c", "db": "2", "flag": "", "": "", "x": "%31"}}},
		// An '@' after the host: f6aa2b2 takes it as the end of the userinfo, the newer
		// parser does not; when both read a server, they read different ones.
		{uri: "redis://h:6379/?x=a@b:1", wantErr: "KVCM versions read different"},
		{uri: "redis://h:6379/?x=a@b", wantErr: "KVCM versions read different"}, // f6aa2b2: host b, port 0
		{uri: "redis://h:6379/x@b:1", wantErr: "KVCM versions read different"},
		// Where only f6aa2b2 reads a server, it is taken, '@' after the host or not.
		{uri: "redis://pa/ss@h:6379", want: StoreURI{UserInfo: "pa/ss", Host: "h", Port: 6379}}, // newer: "pa", port 0
		// A '/' in a query without a path: f6aa2b2 drops the parameters, the newer keeps them.
		{uri: "redis://h:6379?db=3&x=/y", wantErr: "KVCM versions read different"},
		{uri: "redis://h:6379?x=/y", wantErr: "KVCM versions read different"},
		{uri: "redis://h:6379/p?x=/y", want: StoreURI{Host: "h", Port: 6379, Params: map[string]string{"x": "/y"}}},
		{uri: "h:6379", wantErr: `no "://"`},
		{uri: "", wantErr: `no "://"`},
		{uri: "://h:6379", wantErr: "empty scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.uri, func(t *testing.T) {
			got, err := ParseStoreURI(tc.uri)
			if tc.wantErr != "" {
				var se *StoreURIError
				require.True(t, errors.As(err, &se), "err %v", err)
				require.Contains(t, se.Reason, tc.wantErr)
				return
			}
			require.NoError(t, err)
			if tc.want.Params == nil && len(got.Params) == 0 {
				got.Params = nil
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestStoreURIParamInt64(t *testing.T) {
	u := StoreURI{Params: map[string]string{"a": "3", "b": "-3", "c": "+3", "d": "", "e": "03", "f": "3x", "g": " 3",
		"h": "9223372036854775807", "i": "9223372036854775808", "j": "0x10", "k": "-0", "l": "-"}}
	tests := []struct {
		name string
		v    int64
		ok   bool
	}{
		{"a", 3, true}, {"b", -3, true}, {"c", 0, false}, {"d", 0, false}, {"e", 3, true}, {"f", 0, false},
		{"g", 0, false}, {"h", 9223372036854775807, true}, {"i", 0, false}, {"j", 0, false}, {"k", 0, true},
		{"l", 0, false}, {"absent", 0, false},
	}
	for _, tc := range tests {
		v, ok := u.ParamInt64(tc.name)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.v, v, tc.name)
	}
}

// FuzzParseStoreURI: store URIs are outside bytes. Parsing never panics and a refusal never
// holds the URI's text.
func FuzzParseStoreURI(f *testing.F) {
	for _, s := range []string{"redis://h:1", "redis://u:pa/ss@h:6379", "redis://u:p?w@h:1/?db=3", "x://@:?&=", "redis://h:+1",
		"redis://h:6379/?x=a@b:1", "redis://h:1?db=3&x=/y", "://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseStoreURI(s)
		if err != nil {
			var se *StoreURIError
			require.True(t, errors.As(err, &se))
			if len(s) >= 8 {
				require.NotContains(t, se.Reason, s)
			}
			return
		}
		require.True(t, strings.Contains(s, "://"))
		require.True(t, strings.Contains(s, u.Host))
	})
}
