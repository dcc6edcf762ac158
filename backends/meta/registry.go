package meta

import (
	"context"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Instance is one collectable KVCM instance of a registry snapshot.
type Instance struct {
	ID    string
	Group string
	// Store names the instance group's metadata store (credential-free, e.g. "host:port");
	// resolve it with a StoreResolver.
	Store string
	Info  kvcm.InstanceInfo
}

// Skip is a registry entry that is not collected this round, with the reason.
type Skip struct {
	Instance string
	Group    string
	Reason   string // e.g. "local meta store", "instance info missing", "bad instance group json"
}

// Registry is a read-only snapshot of kvcache_registry:<cluster>:.
type Registry struct {
	// Instances are sorted by (Group, ID).
	Instances []Instance
	Groups    map[string]kvcm.InstanceGroup
	Storages  map[string]kvcm.StorageConfig
	Skipped   []Skip
}

// RegistryReader reads registry snapshots (read commands only).
type RegistryReader interface {
	ReadRegistry(ctx context.Context) (*Registry, error)
}

// StoreResolver opens (and caches) the metadata store with a given name.
type StoreResolver interface {
	Store(name string) (Store, error)
}
