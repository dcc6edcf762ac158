package kvcm

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
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
// kvcm-gc needs is decoded; of the quota section only the group's capacity (its items carry
// a duplicated "storage_type" key) and max_key_count (may be 2^64-1) is not interpreted.
type InstanceGroup struct {
	Name              string
	StorageCandidates []string
	// MetaStorageType and MetaStorageURI come from
	// cache_config.meta_indexer_config.meta_storage_backend_config{storage_type,storage_uri}.
	// KVCM's default when absent is "local" (MetaStoreLocal).
	MetaStorageType string
	MetaStorageURI  string
	// MetaPersistentType and MetaCacheType are, for a "cached" store only, the persistent_type
	// and cache_type parameters of MetaStorageURI, with KVCM's defaults ("redis", "local") when
	// absent or empty. KVCM reads them from the URI, not from the JSON.
	MetaPersistentType string
	MetaCacheType      string
	// DelayBeforeDeleteMs is cache_config.reclaim_strategy.delay_before_delete_ms (0 when absent).
	DelayBeforeDeleteMs int64
	// QuotaCapacity is quota.capacity: the bytes KVCM's reclaimer lets the group's registered
	// instances use together (0 when absent). There is no quota per instance.
	QuotaCapacity uint64
}

// The values of meta_storage_backend_config.storage_type KVCM knows
// (MetaStorageBackendFactory, MetaStorageBackendManager::Init). f6aa2b2 knows redis and local
// only; anything else fails the instance group there.
const (
	// MetaStoreRedis: the metadata lives in Redis, which is the truth. The only type kvcm-gc
	// collects.
	MetaStoreRedis = "redis"
	// MetaStoreLocal: in KVCM's memory only; KVCM's default when storage_type is absent.
	MetaStoreLocal = "local"
	// MetaStoreDummy: KVCM keeps no metadata.
	MetaStoreDummy = "dummy"
	// MetaStoreCached: KVCM's memory in front of a persistent store (persistent_type redis or
	// async_redis). Reads are served from memory once KVCM has recovered, and memory is written
	// back to Redis, so Redis is a lagging copy: what an outside process changes there is not
	// seen by KVCM and may be written back over.
	MetaStoreCached = "cached"
)

// KVCM's defaults of the cached store's URI parameters.
const (
	defaultPersistentType = "redis"
	defaultCacheType      = "local"
)

type instanceGroupJSON struct {
	Name string `json:"name"`
	// Quota is read apart (quotaCapacity): a value kvcm-gc does not expect there must not
	// fail the group.
	Quota             json.RawMessage `json:"quota"`
	StorageCandidates []string        `json:"storage_candidates"`
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
		MetaStorageType:     MetaStoreLocal,
		MetaStorageURI:      backend.StorageURI,
		DelayBeforeDeleteMs: j.CacheConfig.ReclaimStrategy.DelayBeforeDeleteMs,
		QuotaCapacity:       quotaCapacity(j.Quota),
	}
	if backend.StorageType != nil {
		g.MetaStorageType = *backend.StorageType
	}
	if g.MetaStorageType == MetaStoreCached {
		params := storeURIParams(g.MetaStorageURI)
		g.MetaPersistentType = cmp.Or(params["persistent_type"], defaultPersistentType)
		g.MetaCacheType = cmp.Or(params["cache_type"], defaultCacheType)
	}
	return g, nil
}

