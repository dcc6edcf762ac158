package sweep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Sweeper is the sweep's sweeper stage (DESIGN §7): it judges the files of a sweep batch
// against their blocks and acts, safe against a KVCM write racing it. KVCM writes the WRITING
// location to Redis before any client writes the file, so:
//
//  1. a walked file is judged on its block read now: an orphan only if the block is absent or
//     no location of it, in any status, names the file (judgeFile; anything uncertain keeps);
//  2. the file is renamed into the quarantine (atomic, same file system): a client that
//     opened it before writes into the quarantined file, one that opens the path after
//     creates a new file there;
//  3. the block is read again: a location that names the file now (a write that began
//     between 1 and 2) moves it back, only to a free path (otherwise both are kept and
//     reported), and so does a read that fails;
//  4. after sweep_quarantine, a look into the quarantine brings the file back to a sweeper,
//     which reads the block once more and unlinks it, or moves it back. From step 3 on no KVCM
//     client can reach the quarantined file: a later write of the block goes to its path.
//
// A batch whose handling fails is redelivered and handled again from the files' state:
// a file found in quarantine by its inode resumes at step 3, one moved back is judged anew.
// Any number of sweepers may run; the sweeper consumer's MaxAckPending caps the batches in
// flight across all of them.
type Sweeper struct {
	cfg       Config
	names     subjects.Names
	registry  meta.RegistryReader
	stores    meta.StoreResolver
	storageOp storage.Options
	events    *pipeline.EventLog
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time

	views    viewCache
	inflight sync.Mutex
	files    int
}

// SweeperDeps are what the sweeper is wired to. Registry and Stores are required; nil Events
// records no event, a nil Metrics counts on an unregistered set, a nil Logger discards, a nil
// Now is time.Now.
type SweeperDeps struct {
	Names    subjects.Names
	Registry meta.RegistryReader
	Stores   meta.StoreResolver
	// State is the STATE bucket, whose scanner checkpoints tell the unregistered instances
	// whose files may go; required with Config.CollectUnregistered only.
	State          jetstream.KeyValue
	StorageOptions storage.Options // path maps; DryRun renames nothing (the storage refuses)
	Events         *pipeline.EventLog
	Metrics        *Metrics
	Logger         *slog.Logger
	Now            func() time.Time
}

// NewSweeper returns the sweeper stage of cfg.
func NewSweeper(cfg Config, deps SweeperDeps) (*Sweeper, error) {
	refused := pipeline.Refusals{cfg.Validate()}
	cfg.refuse(&refused)
	refused.Need(deps.Registry != nil, "no registry reader")
	refused.Need(deps.Stores != nil, "no metadata store resolver")
	if err := refused.Err("sweeper"); err != nil {
		return nil, err
	}
	s := &Sweeper{
		cfg:       cfg,
		names:     deps.Names,
		registry:  deps.Registry,
		stores:    deps.Stores,
		storageOp: deps.StorageOptions,
		events:    deps.Events,
		metrics:   orUnregistered(deps.Metrics),
		log:       pipeline.OrDiscard(deps.Logger),
		now:       pipeline.OrNow(deps.Now),
	}
	u, err := newUnregReader(cfg, pipeline.StageSweeper, deps.State, s.metrics, s.log)
	if err != nil {
		return nil, fmt.Errorf("sweeper: %w", err)
	}
	s.views.unreg = u
	return s, nil
}

// Result is what a sweeper did with one file.
type Result struct {
	File subjects.SweepFile
	// Outcome is a subjects.SweepOutcome*; "" for a quarantined file left waiting out
	// sweep_quarantine.
	Outcome string
	Reason  string
	Detail  string
	// Freed is the bytes an unlink freed.
	Freed int64
	// Op names the failed operation of an error outcome.
	Op string
}

// Handle handles one sweep batch message (a pipeline.Handler).
func (s *Sweeper) Handle(ctx context.Context, msg jetstream.Msg) error {
	b, src, err := pipeline.Receive(s.names, msg, "sweep batch", subjects.DecodeSweepBatch,
		func(b subjects.SweepBatch) (string, string) { return b.Instance, b.Cluster })
	if err != nil {
		return err
	}
	s.track(len(b.Files))
	defer s.track(-len(b.Files))

	// A slow file system does not let the batch be redelivered to another sweeper meanwhile:
	// the consumer keeps it in flight (ConsumerConfig.AckWait).
	results, err := s.Sweep(ctx, b)

	s.record(ctx, b, results, &src)
	if err != nil {
		return fmt.Errorf("sweep batch of storage %q instance %q: %w", b.Storage, b.Instance, err)
	}
	return nil
}

