package scanner

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/duty"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// stopTimeout bounds what a walk still does once the scanner stops: recording its last page.
const stopTimeout = 5 * time.Second

// walkHandle is how the scanner steers a walk it started.
type walkHandle struct {
	store string
	lease *pipeline.Lease
	// release asks for the lease back at the next round boundary; gone says the store left
	// the registry.
	release, gone atomic.Bool
	// between reports that the walk is between rounds (a good one to hand back).
	between atomic.Bool
	wake    chan struct{}
	done    chan struct{}
	// released: the walk handed the lease back itself.
	released atomic.Bool
}

func (h *walkHandle) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// walkDriver performs a walk's actions: the only code between the state machine and the
// servers.
type walkDriver struct {
	s     *Scanner
	h     *walkHandle
	w     *walk
	loop  pipeline.Loop[event, action]
	log   *slog.Logger
	rec   *recording
	bctx  context.Context // for what must finish even when the scanner stops
	sized bool            // a failed size read was logged
	unreg unregTally      // keys of unregistered instances, pages not yet recorded
	audit auditTally      // recounts of KVCM's counters, pages not yet recorded (audit.go)
	// roundInstances are the instances of the round a save starts (audit.go reads their
	// counters).
	roundInstances map[string]meta.Instance
	pace           *pace // the walk's duty pace (nil: paced by scan_interval)

	mu   sync.Mutex
	last pipeline.Checkpoint // the checkpoint last read or written
}

// lastCkpt returns the checkpoint last read or written (the collection of unregistered
// instances decides by it).
func (d *walkDriver) lastCkpt() pipeline.Checkpoint {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

func (d *walkDriver) setLast(c pipeline.Checkpoint) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = c
}

// recording is a page's batches being stored and its checkpoint written, in the background.
type recording struct {
	acks []pipeline.AckWait
	next pipeline.Checkpoint
	rev  uint64
	now  time.Time
	done chan struct{}
	ev   evRecorded
}

func (s *Scanner) newDriver(h *walkHandle) *walkDriver {
	cfg := walkConfig{scanInterval: s.cfg.ScanInterval, roundPause: s.cfg.RoundPause,
		batchSize: s.cfg.ScanBatchSize, maxKeysPerSecond: s.cfg.MaxKeysPerSecond,
		failBudget: s.cfg.ScanFailureBudget, failedPause: s.cfg.FailedRoundPause, backoff: s.backoff}
	d := &walkDriver{s: s, h: h, w: newWalk(cfg, h.store), log: s.log.With("store", h.store)}
	d.loop = pipeline.Loop[event, action]{Walk: d.w, Tick: d.tick, Perform: d.perform, Observe: d.observe, Wake: h.wake}
	return d
}

// run drives the walk until it is over: the lease lost or handed back, or ctx done (the last
// page recorded).
func (d *walkDriver) run(ctx context.Context) {
	d.bctx = context.WithoutCancel(ctx)
	defer d.forget()
	d.s.metrics.initStore(d.h.store)
	d.startPace()
	d.loop.Run(ctx)
}

// forget ends the walk's side effects: a recording still running is waited for (a checkpoint
// is never written behind the walk's back) and its metrics are dropped.
func (d *walkDriver) forget() {
	if d.rec != nil {
		<-d.rec.done
		d.rec = nil
	}
	d.s.metrics.dropStore(d.h.store)
}

func (d *walkDriver) tick(ctx context.Context) event {
	stop := ctx.Err() != nil
	wt := d.s.ctl.Tick(ctx, d.s.now(), d.h.lease, !stop && d.w.phase == pipeline.PhaseReady)
	ev := evTick{now: wt.Now, leaseRev: wt.LeaseRev, pausedUntil: wt.PausedUntil, backlogFull: wt.BacklogFull,
		controlErr: wt.ControlErr, stop: stop, release: d.h.release.Load(), gone: d.h.gone.Load()}
	if wt.LeaseRev != 0 && !stop && d.w.phase == pipeline.PhaseReady && !d.w.ckpt.InRound {
		ev.roundStart = d.s.starts.read(ctx, wt.Now)
	}
	if wt.LeaseRev != 0 && !stop && d.w.phase == pipeline.PhaseReady {
		d.auditRead(ctx, wt.Now) // audit.go
	}
	return ev
}

// perform does one action and returns the event it produced, if any.
func (d *walkDriver) perform(ctx context.Context, a action) (event, bool) {
	ev := d.do(ctx, a)
	return ev, ev != nil
}

