package sweep

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Walker is the sweep's walker (DESIGN §7): for every swept storage whose lease it holds, it
// walks the storage's files page by page and publishes the candidates — per-block names of a
// registered instance and spec, older than sweep_grace — to the SWEEP stream, and looks into
// the storage's quarantine so sweepers finish or undo what is there. It never writes a file
// or Redis; any number of replicas may run, one walks each storage.
type Walker struct {
	cfg        Config
	names      subjects.Names
	registry   meta.RegistryReader
	storageOp  storage.Options
	leases     jetstream.KeyValue
	leaseTTL   time.Duration
	state      jetstream.KeyValue
	publisher  pipeline.AsyncPublisher
	events     *pipeline.EventLog
	backlog    func(ctx context.Context) (uint64, error)
	maxPayload int
	metrics    *Metrics
	log        *slog.Logger
	now        func() time.Time

	views viewCache
	ctl   *pipeline.Controls // the pause and the backlog, read for every storage's walk
}

// WalkerDeps are what the walker is wired to. Registry, Leases, State and Publisher are
// required; a nil Backlog never holds a walk back, nil Events records no event, a nil Metrics
// counts on an unregistered set, a nil Logger discards, a nil Now is time.Now.
type WalkerDeps struct {
	Names          subjects.Names
	Registry       meta.RegistryReader
	StorageOptions storage.Options // the path maps; dry-run changes nothing the walker does
	// Leases is the LEASE bucket, whose bucket-wide TTL is LeaseTTL (default 15s); State the
	// STATE bucket, which keeps the walks' checkpoints.
	Leases    jetstream.KeyValue
	LeaseTTL  time.Duration
	State     jetstream.KeyValue
	Publisher pipeline.AsyncPublisher
	Events    *pipeline.EventLog
	// Backlog reads the sweeper consumer's pending + unacknowledged batches.
	Backlog    func(ctx context.Context) (uint64, error)
	MaxPayload int // the server's max payload; batches are split below it (default 1 MiB)
	Metrics    *Metrics
	Logger     *slog.Logger
	Now        func() time.Time
}

// NewWalker returns the walker of cfg.
func NewWalker(cfg Config, deps WalkerDeps) (*Walker, error) {
	refused := pipeline.Refusals{cfg.Validate()}
	cfg.refuse(&refused)
	refused.Need(deps.Registry != nil, "no registry reader")
	refused.Need(deps.Leases != nil, "no lease bucket")
	refused.Need(deps.State != nil, "no state bucket")
	refused.Need(deps.Publisher != nil, "no publisher")
	if err := refused.Err("walker"); err != nil {
		return nil, err
	}
	w := &Walker{cfg: cfg, names: deps.Names, registry: deps.Registry, storageOp: deps.StorageOptions,
		leases: deps.Leases, leaseTTL: deps.LeaseTTL, state: deps.State, publisher: deps.Publisher, events: deps.Events,
		backlog: deps.Backlog, maxPayload: deps.MaxPayload, metrics: orUnregistered(deps.Metrics),
		log: pipeline.OrDiscard(deps.Logger), now: pipeline.OrNow(deps.Now)}
	u, err := newUnregReader(cfg, pipeline.StageWalker, deps.State, w.metrics, w.log)
	if err != nil {
		return nil, fmt.Errorf("walker: %w", err)
	}
	w.views.unreg = u
	if w.leaseTTL <= 0 {
		w.leaseTTL = 15 * time.Second
	}
	if w.maxPayload <= 0 {
		w.maxPayload = 1 << 20 // the server's default
	}
	// Read at every tick (no reuse), as the walker always read its backlog; a page costs far
	// more than the reading. An operator's pause (kvcm-gc pause walker) holds every walk.
	w.ctl = pipeline.NewControls(pipeline.ControlsConfig{Stage: pipeline.StageWalker, PauseKey: subjects.WalkerPauseKey},
		pipeline.ControlsDeps{State: w.state, Backlog: w.backlogFull(), Paused: w.metrics.WalkerPaused, Logger: w.log,
			OpError: func(op string) { w.metrics.opError(pipeline.StageWalker, op) }})
	return w, nil
}