func (s *Sweeper) track(n int) {
	s.inflight.Lock()
	s.files += n
	s.metrics.InflightFiles.Set(float64(s.files))
	s.inflight.Unlock()
}

// record counts the results and publishes an event for every step taken.
func (s *Sweeper) record(ctx context.Context, b subjects.SweepBatch, results []Result, src *subjects.Source) {
	m := s.metrics
	var fs []jetstream.PubAckFuture
	for _, r := range results {
		switch r.Outcome {
		case "":
			continue // waiting out sweep_quarantine: nothing happened
		case subjects.SweepOutcomeQuarantined:
			m.Quarantined.Inc()
		case subjects.SweepOutcomeRestored:
			m.Restored.Inc()
		case subjects.SweepOutcomeConflict:
			m.Conflicts.Inc()
		case subjects.SweepOutcomeUnlinked:
			m.Unlinked.Inc()
			m.FreedBytes.Add(float64(r.Freed))
		case subjects.SweepOutcomeGone:
			m.Gone.Inc()
		case subjects.SweepOutcomeKept:
			m.Kept.WithLabelValues(r.Reason).Inc()
		case subjects.SweepOutcomeWouldQuarantine, subjects.SweepOutcomeWouldRestore, subjects.SweepOutcomeWouldUnlink:
			m.Kept.WithLabelValues(KeptDryRun).Inc()
		case subjects.SweepOutcomeError:
			s.metrics.opError(pipeline.StageSweeper, r.Op)
		}
		if r.Outcome == subjects.SweepOutcomeConflict || r.Outcome == subjects.SweepOutcomeError {
			s.log.Warn("sweep", "outcome", r.Outcome, "storage", b.Storage, "instance", b.Instance,
				"file", string(r.File.Path), "detail", r.Detail)
		}
		if s.events != nil {
			key := r.File.Key
			fs = append(fs, s.events.Emit(ctx, subjects.Event{Kind: subjects.EventSweep, Stage: pipeline.StageSweeper,
				Instance: b.Instance, Round: b.Round, Key: &key, File: r.File.Path, Reason: r.Reason, Outcome: r.Outcome,
				Detail: r.Detail, DryRun: s.storageOp.DryRun, Source: src}))
		}
	}
	if s.events != nil {
		if err := s.events.Wait(ctx, fs); err != nil {
			s.log.Warn("store sweep events", "instance", b.Instance, "err", err)
		}
	}
}

// errRetry: a step failed for a reason that may pass; the batch is redelivered.
var errRetry = errors.New("some files could not be handled")

// sweepFile is one file of a batch as it is being handled.
type sweepFile struct {
	res    *Result
	target sweepTarget
	rel    string
	qrel   string    // its quarantine name once there
	qAt    time.Time // when it went in
	st     storage.FileStat
	back   bool // found back at its path: an earlier delivery restored it
}

// backDetail is the detail of a restore an earlier delivery did and this one reports.
const backDetail = "found back at its path, moved by an earlier delivery"

