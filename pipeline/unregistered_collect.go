package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Collection of unregistered instances' keys (opt-in, collect_unregistered_instances). The
// scanner, which counts them (unregistered.go), also decides whether an instance's keys may
// go, and sends every location of them to the deleter as delete targets of reason
// unregistered_instance: the deleter's usual exact-value CAS to DELETING and CAD remove them,
// and it leaves their data files in place (PhysSkipSweep: the request carries no storage
// table). The sweep, where it runs, reclaims those files once their keys are gone, under the
// same conditions read from the same checkpoints (CollectableUnregistered, package sweep);
// where it does not run, the space stays taken until the storage's own tools reclaim it. It
// acts on an instance only when every one of these holds (refusal reasons in brackets):
//
//   - the store's checkpoint remembers the instance registered, in the store, in an earlier
//     registry snapshot (never_registered): a first sight is never acted on;
//   - it has been listed by no snapshot since, for at least unregistered_grace
//     (within_grace), and the store's last completed round counted it unregistered
//     (not_counted);
//   - the registry, read again for the page, answers (registry_unread), lists no record it
//     could not read (registry_partial), still does not list the instance (registered), lists
//     its group (group_absent) and at least one other instance of the store
//     (store_without_instances);
//   - the keys sent this round stay under unregistered_max_keys_per_round (cap).
//
// A target the deleter finds changed (a KVCM writing there again, a migration guard) is a
// no-op, as for any target.

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

var unregRefusals = []string{UnregNeverRegistered, UnregWithinGrace, UnregNotCounted, UnregRegistryUnread,
	UnregRegistryPartial, UnregRegistered, UnregGroupAbsent, UnregStoreEmpty, UnregCap}

// SeenInstance is what a store's checkpoint remembers of an instance the registry listed in
// the store: its group, and the last time a snapshot listed it.
type SeenInstance struct {
	Group            string `json:"group"`
	LastRegisteredUs int64  `json:"last_registered_us"`
}

// regView is what the collection takes from one registry read.
type regView struct {
	err      error
	at       time.Time
	known    map[string]bool // every instance id listed, collected or skipped
	groups   map[string]bool // the collected groups
	partial  bool            // a record could not be read: an instance or a group that does not decode
	instance map[string]meta.Instance
}

// newRegView is what the collection takes from registry snapshot reg, read at at.
func newRegView(reg *meta.Registry, at time.Time) regView {
	v := regView{at: at, known: make(map[string]bool, len(reg.Instances)+len(reg.Skipped)), groups: map[string]bool{},
		instance: make(map[string]meta.Instance, len(reg.Instances))}
	for _, in := range reg.Instances {
		v.known[in.ID] = true
		if _, dup := v.instance[in.ID]; !dup {
			v.instance[in.ID] = in
		}
	}
	for _, sk := range reg.Skipped {
		if sk.Instance != "" {
			v.known[sk.Instance] = true
			if sk.Group == "" && !kvcm.IsKVMetaInstanceID(sk.Instance) {
				v.partial = true // an instance record that names no group kvcm-gc could read
			}
		}
	}
	for g := range reg.Groups {
		if _, skipped := reg.SkippedGroups[g]; !skipped {
			v.groups[g] = true
		}
	}
	for g := range reg.SkippedGroups {
		if _, ok := reg.Groups[g]; !ok {
			v.partial = true // a group record that does not decode
		}
	}
	return v
}

// storeInstances returns the collected instances the view lists in store.
func (v regView) storeInstances(store string) []meta.Instance {
	var out []meta.Instance
	for _, in := range v.instance {
		if in.Store == store {
			out = append(out, in)
		}
	}
	return out
}

// unregDecision is the verdict on one unregistered instance of a page: collect, or why not.
func unregDecision(id, store string, ck Checkpoint, v regView, cfg ScannerConfig, now time.Time) string {
	if why := unregVerdict(id, store, ck, v, cfg.UnregisteredGrace, now); why != "" {
		return why
	}
	if ck.UnregisteredCollected >= int64(cfg.UnregisteredMaxKeys) {
		return UnregCap
	}
	return ""
}

