package redismeta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Skip reasons of a registry snapshot. Each is a constant prefix; details follow ": …".
const (
	SkipInfoMissing    = "instance info missing"
	SkipBadInfo        = "bad instance info json"
	SkipInfoIDMismatch = "instance info id mismatch"
	SkipUnknownGroup   = "unknown instance group"
	SkipBadGroup       = "bad instance group json"
	// The group's metadata store is not one kvcm-gc collects: only in KVCM's memory (local),
	// nowhere (dummy), Redis behind KVCM's memory (cached), or a type kvcm-gc does not know.
	SkipLocalStore       = "local meta store"
	SkipDummyStore       = "dummy meta store"
	SkipCachedStore      = "cached meta store"
	SkipUnknownStoreType = "unknown meta store type"
	SkipNoStoreURI       = "meta store uri missing"
	SkipBadStoreURI      = "bad meta store uri"
	SkipBadStorage       = "bad storage config json"
	// SkipKVMeta: an instance of KVCM's KVMeta side path (open upstream PR #341): its id lies
	// in the reserved __kv_meta_v1__ namespace, or its record carries a KVMeta marker. Its
	// CLS_NEW and CLS_DELETING locations are KVMeta's own states, which its reclaimer owns.
	SkipKVMeta = "kvmeta instance"
)

// RegistryOptions configure a RegistryReader.
type RegistryOptions struct {
	// Cluster is KVCM's cluster_name: the registry lives under kvcache_registry:<Cluster>:.
	Cluster string
	// GroupStoreURIs replaces the metadata store URI of instance groups (group name → URI),
	// for example to give kvcm-gc its own credentials or a TLS endpoint. They are kvcm-gc's
	// own URIs, read strictly (ApplyURI: rediss means TLS). Groups whose KVCM store is not
	// "redis" stay skipped: there is no Redis to reach, or it is not the truth.
	GroupStoreURIs map[string]string
	// Learn, when set, is told the URI behind every store name of a snapshot (Pool.Learn),
	// so the store can be opened by name later: a registry URI with KVCMURIPrefix in front,
	// to be read as KVCM reads it (ApplyKVCMURI), an override of GroupStoreURIs as it is. It
	// may be called from ReadRegistry.
	Learn func(name, uri string)
	// Logger receives one line per skipped registry entry at debug level; nil discards.
	Logger *slog.Logger
}

// RegistryReader reads snapshots of a KVCM registry with read commands only (HGETALL,
// HGET), so it works as an ACL user with "+hgetall +hget".
type RegistryReader struct {
	c         redis.UniversalClient
	prefix    string
	overrides map[string]string
	learn     func(name, uri string)
	log       *slog.Logger
}

var _ meta.RegistryReader = (*RegistryReader)(nil)

// NewRegistryReader wraps c, which it owns from now on (Close closes it). The override URIs
// are checked here, so a typo fails at startup rather than skipping a group every round.
func NewRegistryReader(c redis.UniversalClient, o RegistryOptions) (*RegistryReader, error) {
	if o.Cluster == "" {
		return nil, errors.New("registry reader: empty cluster name")
	}
	for group, uri := range o.GroupStoreURIs {
		if _, err := ParseURI(uri); err != nil {
			return nil, fmt.Errorf("registry reader: store uri of group %q: %w", group, err)
		}
	}
	return &RegistryReader{
		c:         c,
		prefix:    "kvcache_registry:" + o.Cluster + ":",
		overrides: o.GroupStoreURIs,
		learn:     o.Learn,
		log:       orDiscard(o.Logger),
	}, nil
}

// OpenRegistryReader builds a client for conn and a RegistryReader on it.
func OpenRegistryReader(conn ConnOptions, o RegistryOptions) (*RegistryReader, error) {
	c, err := NewClient(conn)
	if err != nil {
		return nil, err
	}
	r, err := NewRegistryReader(c, o)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return r, nil
}

// Close closes the client.
func (r *RegistryReader) Close() error { return r.c.Close() }