// Sweep judges and acts on every file of b and returns what it did with each, in order. An
// error means the batch must be handled again (a step failed); everything it did is in the
// results.
func (s *Sweeper) Sweep(ctx context.Context, b subjects.SweepBatch) ([]Result, error) {
	now := s.now()
	results := make([]Result, len(b.Files))
	for i := range b.Files {
		results[i].File = b.Files[i]
	}
	all := func(outcome, reason, detail string) ([]Result, error) {
		for i := range results {
			results[i].Outcome, results[i].Reason, results[i].Detail = outcome, reason, detail
		}
		return results, nil
	}
	if !s.cfg.swept(b.Storage) {
		return all(subjects.SweepOutcomeKept, KeptNotSwept, "storage "+b.Storage)
	}
	cv, err := s.views.get(ctx, s.registry, s.storageOp, s.cfg.RegistryRefresh, now)
	if err != nil {
		s.metrics.opError(pipeline.StageSweeper, "registry")
		return results, err
	}
	view := cv.view
	fs, err := view.Storages().SweepFS(b.Storage)
	if err != nil {
		return all(subjects.SweepOutcomeKept, KeptNoStorage, err.Error())
	}
	root, err := fs.Open()
	if err != nil {
		s.metrics.opError(pipeline.StageSweeper, "open")
		return results, err
	}
	defer root.Close()
	h := &batchSweep{s: s, b: b, view: view, fs: fs, root: root, now: now}
	in, ok := view.judged(b.Instance)
	if !ok {
		_, reason, detail := view.ResolveName(kvcm.BlockObjectName(b.Instance, b.Files[0].Spec, b.Files[0].Key))
		if reason == "" {
			reason = KeptUnknownInstance
		}
		if b.Kind == subjects.SweepWalk {
			return all(subjects.SweepOutcomeKept, reason, detail)
		}
		// Not ours to judge any more (the registry changed): undo the quarantine.
		for i := range results {
			h.undo(&results[i], reason)
		}
		return results, h.err()
	}
	store, err := s.stores.Store(in.Store)
	if err != nil {
		s.metrics.opError(pipeline.StageSweeper, "store")
		return results, fmt.Errorf("open metadata store %q: %w", in.Store, err)
	}
	h.store = store
	if d, ok := store.(interface{ DB() int }); ok && d.DB() != 0 {
		h.otherDB = true
	}
	if b.Kind == subjects.SweepWalk {
		h.walked(ctx, results)
	} else {
		h.quarantined(ctx, results)
	}
	return results, h.err()
}

// batchSweep is the handling of one batch.
type batchSweep struct {
	s       *Sweeper
	b       subjects.SweepBatch
	view    *View
	fs      *storage.SweepFS
	root    *storage.SweepRoot
	store   meta.Store
	otherDB bool
	now     time.Time
	failed  bool
}

func (h *batchSweep) err() error {
	if h.failed {
		return errRetry
	}
	return nil
}

func (h *batchSweep) fail(r *Result, op string, err error) {
	r.Outcome, r.Op, r.Detail = subjects.SweepOutcomeError, op, err.Error()
	h.failed = true
}

// entry checks that a file entry names what KVCM's name of its block gives, on this storage,
// for a collected instance and spec, and returns its local path. ok is false when the result
// is decided (kept) already.
func (h *batchSweep) entry(r *Result) (sweepTarget, string, bool) {
	f := r.File
	object := kvcm.BlockObjectName(h.b.Instance, f.Spec, f.Key)
	if h.fs.DataPath(object) != string(f.Path) {
		r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeKept, KeptBadEntry, "KVCM's name of the block is "+object
		return sweepTarget{}, "", false
	}
	if _, reason, detail := h.view.ResolveName(object); reason != "" {
		r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeKept, reason, detail
		return sweepTarget{}, "", false
	}
	rel, err := h.fs.Resolve(string(f.Path))
	if err != nil {
		r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeKept, KeptPathMap, err.Error()
		return sweepTarget{}, "", false
	}
	t := sweepTarget{storage: h.b.Storage, rawPath: string(f.Path), local: h.fs.LocalDir() + "/" + rel}
	return t, rel, true
}

