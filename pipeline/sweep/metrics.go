package sweep

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// Reasons a file is kept (the "reason" label of kvcm_gc_sweep_kept_files_total, Event.Reason).
// The walker's come first: it publishes only what none of them holds for.
const (
	// KeptNotRegular: a symbolic link, a directory where a file belongs, a device.
	KeptNotRegular = "not_regular"
	// KeptUnparsable: not a per-block name KVCM writes (kvcm.ParseBlockFileName).
	KeptUnparsable = "unparsable"
	// KeptKVMeta: a file of KVCM's KVMeta objects (<root>/kvmeta/…, open upstream PR #341),
	// which KVMeta's own reclaimer owns; its tree is never swept, whatever is in it.
	KeptKVMeta = "kvmeta"
	// KeptShared: a file several blocks share; its name says nothing certain about them.
	KeptShared = "shared"
	// KeptUnknownInstance: no registered instance has the id the name gives.
	KeptUnknownInstance = "unknown_instance"
	// KeptGroupSkipped: the instance's group is not collected (a local, dummy or cached
	// metadata store, or a group record kvcm-gc cannot use).
	KeptGroupSkipped = "group_skipped"
	// KeptUnknownSpec: the instance has no spec of the name's.
	KeptUnknownSpec = "unknown_spec"
	// KeptAmbiguousName: the name reads as blocks of two registered instances (a '/' in an id).
	KeptAmbiguousName = "ambiguous_name"
	// KeptYoung: modified within sweep_grace (or in the future).
	KeptYoung = "young"
	// KeptPathMap: the storage's data path of the name maps to another local file.
	KeptPathMap = "path_mismatch"
	// KeptUnreadable: a directory that could not be read, or too deep; nothing in it judged.
	KeptUnreadable = "unreadable"

	// KeptReferenced: a location of the block, in any status, names the file.
	KeptReferenced = "referenced"
	// KeptCorrupt: a value of the block does not decode, or a location is bad: what it
	// names is unknown.
	KeptCorrupt = "corrupt"
	// KeptTombstone: the block has an empty location field (KVCM's tombstone).
	KeptTombstone = "tombstone"
	// KeptAmbiguousLayout: the block holds both __uri__ and L# fields.
	KeptAmbiguousLayout = "ambiguous_layout"
	// KeptReadError: the block could not be read (or is a legacy key in a database a
	// KVCM of that layout does not use).
	KeptReadError = "read_error"
	// KeptAbsentOtherDB: the block is absent from a store in a database other than 0, where
	// a KVCM of the legacy layout, which ignores db=, would not have written it.
	KeptAbsentOtherDB = "absent_other_db"
	// KeptBadURI: a spec URI of the block does not parse.
	KeptBadURI = "bad_spec_uri"
	// KeptNoStorage: the storage is no longer registered, or cannot be swept.
	KeptNoStorage = "storage_not_registered"
	// KeptNotSwept: this sweeper does not sweep the storage (its storage.overrides differ).
	KeptNotSwept = "not_swept"
	// KeptChanged: the file is not the one the walker saw (another inode, size or
	// mtime), or changed while it was moved.
	KeptChanged = "changed"
	// KeptBadEntry: the batch's entry does not name the file KVCM's name of its block gives.
	KeptBadEntry = "bad_entry"
	// KeptDryRun: dry-run; what a sweeper would have done (would_quarantine, would_restore,
	// would_unlink) was not done.
	KeptDryRun = "dry_run"
)

var keptReasons = []string{KeptNotRegular, KeptUnparsable, KeptKVMeta, KeptShared, KeptUnknownInstance,
	KeptGroupSkipped, KeptUnknownSpec, KeptAmbiguousName, KeptYoung, KeptPathMap,
	KeptUnreadable, KeptReferenced, KeptCorrupt, KeptTombstone, KeptAmbiguousLayout,
	KeptReadError, KeptAbsentOtherDB, KeptBadURI, KeptNoStorage, KeptNotSwept,
	KeptChanged, KeptBadEntry, KeptDryRun}

// KeptReasons lists every kept reason, walker's first.
func KeptReasons() []string { return append([]string(nil), keptReasons...) }

// Operations of the sweep that fail (the "reason" label of kvcm_gc_sweep_errors_total).
var errorOps = map[string][]string{
	pipeline.StageWalker: {
		"lease",
		"checkpoint",
		"registry",
		opScannerCheckpoint,
		"pause",
		"backlog",
		"open",
		"walk",
		"publish",
		"event",
	},
	pipeline.StageSweeper: {
		"registry",
		opScannerCheckpoint,
		"open",
		"store",
		"read",
		"stat",
		"quarantine",
		"restore",
		"unlink",
		"event",
	},
}

// opScannerCheckpoint: a scanner's store checkpoint could not be read (the files of
// unregistered instances, collect_unregistered_instances).
const opScannerCheckpoint = "scanner_checkpoint"