func (d *walkDriver) do(ctx context.Context, a action) event {
	s := d.s
	switch a := a.(type) {
	case actWait:
		d.loop.Wait(a.d)
	case actReadCheckpoint:
		c, rev, err := pipeline.ReadStoreCheckpoint(ctx, s.state, d.h.store)
		if err == nil && c.LastRoundEndUs > 0 {
			// Alerts on "no round for too long" must survive a restart or a failover.
			s.metrics.lastRoundEnd(c.LastRoundEndUs)
		}
		if err == nil {
			// The store's last count moves with its lease: alerts on it must not wait a round.
			s.metrics.unregistered(d.h.store, c.Unregistered)
			s.metrics.audit.set(d.h.store, c.Audit, c.LastRoundEndUs)
			s.metrics.roundFailed(d.h.store, c.FailedRound)
			d.setLast(c)
		}
		return evCheckpoint{ckpt: c, rev: rev, err: err}
	case actSnapshot:
		now := s.now()
		snap, retryAt, err := s.reg.get(ctx, now)
		ev := evSnapshot{now: now, start: a.start, retryAt: retryAt, err: err}
		if err == nil {
			ev.instances = instancesOf(snap, d.h.store)
			if a.start && len(ev.instances) > 0 {
				ev.size = d.dbSize(ctx)
			}
		}
		return ev
	case actScan:
		return d.scan(ctx, a)
	case actPublish:
		return d.publish(ctx, a)
	case actAwait:
		return d.await()
	case actDrop:
		if d.rec != nil {
			<-d.rec.done
			d.rec = nil
		}
	case actSave:
		d.roundInstances = a.instances
		c, rev, err := d.write(ctx, a.ckpt, a.rev, a.now, a.why)
		return evSaved{now: a.now, why: a.why, ckpt: c, rev: rev, instances: a.instances,
			err: err, conflict: pipeline.IsConflict(err)}
	case actEvent:
		e := a.ev
		e.Store = d.h.store
		if a.ckptRev != 0 {
			e.Source = &subjects.Source{Stream: subjects.KVStream(s.names.StateBucket()),
				Seq: a.ckptRev, MsgID: subjects.CheckpointKey(d.h.store)}
		}
		s.event(ctx, e)
	case actLog:
		if a.level >= slog.LevelWarn && ctx.Err() != nil {
			a.level = slog.LevelDebug // failures caused by the shutdown
		}
		d.log.Log(ctx, a.level, a.msg, a.args...)
	case actOpError:
		s.metrics.opError(a.op)
	case actSkipTick:
		s.metrics.BackpressureSkips.Inc()
	case actRoundEnded:
		c := a.ckpt
		s.metrics.ScanRounds.Inc()
		s.metrics.RoundDuration.Set(float64(c.LastRoundDuration) / 1e3)
		s.metrics.lastRoundEnd(c.LastRoundEndUs)
		s.metrics.roundFailed(d.h.store, nil)
	case actRoundFailed:
		s.metrics.StoreFailedRounds.WithLabelValues(d.h.store).Inc()
		s.metrics.roundFailed(d.h.store, a.ckpt.FailedRound)
	case actStepDown:
		d.h.lease.Drop()
	case actRelease:
		rctx, cancel := context.WithTimeout(d.bctx, stopTimeout)
		defer cancel()
		if err := d.h.lease.Release(rctx); err != nil {
			pipeline.Warn(ctx, d.log, "release store lease", "err", err)
		} else {
			d.log.Info("store lease released", "reason", a.reason)
		}
		d.h.released.Store(true)
	default:
		// Sealed: TestWalkSealed fails on an action without a case. Were one to slip
		// through, the walk ends rather than go on without it (its lease is released).
		d.log.Error("unhandled walk action; walk stopped", "action", fmt.Sprintf("%T", a))
		d.w.phase = pipeline.PhaseDone
	}
	return nil
}

// dbSize reads the store's DBSIZE for the estimated end of the walk; a failure (an ACL user
// without +dbsize) means no estimate from it, logged once.
func (d *walkDriver) dbSize(ctx context.Context) int64 {
	s := d.s
	var n int64
	var err error
	switch {
	case s.sizes != nil:
		n, err = s.sizes(ctx, d.h.store)
	default:
		st, oerr := s.stores.Store(d.h.store)
		sz, ok := st.(StoreSizer)
		if oerr != nil || !ok {
			return 0
		}
		n, err = sz.DBSize(ctx)
	}
	if err != nil {
		if !d.sized {
			d.log.Info("read store size; no estimated end from it", "err", err)
		}
		d.sized = true
		return 0
	}
	return n
}

