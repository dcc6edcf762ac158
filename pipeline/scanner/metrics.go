package scanner

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvcm-gc/kvcm-gc/internal/duty"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// Metrics are the scanner's metrics (pipeline.Metrics has those every stage shares).
type Metrics struct {
	ScanRounds        prometheus.Counter
	ScannedKeys       prometheus.Counter
	ScanBadKeys       prometheus.Counter
	ScanPages         prometheus.Counter
	PublishedBatches  prometheus.Counter
	OversizedBlocks   prometheus.Counter
	RoundDuration     prometheus.Gauge
	RoundStore        prometheus.Gauge
	RoundStores       prometheus.Gauge
	ScanUnownedKeys   prometheus.Counter
	ScanWrongDBKeys   prometheus.Counter
	RoundInstances    prometheus.Gauge
	RoundID           prometheus.Gauge
	BackpressureSkips prometheus.Counter
	LeaseHeld         prometheus.Gauge
	ScannerPaused     prometheus.Gauge
	LastRoundEnd      prometheus.Gauge
	Backpressure      prometheus.Gauge
	ScannerMembers    prometheus.Gauge

	// StoreRegistered is 1 for every metadata store of the registry, as this scanner last read
	// it, whoever holds the store's lease: the stores that must have a holder.
	StoreRegistered *prometheus.GaugeVec
	// Per metadata store this process walks (the store label: the registry's store name);
	// a store's series go when its lease does.
	StoreLeaseHeld     *prometheus.GaugeVec
	StoreRound         *prometheus.GaugeVec
	StoreScannedKeys   *prometheus.CounterVec
	StoreKeysPerSecond *prometheus.GaugeVec
	StoreProgress      *prometheus.GaugeVec
	StoreETA           *prometheus.GaugeVec
	// StoreFailedRounds counts the store's rounds that ended failed (walk.go: failRound);
	// StoreRoundFailed is 1 while its last round ended failed, from the checkpoint, so that
	// it survives a restart or a move of the lease.
	StoreFailedRounds *prometheus.CounterVec
	StoreRoundFailed  *prometheus.GaugeVec

	// Keys a store holds of instances the registry does not list (unregistered.go), by store
	// and instance, as the store's last round counted them.
	UnregisteredKeys      *prometheus.GaugeVec
	UnregisteredLocations *prometheus.GaugeVec
	UnregisteredBytes     *prometheus.GaugeVec
	UnregisteredSince     *prometheus.GaugeVec
	// The collection of their keys (collect_unregistered_instances): keys sent to the
	// deleter by store, and the instances of a page left alone, by reason.
	UnregisteredCollected *prometheus.CounterVec
	UnregisteredRefusals  *prometheus.CounterVec
	StoreState            *prometheus.GaugeVec
	// The duty pace of a walk (scanner.duty): the duty, the share of Redis's time the walk
	// took, the wait after its last round trip and why, and Redis's main-thread share by
	// INFO cpu under scanner.redis_cpu_ceiling.
	StorePaceDuty      *prometheus.GaugeVec
	StorePaceShare     *prometheus.GaugeVec
	StorePaceWait      *prometheus.GaugeVec
	StorePaceReason    *prometheus.GaugeVec
	StoreRedisCPUShare *prometheus.GaugeVec

	// audit is the audit of KVCM's counters (audit.go).
	audit auditMetrics

	// ops counts the scanner's failed operations: kvcm_gc_operation_errors_total{stage="scanner"}.
	ops *prometheus.CounterVec
}

// scannerOps are the closed set of the scanner's "op" label values, beside the event log's
// (NewMetrics).
var scannerOps = []string{"lease", "checkpoint", "pause", "registry", "backlog", "store", "scan", "publish"}

var unregRefusals = []string{
	pipeline.UnregNeverRegistered,
	pipeline.UnregWithinGrace,
	pipeline.UnregNotCounted,
	pipeline.UnregRegistryUnread,
	pipeline.UnregRegistryPartial,
	pipeline.UnregRegistered,
	pipeline.UnregGroupAbsent,
	pipeline.UnregStoreEmpty,
	pipeline.UnregCap,
}

