package sweep

import (
	"context"
	"errors"
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
	missing := []error{cfg.Validate()}
	if deps.Registry == nil {
		missing = append(missing, errors.New("no registry reader"))
	}
	if deps.Leases == nil {
		missing = append(missing, errors.New("no lease bucket"))
	}
	if deps.State == nil {
		missing = append(missing, errors.New("no state bucket"))
	}
	if deps.Publisher == nil {
		missing = append(missing, errors.New("no publisher"))
	}
	if err := errors.Join(missing...); err != nil {
		return nil, fmt.Errorf("walker: %w", err)
	}
	w := &Walker{cfg: cfg, names: deps.Names, registry: deps.Registry, storageOp: deps.StorageOptions,
		leases: deps.Leases, leaseTTL: deps.LeaseTTL, state: deps.State, publisher: deps.Publisher, events: deps.Events,
		backlog: deps.Backlog, maxPayload: deps.MaxPayload, metrics: orUnregistered(deps.Metrics),
		log: orDiscard(deps.Logger), now: orNow(deps.Now)}
	if w.leaseTTL <= 0 {
		w.leaseTTL = 15 * time.Second
	}
	if w.maxPayload <= 0 {
		w.maxPayload = 1 << 20 // the server's default
	}
	return w, nil
}

// Run walks until ctx is done, then releases its leases.
func (w *Walker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, name := range slices.Sorted(slices.Values(w.cfg.Storages)) {
		sw := &storageWalk{w: w, storage: name, log: w.log.With("storage", name),
			lease: pipeline.NewLease(w.leases, subjects.SweepKey(name), pipeline.LeaseRecord{Holder: w.cfg.Holder, Storage: name}, w.leaseTTL)}
		wg.Add(1)
		go func() { defer wg.Done(); sw.run(ctx) }()
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

// storageWalk is the walk of one storage: a small state machine (tick) and its driver (run).
type storageWalk struct {
	w       *Walker
	storage string
	log     *slog.Logger
	lease   *pipeline.Lease

	loaded bool // the checkpoint is read
	ck     Checkpoint
	ckRev  uint64
	fs     *storage.SweepFS
	root   *storage.SweepRoot
	walk   *storage.TreeWalk // the data walk, positioned at ck.Cursor
	qwalk  *storage.TreeWalk // the quarantine walk, positioned at ck.QCursor
	// progressed: the last tick moved the walk on.
	progressed bool
	warned     map[string]bool // failures logged once until the walk moves on
}

func (s *storageWalk) run(ctx context.Context) {
	lctx, stopLease := context.WithCancel(ctx)
	leaseDone := make(chan struct{})
	go func() { defer close(leaseDone); s.keepLease(lctx) }()
	defer func() {
		// The renewals end before the release, so none can recreate the key after it.
		stopLease()
		<-leaseDone
		s.reset()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.lease.Release(rctx); err != nil {
			s.log.Warn("release sweep lease", "err", err)
		}
	}()
	interval := s.w.cfg.Interval
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		s.tick(ctx)
		wait := interval
		if !s.progressed {
			wait = max(wait, pipeline.IdleWait)
		}
		timer.Reset(wait) // no catch-up: the next page starts at least an interval after this one
	}
}

func (s *storageWalk) keepLease(ctx context.Context) {
	t := time.NewTicker(pipeline.DefaultLeaseRenew(s.w.cfg.LeaseRenew, s.w.leaseTTL))
	defer t.Stop()
	wasHeld := false
	defer func() {
		if wasHeld {
			s.w.metrics.LeasesHeld.Dec()
		}
	}()
	for {
		held, err := s.lease.Refresh(ctx)
		if err != nil && ctx.Err() == nil {
			s.w.metrics.opError(pipeline.StageWalker, "lease")
			if wasHeld {
				s.log.Warn("sweep lease renewal failed", "err", err)
			}
		}
		if held != wasHeld {
			if held {
				s.log.Info("sweep lease acquired", "holder", s.w.cfg.Holder)
				s.w.metrics.LeasesHeld.Inc()
			} else {
				s.log.Warn("sweep lease lost")
				s.w.metrics.LeasesHeld.Dec()
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

// reset forgets everything the lease guarded: a later leadership reads the checkpoint again.
func (s *storageWalk) reset() {
	s.loaded = false
	s.reopen()
}

func (s *storageWalk) dropWalks() {
	if s.walk != nil {
		s.walk.Close()
		s.walk = nil
	}
	if s.qwalk != nil {
		s.qwalk.Close()
		s.qwalk = nil
	}
}

// warn logs a failure once until the walk moves on again (no log line per tick).
func (s *storageWalk) warn(ctx context.Context, what string, args ...any) {
	if ctx.Err() != nil || s.warned[what] {
		return
	}
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	s.warned[what] = true
	s.log.Warn(what, args...)
}

// tick does at most one page: of the quarantine when a look is under way or due, else of the
// data. Every failure returns and is retried on a later tick (invariant 7).
func (s *storageWalk) tick(ctx context.Context) {
	s.progressed = false
	rev, held := s.lease.Held()
	if !held {
		s.reset()
		return
	}
	if !s.loaded {
		c, r, err := ReadCheckpoint(ctx, s.w.state, s.storage)
		if err != nil {
			s.w.metrics.opError(pipeline.StageWalker, "checkpoint")
			s.warn(ctx, "read sweep checkpoint", "err", err)
			return
		}
		c.Storage = s.storage
		// A new leader looks into the quarantine first: what a walker or a sweeper left there
		// is finished or undone without waiting for the next look.
		c.QNextUs = 0
		s.ck, s.ckRev, s.loaded = c, r, true
		s.dropWalks()
		s.log.Info("sweep walk leader", "round", c.Round, "in_round", c.InRound, "quarantine_look", c.QPass)
	}
	view, err := s.w.snapshot(ctx)
	if err != nil {
		s.warn(ctx, "read registry", "err", err)
		return
	}
	if s.root == nil {
		fs, err := view.Storages().SweepFS(s.storage)
		if err == nil {
			s.root, err = fs.Open()
		}
		if err != nil {
			s.w.metrics.opError(pipeline.StageWalker, "open")
			s.warn(ctx, "open swept storage; not walked", "err", err)
			return
		}
		s.fs = fs
	}
	if s.w.backlog != nil {
		n, err := s.w.backlog(ctx)
		if err != nil {
			s.w.metrics.opError(pipeline.StageWalker, "backlog")
			s.warn(ctx, "read sweeper backlog", "err", err)
			return // fail closed: no walking without knowing the backlog
		}
		s.w.metrics.Backlog.Set(float64(n))
		if n > s.w.cfg.HighWater {
			s.w.metrics.Backpressure.Inc()
			return
		}
	}
	now := s.w.now()
	switch {
	case s.ck.QInPass:
		s.quarantinePage(ctx, view, rev, now)
	case now.UnixMicro() >= s.ck.QNextUs:
		s.startLook(ctx, now)
	case !s.ck.InRound:
		if now.UnixMicro() >= s.ck.NextRoundUs {
			s.startRound(ctx, now)
		}
	default:
		s.walkPage(ctx, view, rev, now)
	}
	if s.progressed {
		s.warned = nil
	}
}

// save writes c as the checkpoint by revision and makes it the walk's on success. A revision
// conflict means another walker wrote it: this one is no longer the leader and steps down.
func (s *storageWalk) save(ctx context.Context, c Checkpoint, now time.Time) bool {
	if _, held := s.lease.Held(); !held {
		return false // fencing: no progress recorded after the lease is gone
	}
	c.Holder, c.SavedUs = s.w.cfg.Holder, now.UnixMicro()
	rev, err := writeCheckpoint(ctx, s.w.state, c, s.ckRev)
	if err != nil {
		s.w.metrics.opError(pipeline.StageWalker, "checkpoint")
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			s.log.Warn("sweep checkpoint written by another walker; stepping down", "err", err)
			s.lease.Drop()
		} else {
			s.warn(ctx, "save sweep checkpoint", "err", err)
		}
		s.loaded = false
		s.dropWalks()
		return false
	}
	s.ck, s.ckRev = c, rev
	return true
}

func (s *storageWalk) startRound(ctx context.Context, now time.Time) {
	c := s.ck.clone()
	c.Round++
	c.InRound, c.Cursor, c.Page = true, nil, 0
	c.RoundStartedUs, c.Walked, c.Candidates, c.Kept = now.UnixMicro(), 0, 0, nil
	c.QNextUs = 0 // every round starts with a look into the quarantine
	if !s.save(ctx, c, now) {
		return
	}
	s.reopen()
	s.progressed = true
	s.log.Info("sweep round started", "round", c.Round)
	s.event(ctx, subjects.Event{Kind: subjects.EventSweep, Round: c.Round, Outcome: subjects.SweepOutcomeRoundStart,
		Detail: "storage " + s.storage})
}

func (s *storageWalk) startLook(ctx context.Context, now time.Time) {
	c := s.ck.clone()
	c.QPass++
	c.QInPass, c.QCursor, c.QPage, c.QSeen = true, nil, 0, QuarantineCount{}
	if !s.save(ctx, c, now) {
		return
	}
	s.reopen()
	s.progressed = true
}

// reopen closes the storage's directory and walks, so the next page opens them again from
// the registry as it is then (a changed root_path, a remounted storage).
func (s *storageWalk) reopen() {
	s.dropWalks()
	if s.root != nil {
		_ = s.root.Close()
		s.root, s.fs = nil, nil
	}
}

// walkPage walks at most BatchSize entries of the data, publishes the candidates among them
// and records the page in the checkpoint. On the last page the round ends.
func (s *storageWalk) walkPage(ctx context.Context, view *View, rev uint64, now time.Time) {
	if s.walk == nil {
		s.walk = s.root.Walk(string(s.ck.Cursor))
	}
	grace := s.w.cfg.Grace
	var files []sweepCandidate
	kept := map[string]uint64{}
	var last string
	n, done := 0, false
	for n < s.w.cfg.BatchSize {
		e, ok := s.walk.Next()
		if !ok {
			done = true
			break
		}
		n++
		last = e.Rel
		if e.Err != nil {
			s.w.metrics.opError(pipeline.StageWalker, "walk")
			s.warn(ctx, "walk a directory of the swept storage; skipped", "path", e.Rel, "err", e.Err)
			kept[KeptUnreadable]++
			continue
		}
		c, reason := classifyWalked(s.fs, view, e, now, grace)
		if reason != "" {
			kept[reason]++
			continue
		}
		files = append(files, c)
	}
	if !s.publish(ctx, subjects.SweepWalk, s.ck.Round, s.ck.Page, rev, now, files) {
		s.dropWalks()
		return
	}
	c := s.ck.clone()
	if n > 0 {
		c.Cursor = subjects.RawText(last)
	}
	c.Page++
	c.Walked += uint64(n)
	c.Candidates += uint64(len(files))
	for r, k := range kept {
		if c.Kept == nil {
			c.Kept = map[string]uint64{}
		}
		c.Kept[r] += k
	}
	if done {
		c.InRound = false
		c.NextRoundUs = now.Add(s.w.cfg.RoundPause).UnixMicro()
		c.LastRoundEndUs, c.LastRoundMs = now.UnixMicro(), now.Sub(time.UnixMicro(c.RoundStartedUs)).Milliseconds()
		c.LastWalked, c.LastCandidates, c.LastKept = c.Walked, c.Candidates, maps.Clone(c.Kept)
	}
	if !s.save(ctx, c, now) {
		return
	}
	s.progressed = true
	m := s.w.metrics
	m.Walked.Add(float64(n))
	m.Candidates.Add(float64(len(files)))
	for r, k := range kept {
		m.Kept.WithLabelValues(r).Add(float64(k))
	}
	if done {
		s.dropWalks()
		m.LastRoundEnd.Set(float64(now.Unix()))
		s.log.Info("sweep round finished", "round", c.Round, "walked", c.Walked, "candidates", c.Candidates,
			"duration", time.Duration(c.LastRoundMs)*time.Millisecond)
		counts := map[string]int64{"walked": int64(c.Walked), "candidates": int64(c.Candidates), "duration_ms": c.LastRoundMs}
		for r, k := range c.Kept {
			counts["kept_"+r] = int64(k)
		}
		s.event(ctx, subjects.Event{Kind: subjects.EventSweep, Round: c.Round, Outcome: subjects.SweepOutcomeRoundEnd,
			Detail: "storage " + s.storage, Counts: counts})
	}
}

// quarantinePage reads at most BatchSize entries of the quarantine and publishes every file
// there for a sweeper to finish or undo; the entries that are no file of kvcm-gc's are counted
// and left alone.
func (s *storageWalk) quarantinePage(ctx context.Context, view *View, rev uint64, now time.Time) {
	if s.qwalk == nil {
		qw, err := s.root.WalkQuarantine(string(s.ck.QCursor))
		if err != nil {
			s.w.metrics.opError(pipeline.StageWalker, "walk")
			s.warn(ctx, "open the quarantine", "err", err)
			return
		}
		s.qwalk = qw
	}
	seen := s.ck.QSeen
	var files []sweepCandidate
	var last string
	n, done := 0, false
	for n < s.w.cfg.BatchSize {
		e, ok := s.qwalk.Next()
		if !ok {
			done = true
			break
		}
		n++
		last = e.Rel
		if e.Err != nil {
			s.w.metrics.opError(pipeline.StageWalker, "walk")
			s.warn(ctx, "walk a directory of the quarantine; skipped", "path", e.Rel, "err", e.Err)
			seen.Foreign++
			continue
		}
		if storage.IsConflict(e.Rel) {
			seen.Conflicts++
			continue
		}
		c, ok := quarantined(s.fs, view, e)
		if !ok {
			seen.Foreign++
			continue
		}
		seen.add(c.file.Size, c.file.QuarantinedUs)
		files = append(files, c)
	}
	if !s.publish(ctx, subjects.SweepQuarantine, s.ck.QPass, s.ck.QPage, rev, now, files) {
		s.dropWalks()
		return
	}
	c := s.ck.clone()
	if n > 0 {
		c.QCursor = subjects.RawText(last)
	}
	c.QPage++
	c.QSeen = seen
	if done {
		c.QInPass = false
		seen.EndedUs = now.UnixMicro()
		c.QLast, c.QSeen = seen, QuarantineCount{}
		c.QNextUs = now.Add(max(s.w.cfg.Quarantine/2, s.w.cfg.Interval)).UnixMicro()
	}
	if !s.save(ctx, c, now) {
		return
	}
	s.progressed = true
	if done {
		if s.qwalk != nil {
			s.qwalk.Close()
			s.qwalk = nil
		}
		m := s.w.metrics
		m.QFiles.Set(float64(seen.Files))
		m.QBytes.Set(float64(seen.Bytes))
		m.QConflicts.Set(float64(seen.Conflicts))
		if seen.OldestUs > 0 {
			m.QOldest.Set(float64(seen.OldestUs) / 1e6)
		} else {
			m.QOldest.Set(0)
		}
		if seen.Files+seen.Conflicts+seen.Foreign > 0 {
			s.log.Info("looked into the quarantine", "files", seen.Files, "bytes", seen.Bytes, "conflicts", seen.Conflicts, "foreign", seen.Foreign)
		}
	}
}

// sweepCandidate is one file to publish, with the batch it goes in.
type sweepCandidate struct {
	instance, group, store string
	file                   subjects.SweepFile
}

// classifyWalked decides whether a walked file is a candidate: a regular file, KVCM's
// per-block name of a registered instance and spec (ResolveName), older than grace by its
// mtime, and whose data path maps back to the very file walked. Else reason says why it stays.
func classifyWalked(fs *storage.SweepFS, view *View, e storage.WalkEntry, now time.Time, grace time.Duration) (sweepCandidate, string) {
	if !e.Stat.Regular() {
		return sweepCandidate{}, KeptNotRegular
	}
	object := fs.Object(e.Rel)
	if object == "" {
		return sweepCandidate{}, KeptUnparsable
	}
	name, reason, _ := view.ResolveName(object)
	if reason != "" {
		return sweepCandidate{}, reason
	}
	if age := now.Sub(e.Stat.ModTime); age < grace {
		return sweepCandidate{}, KeptYoung // also a time in the future
	}
	raw := fs.DataPath(object)
	if rel, err := fs.Resolve(raw); err != nil || rel != e.Rel {
		return sweepCandidate{}, KeptPathMap
	}
	return sweepCandidate{instance: name.Instance.ID, group: name.Instance.Group, store: name.Instance.Store,
		file: subjects.SweepFile{Path: subjects.RawText(raw), Spec: name.Spec, Key: name.Key, Size: e.Stat.Size,
			MtimeUs: e.Stat.ModTime.UnixMicro(), Ino: e.Stat.Ino}}, ""
}

// quarantined turns an entry of the quarantine into a file to publish: any file that
// Quarantine named, whose name is KVCM's per-block name (the only ones it moves). A name that
// no longer resolves to a collected instance (the registry changed meanwhile) goes out under
// its first reading, for a sweeper to move it back.
func quarantined(fs *storage.SweepFS, view *View, e storage.WalkEntry) (sweepCandidate, bool) {
	rel, at, err := storage.ParseQuarantined(e.Rel)
	if err != nil || !e.Stat.Regular() {
		return sweepCandidate{}, false
	}
	object := fs.Object(rel)
	if object == "" {
		return sweepCandidate{}, false
	}
	c := sweepCandidate{file: subjects.SweepFile{Path: subjects.RawText(fs.DataPath(object)), Size: e.Stat.Size,
		MtimeUs: e.Stat.ModTime.UnixMicro(), Ino: e.Stat.Ino, Quarantine: subjects.RawText(e.Rel), QuarantinedUs: at.UnixMicro()}}
	if name, reason, _ := view.ResolveName(object); reason == "" {
		c.instance, c.group, c.store = name.Instance.ID, name.Instance.Group, name.Instance.Store
		c.file.Spec, c.file.Key = name.Spec, name.Key
		return c, true
	}
	bf, err := kvcm.ParseBlockFileName(object)
	if err != nil || bf.Shared {
		return sweepCandidate{}, false
	}
	first := bf.Splits()[0]
	c.instance, c.file.Spec, c.file.Key = first.Instance, first.Spec, bf.Key
	return c, true
}

// publish stores a page's files as one batch per instance (split below the payload limit)
// and waits until the server has stored them all. It reports success.
func (s *storageWalk) publish(ctx context.Context, kind string, round, page, rev uint64, now time.Time, files []sweepCandidate) bool {
	// Fencing: never publish after losing the lease.
	if _, held := s.lease.Held(); !held {
		return false
	}
	byInst := map[string][]sweepCandidate{}
	for _, f := range files {
		byInst[f.instance] = append(byInst[f.instance], f)
	}
	limit := subjects.PayloadLimit(int64(s.w.maxPayload))
	var acks []pipeline.AckWait
	for _, inst := range slices.Sorted(maps.Keys(byInst)) {
		cs := byInst[inst]
		b := subjects.SweepBatch{V: subjects.SchemaVersion, Cluster: s.w.names.Cluster, Instance: inst,
			Group: cs[0].group, Store: cs[0].store, Storage: s.storage, Kind: kind, Round: round, Page: page,
			LeaseRev: rev, WalkedAt: now.UnixMicro()}
		for _, c := range cs {
			b.Files = append(b.Files, c.file)
		}
		parts, err := splitSweep(b, limit)
		if err != nil {
			s.w.metrics.opError(pipeline.StageWalker, "publish")
			s.warn(ctx, "encode sweep batch", "instance", inst, "err", err)
			return false
		}
		for _, p := range parts {
			ack, err := s.w.publisher.PublishAsync(s.w.names.SweepSubject(inst), p.data, subjects.SweepMsgID(p.batch))
			if err != nil {
				s.w.metrics.opError(pipeline.StageWalker, "publish")
				s.warn(ctx, "publish sweep batch", "instance", inst, "err", err)
				return false
			}
			acks = append(acks, ack)
		}
	}
	actx, cancel := context.WithTimeout(ctx, pipeline.AckTimeout)
	defer cancel()
	for _, ack := range acks {
		if err := ack(actx); err != nil {
			s.w.metrics.opError(pipeline.StageWalker, "publish")
			s.warn(ctx, "store sweep batch", "err", err)
			return false
		}
	}
	return true
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

func (s *storageWalk) event(ctx context.Context, e subjects.Event) {
	if s.w.events == nil {
		return
	}
	e.Stage = pipeline.StageWalker
	s.w.events.Emit(ctx, e)
}

// ReadLease returns the walker's lease record of a storage, if any.
func ReadLease(ctx context.Context, kv jetstream.KeyValue, storage string) (*pipeline.LeaseRecord, uint64, error) {
	return pipeline.ReadLeaseKey(ctx, kv, subjects.SweepKey(storage))
}
