package prober

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// candidateReasons are the closed set of the reason label of kvcm_gc_candidates_total.
var candidateReasons = []string{
	subjects.ReasonOrphanWriting,
	subjects.ReasonStorageMissing,
	subjects.ReasonStuckDeleting,
}

// proberSkipReasons are the closed set of the reason label of kvcm_gc_prober_skips_total.
var proberSkipReasons = []string{SkipCorruptURI, SkipBadLocation, SkipAgeUnknown, SkipGuardError, SkipCopyTarget,
	SkipBadSpecURI, SkipStorageNotFound, SkipStorageTypeMismatch, SkipProbeShape, SkipProbeError, SkipExcludedType,
	SkipNoSpec, SkipOverCap, SkipCorruptLocation, SkipTombstone, SkipAmbiguousLayout, SkipLeftToKVCMGC,
	SkipDeletingGroup, SkipDeletingLease, SkipDeletingFirstSeen, SkipDeletingUnobserved,
	pipeline.SkipMigrationGuard, pipeline.SkipMigrationSource, SkipKVMeta}

// proberOps are the closed set of the prober's "op" label values, beside the consumer's and
// the event log's (NewMetrics).
var proberOps = []string{"registry", "publish"}

// Metrics are the prober's metrics (pipeline.Metrics has those every stage shares).
type Metrics struct {
	ProbedLocations prometheus.Counter
	Candidates      *prometheus.CounterVec
	ProberSkips     *prometheus.CounterVec
	ProbeDuration   *prometheus.HistogramVec

	// ops counts the prober's failed operations: kvcm_gc_operation_errors_total{stage="prober"}.
	ops *prometheus.CounterVec
}

// NewMetrics registers the prober's metrics on reg; its failed operations are counted
// on rt's kvcm_gc_operation_errors_total (nil rt: on a set registered nowhere).
func NewMetrics(reg prometheus.Registerer, rt *pipeline.Metrics) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		ProbedLocations: f.NewCounter(prometheus.CounterOpts{Name: "kvcm_gc_judged_locations_total",
			Help: "Locations judged by the prober."}),
		Candidates: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_candidates_total",
			Help: "Locations judged garbage, by reason."}, []string{"reason"}),
		ProberSkips: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_prober_skips_total",
			Help: "Locations or blocks not judged (kept), by reason."}, []string{"reason"}),
		ProbeDuration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "kvcm_gc_probe_duration_seconds",
			Help:    "Latency of one MightExist chunk, by storage type.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}, []string{"storage_type"}),

		ops: rt.StageOps(pipeline.StageProber, proberOps),
	}
	for _, r := range candidateReasons {
		m.Candidates.WithLabelValues(r)
	}
	for _, r := range proberSkipReasons {
		m.ProberSkips.WithLabelValues(r)
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