// NewMetrics registers the scanner's metrics on reg; its failed operations are counted
// on rt's kvcm_gc_operation_errors_total (nil rt: on a set registered nowhere).
func NewMetrics(reg prometheus.Registerer, rt *pipeline.Metrics) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		ScanRounds: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_scan_rounds_total",
			Help: "Completed full scan rounds."}),
		ScannedKeys: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_scanned_keys_total",
			Help: "Block keys read by the maintenance scan."}),
		ScanBadKeys: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_scan_bad_keys_total",
			Help: "Keys matching an instance pattern that are not canonical block keys (skipped)."}),
		ScanPages: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_scan_pages_total", Help: "SCAN pages read."}),
		PublishedBatches: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_published_batches_total",
			Help: "Batch messages stored in the BATCHES stream."}),
		OversizedBlocks: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_oversized_blocks_total",
			Help: "Blocks whose metadata exceeds the NATS max payload (not judged)."}),
		RoundDuration: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_round_duration_seconds",
			Help: "Duration of the last completed round."}),
		RoundStore: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_round_store_index",
			Help: "0-based position of the metadata store being walked in the current round."}),
		RoundStores: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_round_stores",
			Help: "Metadata stores in the current round's registry snapshot."}),
		ScanUnownedKeys: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_scan_unowned_keys_total",
			Help: "Keys a store-wide SCAN returned that belong to no instance registered in that store; not read."}),
		ScanWrongDBKeys: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_scan_wrong_db_keys_total",
			Help: "Legacy-layout keys read from a database other than 0, where no KVCM of that " +
				"layout keeps its blocks; not collected."}),
		RoundInstances: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_round_instances",
			Help: "Instances in the current round's registry snapshot."}),
		RoundID: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_round_id",
			Help: "Id of the current (or last) round."}),
		BackpressureSkips: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_backpressure_skips_total",
			Help: "Scanner ticks skipped because a downstream consumer was above the high-water mark."}),
		LeaseHeld: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_scanner_lease_held",
			Help: "Metadata store leases this scanner holds (one per store it walks)."}),
		ScannerPaused: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_scanner_paused",
			Help: "1 while an operator pause stops this scanner's walks."}),
		LastRoundEnd: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_last_round_end_timestamp_seconds",
			Help: "Unix time a round of a store this scanner walks last completed (0: none yet in this process)."}),
		Backpressure: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_scanner_backpressure",
			Help: "1 while the prober's or the deleter's backlog is above the high-water mark and walks wait."}),
		ScannerMembers: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_scanner_replicas",
			Help: "Scanner replicas sharing the stores, as this one last counted them."}),

		StoreRegistered: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_registered",
			Help: "1 for each metadata store of KVCM's registry, as this scanner last read it, " +
				"whether or not a scanner holds its lease."}, []string{"store"}),
		StoreLeaseHeld: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_lease_held",
			Help: "1 while this scanner holds the store's lease."}, []string{"store"}),
		StoreRound: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_round",
			Help: "Id of the store's current (or last) round."}, []string{"store"}),
		StoreScannedKeys: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_store_scanned_keys_total",
			Help: "Block keys of the store read by this scanner."}, []string{"store"}),
		StoreKeysPerSecond: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_keys_per_second",
			Help: "Recent rate of the store's walk, in keys SCAN returned per second."}, []string{"store"}),
		StoreProgress: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_round_progress_ratio",
			Help: "Share of the store's keys (DBSIZE at the round's start, else the last " +
				"round's) visited this round."}, []string{"store"}),
		StoreETA: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_round_eta_timestamp_seconds",
			Help: "Estimated Unix time the store's round ends (0: unknown, or the walk is not moving)."}, []string{"store"}),
		StoreFailedRounds: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_store_failed_rounds_total",
			Help: "Rounds of the store that ended failed: its SCAN kept failing for " +
				"scan_failure_budget, or the store could not be opened."}, []string{"store"}),
		StoreRoundFailed: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_round_failed",
			Help: "1 while the store's last round ended failed (until a round completes)."}, []string{"store"}),
		UnregisteredKeys: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_unregistered_instance_keys",
			Help: "Block keys the store held, at its last round, of an instance the registry " +
				"does not list (a failed instance removal leaves them)."}, []string{"store", "kvcm_instance"}),
		UnregisteredLocations: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_unregistered_instance_locations",
			Help: "Locations in those keys."}, []string{"store", "kvcm_instance"}),
		UnregisteredBytes: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_unregistered_instance_bytes",
			Help: "Bytes those locations account (their spec URIs' size parameters)."}, []string{"store", "kvcm_instance"}),
		UnregisteredSince: f.NewGaugeVec(
			prometheus.GaugeOpts{Name: "kvcm_gc_unregistered_instance_first_seen_timestamp_seconds",
				Help: "Unix time kvcm-gc first counted the instance unregistered in the store."},
			[]string{"store", "kvcm_instance"},
		),
		UnregisteredCollected: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_unregistered_collected_keys_total",
			Help: "Keys of unregistered instances the scanner sent to the deleter " +
				"(collect_unregistered_instances)."}, []string{"store"}),
		UnregisteredRefusals: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_unregistered_refusals_total",
			Help: "Unregistered instances of a scanned page whose keys were left alone, by " +
				"reason (collect_unregistered_instances)."}, []string{"reason"}),
		StoreState: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_walk_state",
			Help: "1 for the store walk's state: scanning, or why it is not moving (paused, " +
				"backpressure, round_pause, registry_backoff, error)."}, []string{"store", "state"}),
		StorePaceDuty: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_pace_duty_ratio",
			Help: "The share of Redis's time a duty-paced store walk may take (scanner.duty)."}, []string{"store"}),
		StorePaceShare: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_pace_share_ratio",
			Help: "The share of Redis's time a duty-paced store walk took over its last 10 s " +
				"window, by Redis's clock over each round trip."}, []string{"store"}),
		StorePaceWait: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_pace_wait_seconds",
			Help: "The wait of a duty-paced store walk after its last round trip."}, []string{"store"}),
		StorePaceReason: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_pace_reason",
			Help: "1 for what set a duty-paced store walk's last wait (duty, floor, cap, " +
				"max_keys_per_second, redis_busy)."}, []string{"store", "reason"}),
		StoreRedisCPUShare: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_store_redis_cpu_share_ratio",
			Help: "Share of its time the store's main thread was busy between its last two " +
				"readings of INFO cpu, all clients included (scanner.redis_cpu_ceiling; -1: no reading)."}, []string{"store"}),

		audit: newAuditMetrics(f),
		ops:   rt.StageOps(pipeline.StageScanner, scannerOps),
	}
	for _, r := range unregRefusals {
		m.UnregisteredRefusals.WithLabelValues(r)
	}
	return m
}