// startPace sets up the walk's duty pace when the configuration asks for one and the store
// can be read in bursts; otherwise the walk paces by scan_interval.
func (d *walkDriver) startPace() {
	cfg := d.s.cfg
	if cfg.Duty <= 0 {
		return
	}
	st, err := d.s.stores.Store(d.h.store)
	if err != nil {
		return // the walk reports it at its first page
	}
	if _, ok := st.(meta.BurstScanner); !ok {
		d.log.Info("store cannot be read in paced bursts; its walk is paced by scan_interval")
		return
	}
	d.w.cfg.gated = true
	store, m := d.h.store, d.s.metrics
	d.pace = newPace(cfg, st, func(cs duty.CeilingState) { m.storeCeiling(store, cs) })
	m.storePace(store, d.pace.record())
}

// StoreSizer is a metadata store that can tell its number of keys (Redis DBSIZE).
type StoreSizer interface {
	DBSize(ctx context.Context) (int64, error)
}

func (d *walkDriver) scan(ctx context.Context, a actScan) event {
	s := d.s
	now := s.now()
	store, err := s.stores.Store(d.h.store)
	if err != nil {
		return evPage{now: now, err: err, unavailable: true}
	}
	owns := func(id string) bool { _, ok := a.instances[id]; return ok }
	var page meta.Page
	var pace *pipeline.PaceRecord
	if bs, ok := store.(meta.BurstScanner); ok && d.pace != nil {
		page, err = bs.ScanStoreBursts(ctx, a.cursor, a.count, owns, d.pace.bursts())
		d.pace.trips.End()                   // a read that stopped between two round trips holds no gate
		now, pace = s.now(), d.pace.record() // the page is read once its last burst is
		s.metrics.storePace(d.h.store, pace)
	} else {
		page, err = store.ScanStore(ctx, a.cursor, a.count, owns)
	}
	if err != nil {
		return evPage{now: now, err: err}
	}
	if s.reg != nil {
		// Keys of instances no longer registered anywhere: read and counted, and (opt-in)
		// sent to the deleter once they may go.
		counts, reads := countUnregistered(ctx, store, page.UnownedKeys, s.reg.registered)
		sent := d.collectUnregistered(ctx, store, a.cursor, reads)
		d.unreg.add(a.cursor, page.Next, counts, sent, s.reg.listed(d.h.store))
	}
	d.auditPage(ctx, a.cursor, page)
	s.metrics.ScanPages.Inc()
	s.metrics.ScannedKeys.Add(float64(len(page.Entries)))
	s.metrics.ScanBadKeys.Add(float64(len(page.BadKeys)))
	s.metrics.ScanUnownedKeys.Add(float64(page.Unowned))
	s.metrics.StoreScannedKeys.WithLabelValues(d.h.store).Add(float64(len(page.Entries)))
	if page.WrongDB > 0 {
		// Legacy keys outside DB 0 are nobody's live blocks (a KVCM of that layout ignores
		// db=): never published, counted and recorded once per page.
		s.metrics.ScanWrongDBKeys.Add(float64(page.WrongDB))
		s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Store: d.h.store, Reason: "legacy_outside_db0",
			Detail: fmt.Sprintf("store %s: %d legacy-layout keys in a database other than 0, "+
				"where no KVCM of that layout keeps its blocks; not collected", d.h.store, page.WrongDB)})
	}
	return evPage{now: now, page: page, pace: pace}
}

func (d *walkDriver) publish(ctx context.Context, a actPublish) event {
	rec := &recording{next: a.next, rev: a.rev, now: a.now, done: make(chan struct{})}
	if !a.async {
		if d.send(ctx, a, rec) {
			d.record(ctx, rec)
		}
		return d.outcome(rec)
	}
	// The page's batches are encoded and published in the background as well, while the
	// walk reads the next page (one page's encoding overlaps the next one's read). A page
	// whose batches are stored is recorded on the way out too: the recording is not
	// cancelled with the scanner (bounded by AckTimeout and the server's answer). Only the
	// goroutine touches rec until await has waited for it.
	d.rec = rec
	go func() {
		defer close(rec.done)
		if d.send(ctx, a, rec) {
			d.record(d.bctx, rec)
		}
	}()
	return nil
}

