package kvcm

import (
	"encoding/json"
	"fmt"
)

// The registry records are decoded with encoding/json into structs that name only the members
// kvcm-gc reads. Members not named are skipped unparsed (still syntax-checked), which is what
// makes two KVCM quirks harmless: quota_config items carry the key "storage_type" twice (a
// string, then a number) and max_key_count may be 2^64-1, neither of which fits a strict
// decoder. encoding/json matches member names case-insensitively where rapidjson does not;
// KVCM never writes two names differing only in case.

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

type storageConfigJSON struct {
	Type        string          `json:"type"`
	IsAvailable bool            `json:"is_available"`
	Name        string          `json:"global_unique_name"`
	StorageSpec json.RawMessage `json:"storage_spec"`
}

type storageSpecJSON struct {
	RootPath        string  `json:"root_path"`
	Mountpoint      string  `json:"mountpoint"`
	RootDir         string  `json:"root_dir"`
	KeyCountPerFile *uint64 `json:"key_count_per_file"`
}

// DecodeStorageConfig decodes one StorageConfig JSON. Unknown members are ignored.
func DecodeStorageConfig(raw []byte) (StorageConfig, error) {
	var j storageConfigJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return StorageConfig{}, fmt.Errorf("decode storage config: %w", err)
	}
	c := StorageConfig{
		TypeName:        j.Type,
		Available:       j.IsAvailable,
		Name:            j.Name,
		KeyCountPerFile: 1,
	}
	c.Type, _ = ParseStorageType(j.Type)
	if len(j.StorageSpec) > 0 && string(j.StorageSpec) != "null" {
		c.Spec = j.StorageSpec // Unmarshal already copied it out of raw
		var s storageSpecJSON
		if err := json.Unmarshal(j.StorageSpec, &s); err != nil {
			return StorageConfig{}, fmt.Errorf("decode storage config %q: storage_spec: %w", j.Name, err)
		}
		c.RootPath, c.Mountpoint, c.RootDir = s.RootPath, s.Mountpoint, s.RootDir
		if s.KeyCountPerFile != nil {
			c.KeyCountPerFile = *s.KeyCountPerFile
		}
	}
	return c, nil
}

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

// metaStorageLocal is KVCM's default meta storage backend type: in-process, not in Redis.
const metaStorageLocal = "local"

type instanceGroupJSON struct {
	Name              string   `json:"name"`
	StorageCandidates []string `json:"storage_candidates"`
	CacheConfig       struct {
		ReclaimStrategy struct {
			DelayBeforeDeleteMs int64 `json:"delay_before_delete_ms"`
		} `json:"reclaim_strategy"`
		MetaIndexerConfig struct {
			MetaStorageBackendConfig struct {
				StorageType *string `json:"storage_type"`
				StorageURI  string  `json:"storage_uri"`
			} `json:"meta_storage_backend_config"`
		} `json:"meta_indexer_config"`
	} `json:"cache_config"`
}

// DecodeInstanceGroup decodes one InstanceGroup JSON.
func DecodeInstanceGroup(raw []byte) (InstanceGroup, error) {
	var j instanceGroupJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return InstanceGroup{}, fmt.Errorf("decode instance group: %w", err)
	}
	backend := j.CacheConfig.MetaIndexerConfig.MetaStorageBackendConfig
	g := InstanceGroup{
		Name:                j.Name,
		StorageCandidates:   j.StorageCandidates,
		MetaStorageType:     metaStorageLocal,
		MetaStorageURI:      backend.StorageURI,
		DelayBeforeDeleteMs: j.CacheConfig.ReclaimStrategy.DelayBeforeDeleteMs,
	}
	if backend.StorageType != nil {
		g.MetaStorageType = *backend.StorageType
	}
	return g, nil
}

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

// defaultBlockSize is KVCM's InstanceInfo.block_size when the member is absent.
const defaultBlockSize = -1

type instanceInfoJSON struct {
	QuotaGroupName    string `json:"quota_group_name"`
	InstanceGroupName string `json:"instance_group_name"`
	InstanceID        string `json:"instance_id"`
	BlockSize         *int32 `json:"block_size"`
	LocationSpecInfos []struct {
		Name string `json:"name"`
		Size int64  `json:"size"`
	} `json:"location_spec_infos"`
}

// DecodeInstanceInfo decodes one InstanceInfo JSON.
func DecodeInstanceInfo(raw []byte) (InstanceInfo, error) {
	var j instanceInfoJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return InstanceInfo{}, fmt.Errorf("decode instance info: %w", err)
	}
	info := InstanceInfo{
		InstanceID:        j.InstanceID,
		InstanceGroupName: j.InstanceGroupName,
		QuotaGroupName:    j.QuotaGroupName,
		BlockSize:         defaultBlockSize,
	}
	if j.BlockSize != nil {
		info.BlockSize = *j.BlockSize
	}
	if len(j.LocationSpecInfos) > 0 {
		info.LocationSpecs = make([]LocationSpecInfo, len(j.LocationSpecInfos))
		for i, s := range j.LocationSpecInfos {
			info.LocationSpecs[i] = LocationSpecInfo{Name: s.Name, Size: s.Size}
		}
	}
	return info, nil
}
