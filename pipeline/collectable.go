package pipeline

import (
	"errors"
	"slices"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Whether the keys and the files of an instance the registry no longer lists may be collected
// (collect_unregistered_instances): the scanner decides it for the keys it sends the deleter
// (package scanner, unregistered_collect.go), the sweep for the files it reclaims (package sweep), from the
// same store checkpoints and conditions.

// Refusal reasons of the collection of unregistered instances (kvcm_gc_unregistered_refusals_total).
const (
	UnregNeverRegistered = "never_registered"
	UnregWithinGrace     = "within_grace"
	UnregNotCounted      = "not_counted"
	UnregRegistryUnread  = "registry_unread"
	UnregRegistryPartial = "registry_partial"
	UnregRegistered      = "registered"
	UnregGroupAbsent     = "group_absent"
	UnregStoreEmpty      = "store_without_instances"
	UnregCap             = "cap"
)

// RegView is what the collection takes from one registry read.
type RegView struct {
	Err      error
	At       time.Time
	Known    map[string]bool // every instance id listed, collected or skipped
	Groups   map[string]bool // the collected groups
	Partial  bool            // a record could not be read: an instance or a group that does not decode
	Instance map[string]meta.Instance
}

// NewRegView is what the collection takes from registry snapshot reg, read at at.
func NewRegView(reg *meta.Registry, at time.Time) RegView {
	v := RegView{At: at, Known: make(map[string]bool, len(reg.Instances)+len(reg.Skipped)), Groups: map[string]bool{},
		Instance: make(map[string]meta.Instance, len(reg.Instances))}
	for _, in := range reg.Instances {
		v.Known[in.ID] = true
		if _, dup := v.Instance[in.ID]; !dup {
			v.Instance[in.ID] = in
		}
	}
	for _, sk := range reg.Skipped {
		if sk.Instance != "" {
			v.Known[sk.Instance] = true
			if sk.Group == "" && !kvcm.IsKVMetaInstanceID(sk.Instance) {
				v.Partial = true // an instance record that names no group kvcm-gc could read
			}
		}
	}
	for g := range reg.Groups {
		if _, skipped := reg.SkippedGroups[g]; !skipped {
			v.Groups[g] = true
		}
	}
	for g := range reg.SkippedGroups {
		if _, ok := reg.Groups[g]; !ok {
			v.Partial = true // a group record that does not decode
		}
	}
	return v
}

// storeInstances returns the collected instances the view lists in store.
func (v RegView) storeInstances(store string) []meta.Instance {
	var out []meta.Instance
	for _, in := range v.Instance {
		if in.Store == store {
			out = append(out, in)
		}
	}
	return out
}

// UnregVerdict applies every condition of the collection but the round's cap to instance id
// of store, by the store's checkpoint ck and registry view v: "" when its keys may go, else
// why not.
func UnregVerdict(id, store string, ck Checkpoint, v RegView, grace time.Duration, now time.Time) string {
	seen, ok := ck.Seen[id]
	switch {
	case v.Err != nil:
		return UnregRegistryUnread
	case v.Partial:
		return UnregRegistryPartial
	case v.Known[id]:
		return UnregRegistered
	case !ok || seen.LastRegisteredUs <= 0:
		return UnregNeverRegistered
	case now.Sub(time.UnixMicro(seen.LastRegisteredUs)) < grace:
		return UnregWithinGrace
	case !slices.ContainsFunc(ck.Unregistered, func(u UnregisteredCount) bool { return u.Instance == id }):
		return UnregNotCounted
	case !v.Groups[seen.Group]:
		return UnregGroupAbsent
	case len(v.storeInstances(store)) == 0:
		return UnregStoreEmpty
	}
	return ""
}

// UnregisteredInstance is an instance the registry no longer lists whose keys may be
// collected (CollectableUnregistered): the metadata store its keys are in, the group it was
// registered in, and when a registry snapshot last listed it (µs).
type UnregisteredInstance struct {
	ID               string
	Store            string
	Group            string
	LastRegisteredUs int64
}

// Refusals of CollectableUnregistered beyond the scanner's: the instance is counted
// unregistered in more than one store, or a store's checkpoint could not be read (the
// caller's to report).
const (
	UnregSeveralStores    = "several_stores"
	UnregCheckpointUnread = "checkpoint_unread"
)

// CollectableUnregistered applies the conditions of the collection of unregistered
// instances, but the round's cap, to every instance the last completed round of a store
// counted unregistered (cks, the stores' checkpoints), by the registry snapshot reg read at
// now (regErr: the read failed). It returns the instances whose keys may go, and why each
// other one may not. The sweep reclaims the files of the former, once their keys are gone.
func CollectableUnregistered(
	reg *meta.Registry,
	regErr error,
	cks []Checkpoint,
	grace time.Duration,
	now time.Time,
) (map[string]UnregisteredInstance, map[string]string) {
	v := RegView{Err: regErr}
	if regErr == nil && reg == nil {
		v.Err = errors.New("no registry snapshot")
	}
	if v.Err == nil {
		v = NewRegView(reg, now)
	}
	stores := map[string][]int{} // instance -> the checkpoints counting it
	for i, ck := range cks {
		for _, u := range ck.Unregistered {
			stores[u.Instance] = append(stores[u.Instance], i)
		}
	}
	ok, refused := map[string]UnregisteredInstance{}, map[string]string{}
	for id, in := range stores {
		if len(in) > 1 {
			refused[id] = UnregSeveralStores
			continue
		}
		ck := cks[in[0]]
		if why := UnregVerdict(id, ck.Store, ck, v, grace, now); why != "" {
			refused[id] = why
			continue
		}
		seen := ck.Seen[id]
		ok[id] = UnregisteredInstance{ID: id, Store: ck.Store, Group: seen.Group, LastRegisteredUs: seen.LastRegisteredUs}
	}
	return ok, refused
}