// walked handles the files of a walk: judge, quarantine, judge again.
func (h *batchSweep) walked(ctx context.Context, results []Result) {
	var judge, confirm []*sweepFile
	for i := range results {
		r := &results[i]
		t, rel, ok := h.entry(r)
		if !ok {
			continue
		}
		sf := &sweepFile{res: r, target: t, rel: rel}
		st, err := h.root.Stat(rel)
		switch {
		case errors.Is(err, syscall.ENOENT):
			// Moved by an earlier delivery that did not finish: resume after the rename.
			qrel, at, found, ferr := h.root.FindQuarantined(rel, r.File.Ino)
			switch {
			case ferr != nil:
				h.fail(r, "stat", ferr)
			case found:
				sf.qrel, sf.qAt = qrel, at
				confirm = append(confirm, sf)
			default:
				r.Outcome = subjects.SweepOutcomeGone
			}
			continue
		case err != nil:
			h.fail(r, "stat", err)
			continue
		}
		if reason, detail := h.sameFile(r.File, st); reason != "" {
			r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeKept, reason, detail
			continue
		}
		sf.st = st
		judge = append(judge, sf)
	}
	if len(judge) > 0 {
		reads, err := h.read(ctx, judge)
		if err != nil {
			for _, sf := range judge {
				h.fail(sf.res, "read", err)
			}
			judge = nil
		}
		for i, sf := range judge {
			r := sf.res
			orphan, reason, detail := h.view.judgeFile(reads[i], sf.target, h.otherDB)
			if !orphan {
				r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeKept, reason, detail
				continue
			}
			r.Reason = reason
			if h.s.storageOp.DryRun {
				r.Outcome = subjects.SweepOutcomeWouldQuarantine
				continue
			}
			qrel, err := h.root.Quarantine(sf.rel, h.s.now())
			switch {
			case errors.Is(err, syscall.ENOENT):
				r.Outcome = subjects.SweepOutcomeGone
				continue
			case err != nil:
				h.fail(r, "quarantine", err)
				continue
			}
			sf.qrel = qrel
			// The rename moved whatever was at the path: if that was not the file judged (it
			// changed in between), it goes back at once.
			qst, err := h.root.QuarantinedStat(qrel)
			if err != nil || !qst.Regular() || qst.Ino != sf.st.Ino || qst.Size != sf.st.Size ||
				!qst.ModTime.Equal(sf.st.ModTime) {
				r.Detail = "back from quarantine as " + qrel + ": not the file judged"
				h.restore(r, sf, KeptChanged)
				continue
			}
			confirm = append(confirm, sf)
		}
	}
	if len(confirm) == 0 {
		return
	}
	// Read again, now that no client can open the file at its path any more: a location
	// written since the first read (a write that began in between) names it, and it goes back.
	reads, err := h.read(ctx, confirm)
	if err != nil {
		h.s.metrics.opError(pipeline.StageSweeper, "read")
	}
	for i, sf := range confirm {
		r := sf.res
		if err != nil {
			h.restore(r, sf, KeptReadError) // fail closed: unconfirmed, so undone
			continue
		}
		orphan, reason, detail := h.view.judgeFile(reads[i], sf.target, h.otherDB)
		if !orphan {
			r.Detail = joinDetail("back from quarantine as "+sf.qrel, detail)
			h.restore(r, sf, reason)
			continue
		}
		r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeQuarantined, reason, sf.qrel
	}
}

func joinDetail(a, b string) string {
	if b == "" {
		return a
	}
	return a + ": " + b
}

// quarantined handles the files of a look into the quarantine: judge once more, then unlink
// what has waited out sweep_quarantine, or move back what is named again.
func (h *batchSweep) quarantined(ctx context.Context, results []Result) {
	var judge []*sweepFile
	for i := range results {
		r := &results[i]
		sf, ok := h.quarantinedFile(r)
		if !ok {
			continue
		}
		if _, err := h.root.QuarantinedStat(sf.qrel); errors.Is(err, syscall.ENOENT) {
			// Finished or undone already. Undone by a delivery that stopped before its event was
			// stored, the file is back at its path (the same inode): this delivery tells the
			// restore, judged again to say why.
			st, err := h.root.Stat(sf.rel)
			if err != nil || !st.Regular() || st.Ino != r.File.Ino || st.Size != r.File.Size {
				r.Outcome = subjects.SweepOutcomeGone
				continue
			}
			sf.back = true
		} else if err != nil {
			h.fail(r, "stat", err)
			continue
		}
		t, _, ok := h.entry(r)
		switch {
		case !ok && sf.back:
			r.Outcome, r.Detail = subjects.SweepOutcomeRestored, joinDetail(backDetail, r.Detail)
			continue
		case !ok:
			// Its block can no longer be judged: undo.
			reason := r.Reason
			r.Outcome, r.Reason = "", ""
			h.restore(r, sf, reason)
			continue
		}
		sf.target = t
		judge = append(judge, sf)
	}
	if len(judge) == 0 {
		return
	}
	reads, err := h.read(ctx, judge)
	if err != nil {
		for _, sf := range judge {
			h.fail(sf.res, "read", err)
		}
		return
	}
	for i, sf := range judge {
		r := sf.res
		orphan, reason, detail := h.view.judgeFile(reads[i], sf.target, h.otherDB)
		switch {
		case sf.back && !orphan:
			r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeRestored, reason, joinDetail(backDetail, detail)
			continue
		case sf.back:
			// Named when it went back, not now: at its path, the next walk judges it again.
			r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeRestored, KeptChanged, backDetail+": no location names it now"
			continue
		case !orphan:
			r.Detail = detail
			h.restore(r, sf, reason)
			continue
		}
		if h.now.Sub(sf.qAt) < h.s.cfg.Quarantine {
			continue // waiting: the next look brings it back
		}
		if h.s.storageOp.DryRun {
			r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeWouldUnlink, reason, sf.qrel
			continue
		}
		// The read above is the last check (invariant 11): no location of the block names the
		// file, and the quarantine name is none KVCM could reuse.
		freed, err := h.root.Unlink(sf.qrel)
		if err != nil {
			h.fail(r, "unlink", err)
			continue
		}
		r.Outcome, r.Reason, r.Detail, r.Freed = subjects.SweepOutcomeUnlinked, reason, sf.qrel, freed
	}
}

