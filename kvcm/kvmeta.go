package kvcm

import "strings"

// KVMeta (KVCM's generic-object side path, open upstream PR #341) keeps its objects as
// instances of their own, under KVCM's block keys and location fields, with states that mean
// something else: CLS_NEW for active and committed objects (their create_time a tagged
// deadline or a negative commit marker, not µs), CLS_DELETING for a durable cleanup record its
// own reclaimer replays. Nothing of it is kvcm-gc's to judge.
const (
	// KVMetaInstancePrefix starts every KVMeta instance id; KVCM reserves the whole prefix,
	// malformed or future versions included.
	KVMetaInstancePrefix = "__kv_meta_v1__"
	// KVMetaLocationPrefix starts every KVMeta location id.
	KVMetaLocationPrefix = "kvmeta:v1:"
	// KVMetaDir is the first component, below a storage's root, of every KVMeta object.
	KVMetaDir = "kvmeta"
)

// KVMeta's registry markers (manager/kv_meta_instance.h).
const (
	kvMetaModel = "__kv_meta_object__"
	kvMetaDtype = "opaque_bytes"
	kvMetaExtra = "kv_meta_v1"
	kvMetaSpec  = "value"
)

// IsKVMetaInstanceID reports whether id lies in KVMeta's reserved namespace.
func IsKVMetaInstanceID(id string) bool { return strings.HasPrefix(id, KVMetaInstancePrefix) }

// IsKVMetaLocationID reports whether a location id is KVMeta's.
func IsKVMetaLocationID(id string) bool { return strings.HasPrefix(id, KVMetaLocationPrefix) }

// KVMetaMarker says why the instance id with registry entry info (nil when the entry could not
// be read) is KVMeta's, "" when it is not: its id lies in the reserved namespace, or its entry
// carries any one of KVMeta's markers (model __kv_meta_object__, dtype opaque_bytes, extra
// kv_meta_v1, or a single spec "value" of size 1). KVCM itself calls an instance KVMeta only
// when the id and every marker agree (IsKvMetaInstance); kvcm-gc keeps its hands off on any
// one of them, so that a half-matching entry is never judged as ordinary KV cache.
func KVMetaMarker(id string, info *InstanceInfo) string {
	if IsKVMetaInstanceID(id) {
		return "instance id starts with " + KVMetaInstancePrefix
	}
	if info == nil {
		return ""
	}
	if IsKVMetaInstanceID(info.InstanceID) {
		return "instance_id starts with " + KVMetaInstancePrefix
	}
	switch {
	case info.DeploymentUnreadable:
		return "model_deployment unreadable (KVMeta's markers cannot be ruled out)"
	case info.ModelName == kvMetaModel:
		return "model_name " + kvMetaModel
	case info.Dtype == kvMetaDtype:
		return "dtype " + kvMetaDtype
	case info.DeploymentExtra == kvMetaExtra:
		return "model_deployment extra " + kvMetaExtra
	case len(info.LocationSpecs) == 1 && info.LocationSpecs[0].Name == kvMetaSpec && info.LocationSpecs[0].Size == 1:
		return "a single location spec \"value\" of size 1"
	}
	return ""
}
