package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Stage names of the sweep (the "stage" label and Event.Stage).
const (
	StageWalker  = "walker"
	StageSweeper = "sweeper"
)

// Reasons a file is kept (the "reason" label of kvcm_gc_sweep_kept_files_total, Event.Reason).
// The walker's come first: it publishes only what none of them holds for.
const (
	// SweepKeptNotRegular: a symbolic link, a directory where a file belongs, a device.
	SweepKeptNotRegular = "not_regular"
	// SweepKeptUnparsable: not a per-block name KVCM writes (kvcm.ParseBlockFileName).
	SweepKeptUnparsable = "unparsable"
	// SweepKeptShared: a file several blocks share; its name says nothing certain about them.
	SweepKeptShared = "shared"
	// SweepKeptUnknownInstance: no registered instance has the id the name gives.
	SweepKeptUnknownInstance = "unknown_instance"
	// SweepKeptGroupSkipped: the instance's group is not collected (a local, dummy or cached
	// metadata store, or a group record kvcm-gc cannot use).
	SweepKeptGroupSkipped = "group_skipped"
	// SweepKeptUnknownSpec: the instance has no spec of the name's.
	SweepKeptUnknownSpec = "unknown_spec"
	// SweepKeptAmbiguousName: the name reads as blocks of two registered instances (a '/' in an id).
	SweepKeptAmbiguousName = "ambiguous_name"
	// SweepKeptYoung: modified within sweep_grace (or in the future).
	SweepKeptYoung = "young"
	// SweepKeptPathMap: the storage's data path of the name maps to another local file.
	SweepKeptPathMap = "path_mismatch"
	// SweepKeptUnreadable: a directory that could not be read, or too deep; nothing in it judged.
	SweepKeptUnreadable = "unreadable"

	// SweepKeptReferenced: a location of the block, in any status, names the file.
	SweepKeptReferenced = "referenced"
	// SweepKeptCorrupt: a value of the block does not decode, or a location is bad: what it
	// names is unknown.
	SweepKeptCorrupt = "corrupt"
	// SweepKeptTombstone: the block has an empty location field (KVCM's tombstone).
	SweepKeptTombstone = "tombstone"
	// SweepKeptAmbiguousLayout: the block holds both __uri__ and L# fields.
	SweepKeptAmbiguousLayout = "ambiguous_layout"
	// SweepKeptReadError: the block could not be read (or is a legacy key in a database a
	// KVCM of that layout does not use).
	SweepKeptReadError = "read_error"
	// SweepKeptAbsentOtherDB: the block is absent from a store in a database other than 0, where
	// a KVCM of the legacy layout, which ignores db=, would not have written it.
	SweepKeptAbsentOtherDB = "absent_other_db"
	// SweepKeptBadURI: a spec URI of the block does not parse.
	SweepKeptBadURI = "bad_spec_uri"
	// SweepKeptNoStorage: the storage is no longer registered, or cannot be swept.
	SweepKeptNoStorage = "storage_not_registered"
	// SweepKeptNotSwept: this sweeper does not sweep the storage (its storage.overrides differ).
	SweepKeptNotSwept = "not_swept"
	// SweepKeptChanged: the file is not the one the walker saw (another inode, size or
	// mtime), or changed while it was moved.
	SweepKeptChanged = "changed"
	// SweepKeptBadEntry: the batch's entry does not name the file KVCM's name of its block gives.
	SweepKeptBadEntry = "bad_entry"
	// SweepKeptDryRun: dry-run; what a sweeper would have done (would_quarantine, would_restore,
	// would_unlink) was not done.
	SweepKeptDryRun = "dry_run"
)

var sweepKeptReasons = []string{SweepKeptNotRegular, SweepKeptUnparsable, SweepKeptShared, SweepKeptUnknownInstance,
	SweepKeptGroupSkipped, SweepKeptUnknownSpec, SweepKeptAmbiguousName, SweepKeptYoung, SweepKeptPathMap,
	SweepKeptUnreadable, SweepKeptReferenced, SweepKeptCorrupt, SweepKeptTombstone, SweepKeptAmbiguousLayout,
	SweepKeptReadError, SweepKeptAbsentOtherDB, SweepKeptBadURI, SweepKeptNoStorage, SweepKeptNotSwept,
	SweepKeptChanged, SweepKeptBadEntry, SweepKeptDryRun}

// SweepKeptReasons lists every kept reason, walker's first.
func SweepKeptReasons() []string { return append([]string(nil), sweepKeptReasons...) }

