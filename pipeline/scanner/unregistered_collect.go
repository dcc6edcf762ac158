package scanner

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
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

// unregDecision is the verdict on one unregistered instance of a page: collect, or why not.
func unregDecision(id, store string, ck pipeline.Checkpoint, v pipeline.RegView, cfg Config, now time.Time) string {
	if why := pipeline.UnregVerdict(id, store, ck, v, cfg.UnregisteredGrace, now); why != "" {
		return why
	}
	if ck.UnregisteredCollected >= int64(cfg.UnregisteredMaxKeys) {
		return pipeline.UnregCap
	}
	return ""
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
func (d *walkDriver) collectUnregistered(
	ctx context.Context,
	store meta.Store,
	cursor uint64,
	reads map[string][]meta.BlockRead,
) int64 {
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
			s.metrics.opError("publish")
			pipeline.Warn(ctx, d.log, "send the keys of an unregistered instance to the deleter", "instance", id, "err", err)
			continue
		}
		sent += int64(keys)
		ck.UnregisteredCollected += int64(keys)
		s.metrics.UnregisteredCollected.WithLabelValues(d.h.store).Add(float64(keys))
		d.log.Info("keys of an unregistered instance sent to the deleter",
			"instance", id, "keys", keys, "locations", len(targets),
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
