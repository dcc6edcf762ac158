package prober

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Stuck DELETING (DESIGN §5.3, opt-in collect_deleting). KVCM's delete path is CAS to
// DELETING, delay_before_delete_ms, the physical delete, then CAD, all in the leader's memory:
// a crash or a demotion in between leaves the DELETING behind, and nothing retries it. A
// DELETING location is collected once it has been DELETING, with the same bytes, for at least
// deleting_grace, and its data only where its name cannot have been reused.

// deletingLeaseMargin is what a group's delay_before_delete_ms (KVCM's read lease for clients
// that hold the URI of a location it is deleting) plus this may not exceed deleting_grace.
const deletingLeaseMargin = time.Hour

// Observation is when the prober first saw a DELETING location with given bytes.
type Observation struct {
	FirstUs int64  `json:"first_us"` // wall clock of the first sight, µs since the epoch
	Round   uint64 `json:"round"`    // scan round of the batch that showed it first
	// What was seen, for an operator reading the bucket.
	Instance string `json:"instance"`
	Key      int64  `json:"key,string"`
	Location string `json:"location"`
}

// DeletingObserver remembers the first sight of DELETING locations of the location layout,
// where nothing in Redis says when a location became DELETING (create_time is the write's
// start and survives the CAS).
type DeletingObserver interface {
	// Observe returns the first sight of location id of block key with these exact bytes,
	// recording o as the first when there is none yet.
	Observe(ctx context.Context, instance string, key int64, id string, raw []byte, o Observation) (Observation, error)
}

// KVObserver is a DeletingObserver on a JetStream KV bucket whose keys each live TTL (a
// location still DELETING after that is first seen anew: only conservative).
type KVObserver struct {
	KV  jetstream.KeyValue
	TTL time.Duration
}

// ObservationTTL is how long a first sight of a DELETING location is kept: two graces and a
// round pause, and a day to spare, so a location seen in one round is still known when a round
// past the grace comes round to it.
func ObservationTTL(deletingGrace, roundPause time.Duration) time.Duration {
	return 2*deletingGrace + roundPause + 24*time.Hour
}

// observationKey names one (instance, block, location, bytes) in the bucket: a hash, so any
// instance id or location id fits the bucket's key alphabet, and other bytes are another key.
func observationKey(instance string, key int64, id string, raw []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(instance), []byte(strconv.FormatInt(key, 10)), []byte(id), raw} {
		h.Write([]byte(strconv.Itoa(len(part))))
		h.Write([]byte{':'})
		h.Write(part)
	}
	return "deleting." + hex.EncodeToString(h.Sum(nil))
}

// Observe implements DeletingObserver: Create (only when absent), else the stored first sight.
func (k KVObserver) Observe(
	ctx context.Context,
	instance string,
	key int64,
	id string,
	raw []byte,
	o Observation,
) (Observation, error) {
	name := observationKey(instance, key, id, raw)
	val, err := json.Marshal(o)
	if err != nil {
		return Observation{}, fmt.Errorf("encode observation: %w", err)
	}
	_, err = k.KV.Create(ctx, name, val, jetstream.KeyTTL(k.TTL))
	if err == nil {
		return o, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return Observation{}, fmt.Errorf("record first sight of DELETING %s/%d/%s: %w", instance, key, id, err)
	}
	e, err := k.KV.Get(ctx, name)
	if err != nil {
		return Observation{}, fmt.Errorf("read first sight of DELETING %s/%d/%s: %w", instance, key, id, err)
	}
	var got Observation
	if err := json.Unmarshal(e.Value(), &got); err != nil {
		return Observation{}, fmt.Errorf("decode first sight of DELETING %s/%d/%s: %w", instance, key, id, err)
	}
	return got, nil
}

// Backdate records a first sight of DELETING location id of block key with bytes raw at
// firstUs, as if a round before round 1 had seen it: for a location known to have been
// DELETING since then (a seeded keyspace, a test). The prober keeps the first sight it finds,
// so one recorded already is an error.
func (k KVObserver) Backdate(
	ctx context.Context,
	instance string,
	key int64,
	id string,
	raw []byte,
	firstUs int64,
) error {
	got, err := k.Observe(
		ctx,
		instance,
		key,
		id,
		raw,
		Observation{FirstUs: firstUs, Round: 0, Instance: instance, Key: key, Location: id},
	)
	if err != nil {
		return err
	}
	if got.FirstUs != firstUs {
		return fmt.Errorf("first sight of DELETING %s/%d/%s recorded already", instance, key, id)
	}
	return nil
}

