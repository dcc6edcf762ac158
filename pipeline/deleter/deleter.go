package deleter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
	"github.com/kvcm-gc/kvcm-gc/internal/duty"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Deleter is the deleter stage: it runs the delete protocol for every target of a request.
// The number of requests in flight across all deleters is the consumer's MaxAckPending.
type Deleter struct {
	cfg       Config
	names     subjects.Names
	stores    meta.StoreResolver
	storageOp storage.Options
	events    *pipeline.EventLog
	state     jetstream.KeyValue
	metrics   *Metrics
	log       *slog.Logger

	mu       sync.Mutex
	sets     map[string]*storage.StaticSet // by the request's storage table
	inflight map[uint64]time.Time          // by stream sequence
	gates    map[string]*duty.Gate         // delete_duty's, by store name (pace.go)
}

// Deps are what the deleter is wired to. Stores is required; nil Events records no
// event, a nil State counts no deleted key, a nil Metrics counts on an unregistered set, a
// nil Logger discards.
type Deps struct {
	Names          subjects.Names
	Stores         meta.StoreResolver
	StorageOptions storage.Options // local overrides, dry-run
	Events         *pipeline.EventLog
	// State, when set, keeps per instance the block keys deleted and the locations removed
	// with their bytes as KVCM counts them (DeletedKeysKey), for status and the audit: KVCM's
	// counters still count each of them.
	State   jetstream.KeyValue
	Metrics *Metrics
	Logger  *slog.Logger
}

// New returns the deleter stage of cfg.
func New(cfg Config, deps Deps) (*Deleter, error) {
	refused := pipeline.Refusals{cfg.Validate()}
	refused.Need(cfg.AckWait > 0, "ack wait must be > 0")
	refused.Need(cfg.UnlinkWorkers >= 1, "unlink workers must be >= 1")
	refused.Need(deps.Stores != nil, "no metadata store resolver")
	if err := refused.Err("deleter"); err != nil {
		return nil, err
	}
	return &Deleter{cfg: cfg, names: deps.Names, stores: deps.Stores, storageOp: deps.StorageOptions, events: deps.Events,
		state: deps.State, metrics: orUnregistered(deps.Metrics), log: pipeline.OrDiscard(deps.Logger),
		sets: map[string]*storage.StaticSet{}, inflight: map[uint64]time.Time{}, gates: map[string]*duty.Gate{}}, nil
}