// Metrics are the sweep's metrics, registered beside pipeline.Metrics (the sweeper
// consumer's messages are counted there).
type Metrics struct {
	Walked       prometheus.Counter
	Candidates   prometheus.Counter
	Kept         *prometheus.CounterVec
	Quarantined  prometheus.Counter
	Restored     prometheus.Counter
	Conflicts    prometheus.Counter
	Unlinked     prometheus.Counter
	FreedBytes   prometheus.Counter
	Gone         prometheus.Counter
	Errors       *prometheus.CounterVec
	Backpressure prometheus.Counter
	LeasesHeld   prometheus.Gauge
	WalkerPaused prometheus.Gauge
	// Per swept storage (label storage), exported by the walker leading its walk only: the
	// series move with the lease, as a metadata store's do with the scanner's, so one
	// stuck storage is seen apart from the others.
	LastRoundEnd  *prometheus.GaugeVec
	QFiles        *prometheus.GaugeVec
	QBytes        *prometheus.GaugeVec
	QConflicts    *prometheus.GaugeVec
	QOldest       *prometheus.GaugeVec
	InflightFiles prometheus.Gauge
	Backlog       prometheus.Gauge
}

// NewMetrics registers the sweep's metrics on reg (nil: registered nowhere).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	s := &Metrics{
		Walked: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_walked_files_total",
			Help: "Files of swept storages the walker read."}),
		Candidates: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_candidates_total",
			Help: "Files the walker published for the sweepers to judge."}),
		Kept: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_sweep_kept_files_total",
			Help: "Files the walker or a sweeper left alone, by reason."}, []string{"reason"}),
		Quarantined: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_quarantined_files_total",
			Help: "Orphan files moved into quarantine (and confirmed orphan by a second read)."}),
		Restored: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_restored_files_total",
			Help: "Quarantined files moved back to their data path."}),
		Conflicts: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_conflicts_total",
			Help: "Quarantined files that could not go back because their data path was taken: both kept."}),
		Unlinked: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_unlinked_files_total",
			Help: "Quarantined files unlinked after sweep_quarantine."}),
		FreedBytes: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_freed_bytes_total",
			Help: "Bytes of the unlinked files."}),
		Gone: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_gone_files_total",
			Help: "Files gone by the time a sweeper looked (removed by someone else)."}),
		Errors: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_sweep_errors_total",
			Help: "Failed operations of the sweep, by stage and operation; the work is retried."}, []string{"stage", "reason"}),
		Backpressure: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_sweep_backpressure_skips_total",
			Help: "Walker pages skipped because the sweeper backlog was above the high-water mark."}),
		LeasesHeld: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_leases_held",
			Help: "Swept storages whose walk this walker leads."}),
		WalkerPaused: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_walker_paused",
			Help: "1 while an operator pause stops this walker's walks."}),
		LastRoundEnd: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_last_round_end_timestamp_seconds",
			Help: "Unix time the last walk of a swept storage this walker leads completed (0: none yet)."}, []string{"storage"}),
		QFiles: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_quarantine_files",
			Help: "Files in the quarantine of a swept storage this walker leads, at its last look."}, []string{"storage"}),
		QBytes: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_quarantine_bytes",
			Help: "Bytes of those files."}, []string{"storage"}),
		QConflicts: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_quarantine_conflicts",
			Help: "Conflict copies among them, kept for an operator."}, []string{"storage"}),
		QOldest: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_quarantine_oldest_timestamp_seconds",
			Help: "Unix time the oldest of them went into quarantine (0: none)."}, []string{"storage"}),
		InflightFiles: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_inflight_files",
			Help: "Files of the sweep batches this sweeper is handling."}),
		Backlog: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_sweep_backlog_batches",
			Help: "Sweep batches pending or unacknowledged at the sweeper consumer, as this walker last read them."}),
	}
	for _, r := range keptReasons {
		s.Kept.WithLabelValues(r)
	}
	for stage, reasons := range errorOps {
		for _, r := range reasons {
			s.Errors.WithLabelValues(stage, r)
		}
	}
	return s
}

// storageGauges are the gauges labelled by swept storage.
func (m *Metrics) storageGauges() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.LastRoundEnd, m.QFiles, m.QBytes, m.QConflicts, m.QOldest}
}

// leadStorage starts the series of a storage whose walk this walker now leads, from its
// checkpoint: the last walk's end and the last look into its quarantine.
func (m *Metrics) leadStorage(storage string, c Checkpoint) {
	m.LastRoundEnd.WithLabelValues(storage).Set(float64(max(c.LastRoundEndUs, 0)) / 1e6)
	m.quarantineSeen(storage, c.QLast)
}

// quarantineSeen sets the quarantine gauges of a storage to a look's counts.
func (m *Metrics) quarantineSeen(storage string, seen QuarantineCount) {
	m.QFiles.WithLabelValues(storage).Set(float64(seen.Files))
	m.QBytes.WithLabelValues(storage).Set(float64(seen.Bytes))
	m.QConflicts.WithLabelValues(storage).Set(float64(seen.Conflicts))
	m.QOldest.WithLabelValues(storage).Set(float64(max(seen.OldestUs, 0)) / 1e6)
}

// dropStorage removes the series of a storage this walker no longer leads.
func (m *Metrics) dropStorage(storage string) {
	for _, v := range m.storageGauges() {
		v.DeleteLabelValues(storage)
	}
}

// opError counts a failed operation of the sweep.
func (m *Metrics) opError(stage, reason string) {
	m.Errors.WithLabelValues(stage, reason).Inc()
}

// orUnregistered returns m, or metrics registered nowhere: they count, nobody scrapes them.
func orUnregistered(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
