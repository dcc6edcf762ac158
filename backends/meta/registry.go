package meta

import (
	"cmp"
	"context"
	"slices"
	"strconv"

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
	Reason   string // e.g. "local meta store: …", "instance info missing", "bad instance group json: …"
}

// Registry is a read-only snapshot of kvcache_registry:<cluster>:.
type Registry struct {
	// Instances are sorted by (Group, ID).
	Instances []Instance
	// Groups are the instance groups whose record decodes, collected or not.
	Groups   map[string]kvcm.InstanceGroup
	Storages map[string]kvcm.StorageConfig
	// Skipped are the instances not collected (and storages whose record does not decode,
	// with an empty Instance).
	Skipped []Skip
	// SkippedGroups maps each instance group kvcm-gc does not collect at all to the reason:
	// a metadata store that is not Redis, or of which Redis is not the truth (local, dummy,
	// cached, an unknown type), a store URI kvcm-gc cannot use, a record that does not decode.
	// Each of the group's instances is in Skipped too, with the same reason.
	SkippedGroups map[string]string
}

// HasGroups reports whether the cluster has any instance group record, collected or not. A
// snapshot without groups is a cluster KVCM has not set up (or a wrong cluster name); one
// with groups but no Instances has nothing kvcm-gc may collect, and SkippedGroupSummary says
// why.
func (r *Registry) HasGroups() bool {
	return len(r.Groups) > 0 || len(r.SkippedGroups) > 0
}

// GroupSkip is an instance group that is not collected.
type GroupSkip struct {
	Group  string
	Reason string
	// Instances is the number of the group's registered instances (none collected).
	Instances int
}

// String is one line for a report: `group "g1" (2 instances): local meta store: …`.
func (s GroupSkip) String() string {
	n := strconv.Itoa(s.Instances) + " instances"
	if s.Instances == 1 {
		n = "1 instance"
	}
	return "group " + strconv.Quote(s.Group) + " (" + n + "): " + s.Reason
}

// SkippedGroupSummary returns the groups not collected (SkippedGroups), sorted by name, each
// with the number of its instances in Skipped.
func (r *Registry) SkippedGroupSummary() []GroupSkip {
	if len(r.SkippedGroups) == 0 {
		return nil
	}
	counts := make(map[string]int, len(r.SkippedGroups))
	for _, s := range r.Skipped {
		if s.Instance != "" {
			counts[s.Group]++
		}
	}
	out := make([]GroupSkip, 0, len(r.SkippedGroups))
	for g, reason := range r.SkippedGroups {
		out = append(out, GroupSkip{Group: g, Reason: reason, Instances: counts[g]})
	}
	slices.SortFunc(out, func(a, b GroupSkip) int { return cmp.Compare(a.Group, b.Group) })
	return out
}

// RegistryReader reads registry snapshots (read commands only).
type RegistryReader interface {
	ReadRegistry(ctx context.Context) (*Registry, error)
}

// StoreResolver opens (and caches) the metadata store with a given name.
type StoreResolver interface {
	Store(name string) (Store, error)
}