// unregVerdict applies every condition of the collection but the round's cap to instance id
// of store, by the store's checkpoint ck and registry view v: "" when its keys may go, else
// why not.
func unregVerdict(id, store string, ck Checkpoint, v regView, grace time.Duration, now time.Time) string {
	seen, ok := ck.Seen[id]
	switch {
	case v.err != nil:
		return UnregRegistryUnread
	case v.partial:
		return UnregRegistryPartial
	case v.known[id]:
		return UnregRegistered
	case !ok || seen.LastRegisteredUs <= 0:
		return UnregNeverRegistered
	case now.Sub(time.UnixMicro(seen.LastRegisteredUs)) < grace:
		return UnregWithinGrace
	case !slices.ContainsFunc(ck.Unregistered, func(u UnregisteredCount) bool { return u.Instance == id }):
		return UnregNotCounted
	case !v.groups[seen.Group]:
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
func CollectableUnregistered(reg *meta.Registry, regErr error, cks []Checkpoint, grace time.Duration, now time.Time) (map[string]UnregisteredInstance, map[string]string) {
	v := regView{err: regErr}
	if regErr == nil && reg == nil {
		v.err = errors.New("no registry snapshot")
	}
	if v.err == nil {
		v = newRegView(reg, now)
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
		if why := unregVerdict(id, ck.Store, ck, v, grace, now); why != "" {
			refused[id] = why
			continue
		}
		seen := ck.Seen[id]
		ok[id] = UnregisteredInstance{ID: id, Store: ck.Store, Group: seen.Group, LastRegisteredUs: seen.LastRegisteredUs}
	}
	return ok, refused
}

// unregTargets are the delete targets of every location of an unregistered instance's
// blocks, each with its exact bytes, in either layout; a block that does not decode whole,
// or holds both layouts, gives none.
func unregTargets(reads []meta.BlockRead) (targets []subjects.Target, keys int) {
	for _, r := range reads {
		if r.Err != nil || !r.Exists {
			continue
		}
		ps := r.Entry.Parts()
		layout := ps.Layout()
		if layout != kvcm.LayoutLegacy && layout != kvcm.LayoutLocation {
			continue // absent, ambiguous or unknown: nothing in it is written (invariant 9)
		}
		var ts []subjects.Target
		ok := true
		for p := range ps.All() {
			if p.Kind == kvcm.PartCorrupt {
				ok = false
				break
			}
			if p.Kind == kvcm.PartTombstone {
				continue // nothing writes a tombstone
			}
			ts = append(ts, subjects.Target{Key: r.Entry.BlockKey, Location: p.ID, Layout: layout.String(),
				Reason: subjects.ReasonUnregisteredInstance, Expected: subjects.RawText(p.Raw)})
		}
		if ok && len(ts) > 0 {
			targets = append(targets, ts...)
			keys++
		}
	}
	return targets, keys
}

// collectUnregistered sends the deleter the locations of the page's unregistered instances
// that may go (unregDecision), within the round's cap, and returns the keys sent. Every
// refusal is counted by reason; a failure leaves the keys for a later round.
func (d *walkDriver) collectUnregistered(ctx context.Context, store meta.Store, cursor uint64, reads map[string][]meta.BlockRead) int64 {
	s := d.s
	if !s.cfg.CollectUnregistered || len(reads) == 0 {
		return 0
	}
	ck := d.lastCkpt()
	now := s.now()
	v := s.reg.view(ctx, now)
	var sent int64
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range reads {
			if !yield(id) {
				return
			}
		}
	})
	for _, id := range ids {
		why := unregDecision(id, d.h.store, ck, v, s.cfg, now)
		if why != "" {
			s.metrics.UnregisteredRefusals.WithLabelValues(why).Inc()
			continue
		}
		targets, keys := unregTargets(reads[id])
		if room := int64(s.cfg.UnregisteredMaxKeys) - ck.UnregisteredCollected; int64(keys) > room {
			targets, keys = capTargets(targets, int(room))
		}
		if len(targets) == 0 {
			continue
		}
		if _, held := d.h.lease.Held(); !held {
			return sent // fencing: nothing is sent once the lease is lost
		}
		req := subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: s.names.Cluster, Instance: id,
			Group: ck.Seen[id].Group, Store: d.h.store, Round: ck.Round, JudgedAt: now.UnixMicro(), Targets: targets,
			Source: subjects.Source{MsgID: "u:" + d.h.store + ":" + strconv.FormatUint(ck.Round, 10) + ":" +
				strconv.FormatUint(cursor, 10) + ":" + id}}
		if err := d.sendDelete(ctx, req); err != nil {
			s.metrics.opError(StageScanner, "publish")
			warn(ctx, d.log, "send the keys of an unregistered instance to the deleter", "instance", id, "err", err)
			continue
		}
		sent += int64(keys)
		ck.UnregisteredCollected += int64(keys)
		s.metrics.UnregisteredCollected.WithLabelValues(d.h.store).Add(float64(keys))
		d.log.Info("keys of an unregistered instance sent to the deleter", "instance", id, "keys", keys, "locations", len(targets),
			"last_registered", time.UnixMicro(ck.Seen[id].LastRegisteredUs).UTC())
	}
	return sent
}

// capTargets keeps the targets of the first n blocks.
func capTargets(targets []subjects.Target, n int) ([]subjects.Target, int) {
	keys := 0
	for i, t := range targets {
		if i == 0 || t.Key != targets[i-1].Key {
			if keys == n {
				return targets[:i], keys
			}
			keys++
		}
	}
	return targets, keys
}

// sendDelete publishes a delete request and waits for the server to store it.
func (d *walkDriver) sendDelete(ctx context.Context, req subjects.DeleteRequest) error {
	data, err := subjects.EncodeDeleteRequest(req)
	if err != nil {
		return fmt.Errorf("encode delete request: %w", err)
	}
	ack, err := d.s.publisher.PublishAsync(d.s.names.DeleteSubject(req.Instance), data, subjects.DeleteMsgID(req))
	if err != nil {
		return err
	}
	return ack(ctx)
}