// undo moves a quarantined file back without judging it.
func (h *batchSweep) undo(r *Result, reason string) {
	if sf, ok := h.quarantinedFile(r); ok {
		h.restore(r, sf, reason)
	}
}

// quarantinedFile is r's file in the quarantine, when its quarantine name parses and is the
// name of r's path; otherwise r is kept as a bad entry (false).
func (h *batchSweep) quarantinedFile(r *Result) (*sweepFile, bool) {
	rel, at, err := storage.ParseQuarantined(string(r.File.Quarantine))
	if err != nil {
		r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeKept, KeptBadEntry, err.Error()
		return nil, false
	}
	if local, err := h.fs.Resolve(string(r.File.Path)); err != nil || local != rel {
		r.Outcome, r.Reason, r.Detail = subjects.SweepOutcomeKept, KeptBadEntry, "quarantine name of another path"
		return nil, false
	}
	return &sweepFile{res: r, rel: rel, qrel: string(r.File.Quarantine), qAt: at}, true
}

// restore moves sf back to its path; reason says why. Dry-run only says so.
func (h *batchSweep) restore(r *Result, sf *sweepFile, reason string) {
	r.Reason = reason
	if h.s.storageOp.DryRun {
		r.Outcome = subjects.SweepOutcomeWouldRestore
		return
	}
	err := h.root.Restore(sf.qrel, sf.rel)
	switch {
	case err == nil:
		r.Outcome = subjects.SweepOutcomeRestored
	case errors.Is(err, storage.ErrRestoreConflict):
		r.Outcome, r.Detail = subjects.SweepOutcomeConflict, err.Error()
	case errors.Is(err, syscall.ENOENT):
		r.Outcome = subjects.SweepOutcomeGone
	default:
		h.fail(r, "restore", err)
	}
}

// sameFile says why st is not the file the walker saw (or is too young now), "" when it is.
func (h *batchSweep) sameFile(f subjects.SweepFile, st storage.FileStat) (reason, detail string) {
	switch {
	case !st.Regular():
		return KeptNotRegular, ""
	case st.Ino != f.Ino || st.Size != f.Size || st.ModTime.UnixMicro() != f.MtimeUs:
		return KeptChanged, fmt.Sprintf("inode %d size %d mtime %d, walked %d %d %d", st.Ino,
			st.Size, st.ModTime.UnixMicro(), f.Ino, f.Size, f.MtimeUs)
	case h.now.Sub(st.ModTime) < h.s.cfg.Grace:
		return KeptYoung, ""
	}
	return "", ""
}

// read reads the blocks of files in one round trip, in order.
func (h *batchSweep) read(ctx context.Context, files []*sweepFile) ([]meta.BlockRead, error) {
	keys := make([]int64, len(files))
	for i, sf := range files {
		keys[i] = sf.res.File.Key
	}
	reads, err := h.store.ReadBlocks(ctx, h.b.Instance, keys)
	if err == nil && len(reads) != len(keys) {
		err = fmt.Errorf("read %d blocks: %d answers", len(keys), len(reads))
	}
	if err != nil {
		return nil, err
	}
	return reads, nil
}