// Handle processes one delete request message (a Handler).
func (d *Deleter) Handle(ctx context.Context, msg jetstream.Msg) error {
	req, src, err := pipeline.Receive(d.names, msg, "request", subjects.DecodeDeleteRequest,
		func(r subjects.DeleteRequest) (string, string) { return r.Instance, r.Cluster })
	if err != nil {
		return err
	}
	set, err := d.storageSet(req.Storages)
	if err != nil {
		return fmt.Errorf("%w: storage table: %v", subjects.ErrPoison, err)
	}
	store, err := d.stores.Store(req.Store)
	if err != nil {
		d.metrics.opError("store")
		return fmt.Errorf("open metadata store %q: %w", req.Store, err)
	}
	store, gate := d.paced(req.Store, store)

	seq := src.Seq
	d.track(seq, true)
	defer d.track(seq, false)

	proto := NewProtocol(d.cfg)
	d.metrics.DeleteTargets.Add(float64(len(req.Targets)))
	// Each step runs for all blocks of the request in one round trip, and delete_delay is
	// waited once per request (DeleteAll).
	results, delErr := proto.DeleteAll(ctx, store, set, req.Instance, req.Targets)
	if gate != nil {
		d.metrics.recordPace(req.Store, gate)
	}

	removed := Removed{Bytes: map[string]uint64{}}
	targets := make([]subjects.EventTarget, len(results))
	counts := map[string]int64{}
	for i, r := range results {
		d.metrics.DeleteResults.WithLabelValues(r.Outcome).Inc()
		for reason, n := range r.PhysicalSkips {
			d.metrics.PhysicalSkips.WithLabelValues(reason).Add(float64(n))
			if r.Target.Reason == subjects.ReasonStuckDeleting && r.StorageType != "" {
				d.metrics.StuckDataLeft.WithLabelValues(r.StorageType, reason).Add(float64(n))
			}
		}
		switch {
		case r.Outcome == subjects.OutcomeWouldDelete:
			// A dry run frees nothing: what it would free has a series of its own, so a
			// dashboard shows it during the dry run and never mixes it with real reclaims.
			rec, _ := TargetReclaim(r.Target)
			for _, x := range rec {
				d.metrics.WouldReclaimBytes.WithLabelValues(x.Storage, r.Target.Reason).Add(float64(x.Bytes))
			}
		case Frees(r.Outcome):
			rec, _ := TargetReclaim(r.Target)
			for _, x := range rec {
				d.metrics.ReclaimedBytes.WithLabelValues(x.Storage, r.Target.Reason).Add(float64(x.Bytes))
				d.metrics.ReclaimedFiles.WithLabelValues(x.Storage, r.Target.Reason).Add(float64(x.Files))
			}
		}
		if r.Outcome == subjects.OutcomeDeleted || r.Outcome == subjects.OutcomePartial {
			if slot, b, ok := Phantom(r.Target); ok {
				removed.Locations++
				removed.Bytes[slot.String()] += b
				d.metrics.PhantomBytes.WithLabelValues(req.Instance, slot.String()).Add(float64(b))
			}
		}
		if r.KeyDeleted {
			d.metrics.DeletedKeys.WithLabelValues(req.Instance).Inc()
			removed.Keys++
		}
		if r.Outcome == subjects.OutcomeError {
			d.metrics.opError("delete")
		}
		counts[r.Outcome]++
		targets[i] = subjects.EventTarget{Key: r.Target.Key, Location: r.Target.Location, Reason: r.Target.Reason,
			Outcome: r.Outcome, Detail: r.Detail, PhysicalSkips: r.PhysicalSkips, Resumed: r.Resumed, KeyDeleted: r.KeyDeleted}
	}
	if (removed.Keys > 0 || removed.Locations > 0) && d.state != nil {
		if err := AddRemoved(ctx, d.state, req.Instance, removed); err != nil {
			d.log.Warn("count removed keys and bytes", "instance", req.Instance, "err", err)
		}
	}
	if d.events != nil {
		// One event for the whole request, every target's outcome in it, stored before the
		// request is acknowledged.
		outcome := subjects.OutcomeMixed
		if len(counts) == 1 {
			outcome = results[0].Outcome
		}
		f := d.events.Emit(
			ctx,
			subjects.Event{Kind: subjects.EventDelete, Stage: pipeline.StageDeleter, Instance: req.Instance,
				Round: req.Round, Outcome: outcome, Counts: counts, Targets: targets, Source: &src},
		)
		if err := d.events.Wait(ctx, []jetstream.PubAckFuture{f}); err != nil {
			d.log.Warn("store deleter events", "instance", req.Instance, "err", err)
		}
	}
	if delErr != nil {
		return fmt.Errorf("delete request %d of instance %q: %w", seq, req.Instance, delErr)
	}
	return nil
}

func (d *Deleter) storageSet(infos map[string]subjects.StorageInfo) (*storage.StaticSet, error) {
	key, err := json.Marshal(infos) // map keys are sorted: a stable cache key
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.sets[string(key)]; ok {
		return s, nil
	}
	s, err := storage.NewSet(StorageConfigs(infos), d.storageOp)
	if err != nil {
		return nil, err
	}
	if len(d.sets) > 1024 {
		d.sets = map[string]*storage.StaticSet{}
	}
	d.sets[string(key)] = s
	return s, nil
}