// send encodes and publishes the page's batches, their acks into rec; false (rec.ev set)
// when the lease is no longer held (fencing: never publish after losing it) or a publish
// failed.
func (d *walkDriver) send(ctx context.Context, a actPublish, rec *recording) bool {
	s := d.s
	if _, held := d.h.lease.Held(); !held {
		rec.ev = evRecorded{err: pipeline.ErrLeaseLost, failure: failLease} // fencing, in the background too
		return false
	}
	for _, b := range s.batches(ctx, d.h.store, a) {
		acks, err := s.publish(ctx, b)
		if err != nil {
			// Batches already sent are stored again under the same ids: the server drops them.
			rec.ev = evRecorded{err: err, failure: failPublish}
			return false
		}
		rec.acks = append(rec.acks, acks...)
	}
	return true
}

func (d *walkDriver) await() event {
	rec := d.rec
	if rec == nil {
		return nil
	}
	<-rec.done // record ends within AckTimeout plus one checkpoint write
	d.rec = nil
	return d.outcome(rec)
}

// outcome is a finished recording's event; its batches count as published once recorded.
func (d *walkDriver) outcome(rec *recording) event {
	if rec.ev.err == nil {
		d.s.metrics.PublishedBatches.Add(float64(len(rec.acks)))
	}
	return rec.ev
}

// record waits for the page's batches to be stored, then writes its checkpoint by revision.
// It sets rec.ev and changes nothing else.
func (d *walkDriver) record(ctx context.Context, rec *recording) {
	actx, cancel := context.WithTimeout(ctx, pipeline.AckTimeout)
	defer cancel()
	for _, ack := range rec.acks {
		if err := ack(actx); err != nil {
			rec.ev = evRecorded{err: err, failure: failPublish}
			return
		}
	}
	// Fencing: never record progress after losing the lease.
	if _, held := d.h.lease.Held(); !held {
		rec.ev = evRecorded{err: pipeline.ErrLeaseLost, failure: failLease}
		return
	}
	c, rev, err := d.write(ctx, rec.next, rec.rev, rec.now, "")
	if err != nil {
		f := failCheckpoint
		if pipeline.IsConflict(err) {
			f = failConflict
		}
		rec.ev = evRecorded{err: err, failure: f}
		return
	}
	rec.ev = evRecorded{ckpt: c, rev: rev}
}

// write stores c, stamped with this holder and now, as the store's checkpoint with revision
// rev (0: the first one), for why ("" for a page's record); it returns what it stored and the
// new revision. The count of unregistered instances' keys joins it here, the one place every
// checkpoint passes (unregistered.go).
func (d *walkDriver) write(
	ctx context.Context,
	c pipeline.Checkpoint,
	rev uint64,
	now time.Time,
	why string,
) (pipeline.Checkpoint, uint64, error) {
	c.Store = d.h.store
	c.Holder = d.s.cfg.Holder
	c.SavedUs = now.UnixMicro()
	c, ended := d.unreg.apply(c, why, now)
	switch why {
	case saveRoundStart:
		d.audit.reset()
		c.AuditRound = d.auditStart(ctx, d.roundInstances, now)
		c.AuditTruncated = max(0, len(d.roundInstances)-maxAudit)
	case saveRoundEnd:
		d.audit.reset()
		c.Audit, c.AuditRound = d.auditEnd(ctx, c.AuditRound, now), nil
	case saveFailed:
		// A part of a walk recounts part of each instance: the last completed round's audit
		// stands, and KVCM's counters are not read against this one.
		d.audit.reset()
		c.AuditRound = nil
	case "":
		c = d.audit.apply(c)
	}
	rev, err := pipeline.WriteCheckpoint(ctx, d.s.state, subjects.CheckpointKey(d.h.store), c, rev)
	if err == nil {
		d.setLast(c)
	}
	if err == nil && ended {
		d.s.metrics.audit.set(d.h.store, c.Audit, c.LastRoundEndUs)
		d.s.metrics.unregistered(d.h.store, c.Unregistered)
		if len(c.Unregistered) > 0 {
			top := c.Unregistered[0]
			d.log.Warn("keys of instances the registry does not list", "instances", len(c.Unregistered)+c.UnregisteredTruncated,
				"first", top.Instance, "keys", top.Keys, "locations", top.Locations, "bytes", top.Bytes)
		}
	}
	return c, rev, err
}

