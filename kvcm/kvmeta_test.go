package kvcm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKVMetaMarker(t *testing.T) {
	plain := &InstanceInfo{InstanceID: "inst0", ModelName: "qwen", Dtype: "bf16",
		LocationSpecs: []LocationSpecInfo{{Name: "tp0", Size: 1 << 20}}}
	require.Empty(t, KVMetaMarker("inst0", plain))
	require.Empty(t, KVMetaMarker("inst0", nil))
	require.Empty(t, KVMetaMarker("__kv_meta_v0__61", nil), "another version's prefix is not this one")
	for _, c := range []struct {
		id   string
		info *InstanceInfo
		want string
	}{
		{"__kv_meta_v1__656d62", nil, "instance id starts with __kv_meta_v1__"},
		{"__kv_meta_v1__", plain, "instance id starts with __kv_meta_v1__"}, // malformed: reserved all the same
		{"__kv_meta_v1__ZZ", plain, "instance id starts with __kv_meta_v1__"},
		{"inst0", &InstanceInfo{InstanceID: "__kv_meta_v1__61"}, "instance_id starts with __kv_meta_v1__"},
		{"inst0", &InstanceInfo{ModelName: "__kv_meta_object__"}, "model_name __kv_meta_object__"},
		{"inst0", &InstanceInfo{Dtype: "opaque_bytes"}, "dtype opaque_bytes"},
		{"inst0", &InstanceInfo{DeploymentExtra: "kv_meta_v1"}, "model_deployment extra kv_meta_v1"},
		{"inst0", &InstanceInfo{LocationSpecs: []LocationSpecInfo{{Name: "value", Size: 1}}}, `a single location spec "value" of size 1`},
		{"inst0", &InstanceInfo{DeploymentUnreadable: true}, "model_deployment unreadable (KVMeta's markers cannot be ruled out)"},
	} {
		require.Equal(t, c.want, KVMetaMarker(c.id, c.info), c.id)
	}
	require.Empty(t, KVMetaMarker("inst0", &InstanceInfo{LocationSpecs: []LocationSpecInfo{{Name: "value", Size: 4096}}}))

	// The registry's JSON carries the markers in model_deployment.
	info, err := DecodeInstanceInfo([]byte(`{"quota_group_name":"q","instance_group_name":"g","instance_id":"__kv_meta_v1__656d62",` +
		`"block_size":1,"location_spec_infos":[{"name":"value","size":1}],"model_deployment":{"model_name":"__kv_meta_object__",` +
		`"dtype":"opaque_bytes","use_mla":false,"tp_size":1,"dp_size":1,"lora_name":"","pp_size":1,"extra":"kv_meta_v1","user_data":""},` +
		`"location_spec_groups":[],"default_query_type":1}`))
	require.NoError(t, err)
	require.Equal(t, "__kv_meta_object__", info.ModelName)
	require.Equal(t, "opaque_bytes", info.Dtype)
	require.Equal(t, "kv_meta_v1", info.DeploymentExtra)
	require.NotEmpty(t, KVMetaMarker("other", &info))

	require.True(t, IsKVMetaLocationID("kvmeta:v1:6b6579"))
	require.False(t, IsKVMetaLocationID("kvmeta:v2:x"))
}