// paced returns store (named name) paced by its gate, created on first use; store itself
// when delete_duty is 0.
func (d *Deleter) paced(name string, store meta.Store) (meta.Store, *duty.Gate) {
	if d.cfg.Duty <= 0 {
		return store, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.gates[name]
	if !ok {
		g = duty.NewGate(duty.New(duty.Config{Duty: d.cfg.Duty}), nil)
		d.gates[name] = g
		d.metrics.PaceDuty.WithLabelValues(name).Set(d.cfg.Duty)
	}
	return pacedStore{Store: store, gate: g}, g
}

// track maintains the in-flight gauges of this process.
func (d *Deleter) track(seq uint64, start bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if start {
		d.inflight[seq] = time.Now()
	} else {
		delete(d.inflight, seq)
	}
	d.metrics.InflightDeletes.Set(float64(len(d.inflight)))
	var oldest time.Time
	for _, t := range d.inflight {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	if oldest.IsZero() {
		d.metrics.InflightOldest.Set(0)
	} else {
		d.metrics.InflightOldest.Set(time.Since(oldest).Seconds())
	}
}

// DeletedKeys is the value of DeletedKeysKey(instance) in the state bucket: kvcm-gc's own
// share of the drift of KVCM's counters, exactly, since the instance's first delete.
type DeletedKeys struct {
	// Keys are the block keys deleted (empty_block: delete).
	Keys uint64 `json:"keys"`
	// Locations are the location-layout locations removed, Bytes their bytes by slot name as
	// KVCM counts them (Phantom): what KVCM's usage still counts of them, until a repair.
	Locations uint64            `json:"locations,omitempty"`
	Bytes     map[string]uint64 `json:"bytes,omitempty"`
	UpdatedUs int64             `json:"updated_us"`
}

// Removed is what one request's deletes add to DeletedKeys.
type Removed struct {
	Keys, Locations uint64
	Bytes           map[string]uint64
}

// DeletedKeysKey is the state-bucket key counting the block keys of instance the deleter
// deleted (empty_block: delete); the id is base64url, which any id fits into a bucket key.
func DeletedKeysKey(instance string) string {
	return "deleted_keys." + base64.RawURLEncoding.EncodeToString([]byte(instance))
}

// AddRemoved adds n to instance's DeletedKeys (by revision: pipeline.WriteCheckpoint's
// create-or-update, retried on a conflict with a concurrent deleter after a short jittered
// wait, at most addRemovedAttempts times). A crash between a request's CAD and this update
// loses that request's share: its redelivery finds the locations gone (noop_gone) and adds
// nothing.
func AddRemoved(ctx context.Context, kv jetstream.KeyValue, instance string, n Removed) error {
	key := DeletedKeysKey(instance)
	attempts := 0
	var readErr error
	err := addRemovedRetry.Retry(ctx, func(ctx context.Context) error {
		attempts++
		var cur DeletedKeys
		rev, err := pipeline.ReadJSON(ctx, kv, key, key, &cur)
		if err != nil {
			readErr = err
			return backoff.Permanent(err)
		}
		cur.Keys += n.Keys
		cur.Locations += n.Locations
		for slot, b := range n.Bytes {
			if b == 0 {
				continue
			}
			if cur.Bytes == nil {
				cur.Bytes = map[string]uint64{}
			}
			cur.Bytes[slot] += b
		}
		cur.UpdatedUs = time.Now().UnixMicro()
		_, err = pipeline.WriteCheckpoint(ctx, kv, key, cur, rev)
		if pipeline.IsConflict(err) && attempts < addRemovedAttempts {
			return err
		}
		return backoff.Permanent(err)
	}, nil)
	switch {
	case readErr != nil:
		return readErr
	case err != nil:
		return fmt.Errorf("update %s: %w", key, err)
	}
	return nil
}

// addRemovedRetry and addRemovedAttempts bound AddRemoved's retries of a conflict: deleters
// of one instance write its DeletedKeys at once only briefly, so a few milliseconds apart.
var addRemovedRetry = backoff.New(time.Millisecond, 5*time.Millisecond)

const addRemovedAttempts = 50

// StorageConfigs turns a delete request's storage table back into registry records.
func StorageConfigs(infos map[string]subjects.StorageInfo) map[string]kvcm.StorageConfig {
	out := make(map[string]kvcm.StorageConfig, len(infos))
	for name, in := range infos {
		t, _ := kvcm.ParseStorageType(in.Type)
		kc := in.KeyCountPerFile
		if kc == 0 {
			kc = 1
		}
		out[name] = kvcm.StorageConfig{Type: t, TypeName: in.Type, Available: true, Name: name, RootPath: in.RootPath,
			Mountpoint: in.Mountpoint, RootDir: in.RootDir, KeyCountPerFile: kc}
	}
	return out
}
