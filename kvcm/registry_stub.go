package kvcm

// THIS FILE IS THE API CONTRACT for the registry's JSON records. Signatures are fixed.

import "encoding/json"

// StorageConfig is a value of the kvcache_registry:<cluster>:storage hash.
type StorageConfig struct {
	Type            StorageType     // from the "type" string; TypeUnknown when unrecognised
	TypeName        string          // the raw "type" string
	Available       bool            // is_available
	Name            string          // global_unique_name
	RootPath        string          // file: storage_spec.root_path
	Mountpoint      string          // hf3fs/vcns_hf3fs: storage_spec.mountpoint
	RootDir         string          // hf3fs/vcns_hf3fs: storage_spec.root_dir
	KeyCountPerFile uint64          // file/hf3fs: storage_spec.key_count_per_file (KVCM default 1 when absent)
	Spec            json.RawMessage // the whole storage_spec, untouched
}

// DecodeStorageConfig decodes one StorageConfig JSON. Unknown members are ignored.
func DecodeStorageConfig(raw []byte) (StorageConfig, error) { panic("stub") }

// InstanceGroup is a value of the kvcache_registry:<cluster>:instance_group hash. Only what
// kvcm-gc needs is decoded; the quota section (with its duplicated "storage_type" key) and
// max_key_count (may be 2^64-1) are tolerated and not interpreted.
type InstanceGroup struct {
	Name              string
	StorageCandidates []string
	// MetaStorageType and MetaStorageURI come from
	// cache_config.meta_indexer_config.meta_storage_backend_config{storage_type,storage_uri}.
	// KVCM's default when absent is "local".
	MetaStorageType string
	MetaStorageURI  string
	// DelayBeforeDeleteMs is cache_config.reclaim_strategy.delay_before_delete_ms (0 when absent).
	DelayBeforeDeleteMs int64
}

// DecodeInstanceGroup decodes one InstanceGroup JSON.
func DecodeInstanceGroup(raw []byte) (InstanceGroup, error) { panic("stub") }

// InstanceInfo is the value stored at kvcache_registry:<cluster>:<instance_id> field <instance_id>.
type InstanceInfo struct {
	InstanceID        string
	InstanceGroupName string
	QuotaGroupName    string
	BlockSize         int32
	LocationSpecs     []LocationSpecInfo
}

// LocationSpecInfo is {name,size} in InstanceInfo.location_spec_infos.
type LocationSpecInfo struct {
	Name string
	Size int64
}

// DecodeInstanceInfo decodes one InstanceInfo JSON.
func DecodeInstanceInfo(raw []byte) (InstanceInfo, error) { panic("stub") }