// Run walks until ctx is done, then releases its leases.
func (w *Walker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, name := range slices.Sorted(slices.Values(w.cfg.Storages)) {
		d := w.newDriver(name)
		wg.Go(func() { d.run(ctx) })
	}
	wg.Wait()
	<-ctx.Done() // with no swept storage the stage runs and does nothing
	return nil
}

// snapshot returns the registry view (viewCache).
func (w *Walker) snapshot(ctx context.Context) (*View, error) {
	v, err := w.views.get(ctx, w.registry, w.storageOp, w.cfg.RegistryRefresh, w.now())
	if err != nil || v.stale {
		w.metrics.opError(pipeline.StageWalker, "registry")
	}
	if err == nil && v.stale {
		w.log.Warn("refresh registry; walking with the previous snapshot", "err", v.err)
	}
	return v.view, err
}

// backlogFull is the walker's reading of the sweeper backlog: full above the high-water mark
// (nil without a backlog reader: nothing holds the walks back).
func (w *Walker) backlogFull() pipeline.BacklogFunc {
	if w.backlog == nil {
		return nil
	}
	return func(ctx context.Context) (bool, []any, error) {
		n, err := w.backlog(ctx)
		if err != nil {
			return false, nil, err
		}
		w.metrics.Backlog.Set(float64(n))
		return n > w.cfg.HighWater, []any{"sweeper_backlog", n, "high_water", w.cfg.HighWater}, nil
	}
}

// walkDriver performs the actions of one storage's walk: the only code between its state
// machine (walk.go) and the servers and files. It holds what the walk opened: the storage's
// directory and the walks of its data and of its quarantine, each positioned after the last
// page read.
type walkDriver struct {
	w       *Walker
	storage string
	log     *slog.Logger
	lease   *pipeline.Lease
	walk    *walk
	loop    pipeline.Loop[event, action]

	now        time.Time // the tick's time: what its pages are walked and recorded at
	view       *View     // the tick's registry view
	fs         *storage.SweepFS
	root       *storage.SweepRoot
	data       *storage.TreeWalk // the data walk, positioned at the checkpoint's cursor
	quarantine *storage.TreeWalk // the quarantine walk, positioned at its cursor
	warned     map[string]bool   // failures logged once until the walk moves on
	// led: the storage's series are exported (from the checkpoint read as the lease holder
	// until a tick finds the lease gone). Only the walk's loop touches them, so a walker
	// that lost the lease leaves no series of the storage behind.
	led bool
}

func (w *Walker) newDriver(name string) *walkDriver {
	d := &walkDriver{w: w, storage: name, log: w.log.With("storage", name),
		lease: pipeline.NewLease(
			w.leases,
			subjects.SweepKey(name),
			pipeline.LeaseRecord{Holder: w.cfg.Holder, Storage: name},
			w.leaseTTL,
		),
		walk: newWalk(newWalkConfig(w.cfg), name)}
	d.loop = pipeline.Loop[event, action]{Walk: d.walk, Tick: d.tick, Perform: d.perform}
	return d
}

// run walks the storage until ctx is done. The lease is renewed in the background; the
// renewals end before the release, so none can recreate the key after it.
func (d *walkDriver) run(ctx context.Context) {
	lctx, stopLease := context.WithCancel(ctx)
	leaseDone := make(chan struct{})
	go func() { defer close(leaseDone); d.keepLease(lctx) }()
	defer func() {
		stopLease()
		<-leaseDone
		d.close(actClose{root: true})
		d.unlead()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := d.lease.Release(rctx); err != nil {
			d.log.Warn("release sweep lease", "err", err)
		}
	}()
	d.loop.Run(ctx)
}

