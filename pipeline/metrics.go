package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Stage names (the "stage" label and Event.Stage): the pipeline's three, and the sweep's
// walker and sweeper (package sweep).
const (
	StageScanner = "scanner"
	StageProber  = "prober"
	StageDeleter = "deleter"
	StageWalker  = "walker"
	StageSweeper = "sweeper"
)

// Message results of a consumer (kvcm_gc_messages_total).
const (
	MsgAck  = "ack"
	MsgNak  = "nak"
	MsgTerm = "term"
	// MsgMaxDeliveries is the result of a message the server gave up on: its last allowed
	// delivery was never answered, so no consumer loop saw it end. Counted by the stage's
	// max-deliveries listener (deadletter.go), once per message across the stage's replicas.
	MsgMaxDeliveries = "max_deliveries"
)

// Closed label sets. Every value is pre-initialised so a dashboard sees zeros, not gaps.
var (
	// messageStages are the stages of kvcm_gc_messages_total.
	messageStages = []string{StageScanner, StageProber, StageDeleter, StageSweeper}
	// runtimeOps are the "op" label values of kvcm_gc_operation_errors_total that the shared
	// runtime counts, by stage: a failed event publish (EventLog) and a failed fetch
	// (Consumer). Each stage's metrics add its own (scanner.Metrics, prober.Metrics,
	// deleter.Metrics); the sweep counts its own on kvcm_gc_sweep_errors_total.
	runtimeOps = map[string][]string{
		StageScanner: {"event"},
		StageProber:  {"event", "fetch"},
		StageDeleter: {"event", "fetch"},
		StageSweeper: {"event", "fetch"},
	}
)

// Metrics are the metrics every stage shares, on one injected registry (nothing on
// the global registry): the messages the consume loops disposed of, and the failed
// operations. Each stage has its own beside them (scanner.Metrics, prober.Metrics,
// deleter.Metrics, sweep.Metrics); a process registers all of them even when it runs one
// stage, so names stay stable.
type Metrics struct {
	OperationErrors *prometheus.CounterVec
	Messages        *prometheus.CounterVec
	// DryRun is 1 for each stage the process runs dry (DESIGN §8.8), 0 for each it runs live;
	// a stage the process does not run has no series (SetDryRun).
	DryRun *prometheus.GaugeVec
}

// NewMetrics registers the shared metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		OperationErrors: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_operation_errors_total",
			Help: "Failed operations, by stage and operation."}, []string{"stage", "op"}),
		Messages: f.NewCounterVec(prometheus.CounterOpts{Name: "kvcm_gc_messages_total",
			Help: "Consumed messages by stage and disposition (ack, nak, term; max_deliveries: " +
				"the server gave up on the last delivery, unanswered)."}, []string{"stage", "result"}),
		DryRun: f.NewGaugeVec(prometheus.GaugeOpts{Name: "kvcm_gc_dry_run",
			Help: "1 while the stage runs dry (dry_run: it records what it would do and writes " +
				"nothing), 0 while it runs live; only the stages the process runs."}, []string{"stage"}),
	}
	for _, s := range messageStages {
		for _, r := range []string{MsgAck, MsgNak, MsgTerm, MsgMaxDeliveries} {
			m.Messages.WithLabelValues(s, r)
		}
	}
	for stage, ops := range runtimeOps {
		for _, op := range ops {
			m.OperationErrors.WithLabelValues(stage, op)
		}
	}
	return m
}

// SetDryRun sets kvcm_gc_dry_run of a stage the process runs: whether it runs dry. A nil m
// sets nothing.
func (m *Metrics) SetDryRun(stage string, dry bool) {
	if m == nil {
		return
	}
	v := 0.0
	if dry {
		v = 1
	}
	m.DryRun.WithLabelValues(stage).Set(v)
}

// StageOps returns kvcm_gc_operation_errors_total of stage, its ops pre-initialised: what a
// stage's own metrics count its failed operations on. A nil m gives a set registered nowhere.
func (m *Metrics) StageOps(stage string, ops []string) *prometheus.CounterVec {
	v := orUnregistered(m).OperationErrors.MustCurryWith(prometheus.Labels{"stage": stage})
	for _, op := range ops {
		v.WithLabelValues(op)
	}
	return v
}

// orUnregistered returns m, or metrics registered nowhere: they count, nobody scrapes them.
func orUnregistered(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}

// opError counts a failed operation.
func (m *Metrics) opError(stage, op string) { m.OperationErrors.WithLabelValues(stage, op).Inc() }