// Operations of the sweep that fail (the "reason" label of kvcm_gc_sweep_errors_total).
var sweepErrors = map[string][]string{
	StageWalker:  {"lease", "checkpoint", "registry", "backlog", "open", "walk", "publish", "event"},
	StageSweeper: {"registry", "open", "store", "read", "stat", "quarantine", "restore", "unlink", "event"},
}

// SweepMetrics are the sweep's metrics, part of Metrics.
type SweepMetrics struct {
	Walked        prometheus.Counter
	Candidates    prometheus.Counter
	Kept          *prometheus.CounterVec
	Quarantined   prometheus.Counter
	Restored      prometheus.Counter
	Conflicts     prometheus.Counter
	Unlinked      prometheus.Counter
	FreedBytes    prometheus.Counter
	Gone          prometheus.Counter
	Errors        *prometheus.CounterVec
	Backpressure  prometheus.Counter
	LeasesHeld    prometheus.Gauge
	LastRoundEnd  prometheus.Gauge
	QFiles        prometheus.Gauge
	QBytes        prometheus.Gauge
	QConflicts    prometheus.Gauge
	QOldest       prometheus.Gauge
	InflightFiles prometheus.Gauge
	Backlog       prometheus.Gauge
}

func newSweepMetrics(f promauto.Factory, m *Metrics) *SweepMetrics {
	s := &SweepMetrics{
		Walked:     f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_walked_files_total", Help: "Files of swept storages the walker read."}),
		Candidates: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_candidates_total", Help: "Files the walker published for the sweepers to judge."}),
		Kept: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_sweep_kept_files_total",
			Help: "Files the walker or a sweeper left alone, by reason."}, []string{"reason"}),
		Quarantined: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_quarantined_files_total", Help: "Orphan files moved into quarantine (and confirmed orphan by a second read)."}),
		Restored:    f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_restored_files_total", Help: "Quarantined files moved back to their data path."}),
		Conflicts:   f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_conflicts_total", Help: "Quarantined files that could not go back because their data path was taken: both kept."}),
		Unlinked:    f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_unlinked_files_total", Help: "Quarantined files unlinked after sweep_quarantine."}),
		FreedBytes:  f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_freed_bytes_total", Help: "Bytes of the unlinked files."}),
		Gone:        f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_gone_files_total", Help: "Files gone by the time a sweeper looked (removed by someone else)."}),
		Errors: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_sweep_errors_total",
			Help: "Failed operations of the sweep, by stage and operation; the work is retried."}, []string{"stage", "reason"}),
		Backpressure: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_backpressure_skips_total", Help: "Walker pages skipped because the sweeper backlog was above the high-water mark."}),
		LeasesHeld:   f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_leases_held", Help: "Swept storages whose walk this walker leads."}),
		LastRoundEnd: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_last_round_end_timestamp_seconds", Help: "Unix time a walk of a storage this walker leads last completed (0: none yet in this process)."}),
		QFiles:       f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_quarantine_files", Help: "Files in the quarantines of the storages this walker leads, at its last look."}),
		QBytes:       f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_quarantine_bytes", Help: "Bytes of those files."}),
		QConflicts:   f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_quarantine_conflicts", Help: "Conflict copies among them, kept for an operator."}),
		QOldest: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_quarantine_oldest_timestamp_seconds",
			Help: "Unix time the oldest of them went into quarantine (0: none)."}),
		InflightFiles: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_inflight_files", Help: "Files of the sweep batches this sweeper is handling."}),
		Backlog: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_backlog_batches",
			Help: "Sweep batches pending or unacknowledged at the sweeper consumer, as this walker last read them."}),
	}
	for _, r := range sweepKeptReasons {
		s.Kept.WithLabelValues(r)
	}
	for stage, reasons := range sweepErrors {
		for _, r := range reasons {
			s.Errors.WithLabelValues(stage, r)
		}
	}
	for _, r := range []string{MsgAck, MsgNak, MsgTerm} {
		m.Messages.WithLabelValues(StageSweeper, r)
	}
	for _, op := range []string{"event", "fetch"} {
		m.OperationErrors.WithLabelValues(StageSweeper, op)
	}
	return s
}

// sweepError counts a failed operation of the sweep.
func (m *Metrics) sweepError(stage, reason string) {
	m.Sweep.Errors.WithLabelValues(stage, reason).Inc()
}