// ReadRegistry implements meta.RegistryReader. It reads, as KVCM's DoRecover does, the
// instance index, the groups and the storages, then each instance's record. A Redis error
// fails the snapshot (the round retries later); a record that does not decode skips only that
// entry, with the reason in Registry.Skipped (a bad storage config is reported with an empty
// Instance). A group that is not collected is in Registry.SkippedGroups, and each of its
// instances in Registry.Skipped, with the reason.
func (r *RegistryReader) ReadRegistry(ctx context.Context) (*meta.Registry, error) {
	pipe := r.c.Pipeline()
	idsCmd := pipe.HGetAll(ctx, r.prefix+"instance")
	groupsCmd := pipe.HGetAll(ctx, r.prefix+"instance_group")
	storagesCmd := pipe.HGetAll(ctx, r.prefix+"storage")
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read registry %q: %w", r.prefix, err)
	}
	reg := &meta.Registry{
		Groups:        make(map[string]kvcm.InstanceGroup),
		Storages:      make(map[string]kvcm.StorageConfig),
		SkippedGroups: make(map[string]string),
	}

	for _, name := range sortedKeys(storagesCmd.Val()) {
		sc, err := kvcm.DecodeStorageConfig([]byte(storagesCmd.Val()[name]))
		if err != nil {
			r.skip(ctx, reg, meta.Skip{Reason: fmt.Sprintf("%s: storage %q: %v", SkipBadStorage, name, err)})
			continue
		}
		reg.Storages[name] = sc
	}

	stores := make(map[string]string) // collected group → store name
	for _, name := range sortedKeys(groupsCmd.Val()) {
		g, err := kvcm.DecodeInstanceGroup([]byte(groupsCmd.Val()[name]))
		if err != nil {
			r.skipGroup(ctx, reg, name, fmt.Sprintf("%s: %v", SkipBadGroup, err))
			continue
		}
		reg.Groups[name] = g
		store, reason := r.groupStore(name, g)
		if reason != "" {
			r.skipGroup(ctx, reg, name, reason)
			continue
		}
		stores[name] = store
	}

	ids := sortedKeys(idsCmd.Val())
	if len(ids) > 0 {
		pipe := r.c.Pipeline()
		infoCmds := make([]*redis.StringCmd, len(ids))
		for i, id := range ids {
			infoCmds[i] = pipe.HGet(ctx, r.prefix+id, id)
		}
		// A missing record is redis.Nil for that command only; other errors fail the snapshot.
		if err := execPipeline(ctx, pipe); err != nil {
			return nil, fmt.Errorf("read registry instances: %w", err)
		}
		for i, id := range ids {
			if kvcm.IsKVMetaInstanceID(id) {
				// Reserved whatever its record says, even one that does not decode.
				r.skip(ctx, reg, meta.Skip{Instance: id, Reason: SkipKVMeta + ": " + kvcm.KVMetaMarker(id, nil)})
				continue
			}
			raw, err := infoCmds[i].Result()
			if errors.Is(err, redis.Nil) || (err == nil && raw == "") {
				r.skip(ctx, reg, meta.Skip{Instance: id, Reason: SkipInfoMissing})
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("read registry instance %q: %w", id, err)
			}
			r.addInstance(ctx, reg, id, []byte(raw), stores)
		}
	}
	slices.SortFunc(reg.Instances, func(a, b meta.Instance) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.ID, b.ID))
	})
	return reg, nil
}

func (r *RegistryReader) addInstance(
	ctx context.Context,
	reg *meta.Registry,
	id string,
	raw []byte,
	stores map[string]string,
) {
	info, err := kvcm.DecodeInstanceInfo(raw)
	if err != nil {
		r.skip(ctx, reg, meta.Skip{Instance: id, Reason: fmt.Sprintf("%s: %v", SkipBadInfo, err)})
		return
	}
	group := info.InstanceGroupName
	// The record is looked up by id; one that names another instance was not written by
	// KVCM for this id, and collecting under either id could cross instances (DESIGN §8.4).
	if info.InstanceID != id {
		r.skip(ctx, reg, meta.Skip{Instance: id, Group: group,
			Reason: fmt.Sprintf("%s: record names %q", SkipInfoIDMismatch, info.InstanceID)})
		return
	}
	if why := kvcm.KVMetaMarker(id, &info); why != "" {
		r.skip(ctx, reg, meta.Skip{Instance: id, Group: group, Reason: SkipKVMeta + ": " + why})
		return
	}
	if reason, skipped := reg.SkippedGroups[group]; skipped {
		r.skip(ctx, reg, meta.Skip{Instance: id, Group: group, Reason: reason})
		return
	}
	store, ok := stores[group]
	if !ok {
		r.skip(ctx, reg, meta.Skip{Instance: id, Group: group, Reason: SkipUnknownGroup})
		return
	}
	reg.Instances = append(reg.Instances, meta.Instance{ID: id, Group: group, Store: store, Info: info})
}

// groupStore decides where a group's metadata lives: the store name, or why the group is not
// collected. Only "redis" groups are collected: in a cached store Redis lags KVCM's memory,
// which wins (a dropped write-behind leaves Redis with a WRITING location that KVCM serves;
// a field deleted in Redis is written back from memory). A group's URI is read as KVCM reads
// it, unless configuration replaces it with one of kvcm-gc's own. The store is named by its
// credential-free address and database, and the URI behind the name is handed to Learn.
func (r *RegistryReader) groupStore(name string, g kvcm.InstanceGroup) (store, reason string) {
	switch g.MetaStorageType {
	case kvcm.MetaStoreRedis:
	case kvcm.MetaStoreLocal:
		return "", SkipLocalStore + ": in KVCM's memory, not in Redis"
	case kvcm.MetaStoreDummy:
		return "", SkipDummyStore + ": KVCM keeps no metadata"
	case kvcm.MetaStoreCached:
		return "", fmt.Sprintf("%s: Redis is a write-behind copy of KVCM's memory, not the truth "+
			"(persistent_type=%s, cache_type=%s)",
			SkipCachedStore, g.MetaPersistentType, g.MetaCacheType)
	default:
		return "", fmt.Sprintf("%s: %q", SkipUnknownStoreType, g.MetaStorageType)
	}
	uri, own := r.overrides[name]
	if !own {
		uri = g.MetaStorageURI
	}
	if uri == "" {
		return "", SkipNoStoreURI
	}
	parse, learned := ParseKVCMURI, KVCMURIPrefix+uri
	if own {
		parse, learned = ParseURI, uri
	}
	conn, err := parse(uri)
	if err != nil {
		return "", fmt.Sprintf("%s: %v", SkipBadStoreURI, err) // err is redacted
	}
	store = conn.Name()
	if r.learn != nil {
		r.learn(store, learned)
	}
	return store, ""
}

func (r *RegistryReader) skipGroup(ctx context.Context, reg *meta.Registry, group, reason string) {
	r.log.DebugContext(ctx, "instance group skipped", "group", group, "reason", reason)
	reg.SkippedGroups[group] = reason
}

func (r *RegistryReader) skip(ctx context.Context, reg *meta.Registry, s meta.Skip) {
	r.log.DebugContext(ctx, "registry entry skipped", "instance", s.Instance, "group", s.Group, "reason", s.Reason)
	reg.Skipped = append(reg.Skipped, s)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