// opError counts a failed operation.
func (m *Metrics) opError(op string) { m.ops.WithLabelValues(op).Inc() }

// registeredStores sets kvcm_gc_store_registered to the registry's stores now, removing the
// series of those of was (the previous reading) that left it. No reset in between: a scrape
// never sees the list empty.
func (m *Metrics) registeredStores(was, now []string) {
	for _, st := range now {
		m.StoreRegistered.WithLabelValues(st).Set(1)
	}
	for _, st := range was {
		if !slices.Contains(now, st) {
			m.StoreRegistered.DeleteLabelValues(st)
		}
	}
}

// initStore starts the series of a store this process walks.
func (m *Metrics) initStore(store string) {
	m.StoreLeaseHeld.WithLabelValues(store).Set(1)
	m.StoreRound.WithLabelValues(store)
	m.StoreScannedKeys.WithLabelValues(store)
	m.StoreKeysPerSecond.WithLabelValues(store)
	m.StoreProgress.WithLabelValues(store)
	m.StoreETA.WithLabelValues(store)
	m.StoreFailedRounds.WithLabelValues(store)
	m.StoreRoundFailed.WithLabelValues(store)
	for _, st := range walkStates {
		m.StoreState.WithLabelValues(store, st)
	}
}

// dropStore removes the series of a store this process no longer walks.
func (m *Metrics) dropStore(store string) {
	perStore := []*prometheus.GaugeVec{
		m.StoreLeaseHeld, m.StoreRound, m.StoreKeysPerSecond, m.StoreProgress, m.StoreETA, m.StoreRoundFailed,
	}
	for _, v := range perStore {
		v.DeleteLabelValues(store)
	}
	m.StoreScannedKeys.DeleteLabelValues(store)
	m.StoreFailedRounds.DeleteLabelValues(store)
	m.StoreState.DeletePartialMatch(prometheus.Labels{"store": store})
	m.unregistered(store, nil)
	m.audit.set(store, nil, 0)
	for _, v := range []*prometheus.GaugeVec{m.StorePaceDuty, m.StorePaceShare, m.StorePaceWait, m.StoreRedisCPUShare} {
		v.DeleteLabelValues(store)
	}
	m.StorePaceReason.DeletePartialMatch(prometheus.Labels{"store": store})
}