// quotaCapacity reads quota.capacity; 0 when absent or not a uint64 (it only scales an
// alert, never a decision).
func quotaCapacity(raw json.RawMessage) uint64 {
	var q struct {
		Capacity json.Number `json:"capacity"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &q) != nil {
		return 0
	}
	v, err := strconv.ParseUint(q.Capacity.String(), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// InstanceInfo is the value stored at kvcache_registry:<cluster>:<instance_id> field <instance_id>.
type InstanceInfo struct {
	InstanceID        string
	InstanceGroupName string
	QuotaGroupName    string
	BlockSize         int32
	LocationSpecs     []LocationSpecInfo
	// ModelName, Dtype and DeploymentExtra are model_deployment's model_name, dtype and extra
	// (KVMeta marks its instances with them).
	ModelName       string
	Dtype           string
	DeploymentExtra string
	// DeploymentUnreadable: model_deployment is present but not an object of those strings,
	// so whether the entry carries KVMeta's markers cannot be told.
	DeploymentUnreadable bool
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
	ModelDeployment json.RawMessage `json:"model_deployment"`
}

type modelDeploymentJSON struct {
	ModelName string `json:"model_name"`
	Dtype     string `json:"dtype"`
	Extra     string `json:"extra"`
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
	if len(j.ModelDeployment) > 0 && string(j.ModelDeployment) != "null" {
		var md modelDeploymentJSON
		if err := json.Unmarshal(j.ModelDeployment, &md); err != nil {
			info.DeploymentUnreadable = true
		}
		info.ModelName, info.Dtype, info.DeploymentExtra = md.ModelName, md.Dtype, md.Extra
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

// StoreURI is a metadata store URI (meta_storage_backend_config.storage_uri) as KVCM reads
// it with StandardUri::Parse: no percent-decoding, no case folding.
type StoreURI struct {
	// UserInfo is the raw text between "://" and the first '@' after it, wherever that '@'
	// is; KVCM's RedisClient sends it as the single argument of AUTH.
	UserInfo string
	Host     string
	// Port is 0 when the URI names none (KVCM then dials port 0, which fails).
	Port int64
	// Params is the query split on '&' and each item on its first '='; a later duplicate
	// wins, an item without '=' has the value "".
	Params map[string]string
}

// StoreURIError says why a metadata store URI is refused: KVCM cannot read it, or KVCM
// versions read it differently. It never holds the URI, which may hold credentials.
type StoreURIError struct{ Reason string }

func (e *StoreURIError) Error() string { return "bad meta store uri: " + e.Reason }

// ParseStoreURI reads s as KVCM's StandardUri::Parse does in f6aa2b2:
//
//   - the scheme is the text before the first "://"; KVCM's Redis client never reads it;
//   - the userinfo ends at the first '@' anywhere after "://", even in the path or query;
//   - host and port end at the first '/' or '?' after "://". When that one lies inside the
//     userinfo (a password holding '/' or '?'), KVCM's length computation wraps around and
//     host and port run to the end of the string: "redis://u:pa/ss@h:6379" is h:6379 with
//     userinfo "u:pa/ss", while "redis://u:pa/ss@h:6379/" has the port "6379/";
//   - the port is what strtoll reads (leading spaces and a sign allowed) and must take the
//     whole text after the first ':', else the parse fails;
//   - the query is parsed only when it follows a path or when there is no '/' at all.
//
// A newer StandardUri (whether it is on KVCM's main is not known) ends the userinfo at an
// '@' inside the authority only and reads ports with from_chars. Where both versions read a
// server and they differ (an '@' after the host, a '/' in a query without a path), the URI
// is refused: kvcm-gc could not know which Redis, database or credentials KVCM uses. Where
// only f6aa2b2's reading yields a server (a '/' or '?' in the password, a "+" port), that is
// the only server a working KVCM can be using, and it is taken.
//
// An empty scheme is refused (StandardUri::Valid is false). Errors are *StoreURIError.
func ParseStoreURI(s string) (StoreURI, error) {
	old, why := parseStandardURIf6aa2b2(s)
	if why != "" {
		return StoreURI{}, &StoreURIError{Reason: why}
	}
	if old.Scheme == "" {
		return StoreURI{}, &StoreURIError{Reason: "empty scheme (KVCM's URI is not valid)"}
	}
	if nu, ok := parseStandardURINewer(s); ok && nu.Host != "" && nu.Port != 0 &&
		(nu.UserInfo != old.UserInfo || nu.Host != old.Host || nu.Port != old.Port || !maps.Equal(nu.Params, old.Params)) {
		return StoreURI{}, &StoreURIError{Reason: "KVCM versions read different servers, credentials or parameters from it " +
			"(an '@' after the host, or a '/' in a query without a path before it)"}
	}
	return StoreURI{UserInfo: old.UserInfo, Host: old.Host, Port: old.Port, Params: old.Params}, nil
}

// ParamInt64 reads a parameter as StandardUri::GetParamAs<int64_t> does (std::from_chars):
// an optional '-', then digits, taking the whole value, within int64. ok is false when the
// parameter is absent, empty or anything else, which leaves KVCM's value unchanged.
func (u StoreURI) ParamInt64(name string) (v int64, ok bool) {
	return fromCharsInt64(u.Params[name])
}

// storeURIParams returns the query parameters of a metadata store URI as either KVCM version
// reads them, nil when neither can. It serves reports only (the cached store's types).
func storeURIParams(s string) map[string]string {
	if u, why := parseStandardURIf6aa2b2(s); why == "" {
		return u.Params
	}
	if u, ok := parseStandardURINewer(s); ok {
		return u.Params
	}
	return nil
}