func (d *walkDriver) keepLease(ctx context.Context) {
	t := time.NewTicker(pipeline.DefaultLeaseRenew(d.w.cfg.LeaseRenew, d.w.leaseTTL))
	defer t.Stop()
	wasHeld := false
	defer func() {
		if wasHeld {
			d.w.metrics.LeasesHeld.Dec()
		}
	}()
	for {
		held, err := d.lease.Refresh(ctx)
		if err != nil && ctx.Err() == nil {
			d.w.metrics.opError(pipeline.StageWalker, "lease")
			if wasHeld {
				d.log.Warn("sweep lease renewal failed", "err", err)
			}
		}
		if held != wasHeld {
			if held {
				d.log.Info("sweep lease acquired", "holder", d.w.cfg.Holder)
				d.w.metrics.LeasesHeld.Inc()
			} else {
				d.log.Warn("sweep lease lost")
				d.w.metrics.LeasesHeld.Dec()
			}
			wasHeld = held
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick reads the lease and, for a walk ready to move, the registry view and the controls.
func (d *walkDriver) tick(ctx context.Context) event {
	stop := ctx.Err() != nil
	d.now = d.w.now()
	t := evTick{WalkTick: d.w.ctl.Tick(ctx, d.now, d.lease, false), stop: stop}
	if t.LeaseRev == 0 {
		d.unlead()
	}
	if t.LeaseRev != 0 && !stop && d.walk.phase == pipeline.PhaseReady {
		d.view, t.viewErr = d.w.snapshot(ctx)
		if t.viewErr == nil {
			t.PausedUntil, t.BacklogFull, t.ControlErr = d.w.ctl.Read(ctx, d.now)
		}
	}
	return t
}

// perform does one action and returns the event it produced, if any.
func (d *walkDriver) perform(ctx context.Context, a action) (event, bool) {
	ev := d.do(ctx, a)
	return ev, ev != nil
}

func (d *walkDriver) do(ctx context.Context, a action) event {
	m := d.w.metrics
	switch a := a.(type) {
	case actWait:
		d.loop.Wait(a.d)
	case actReadCheckpoint:
		c, rev, err := ReadCheckpoint(ctx, d.w.state, d.storage)
		if err == nil {
			m.leadStorage(d.storage, c)
			d.led = true
		}
		return evLoaded{ck: c, rev: rev, err: err}
	case actOpen:
		fs, err := d.view.Storages().SweepFS(d.storage)
		var root *storage.SweepRoot
		if err == nil {
			root, err = fs.Open()
		}
		if err == nil {
			d.fs, d.root = fs, root
		}
		return evOpened{err: err}
	case actClose:
		d.close(a)
	case actReadPage:
		if a.kind == subjects.SweepQuarantine {
			return d.readQuarantine(a.cursor)
		}
		return d.readData(a.cursor)
	case actPublish:
		return d.publish(ctx, a)
	case actSave:
		// Fencing: no progress recorded after the lease is gone.
		if _, held := d.lease.Held(); !held {
			return evSaved{now: a.now, why: a.why, fenced: true}
		}
		c := a.ck
		c.Holder, c.SavedUs = d.w.cfg.Holder, a.now.UnixMicro()
		rev, err := writeCheckpoint(ctx, d.w.state, c, a.rev)
		return evSaved{now: a.now, why: a.why, ck: c, rev: rev, err: err}
	case actStepDown:
		d.lease.Drop()
	case actWarn:
		if ctx.Err() != nil || d.warned[a.what] {
			break
		}
		if d.warned == nil {
			d.warned = map[string]bool{}
		}
		d.warned[a.what] = true
		d.log.Warn(a.what, a.args...)
	case actProgress:
		d.warned = nil
	case actLog:
		d.log.Log(ctx, a.level, a.msg, a.args...)
	case actOpError:
		m.opError(pipeline.StageWalker, a.op)
	case actSkip:
		m.Backpressure.Inc()
	case actCount:
		m.Walked.Add(float64(a.read.n))
		m.Candidates.Add(float64(len(a.read.files)))
		for r, k := range a.read.kept {
			m.Kept.WithLabelValues(r).Add(float64(k))
		}
	case actRoundStarted:
		d.log.Info("sweep round started", "round", a.round)
		d.event(ctx, subjects.Event{Kind: subjects.EventSweep, Round: a.round, Outcome: subjects.SweepOutcomeRoundStart,
			Detail: "storage " + d.storage})
	case actRoundEnded:
		c := a.ck
		if d.led {
			m.LastRoundEnd.WithLabelValues(d.storage).Set(float64(a.now.Unix()))
		}
		d.log.Info("sweep round finished", "round", c.Round, "walked", c.Walked, "candidates", c.Candidates,
			"duration", time.Duration(c.LastRoundMs)*time.Millisecond)
		counts := map[string]int64{"walked": int64(c.Walked), "candidates": int64(c.Candidates), "duration_ms": c.LastRoundMs}
		for r, k := range c.Kept {
			counts["kept_"+r] = int64(k)
		}
		d.event(ctx, subjects.Event{Kind: subjects.EventSweep, Round: c.Round, Outcome: subjects.SweepOutcomeRoundEnd,
			Detail: "storage " + d.storage, Counts: counts})
	case actLookEnded:
		seen := a.seen
		if d.led {
			m.quarantineSeen(d.storage, seen)
		}
		if seen.Files+seen.Conflicts+seen.Foreign > 0 {
			d.log.Info("looked into the quarantine", "files", seen.Files, "bytes", seen.Bytes,
				"conflicts", seen.Conflicts, "foreign", seen.Foreign)
		}
	default:
		// Sealed: TestWalkSealed fails on an action without a case. Were one to slip through,
		// the walk stops rather than go on without it.
		d.log.Error("unhandled walk action; walk stopped", "action", fmt.Sprintf("%T", a))
		d.walk.phase = pipeline.PhaseDone
	}
	return nil
}

// unlead removes the storage's series: this walker no longer leads its walk.
func (d *walkDriver) unlead() {
	if d.led {
		d.w.metrics.dropStorage(d.storage)
		d.led = false
	}
}

// close closes the directory walks (a: the quarantine's alone, or the directory too).
func (d *walkDriver) close(a actClose) {
	if d.quarantine != nil {
		d.quarantine.Close()
		d.quarantine = nil
	}
	if a.quarantineOnly {
		return
	}
	if d.data != nil {
		d.data.Close()
		d.data = nil
	}
	if a.root && d.root != nil {
		_ = d.root.Close()
		d.root, d.fs = nil, nil
	}
}

// readData walks at most BatchSize entries of the data from cursor and classifies them.
func (d *walkDriver) readData(cursor subjects.RawText) event {
	if d.data == nil {
		d.data = d.root.Walk(string(cursor))
	}
	r := pageRead{kept: map[string]uint64{}}
	d.readPage(d.data, &r, func(e storage.WalkEntry) {
		if e.Err != nil {
			r.kept[KeptUnreadable]++
			return
		}
		c, reason := classifyWalked(d.fs, d.view, e, d.now, d.w.cfg.Grace)
		if reason != "" {
			r.kept[reason]++
			return
		}
		r.files = append(r.files, c)
	})
	return evPage{now: d.now, kind: subjects.SweepWalk, read: r}
}

// readQuarantine reads at most BatchSize entries of the quarantine from cursor: every file
// there goes to a sweeper to finish or undo; the entries that are no file of kvcm-gc's are
// counted and left alone.
func (d *walkDriver) readQuarantine(cursor subjects.RawText) event {
	if d.quarantine == nil {
		qw, err := d.root.WalkQuarantine(string(cursor))
		if err != nil {
			return evPage{now: d.now, kind: subjects.SweepQuarantine, err: err}
		}
		d.quarantine = qw
	}
	var r pageRead
	d.readPage(d.quarantine, &r, func(e storage.WalkEntry) {
		if e.Err != nil {
			r.seen.Foreign++
			return
		}
		if storage.IsConflict(e.Rel) {
			r.seen.Conflicts++
			return
		}
		c, ok := quarantined(d.fs, d.view, e)
		if !ok {
			r.seen.Foreign++
			return
		}
		r.seen.add(c.file.Size, c.file.QuarantinedUs)
		r.files = append(r.files, c)
	})
	return evPage{now: d.now, kind: subjects.SweepQuarantine, read: r}
}

// readPage reads at most BatchSize entries of tw into r, the position (n, last, done) and the
// unreadable directories, and hands each entry to classify (an unreadable one too, to count).
func (d *walkDriver) readPage(tw *storage.TreeWalk, r *pageRead, classify func(storage.WalkEntry)) {
	for r.n < d.w.cfg.BatchSize {
		e, ok := tw.Next()
		if !ok {
			r.done = true
			return
		}
		r.n++
		r.last = e.Rel
		if e.Err != nil {
			r.unreadable = append(r.unreadable, walkFailure{path: e.Rel, err: e.Err})
		}
		classify(e)
	}
}

// classifyWalked decides whether a walked file is a candidate: a regular file, KVCM's
// per-block name of a registered instance and spec (ResolveName), older than grace by its
// mtime, and whose data path maps back to the very file walked. Else reason says why it stays.
func classifyWalked(
	fs *storage.SweepFS,
	view *View,
	e storage.WalkEntry,
	now time.Time,
	grace time.Duration,
) (candidate, string) {
	if !e.Stat.Regular() {
		return candidate{}, KeptNotRegular
	}
	object := fs.Object(e.Rel)
	if object == "" {
		return candidate{}, KeptUnparsable
	}
	name, reason, _ := view.ResolveName(object)
	if reason != "" {
		return candidate{}, reason
	}
	if age := now.Sub(e.Stat.ModTime); age < grace {
		return candidate{}, KeptYoung // also a time in the future
	}
	raw := fs.DataPath(object)
	if rel, err := fs.Resolve(raw); err != nil || rel != e.Rel {
		return candidate{}, KeptPathMap
	}
	return candidate{instance: name.Instance.ID, group: name.Instance.Group, store: name.Instance.Store,
		file: subjects.SweepFile{Path: subjects.RawText(raw), Spec: name.Spec, Key: name.Key, Size: e.Stat.Size,
			MtimeUs: e.Stat.ModTime.UnixMicro(), Ino: e.Stat.Ino}}, ""
}

// quarantined turns an entry of the quarantine into a file to publish: any file that
// Quarantine named, whose name is KVCM's per-block name (the only ones it moves). A name that
// no longer resolves to a collected instance (the registry changed meanwhile) goes out under
// its first reading, for a sweeper to move it back.
func quarantined(fs *storage.SweepFS, view *View, e storage.WalkEntry) (candidate, bool) {
	rel, at, err := storage.ParseQuarantined(e.Rel)
	if err != nil || !e.Stat.Regular() {
		return candidate{}, false
	}
	object := fs.Object(rel)
	if object == "" {
		return candidate{}, false
	}
	c := candidate{file: subjects.SweepFile{Path: subjects.RawText(fs.DataPath(object)), Size: e.Stat.Size,
		MtimeUs: e.Stat.ModTime.UnixMicro(), Ino: e.Stat.Ino,
		Quarantine: subjects.RawText(e.Rel), QuarantinedUs: at.UnixMicro()}}
	if name, reason, _ := view.ResolveName(object); reason == "" {
		c.instance, c.group, c.store = name.Instance.ID, name.Instance.Group, name.Instance.Store
		c.file.Spec, c.file.Key = name.Spec, name.Key
		return c, true
	}
	bf, err := kvcm.ParseBlockFileName(object)
	if err != nil || bf.Shared {
		return candidate{}, false
	}
	first := bf.Splits()[0]
	c.instance, c.file.Spec, c.file.Key = first.Instance, first.Spec, bf.Key
	return c, true
}

// publish stores a page's files as one batch per instance (split below the payload limit)
// and waits until the server has stored them all.
func (d *walkDriver) publish(ctx context.Context, a actPublish) event {
	// Fencing: never publish after losing the lease.
	if _, held := d.lease.Held(); !held {
		return evPublished{now: a.now, fenced: true}
	}
	failed := func(what string, err error, args ...any) event {
		return evPublished{now: a.now, err: err, what: what, args: args}
	}
	byInst := map[string][]candidate{}
	for _, f := range a.files {
		byInst[f.instance] = append(byInst[f.instance], f)
	}
	limit := subjects.PayloadLimit(int64(d.w.maxPayload))
	var acks []pipeline.AckWait
	for _, inst := range slices.Sorted(maps.Keys(byInst)) {
		cs := byInst[inst]
		b := subjects.SweepBatch{V: subjects.SchemaVersion, Cluster: d.w.names.Cluster, Instance: inst,
			Group: cs[0].group, Store: cs[0].store, Storage: d.storage, Kind: a.kind, Round: a.round, Page: a.page,
			LeaseRev: a.leaseRev, WalkedAt: a.now.UnixMicro()}
		for _, c := range cs {
			b.Files = append(b.Files, c.file)
		}
		parts, err := splitSweep(b, limit)
		if err != nil {
			return failed("encode sweep batch", err, "instance", inst)
		}
		for _, p := range parts {
			ack, err := d.w.publisher.PublishAsync(d.w.names.SweepSubject(inst), p.data, subjects.SweepMsgID(p.batch))
			if err != nil {
				return failed("publish sweep batch", err, "instance", inst)
			}
			acks = append(acks, ack)
		}
	}
	actx, cancel := context.WithTimeout(ctx, pipeline.AckTimeout)
	defer cancel()
	for _, ack := range acks {
		if err := ack(actx); err != nil {
			return failed("store sweep batch", err)
		}
	}
	return evPublished{now: a.now}
}

type encodedSweep struct {
	batch subjects.SweepBatch
	data  []byte
}

// splitSweep encodes b into parts of at most limit bytes each, halving the files until every
// part fits (deterministic, so a page read again is split the same way).
func splitSweep(b subjects.SweepBatch, limit int) ([]encodedSweep, error) {
	var out []encodedSweep
	var split func(files []subjects.SweepFile) error
	split = func(files []subjects.SweepFile) error {
		p := b
		p.Files, p.Part = files, len(out)
		data, err := subjects.Encode(p)
		if err != nil {
			return err
		}
		if len(data) <= limit {
			out = append(out, encodedSweep{batch: p, data: data})
			return nil
		}
		if len(files) == 1 {
			return fmt.Errorf("one file's entry encodes to %d bytes, more than %d", len(data), limit)
		}
		if err := split(files[:len(files)/2]); err != nil {
			return err
		}
		return split(files[len(files)/2:])
	}
	return out, split(b.Files)
}

func (d *walkDriver) event(ctx context.Context, e subjects.Event) {
	if d.w.events == nil {
		return
	}
	e.Stage = pipeline.StageWalker
	d.w.events.Emit(ctx, e)
}

// ReadLease returns the walker's lease record of a storage, if any.
func ReadLease(ctx context.Context, kv jetstream.KeyValue, storage string) (*pipeline.LeaseRecord, uint64, error) {
	return pipeline.ReadLeaseKey(ctx, kv, subjects.SweepKey(storage))
}