// stuckDeleting is rule 3 (stuck DELETING, DESIGN §5), on with collect_deleting.
type stuckDeleting struct{ rules *Rules }

func (stuckDeleting) Reason() string      { return subjects.ReasonStuckDeleting }
func (stuckDeleting) Status() kvcm.Status { return kvcm.StatusDeleting }

func (d stuckDeleting) Offer(ctx context.Context, j *judging, at located) bool {
	return d.rules.judgeDeleting(ctx, j.batch, at.be, at.loc, at.layout, j.now, j.v)
}

func (stuckDeleting) Decide(context.Context, *judging) []located { return nil }

// judgeDeleting is rule 3 (stuck DELETING) for a DELETING location of batch b. Every doubt
// keeps: an unknown group or one whose read lease is too long for the grace, an age that
// cannot be told, a first sight in this very round, an observation that cannot be recorded.
func (r Rules) judgeDeleting(
	ctx context.Context,
	b *subjects.Batch,
	be *subjects.BlockEntry,
	loc *kvcm.Location,
	layout string,
	now time.Time,
	v *Verdict,
) bool {
	cfg := r.Config
	delay, ok := time.Duration(0), false
	if r.GroupDelay != nil {
		delay, ok = r.GroupDelay(b.Group)
	}
	if !ok {
		v.skip(SkipDeletingGroup, 1)
		return false
	}
	if delay+deletingLeaseMargin > cfg.DeletingGrace {
		// KVCM's read lease of this group does not fit the grace: not collected.
		v.skip(SkipDeletingLease, 1)
		return false
	}
	var age time.Duration
	if layout == subjects.LayoutLegacy {
		// KVCM rewrites __lru_time__ with every write of the block, its CAS to DELETING
		// included: now − __lru_time__ is a lower bound of the time DELETING.
		if age, ok = kvcm.LegacyAge(loc, be.LRUTime, now); !ok {
			v.skip(SkipAgeUnknown, 1)
			return false
		}
	} else {
		if r.Observer == nil {
			v.skip(SkipDeletingUnobserved, 1)
			return false
		}
		first, err := r.Observer.Observe(ctx, b.Instance, be.Key, loc.ID, loc.Raw,
			Observation{FirstUs: now.UnixMicro(), Round: b.Round, Instance: b.Instance, Key: be.Key, Location: loc.ID})
		if err != nil {
			v.note(be.Key, loc.ID, SkipDeletingUnobserved, err.Error())
			return false
		}
		if first.Round >= b.Round {
			// Never on first sight: only a later round may nominate it.
			v.skip(SkipDeletingFirstSeen, 1)
			return false
		}
		if age, ok = ageSinceUs(first.FirstUs, now); !ok {
			v.skip(SkipAgeUnknown, 1)
			return false
		}
	}
	return age >= cfg.DeletingGrace
}

// ageSinceUs is now − t for t in µs; ok is false for a time that is not positive or is in
// the future.
func ageSinceUs(t int64, now time.Time) (time.Duration, bool) {
	n := now.UnixMicro()
	if t <= 0 || n < t {
		return 0, false
	}
	return time.Duration(n-t) * time.Microsecond, true
}

// Skip reasons of rule 3 (the "reason" label of kvcm_gc_prober_skips_total and Event.Reason).
const (
	// Rule 3 keeps a DELETING location whose instance group is not in the registry, whose
	// group's delay_before_delete_ms + 1h exceeds deleting_grace, at a first sight of it
	// (location layout: only a later round nominates it), or when the sight could not be
	// recorded.
	SkipDeletingGroup      = "deleting_group_unknown"
	SkipDeletingLease      = "deleting_lease_too_long"
	SkipDeletingFirstSeen  = "deleting_first_seen"
	SkipDeletingUnobserved = "deleting_unobserved"
)