// observe updates the store's gauges from the walk's state.
func (d *walkDriver) observe() {
	w, m, store := d.w, d.s.metrics, d.h.store
	d.h.between.Store(w.phase == pipeline.PhaseReady && !w.ckpt.InRound && w.pending == nil)
	if w.phase == pipeline.PhaseDone {
		return
	}
	d.s.noteRound(store, w.ckpt)
	m.StoreRound.WithLabelValues(store).Set(float64(w.ckpt.Round))
	m.StoreKeysPerSecond.WithLabelValues(store).Set(w.ckpt.Rate)
	eta, progress, _ := EstimateEnd(w.ckpt, d.s.now())
	m.StoreProgress.WithLabelValues(store).Set(progress)
	if eta.IsZero() {
		m.StoreETA.WithLabelValues(store).Set(0)
	} else {
		m.StoreETA.WithLabelValues(store).Set(float64(eta.UnixMilli()) / 1e3)
	}
	state := stateLabel(w.waiting)
	for _, st := range walkStates {
		v := 0.0
		if st == state {
			v = 1
		}
		m.StoreState.WithLabelValues(store, st).Set(v)
	}
}

// batches routes a store page's blocks to one batch per instance, in instance order, and
// reports the keys that do not parse, by instance.
func (s *Scanner) batches(ctx context.Context, store string, a actPublish) []subjects.Batch {
	owns := func(id string) bool { _, ok := a.instances[id]; return ok }
	page := a.page
	bad := map[string][]string{}
	for _, k := range page.BadKeys {
		id, _ := kvcm.OwnerOf(k, owns)
		bad[id] = append(bad[id], k)
	}
	byInst := map[string]*subjects.Batch{}
	batch := func(id string) *subjects.Batch {
		b := byInst[id]
		if b == nil {
			in := a.instances[id]
			b = &subjects.Batch{
				V: subjects.BatchSchemaVersion, Cluster: s.names.Cluster, Instance: id, Group: in.Group, Store: store,
				Round: a.round, LeaseRev: a.leaseRev, Cursor: a.cursor, Next: page.Next,
				ScannedAt: a.now.UnixMicro(), BadKeys: len(bad[id]),
			}
			byInst[id] = b
		}
		return b
	}
	for i := range page.Entries {
		e := &page.Entries[i]
		be, ok := BlockEntry(e)
		if !ok {
			continue
		}
		b := batch(e.Instance)
		b.Blocks = append(b.Blocks, be)
	}
	for _, id := range slices.Sorted(maps.Keys(bad)) {
		keys := bad[id]
		s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Instance: id, Round: a.round, Reason: "bad_key",
			Detail: fmt.Sprintf("%d keys do not parse, e.g. %q", len(keys), keys[0])})
	}
	out := make([]subjects.Batch, 0, len(byInst))
	for _, id := range slices.Sorted(maps.Keys(byInst)) {
		out = append(out, *byInst[id])
	}
	return out
}

func (s *Scanner) publish(ctx context.Context, b subjects.Batch) ([]pipeline.AckWait, error) {
	maxPayload := int64(s.maxPayload)
	if maxPayload <= 0 {
		maxPayload = 1 << 20 // the server's default
	}
	maxBytes := subjects.PayloadLimit(maxPayload) // headers travel too
	parts, oversized, err := subjects.EncodeBatchParts(b, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	for _, o := range oversized {
		s.metrics.OversizedBlocks.Inc()
		key := o.Key
		field, size := o.LargestField()
		s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Instance: b.Instance, Round: b.Round, Key: &key,
			Reason: "oversized", Detail: fmt.Sprintf("block does not fit in a message of %d "+
				"bytes: its field %s holds %d bytes", maxBytes, field, size)})
	}
	var acks []pipeline.AckWait
	for _, p := range parts {
		if len(p.Batch.Blocks) == 0 {
			continue
		}
		ack, err := s.publisher.PublishAsync(s.names.BatchSubject(b.Instance), p.Data, subjects.BatchMsgID(p.Batch))
		if err != nil {
			return nil, fmt.Errorf("publish batch of %s: %w", b.Instance, err)
		}
		acks = append(acks, ack)
	}
	return acks, nil
}

func (s *Scanner) event(ctx context.Context, e subjects.Event) {
	if s.events == nil {
		return
	}
	e.Stage = pipeline.StageScanner
	s.events.Emit(ctx, e)
}