// storePace sets the pace gauges of a duty-paced store walk.
func (m *Metrics) storePace(store string, pc *pipeline.PaceRecord) {
	m.StorePaceDuty.WithLabelValues(store).Set(pc.Duty)
	m.StorePaceShare.WithLabelValues(store).Set(pc.Share)
	m.StorePaceWait.WithLabelValues(store).Set(float64(pc.WaitUs) / 1e6)
	for _, r := range duty.Reasons {
		v := 0.0
		if r == pc.Reason {
			v = 1
		}
		m.StorePaceReason.WithLabelValues(store, r).Set(v)
	}
	if pc.CPULimit > 0 {
		m.StoreRedisCPUShare.WithLabelValues(store).Set(pc.CPUShare)
	}
}

// storeCeiling sets the gauges of a reading of the store's CPU time: its share and, while
// the walk holds for it, the reason (the rest of the pace is set once the page is read).
func (m *Metrics) storeCeiling(store string, cs duty.CeilingState) {
	m.StoreRedisCPUShare.WithLabelValues(store).Set(cs.Share)
	if cs.State == duty.CeilingBusy {
		for _, r := range duty.Reasons {
			v := 0.0
			if r == duty.ReasonBusy {
				v = 1
			}
			m.StorePaceReason.WithLabelValues(store, r).Set(v)
		}
	}
}

// unregistered replaces a store's series of unregistered instances with its last count.
func (m *Metrics) unregistered(store string, counts []pipeline.UnregisteredCount) {
	perInstance := []*prometheus.GaugeVec{
		m.UnregisteredKeys, m.UnregisteredLocations, m.UnregisteredBytes, m.UnregisteredSince,
	}
	for _, g := range perInstance {
		g.DeletePartialMatch(prometheus.Labels{"store": store})
	}
	for _, c := range counts {
		// An id read from a key is any bytes; a label value must be UTF-8.
		id := strings.ToValidUTF8(c.Instance, "\uFFFD")
		m.UnregisteredKeys.WithLabelValues(store, id).Set(float64(c.Keys))
		m.UnregisteredLocations.WithLabelValues(store, id).Set(float64(c.Locations))
		m.UnregisteredBytes.WithLabelValues(store, id).Set(float64(c.Bytes))
		m.UnregisteredSince.WithLabelValues(store, id).Set(float64(c.FirstSeenUs) / 1e6)
	}
}

// roundFailed sets kvcm_gc_store_round_failed from the store's last failed round (nil: its
// last round completed, or none ended yet).
func (m *Metrics) roundFailed(store string, f *pipeline.RoundFailure) {
	v := 0.0
	if f != nil {
		v = 1
	}
	m.StoreRoundFailed.WithLabelValues(store).Set(v)
}

// lastRoundEnd raises kvcm_gc_last_round_end_timestamp_seconds to a round's end (µs).
func (m *Metrics) lastRoundEnd(us int64) {
	if v := float64(us) / 1e6; v > gaugeValue(m.LastRoundEnd) {
		m.LastRoundEnd.Set(v)
	}
}

func gaugeValue(g prometheus.Gauge) float64 {
	var d dto.Metric
	if err := g.Write(&d); err != nil || d.Gauge == nil {
		return 0
	}
	return d.Gauge.GetValue()
}

// orUnregistered returns m, or metrics registered nowhere: they count, nobody scrapes them.
func orUnregistered(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil, nil)
	}
	return m
}
