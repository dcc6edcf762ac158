package deleter

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// deleteOutcomes are the closed set of the outcome label of kvcm_gc_delete_results_total.
var deleteOutcomes = []string{subjects.OutcomeDeleted, subjects.OutcomePartial, subjects.OutcomeNoopMismatch,
	subjects.OutcomeNoopGone, subjects.OutcomeError, subjects.OutcomeWouldDelete}

// deleterOps are the closed set of the deleter's "op" label values, beside the consumer's and
// the event log's (NewMetrics).
var deleterOps = []string{"store", "delete"}

// Metrics are the deleter's metrics (pipeline.Metrics has those every stage shares).
type Metrics struct {
	DeleteTargets   prometheus.Counter
	DeleteResults   *prometheus.CounterVec
	PhysicalSkips   *prometheus.CounterVec
	InflightDeletes prometheus.Gauge
	InflightOldest  prometheus.Gauge
	StuckDataLeft   *prometheus.CounterVec
	DeletedKeys     *prometheus.CounterVec
	// PhantomBytes counts the bytes of the locations kvcm-gc removed that KVCM's usage still
	// counts (Phantom), by instance and slot.
	PhantomBytes   *prometheus.CounterVec
	ReclaimedBytes *prometheus.CounterVec
	ReclaimedFiles *prometheus.CounterVec
	// WouldReclaimBytes counts, in a dry run, what ReclaimedBytes would have counted: the
	// bytes of the locations judged garbage whose compare held (would_delete).
	WouldReclaimBytes *prometheus.CounterVec

	// The pace of the deleter's pipelines on each store (delete_duty, pace.go): the duty, the
	// share of Redis's time they took over the last 10 s window by their round trips, and
	// the wait after the last one.
	PaceDuty  *prometheus.GaugeVec
	PaceShare *prometheus.GaugeVec
	PaceWait  *prometheus.GaugeVec

	// ops counts the deleter's failed operations: kvcm_gc_operation_errors_total{stage="deleter"}.
	ops *prometheus.CounterVec
}

// NewMetrics registers the deleter's metrics on reg; its failed operations are counted
// on rt's kvcm_gc_operation_errors_total (nil rt: on a set registered nowhere).
func NewMetrics(reg prometheus.Registerer, rt *pipeline.Metrics) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		DeleteTargets: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_delete_targets_total",
			Help: "Targets received by the deleter."}),
		DeleteResults: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_delete_results_total",
			Help: "Deleter outcomes per target."}, []string{"outcome"}),
		PhysicalSkips: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_physical_delete_skips_total",
			Help: "Spec URIs whose data was not unlinked, by reason."}, []string{"reason"}),
		InflightDeletes: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_inflight_delete_requests",
			Help: "Delete requests being handled by this process."}),
		InflightOldest: f.NewGauge(prometheus.GaugeOpts{Name: "kvcm_gc_inflight_delete_oldest_age_seconds",
			Help: "Age of the oldest delete request in flight in this process (0: none)."}),
		StuckDataLeft: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_stuck_deleting_data_left_total",
			Help: "Spec URIs of collected stuck DELETING locations whose data was left in place " +
				"(metadata only), by storage type and reason."}, []string{"storage_type", "reason"}),
		DeletedKeys: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_deleted_keys_total",
			Help: "Block keys the deleter deleted because their last location went (empty_block: " +
				"delete); KVCM's key count still counts each."}, []string{"kvcm_instance"}),
		PhantomBytes: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_phantom_bytes_total",
			Help: "Bytes of the locations the deleter removed that KVCM's usage still counts " +
				"(only KVCM's own deletes lower it), as KVCM counts them, by instance and storage type."},
			[]string{"kvcm_instance", "storage_type"}),
		ReclaimedBytes: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_reclaimed_bytes_total",
			Help: "Bytes of the locations the deleter removed (their spec URIs' size=), by " +
				"storage and reason; what a dry run's report says deletes would free."}, []string{"storage", "reason"}),
		ReclaimedFiles: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_reclaimed_files_total",
			Help: "Data objects (spec URIs) of the locations the deleter removed, by storage and " +
				"reason."}, []string{"storage", "reason"}),
		WouldReclaimBytes: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_would_reclaim_bytes_total",
			Help: "In a dry run, bytes of the locations the deleter would have removed " +
				"(would_delete: judged garbage, its compare held), by storage and reason; " +
				"kvcm_gc_reclaimed_bytes_total once live."}, []string{"storage", "reason"}),
		PaceDuty: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_deleter_pace_duty_ratio",
			Help: "The share of a metadata store's time this deleter's reads and conditional " +
				"writes may take (delete_duty)."}, []string{"store"}),
		PaceShare: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_deleter_pace_share_ratio",
			Help: "The share of a metadata store's time this deleter's pipelines took over their " +
				"last 10 s window, by their round trips."}, []string{"store"}),
		PaceWait: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_deleter_pace_wait_seconds",
			Help: "The wait of this deleter's pipelines on a metadata store after the last one " +
				"(delete_duty)."}, []string{"store"}),

		ops: rt.StageOps(pipeline.StageDeleter, deleterOps),
	}
	for _, o := range deleteOutcomes {
		m.DeleteResults.WithLabelValues(o)
	}
	for _, r := range physSkipReasons {
		m.PhysicalSkips.WithLabelValues(r)
	}
	for _, t := range kvcm.KnownTypes() {
		for _, r := range physSkipReasons {
			m.StuckDataLeft.WithLabelValues(t.String(), r)
		}
	}
	return m
}

// opError counts a failed operation.
func (m *Metrics) opError(op string) { m.ops.WithLabelValues(op).Inc() }

// orUnregistered returns m, or metrics registered nowhere: they count, nobody scrapes them.
func orUnregistered(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil, nil)
	}
	return m
}
