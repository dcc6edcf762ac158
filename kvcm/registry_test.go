package kvcm

import (
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

func TestDecodeInstanceGroup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    InstanceGroup
		wantErr bool
	}{
		{
			name: "redis group with quota quirks",
			in:   groupRedisJSON,
			want: InstanceGroup{Name: "group_a", StorageCandidates: []string{"nfs_01", "hf3fs_01"},
				MetaStorageType: "redis", MetaStorageURI: "redis://test_redis_user:test_redis_password@localhost:6379/",
				DelayBeforeDeleteMs: 5000},
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
		{name: "not json", in: `{"name":`, wantErr: true},
		{name: "not an object", in: `[]`, wantErr: true},
		{name: "wrong type", in: `{"name":1}`, wantErr: true},
		{name: "trailing garbage", in: `{"name":"g"} x`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeInstanceGroup([]byte(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeStorageConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    StorageConfig
		wantErr bool
	}{
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeStorageConfig([]byte(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeInstanceInfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    InstanceInfo
		wantErr bool
	}{
		{
			name: "full",
			in: `{"quota_group_name":"q","instance_group_name":"group_a","instance_id":"inst0","block_size":64,` +
				`"location_spec_infos":[{"name":"tp0","size":1048576},{"name":"tp1","size":1048576}],` +
				`"model_deployment":{"model_name":"m","dtype":"bf16","use_mla":false,"tp_size":2,"dp_size":1,` +
				`"lora_name":"","pp_size":1,"extra":"","user_data":""},"location_spec_groups":[{"name":"g","spec_names":["tp0","tp1"]}]}`,
			want: InstanceInfo{InstanceID: "inst0", InstanceGroupName: "group_a", QuotaGroupName: "q", BlockSize: 64,
				LocationSpecs: []LocationSpecInfo{{Name: "tp0", Size: 1048576}, {Name: "tp1", Size: 1048576}}},
		},
		{
			name: "defaults",
			in:   `{"instance_id":"inst0"}`,
			want: InstanceInfo{InstanceID: "inst0", BlockSize: -1},
		},
		{name: "block size overflow", in: `{"block_size":4294967296}`, wantErr: true},
		{name: "not json", in: `nope`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeInstanceInfo([]byte(tt.in))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
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
