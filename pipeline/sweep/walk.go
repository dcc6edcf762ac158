package sweep

import (
	"log/slog"
	"maps"
	"time"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The walk of one swept storage is a walk as package pipeline's walk.go describes it: step
// takes the walk's state and one event (a tick with its readings, the checkpoint read, the
// storage opened, a page read, a page published, the checkpoint written) and returns the
// actions to perform; it does no I/O and reads no clock, so every decision and every failure
// path is a row of walk_test.go. The driver (walker.go) performs the actions and feeds their
// results back.
//
// A tick moves the walk at most one page on: of the quarantine when a look is under way or
// due, else of the data. A page is read, its candidates published and stored, and only then is
// the checkpoint moved past it, by revision, in one place (save); any failure leaves the
// checkpoint where it was, closes the directory walks so the next page is read again from it,
// and waits at least IdleWait (invariant DESIGN §8.7: nothing spins). The walk never ends on its
// own: a lost lease sends it back to reading the checkpoint once the lease is held again.

// walkConfig is what a walk needs of Config.
type walkConfig struct {
	interval, roundPause, quarantine time.Duration
}

func newWalkConfig(c Config) walkConfig {
	return walkConfig{interval: c.Interval, roundPause: c.RoundPause, quarantine: c.Quarantine}
}

// walk is one storage's walk state.
type walk struct {
	cfg     walkConfig
	storage string
	phase   pipeline.WalkPhase
	// leaseRev is the lease revision of the last tick: the fencing token of what is published.
	leaseRev uint64
	// ck is the checkpoint as last written (or read), rev its revision (0: none yet).
	ck  Checkpoint
	rev uint64
	// opened: the storage's directory is open (it is closed again on every new leadership,
	// round and look, so a changed root_path or a remount is seen).
	opened bool
	// plan is the page read and being published, with the checkpoint that records it.
	plan *pagePlan
}

// pagePlan is a page on its way to the checkpoint.
type pagePlan struct {
	kind string // subjects.SweepWalk or subjects.SweepQuarantine
	next Checkpoint
	read pageRead
	done bool
}

func newWalk(cfg walkConfig, storage string) *walk {
	return &walk{cfg: cfg, storage: storage, phase: pipeline.PhaseLoad}
}

// event is one of the ev* types: sealed, each handled by step (TestWalkSealed).
type event interface{ isEvent() }

func (evTick) isEvent()      {}
func (evLoaded) isEvent()    {}
func (evOpened) isEvent()    {}
func (evPage) isEvent()      {}
func (evPublished) isEvent() {}
func (evSaved) isEvent()     {}

// Events.
type (
	// evTick: the walk's timer fired. viewErr: the registry could not be read (a walk reads it
	// before every page).
	evTick struct {
		pipeline.WalkTick
		viewErr error
		stop    bool // the walker shuts down
	}
	evLoaded struct {
		ck  Checkpoint
		rev uint64
		err error
	}
	evOpened struct{ err error }
	// evPage is a page read at now: err is a quarantine that could not be opened (no page).
	evPage struct {
		now  time.Time
		kind string
		read pageRead
		err  error
	}
	// evPublished: the page's batches are stored (err nil), or not: fenced (the lease was gone
	// before anything was sent), or a failure whose log line is what.
	evPublished struct {
		now    time.Time
		err    error
		what   string
		args   []any
		fenced bool
	}
	evSaved struct {
		now    time.Time
		why    string
		ck     Checkpoint
		rev    uint64
		err    error
		fenced bool // the lease was gone: nothing was written
	}
)

// pageRead is what the driver read of one page: its entries, the last one's path, whether the
// walk is at its end, the candidates, and what was not published (the data's kept files by
// reason; the quarantine's count of this page).
type pageRead struct {
	n          int
	last       string
	done       bool
	files      []candidate
	kept       map[string]uint64
	seen       QuarantineCount
	unreadable []walkFailure // directories that could not be read, skipped
}

// candidate is one file to publish, with the batch it goes in.
type candidate struct {
	instance, group, store string
	file                   subjects.SweepFile
}

// walkFailure is an entry of a page that could not be read.
type walkFailure struct {
	path string
	err  error
}

// Why a checkpoint is written.
const (
	saveRoundStart = "round_start"
	saveLookStart  = "look_start"
	savePage       = "page"
)

// action is one of the act* types: sealed, each handled by the driver's do (TestWalkSealed).
type action interface{ isAction() }

func (actReadCheckpoint) isAction() {}
func (actOpen) isAction()           {}
func (actClose) isAction()          {}
func (actReadPage) isAction()       {}
func (actPublish) isAction()        {}
func (actSave) isAction()           {}
func (actStepDown) isAction()       {}
func (actWait) isAction()           {}
func (actWarn) isAction()           {}
func (actProgress) isAction()       {}
func (actLog) isAction()            {}
func (actOpError) isAction()        {}
func (actSkip) isAction()           {}
func (actCount) isAction()          {}
func (actRoundStarted) isAction()   {}
func (actRoundEnded) isAction()     {}
func (actLookEnded) isAction()      {}

// Actions.
type (
	actReadCheckpoint struct{}
	// actOpen opens the storage's directory from the registry view of the tick.
	actOpen struct{}
	// actClose closes the directory walks, so the next page is read from the checkpoint's
	// cursor; root closes the directory too (opened again from the registry at the next page).
	// quarantineOnly closes the quarantine's walk alone.
	actClose struct{ root, quarantineOnly bool }
	// actReadPage reads one page of kind from cursor (the walk opened there when it is not).
	actReadPage struct {
		kind   string
		cursor subjects.RawText
	}
	// actPublish stores a page's files as one batch per instance and waits for the server.
	actPublish struct {
		now      time.Time
		kind     string
		round    uint64
		page     uint64
		leaseRev uint64
		files    []candidate
	}
	// actSave writes ck by revision rev (fenced: not once the lease is gone).
	actSave struct {
		now time.Time
		why string
		ck  Checkpoint
		rev uint64
	}
	actStepDown struct{} // another walker wrote the checkpoint: forget the lease
	// actWait: the next tick comes after d (the last actWait of a step wins).
	actWait struct{ d time.Duration }
	// actWarn logs a failure once until the walk moves on (actProgress).
	actWarn struct {
		what string
		args []any
	}
	actProgress struct{}
	actLog      struct {
		level slog.Level
		msg   string
		args  []any
	}
	actOpError      struct{ op string }
	actSkip         struct{} // a page skipped by backpressure
	actCount        struct{ read pageRead }
	actRoundStarted struct{ round uint64 }
	actRoundEnded   struct {
		now time.Time
		ck  Checkpoint
	}
	actLookEnded struct{ seen QuarantineCount }
)

// Step, Phase and Idle make the walk a pipeline.Stepper.
func (w *walk) Step(ev event) []action    { return w.step(ev) }
func (w *walk) Phase() pipeline.WalkPhase { return w.phase }
func (w *walk) Idle() time.Duration       { return w.idle() }
func (w *walk) idle() time.Duration       { return max(w.cfg.interval, pipeline.IdleWait) }
func (w *walk) wait(progress bool) action {
	if progress {
		return actWait{w.cfg.interval} // no catch-up: the next page an interval after this one
	}
	return actWait{w.idle()}
}

// step is the whole decision of a walk: the event's effect on the state and the actions.
func (w *walk) step(ev event) []action {
	if w.phase == pipeline.PhaseDone {
		return nil
	}
	switch e := ev.(type) {
	case evTick:
		return w.tick(e)
	case evLoaded:
		return w.loaded(e)
	case evOpened:
		return w.openedDir(e)
	case evPage:
		return w.pageRead(e)
	case evPublished:
		return w.published(e)
	case evSaved:
		return w.saved(e)
	}
	return nil // sealed: no other event exists
}

func (w *walk) tick(t evTick) []action {
	if t.stop {
		w.phase = pipeline.PhaseDone
		return nil
	}
	if t.LeaseRev == 0 {
		// Everything the lease guarded is forgotten: a later leadership reads the checkpoint
		// again and opens the storage anew.
		acts := w.reset()
		return append(acts, w.wait(false))
	}
	w.leaseRev = t.LeaseRev
	if w.phase == pipeline.PhaseLoad {
		return []action{actReadCheckpoint{}}
	}
	if t.viewErr != nil {
		return []action{actWarn{"read registry", []any{"err", t.viewErr}}, w.wait(false)}
	}
	if !w.opened {
		return []action{actOpen{}}
	}
	switch {
	case t.ControlErr != nil:
		return []action{w.wait(false)} // fail closed: no page without knowing the pause and the backlog
	case !t.PausedUntil.IsZero() && t.Now.Before(t.PausedUntil):
		return []action{w.wait(false)}
	case t.BacklogFull:
		return []action{actSkip{}, w.wait(false)}
	}
	now := t.Now
	switch {
	case w.ck.QInPass:
		return []action{actReadPage{kind: subjects.SweepQuarantine, cursor: w.ck.QCursor}}
	case now.UnixMicro() >= w.ck.QNextUs:
		c := w.ck.clone()
		c.QPass++
		c.QInPass, c.QCursor, c.QPage, c.QSeen = true, nil, 0, QuarantineCount{}
		return []action{actSave{now: now, why: saveLookStart, ck: c, rev: w.rev}}
	case !w.ck.InRound && now.UnixMicro() >= w.ck.NextRoundUs:
		c := w.ck.clone()
		c.Round++
		c.InRound, c.Cursor, c.Page = true, nil, 0
		c.RoundStartedUs, c.Walked, c.Candidates, c.Kept = now.UnixMicro(), 0, 0, nil
		c.QNextUs = 0 // every round starts with a look into the quarantine
		return []action{actSave{now: now, why: saveRoundStart, ck: c, rev: w.rev}}
	case !w.ck.InRound:
		return []action{w.wait(false)} // between rounds
	}
	return []action{actReadPage{kind: subjects.SweepWalk, cursor: w.ck.Cursor}}
}

// reset forgets the checkpoint and closes the storage.
func (w *walk) reset() []action {
	w.phase, w.plan = pipeline.PhaseLoad, nil
	if !w.opened {
		return []action{actClose{}}
	}
	w.opened = false
	return []action{actClose{root: true}}
}

func (w *walk) loaded(e evLoaded) []action {
	if e.err != nil {
		return []action{actOpError{"checkpoint"}, actWarn{"read sweep checkpoint", []any{"err", e.err}}, w.wait(false)}
	}
	c := e.ck
	c.Storage = w.storage
	// A new leader looks into the quarantine first: what a walker or a sweeper left there is
	// finished or undone without waiting for the next look.
	c.QNextUs = 0
	w.ck, w.rev, w.phase = c, e.rev, pipeline.PhaseReady
	return []action{actClose{},
		actLog{
			slog.LevelInfo,
			"sweep walk leader",
			[]any{"round", c.Round, "in_round", c.InRound, "quarantine_look", c.QPass},
		},
		actWait{0}}
}

func (w *walk) openedDir(e evOpened) []action {
	if e.err != nil {
		return []action{actOpError{"open"}, actWarn{"open swept storage; not walked", []any{"err", e.err}}, w.wait(false)}
	}
	w.opened = true
	return []action{actWait{0}}
}

func (w *walk) pageRead(e evPage) []action {
	if e.err != nil {
		return []action{actOpError{"walk"}, actWarn{"open the quarantine", []any{"err", e.err}}, w.wait(false)}
	}
	var acts []action
	what := "walk a directory of the swept storage; skipped"
	if e.kind == subjects.SweepQuarantine {
		what = "walk a directory of the quarantine; skipped"
	}
	for _, f := range e.read.unreadable {
		acts = append(acts, actOpError{"walk"}, actWarn{what, []any{"path", f.path, "err", f.err}})
	}
	p := &pagePlan{kind: e.kind, read: e.read, done: e.read.done}
	round, page := w.ck.Round, w.ck.Page
	if e.kind == subjects.SweepWalk {
		p.next = w.nextData(e.read, e.now)
	} else {
		p.next = w.nextLook(e.read, e.now)
		round, page = w.ck.QPass, w.ck.QPage
	}
	w.plan = p
	return append(
		acts,
		actPublish{now: e.now, kind: e.kind, round: round, page: page, leaseRev: w.leaseRev, files: e.read.files},
	)
}

// nextData is the checkpoint past a data page read at now; the round ends with the last page.
func (w *walk) nextData(r pageRead, now time.Time) Checkpoint {
	c := w.ck.clone()
	if r.n > 0 {
		c.Cursor = subjects.RawText(r.last)
	}
	c.Page++
	c.Walked += uint64(r.n)
	c.Candidates += uint64(len(r.files))
	for reason, k := range r.kept {
		if c.Kept == nil {
			c.Kept = map[string]uint64{}
		}
		c.Kept[reason] += k
	}
	if r.done {
		c.InRound = false
		c.NextRoundUs = now.Add(w.cfg.roundPause).UnixMicro()
		c.LastRoundEndUs, c.LastRoundMs = now.UnixMicro(), now.Sub(time.UnixMicro(c.RoundStartedUs)).Milliseconds()
		c.LastWalked, c.LastCandidates, c.LastKept = c.Walked, c.Candidates, maps.Clone(c.Kept)
	}
	return c
}

// nextLook is the checkpoint past a page of the quarantine read at now; the look ends with
// the last page, and the next is due half a quarantine later (at least an interval).
func (w *walk) nextLook(r pageRead, now time.Time) Checkpoint {
	c := w.ck.clone()
	seen := c.QSeen
	seen.merge(r.seen)
	if r.n > 0 {
		c.QCursor = subjects.RawText(r.last)
	}
	c.QPage++
	c.QSeen = seen
	if r.done {
		c.QInPass = false
		seen.EndedUs = now.UnixMicro()
		c.QLast, c.QSeen = seen, QuarantineCount{}
		c.QNextUs = now.Add(max(w.cfg.quarantine/2, w.cfg.interval)).UnixMicro()
	}
	return c
}

func (w *walk) published(e evPublished) []action {
	p := w.plan
	if p == nil {
		return nil
	}
	if e.err != nil || e.fenced {
		// The checkpoint stays before the page: it is read and published again (the server
		// drops the batches it already has).
		w.plan = nil
		acts := []action{actClose{}}
		if !e.fenced {
			acts = append(acts, actOpError{"publish"}, actWarn{e.what, append(e.args, "err", e.err)})
		}
		return append(acts, w.wait(false))
	}
	return []action{actSave{now: e.now, why: savePage, ck: p.next, rev: w.rev}}
}

func (w *walk) saved(e evSaved) []action {
	p := w.plan
	w.plan = nil
	switch {
	case e.fenced:
		// The lease is gone: nothing recorded; the next tick finds it gone.
		return []action{actClose{}, w.wait(false)}
	case e.err != nil && pipeline.IsConflict(e.err):
		w.phase = pipeline.PhaseLoad
		return []action{actOpError{"checkpoint"},
			actLog{slog.LevelWarn, "sweep checkpoint written by another walker; stepping down", []any{"err", e.err}},
			actStepDown{}, actClose{}, w.wait(false)}
	case e.err != nil:
		// The write may have reached the server: the checkpoint is read again first.
		w.phase = pipeline.PhaseLoad
		return []action{
			actOpError{"checkpoint"},
			actWarn{"save sweep checkpoint", []any{"err", e.err}},
			actClose{},
			w.wait(false),
		}
	}
	c := e.ck
	w.ck, w.rev = c, e.rev
	switch e.why {
	case saveRoundStart:
		w.opened = false
		return []action{actClose{root: true}, actProgress{}, actRoundStarted{round: c.Round}, w.wait(true)}
	case saveLookStart:
		w.opened = false
		return []action{actClose{root: true}, actProgress{}, w.wait(true)}
	}
	if p == nil {
		return []action{actProgress{}, w.wait(true)}
	}
	acts := []action{actProgress{}}
	if p.kind == subjects.SweepWalk {
		acts = append(acts, actCount{read: p.read})
		if p.done {
			acts = append(acts, actClose{}, actRoundEnded{now: e.now, ck: c})
		}
	} else if p.done {
		acts = append(acts, actClose{quarantineOnly: true}, actLookEnded{seen: c.QLast})
	}
	return append(acts, w.wait(true))
}
