package scanner

import (
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The walk of one metadata store is a walk as package pipeline's walk.go describes it: step
// takes the walk's state and one event (a tick with the readings it needs, a page read, a
// page recorded, a checkpoint written, …) and returns the actions to perform (read a page,
// publish it, write the checkpoint, wait, …); it does no I/O and reads no clock, so every
// decision of the walk's course is table-tested without servers (walk_test.go). The driver
// (driver.go) performs the actions and feeds their results back as events; the scanner
// (scanner.go) holds the leases and starts one walk per store it holds. One decision is not
// a row of that table: which keys of unregistered instances a page sends to the deleter,
// which the driver makes with the page it read (unregistered_collect.go, tested in
// unregistered_test.go).
//
// The read position runs at most one page ahead of the checkpoint: a page's batches are stored
// by JetStream (and the checkpoint moved past it) while the next page is read from Redis, and
// the next page is published only once the previous one is recorded (pending). A failure of
// either puts the read position back on the checkpoint, so that page is read and published
// again (the server drops the batches it already has). Every path that makes no progress
// waits at least IdleWait, whatever scan_interval (invariant 7: nothing spins).
//
// A failed SCAN is retried from the same cursor with the scanner's backoff; once the store's
// reads have failed for scan_failure_budget with no page read in between (or the store cannot
// be opened at all), the store's round ends failed (failRound). A failed round decides
// nothing a round's end decides from a whole walk: its partial recount of KVCM's counters is
// dropped (the last completed round's audit stands), its count of unregistered instances'
// keys does not become the store's last count (the collection of those keys and the sweep
// act only on a completed round's), and it is no completed round to the metrics and alerts.
// The batches it published stand on their own, as every page's do. Its next round comes
// failed_round_pause later (at most round_pause) and starts over from cursor 0: a SCAN
// cursor means something only to the server process that gave it (its hash seed orders the
// table), and a failure that long is often a restart or a failover, after which resuming
// would skip keys; and the round's audit and unregistered count need one whole walk.

// overlapBelow: only when the next tick is due sooner than this does a page stay unrecorded
// while the next one is read; a slower walk records every page at once (a successor then
// reads no page twice).
const overlapBelow = 5 * time.Millisecond

// rateWindow is the time constant of a walk's recent rate (Checkpoint.Rate).
const rateWindow = 10 * time.Second

// walkConfig is what a walk needs of Config.
type walkConfig struct {
	scanInterval     time.Duration
	roundPause       time.Duration
	batchSize        int
	maxKeysPerSecond float64
	// gated: the driver paces the page's reads by the duty (pace.go); the walk waits
	// nothing between pages.
	gated bool
	// failBudget is scan_failure_budget, failedPause failed_round_pause; backoff the wait
	// before the attempt-th retry (1-based) of a failed read.
	failBudget  time.Duration
	failedPause time.Duration
	backoff     func(attempt int) time.Duration
}

// walk is one store's walk state.
type walk struct {
	cfg   walkConfig
	store string
	phase pipeline.WalkPhase
	// leaseRev is the lease revision of the last tick: the fencing token of what is read now.
	leaseRev uint64
	// ckpt is the checkpoint as last written (or read), rev its revision (0: none yet).
	ckpt pipeline.Checkpoint
	rev  uint64
	// instances is the round's registry snapshot of the store (nil: not read since the lease
	// was taken).
	instances map[string]meta.Instance
	// The read position: the next SCAN cursor, whether the store's last page was read, and
	// the SCAN COUNT of the next page.
	cursor uint64
	walked bool
	count  int
	// pending is a published page not yet recorded in the checkpoint; held a page read while
	// pending was not recorded yet (it is published once pending is).
	pending *pendingPage
	held    *heldPage
	// waiting is why the walk does not move now (Wait*); the checkpoint says it once written.
	waiting      string
	waitingSince time.Time
	// lastPage is when the last page of the round was read (zero: none yet), lastWait the
	// wait asked after it: the time between two pages that was not waited was spent reading,
	// publishing and ticking (for the rate, and for max_keys_per_second).
	lastPage time.Time
	lastWait time.Duration
	// stopping: the walk ends once the pending page is recorded, handing the lease back
	// when stopReason says why.
	stopping   bool
	stopReason string
	// failures counts the reads of the store that failed since its last page was read, the
	// first of them at failingSince.
	failures     int
	failingSince time.Time
}

type pendingPage struct {
	cursor uint64
	next   pipeline.Checkpoint
}

type heldPage struct {
	page meta.Page
	at   time.Time
	pace *pipeline.PaceRecord
}

func newWalk(cfg walkConfig, store string) *walk {
	return &walk{cfg: cfg, store: store, phase: pipeline.PhaseLoad}
}

// event is one of the ev* types: sealed, each handled by step (TestWalkSealed).
type event interface{ isEvent() }

func (evTick) isEvent()       {}
func (evCheckpoint) isEvent() {}
func (evSnapshot) isEvent()   {}
func (evPage) isEvent()       {}
func (evRecorded) isEvent()   {}
func (evSaved) isEvent()      {}

// Events.
type (
	// evTick: the walk's timer fired (or the scanner woke it). It carries what the decision
	// needs: the lease, the operator's pause and the backlog, and the scanner's requests.
	evTick struct {
		now         time.Time
		leaseRev    uint64    // 0: the lease is not held
		pausedUntil time.Time // zero: no pause
		backlogFull bool
		controlErr  error // the pause or the backlog could not be read: fail closed
		release     bool  // hand the store back at the next round boundary (over share)
		gone        bool  // the store left the registry: stop after the pending page
		stop        bool  // the scanner shuts down: record the pending page, then stop
		// roundStart is the operators' requests to start rounds now (kvcm-gc round start),
		// read only while the walk is between rounds.
		roundStart pipeline.RoundStartRecord
	}
	evCheckpoint struct {
		ckpt pipeline.Checkpoint
		rev  uint64
		err  error
	}
	evSnapshot struct {
		now       time.Time
		start     bool
		instances map[string]meta.Instance
		size      int64 // DBSIZE at the round's start (0: unknown)
		retryAt   time.Time
		err       error
	}
	evPage struct {
		now         time.Time
		page        meta.Page
		err         error
		unavailable bool                 // the store cannot be opened at all: its round is skipped
		pace        *pipeline.PaceRecord // a duty-paced walk's pace as the page was read
	}
	evRecorded struct {
		ckpt    pipeline.Checkpoint
		rev     uint64
		err     error
		failure string // failPublish, failLease, failConflict, failCheckpoint
	}
	evSaved struct {
		now       time.Time
		why       string
		ckpt      pipeline.Checkpoint
		rev       uint64
		instances map[string]meta.Instance
		err       error
		conflict  bool
	}
)

// Why a page's recording failed.
const (
	failPublish    = "publish"    // a batch was not stored
	failLease      = "lease"      // the lease was lost before the checkpoint was written (fencing)
	failConflict   = "conflict"   // the checkpoint was written by someone else
	failCheckpoint = "checkpoint" // the checkpoint write failed
)

// Why a checkpoint is written outside of a page.
const (
	saveRoundStart = "round_start"
	saveRoundEnd   = "round_end"
	saveFailed     = "round_failed"
	saveWaiting    = "waiting"
)

// action is one of the act* types: sealed, each handled by the driver's perform
// (TestWalkSealed).
type action interface{ isAction() }

func (actReadCheckpoint) isAction() {}
func (actSnapshot) isAction()       {}
func (actScan) isAction()           {}
func (actPublish) isAction()        {}
func (actAwait) isAction()          {}
func (actDrop) isAction()           {}
func (actSave) isAction()           {}
func (actEvent) isAction()          {}
func (actLog) isAction()            {}
func (actOpError) isAction()        {}
func (actSkipTick) isAction()       {}
func (actRoundEnded) isAction()     {}
func (actRoundFailed) isAction()    {}
func (actStepDown) isAction()       {}
func (actRelease) isAction()        {}
func (actWait) isAction()           {}

// Actions.
type (
	actReadCheckpoint struct{}
	// actSnapshot reads the store's instances from the registry (and, at a round's start,
	// its DBSIZE).
	actSnapshot struct{ start bool }
	actScan     struct {
		cursor    uint64
		count     int
		instances map[string]meta.Instance
	}
	// actPublish publishes a page's batches and records next (by revision rev) once they are
	// stored: in the background when async, else before returning (evRecorded).
	actPublish struct {
		now       time.Time
		page      meta.Page
		cursor    uint64
		round     uint64
		leaseRev  uint64
		instances map[string]meta.Instance
		next      pipeline.Checkpoint
		rev       uint64
		async     bool
	}
	actAwait struct{} // wait for the pending page's recording (evRecorded)
	actDrop  struct{} // wait for it and forget its outcome (the lease is gone)
	actSave  struct {
		now       time.Time
		why       string
		ckpt      pipeline.Checkpoint
		rev       uint64
		instances map[string]meta.Instance
	}
	actEvent struct {
		ev subjects.Event
		// ckptRev, when set, makes the event's source the store's checkpoint at that revision.
		ckptRev uint64
	}
	actLog struct {
		level slog.Level
		msg   string
		args  []any
	}
	actOpError    struct{ op string }
	actSkipTick   struct{} // a tick skipped by backpressure (kvcm_gc_backpressure_skips_total)
	actRoundEnded struct{ ckpt pipeline.Checkpoint }
	// actRoundFailed: the round ended failed (kvcm_gc_store_failed_rounds_total).
	actRoundFailed struct{ ckpt pipeline.Checkpoint }
	actStepDown    struct{} // another scanner wrote the checkpoint: forget the lease
	actRelease     struct{ reason string }
	// actWait: the next tick comes after d (the last actWait of a step wins).
	actWait struct{ d time.Duration }
)

// step is the whole decision of a walk: the event's effect on the state and the actions.
func (w *walk) step(ev event) []action {
	if w.phase == pipeline.PhaseDone {
		return nil
	}
	switch e := ev.(type) {
	case evTick:
		return w.tick(e)
	case evCheckpoint:
		return w.loaded(e)
	case evSnapshot:
		return w.snapshot(e)
	case evPage:
		return w.pageRead(e)
	case evRecorded:
		return w.recorded(e)
	case evSaved:
		return w.saved(e)
	}
	return nil // sealed: no other event exists
}

// Step, Phase and Idle make the walk a Stepper.
func (w *walk) Step(ev event) []action    { return w.step(ev) }
func (w *walk) Phase() pipeline.WalkPhase { return w.phase }
func (w *walk) Idle() time.Duration       { return w.idle() }

func (w *walk) idle() time.Duration { return max(pipeline.IdleWait, w.cfg.scanInterval) }

func (w *walk) tick(t evTick) []action {
	if t.leaseRev == 0 {
		return w.lost()
	}
	w.leaseRev = t.leaseRev
	if t.stop || t.gone {
		return w.stop(t.gone)
	}
	if w.phase == pipeline.PhaseLoad {
		return []action{actReadCheckpoint{}}
	}
	if !t.pausedUntil.IsZero() && t.now.Before(t.pausedUntil) {
		return w.hold(t.now, pipeline.WaitPaused)
	}
	if !w.ckpt.InRound {
		if t.release {
			return w.release("over its share of the stores, at a round boundary")
		}
		// An operator's request made after the last round ended cuts the round pause short;
		// the wait is no longer than RoundStartPoll so that a request is seen.
		if next := time.UnixMicro(w.ckpt.NextRoundUs); t.now.Before(next) && !t.roundStart.Starts(w.store, w.ckpt) {
			acts := w.setWaiting(t.now, pipeline.WaitRoundPause)
			return append(acts, actWait{min(next.Sub(t.now), RoundStartPoll)})
		}
		if t.controlErr != nil {
			return w.hold(t.now, pipeline.WaitError) // no round starts while the pause cannot be read
		}
		return []action{actSnapshot{start: true}}
	}
	if t.controlErr != nil {
		return w.hold(t.now, pipeline.WaitError)
	}
	if t.backlogFull {
		return append(w.hold(t.now, pipeline.WaitBackpressure), actSkipTick{})
	}
	if w.walked {
		if w.pending != nil {
			return []action{actAwait{}, actWait{0}}
		}
		return w.endRound(t.now)
	}
	if w.instances == nil {
		return []action{actSnapshot{start: false}}
	}
	count := w.count
	if count <= 0 {
		count = w.cfg.batchSize
	}
	return []action{actScan{cursor: w.cursor, count: count, instances: w.instances}}
}

// hold keeps the walk where it is for a while: the pending page is recorded first, then the
// reason is written (once) and the walk waits.
func (w *walk) hold(now time.Time, reason string) []action {
	if w.pending != nil {
		return []action{actAwait{}, actWait{0}}
	}
	acts := w.setWaiting(now, reason)
	return append(acts, actWait{w.idle()})
}

// setWaiting notes why the walk is not moving, and writes it to the checkpoint when that
// says otherwise (never while a page is pending: its recording writes the checkpoint).
func (w *walk) setWaiting(now time.Time, reason string) []action {
	if w.waiting != reason || w.waitingSince.IsZero() {
		w.waiting, w.waitingSince = reason, now
	}
	if w.pending != nil || w.phase != pipeline.PhaseReady || w.ckpt.Waiting == reason {
		return nil
	}
	c := w.ckpt
	c.Waiting, c.WaitingSinceUs = reason, 0
	if reason != pipeline.WaitNone {
		c.WaitingSinceUs = w.waitingSince.UnixMicro()
	}
	return []action{actSave{now: now, why: saveWaiting, ckpt: c, rev: w.rev}}
}

func (w *walk) lost() []action {
	acts := []action{
		actLog{slog.LevelWarn, "store lease lost; walk stopped", []any{"round", w.ckpt.Round, "cursor", w.ckpt.Cursor}},
	}
	if w.pending != nil {
		// Its recording checks the lease before writing (fencing) and writes nothing; the
		// next holder reads the page again.
		acts = append(acts, actDrop{})
	}
	w.pending, w.held, w.phase = nil, nil, pipeline.PhaseDone
	return acts
}

func (w *walk) stop(gone bool) []action {
	w.held = nil
	if gone {
		w.stopReason = "the store left the registry"
	}
	if w.pending != nil {
		// The last page's batches: record them if they were stored, so a successor does
		// not read that page again.
		w.stopping = true
		return []action{actAwait{}, actWait{0}}
	}
	return w.finish()
}

// finish ends a stopping walk.
func (w *walk) finish() []action {
	if w.stopReason != "" {
		return w.release(w.stopReason)
	}
	w.phase = pipeline.PhaseDone
	return nil
}

func (w *walk) release(reason string) []action {
	w.phase = pipeline.PhaseDone
	return []action{actRelease{reason: reason}}
}

func (w *walk) stepDown() []action {
	w.pending, w.held, w.phase = nil, nil, pipeline.PhaseDone
	return []action{actLog{slog.LevelWarn, "checkpoint written by another scanner; stepping down", nil}, actStepDown{}}
}

// rewind puts the read position back on the checkpoint.
func (w *walk) rewind() {
	w.cursor, w.walked, w.count = w.ckpt.Cursor, w.ckpt.Walked, 0
}

func (w *walk) loaded(e evCheckpoint) []action {
	if e.err != nil {
		return []action{actOpError{"checkpoint"}, actLog{slog.LevelWarn, "read checkpoint", []any{"err", e.err}},
			actWait{w.idle()}}
	}
	c := e.ckpt
	c.Store = w.store
	w.ckpt, w.rev, w.phase, w.instances = c, e.rev, pipeline.PhaseReady, nil
	w.waiting, w.waitingSince = c.Waiting, time.UnixMicro(c.WaitingSinceUs)
	w.rewind()
	return []action{
		actLog{
			slog.LevelInfo,
			"store lease acquired",
			[]any{"round", c.Round, "in_round", c.InRound, "cursor", c.Cursor, "keys", c.KeysScanned},
		},
		actWait{0},
	}
}

func (w *walk) snapshot(e evSnapshot) []action {
	if e.err != nil {
		acts := w.setWaiting(e.now, pipeline.WaitRegistryBackoff)
		return append(acts, actWait{max(e.retryAt.Sub(e.now), w.idle())})
	}
	if len(e.instances) == 0 {
		return w.release("no instance of the registry uses the store")
	}
	if !e.start {
		w.instances = e.instances
		w.ckpt.Instances = len(e.instances)
		return []action{
			actLog{
				slog.LevelInfo,
				"round resumed",
				[]any{"round", w.ckpt.Round, "cursor", w.ckpt.Cursor, "keys", w.ckpt.KeysScanned},
			},
			actWait{0},
		}
	}
	c := w.ckpt
	c.Round++
	c.InRound, c.Walked, c.Cursor = true, false, 0
	c.Instances = len(e.instances)
	c.RoundStartedUs = e.now.UnixMicro()
	c.KeysScanned, c.KeysVisited, c.Rate, c.Layouts = 0, 0, 0, nil
	c.DBSize = e.size
	c.Waiting, c.WaitingSinceUs = pipeline.WaitNone, 0
	return []action{actSave{now: e.now, why: saveRoundStart, ckpt: c, rev: w.rev, instances: e.instances}}
}

func (w *walk) saved(e evSaved) []action {
	if e.err != nil {
		if e.conflict {
			return w.stepDown()
		}
		return []action{
			actOpError{"checkpoint"},
			actLog{slog.LevelWarn, "save checkpoint", []any{"why", e.why, "err", e.err}},
			actWait{w.idle()},
		}
	}
	w.ckpt, w.rev = e.ckpt, e.rev
	switch e.why {
	case saveRoundStart:
		w.instances = e.instances
		w.cursor, w.walked, w.count, w.lastPage = 0, false, 0, time.Time{}
		w.waiting, w.waitingSince = pipeline.WaitNone, e.now
		c := w.ckpt
		return []action{
			actLog{slog.LevelInfo, "round started", []any{"round", c.Round, "instances", c.Instances, "dbsize", c.DBSize}},
			actEvent{ev: subjects.Event{Kind: subjects.EventRound, Round: c.Round, Outcome: "start", Detail: "store " + w.store,
				Counts: map[string]int64{"instances": int64(c.Instances), "dbsize": c.DBSize}}, ckptRev: e.rev},
			actWait{0},
		}
	case saveRoundEnd:
		w.instances = nil
		w.waiting, w.waitingSince = pipeline.WaitRoundPause, e.now
		c := w.ckpt
		acts := []action{
			actRoundEnded{ckpt: c},
			actLog{slog.LevelInfo, "round finished", []any{"round", c.Round, "keys", c.LastRoundKeys,
				"duration", time.Duration(c.LastRoundDuration) * time.Millisecond, "layouts", c.LastRoundLayouts}},
			actEvent{ev: subjects.Event{Kind: subjects.EventRound, Round: c.Round, Outcome: "end", Detail: "store " + w.store,
				Counts: map[string]int64{"keys": int64(c.LastRoundKeys), "duration_ms": c.LastRoundDuration,
					"instances": int64(c.Instances), "stores": 1}}, ckptRev: e.rev},
		}
		if mixedLayouts(c.LastRoundLayouts) {
			counts := map[string]int64{}
			for l, n := range c.LastRoundLayouts {
				counts[l] = int64(n)
			}
			acts = append(
				acts,
				actLog{
					slog.LevelWarn,
					"store holds keys of more than one layout",
					[]any{"round", c.Round, "layouts", c.LastRoundLayouts},
				},
				actEvent{ev: subjects.Event{Kind: subjects.EventRound, Round: c.Round, Reason: "mixed_layouts",
					Detail: "store " + w.store, Counts: counts}, ckptRev: e.rev},
			)
		}
		return append(acts, actWait{0})
	case saveFailed:
		w.instances, w.failures, w.failingSince = nil, 0, time.Time{}
		w.waiting, w.waitingSince = pipeline.WaitRoundPause, e.now
		c, f := w.ckpt, w.ckpt.FailedRound
		return []action{
			actRoundFailed{ckpt: c},
			actLog{slog.LevelWarn, "round failed; the next starts over", []any{"round", c.Round, "reason", f.Reason,
				"attempts", f.Attempts, "cursor", f.Cursor, "keys", f.KeysScanned, "err", f.Error,
				"next_round", time.UnixMicro(c.NextRoundUs).UTC()}},
			actEvent{ev: subjects.Event{Kind: subjects.EventRound, Round: c.Round, Outcome: "failed", Reason: f.Reason,
				Detail: "store " + w.store + ": " + f.Error, Counts: map[string]int64{"keys": int64(f.KeysScanned),
					"attempts": int64(f.Attempts), "stores": 1}}, ckptRev: e.rev},
			actWait{0},
		}
	}
	return nil
}

// mixedLayouts: a round read keys of both layouts, or a key with both.
func mixedLayouts(l map[string]uint64) bool {
	return l[LayoutAmbiguous] > 0 || (l[LayoutLegacy] > 0 && l[LayoutLocation] > 0)
}

func (w *walk) endRound(now time.Time) []action {
	c := w.ckpt
	started := time.UnixMicro(c.RoundStartedUs)
	c.InRound, c.Walked = false, false
	c.NextRoundUs = now.Add(w.cfg.roundPause).UnixMicro()
	c.LastRoundEndUs = now.UnixMicro()
	c.LastRoundKeys, c.LastRoundVisited = c.KeysScanned, c.KeysVisited
	c.LastRoundDuration = now.Sub(started).Milliseconds()
	c.LastRoundLayouts = maps.Clone(c.Layouts)
	c.FailedRound = nil
	c.Waiting, c.WaitingSinceUs = pipeline.WaitRoundPause, now.UnixMicro()
	return []action{actSave{now: now, why: saveRoundEnd, ckpt: c, rev: w.rev}}
}

// failRound ends the round failed (no page pending): the next starts over from cursor 0,
// failed_round_pause from now but never later than a completed round's would.
func (w *walk) failRound(now time.Time, reason string, err error) []action {
	c := w.ckpt
	f := &pipeline.RoundFailure{Round: c.Round, Reason: reason, Error: err.Error(), AtUs: now.UnixMicro(),
		Attempts: w.failures, Cursor: c.Cursor, KeysScanned: c.KeysScanned}
	if !w.failingSince.IsZero() {
		f.FailingSinceUs = w.failingSince.UnixMicro()
	}
	c.InRound, c.Walked, c.Cursor, c.FailedRound = false, false, 0, f
	c.NextRoundUs = now.Add(min(w.cfg.failedPause, w.cfg.roundPause)).UnixMicro()
	c.Waiting, c.WaitingSinceUs = pipeline.WaitRoundPause, now.UnixMicro()
	w.held = nil
	return []action{actSave{now: now, why: saveFailed, ckpt: c, rev: w.rev}}
}

// retryWait is the wait before the next read after the walk's failures-th failed one: the
// scanner's backoff, never less than the walk's idle wait.
func (w *walk) retryWait() time.Duration {
	d := w.idle()
	if w.cfg.backoff != nil {
		d = max(d, w.cfg.backoff(w.failures))
	}
	return d
}

func (w *walk) pageRead(e evPage) []action {
	switch {
	case e.unavailable:
		if w.pending != nil {
			return []action{actAwait{}, actWait{0}}
		}
		// A store that cannot even be opened (a bad URI): its instances are skipped this
		// round, and the round ends failed (a whole walk it is not).
		acts := []action{actOpError{"store"},
			actLog{
				slog.LevelWarn,
				"open metadata store; its instances skipped this round",
				[]any{"instances", len(w.instances), "err", e.err},
			}}
		for _, id := range slices.Sorted(maps.Keys(w.instances)) {
			acts = append(acts, actEvent{ev: subjects.Event{Kind: subjects.EventSkip, Instance: id, Round: w.ckpt.Round,
				Reason: "store_unavailable", Detail: e.err.Error()}})
		}
		w.failures++
		return append(acts, w.failRound(e.now, pipeline.RoundFailedUnavailable, e.err)...)
	case e.err != nil:
		if w.failures == 0 {
			w.failingSince = e.now
		}
		w.failures++
		acts := []action{
			actOpError{"scan"},
			actLog{slog.LevelWarn, "scan page; cursor kept", []any{"cursor", w.cursor, "attempt", w.failures, "err", e.err}},
		}
		if w.pending != nil {
			return append(acts, actAwait{}, actWait{w.idle()})
		}
		if e.now.Sub(w.failingSince) >= w.cfg.failBudget {
			return append(acts, w.failRound(e.now, pipeline.RoundFailedScan, e.err)...)
		}
		acts = append(acts, w.setWaiting(e.now, pipeline.WaitError)...)
		return append(acts, actWait{w.retryWait()})
	}
	w.failures, w.failingSince = 0, time.Time{}
	if w.pending != nil {
		// Only once the previous page is recorded is this one published (batches stay in
		// order, and the checkpoint never passes a page whose batches are not stored).
		w.held = &heldPage{page: e.page, at: e.now, pace: e.pace}
		return []action{actAwait{}}
	}
	return w.publish(e.page, e.now, e.pace)
}

// publish publishes a page read at now and moves the read position past it.
func (w *walk) publish(page meta.Page, now time.Time, pace *pipeline.PaceRecord) []action {
	returned := len(page.Entries) + len(page.BadKeys) + page.Unowned
	next := w.ckpt
	next.Cursor, next.Walked = page.Next, page.Next == 0
	next.KeysScanned += uint64(len(page.Entries))
	next.KeysVisited += uint64(returned)
	if len(page.Entries) > 0 {
		next.Layouts = countLayouts(next.Layouts, page.Entries)
	}
	if !w.lastPage.IsZero() && now.After(w.lastPage) {
		dt := now.Sub(w.lastPage)
		inst := float64(returned) / dt.Seconds()
		if next.Rate == 0 {
			next.Rate = inst // the first measure of the round, not a climb from zero
		} else {
			next.Rate += (1 - math.Exp(-float64(dt)/float64(rateWindow))) * (inst - next.Rate)
		}
	}
	next.Waiting, next.WaitingSinceUs = pipeline.WaitNone, 0
	next.Pace = pace

	wait := w.cfg.scanInterval
	switch {
	case w.cfg.gated:
		wait = 0
	case w.cfg.maxKeysPerSecond > 0 && returned > 0:
		wait = max(wait, w.capWait(returned, now))
	}
	act := actPublish{now: now, page: page, cursor: w.cursor, round: w.ckpt.Round, leaseRev: w.leaseRev,
		instances: w.instances, next: next, rev: w.rev, async: wait < overlapBelow}
	w.pending = &pendingPage{cursor: w.cursor, next: next}
	count := w.count
	if count <= 0 {
		count = w.cfg.batchSize
	}
	w.cursor = page.Next
	if page.Next == 0 {
		w.walked, w.count = true, 0
	} else {
		w.count = nextCount(count, returned, w.cfg.batchSize)
	}
	w.lastPage, w.lastWait = now, wait
	w.waiting, w.waitingSince = pipeline.WaitNone, now
	return []action{act, actWait{wait}}
}

// capWait is the wait after a page of returned keys read at now, under max_keys_per_second:
// the next page is due returned / that rate after this one. The walk's own time between two
// pages (the read, the publish, the tick) is part of that period, not added to it, or the cap
// is a ceiling the walk stays far below (at 32,000 keys/s it walked 16,611): what the last
// period spent besides its wait is taken out of this one, at most all of it. No debt carries
// further, so over any run of pages the walk is ahead of the cap by at most one period.
func (w *walk) capWait(returned int, now time.Time) time.Duration {
	period := time.Duration(float64(returned) / w.cfg.maxKeysPerSecond * float64(time.Second))
	if w.lastPage.IsZero() {
		return period // the round's first page: nothing measured yet
	}
	spent := max(now.Sub(w.lastPage)-w.lastWait, 0)
	return period - min(spent, period)
}

func (w *walk) recorded(e evRecorded) []action {
	w.pending = nil
	if e.err != nil {
		w.held = nil
		w.rewind()
		switch e.failure {
		case failLease:
			return w.lost()
		case failConflict:
			return w.stepDown()
		case failPublish:
			if w.stopping {
				return w.finish()
			}
			return []action{
				actOpError{"publish"},
				actLog{slog.LevelWarn, "publish batch; cursor kept", []any{"cursor", w.ckpt.Cursor, "err", e.err}},
				actWait{w.idle()},
			}
		default:
			if w.stopping {
				return w.finish()
			}
			// The write may have reached the server: read the checkpoint again before
			// going on (a later write by the old revision would conflict anyway).
			w.phase = pipeline.PhaseLoad
			return []action{
				actOpError{"checkpoint"},
				actLog{slog.LevelWarn, "save checkpoint; read it again", []any{"err", e.err}},
				actWait{w.idle()},
			}
		}
	}
	w.ckpt, w.rev = e.ckpt, e.rev
	if w.stopping {
		return w.finish()
	}
	if h := w.held; h != nil {
		w.held = nil
		return w.publish(h.page, h.at, h.pace)
	}
	return nil
}

// countLayouts returns a copy of counts with the layouts of entries added (counted locally
// first: one map update per layout, not per key).
func countLayouts(counts map[string]uint64, entries []meta.Entry) map[string]uint64 {
	var legacy, location, ambiguous uint64
	var other map[string]uint64
	for i := range entries {
		switch l := entryLayout(&entries[i]); l {
		case LayoutLegacy:
			legacy++
		case LayoutLocation:
			location++
		case LayoutAmbiguous:
			ambiguous++
		default:
			if other == nil {
				other = map[string]uint64{}
			}
			other[l]++
		}
	}
	out := make(map[string]uint64, len(counts)+1)
	maps.Copy(out, counts)
	for l, n := range map[string]uint64{LayoutLegacy: legacy, LayoutLocation: location, LayoutAmbiguous: ambiguous} {
		if n > 0 {
			out[l] += n
		}
	}
	for l, n := range other {
		out[l] += n
	}
	return out
}

// nextCount is the SCAN COUNT for the next page of a store whose last page, scanned with
// count, returned got keys. SCAN's COUNT is a number of hash-table buckets to visit, not of
// keys to return: in a database that also holds other keys than KVCM's blocks, a MATCH page
// holds only their share of the keys visited, yet every page costs a publish, a checkpoint
// write and a backlog check. The count is scaled so that a page holds about want keys, between
// want and 16 × want, moving halfway towards the estimate each page. Redis does the same work
// per key visited whatever the COUNT.
func nextCount(count, got, want int) int {
	est := 2 * count
	if got > 0 {
		est = count * want / got
	}
	return min(max((count+est)/2, want), 16*want)
}
