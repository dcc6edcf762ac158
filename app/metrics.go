package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
)

// Metrics are the metrics of the pipeline's stages on one registry: those every stage shares
// (the consume loops', the event log's) and each stage's own. A process registers all of them
// even when it runs one stage, so its series stay the same whatever it runs; the sweep's are
// beside them (Options.SweepMetrics).
type Metrics struct {
	Pipeline *pipeline.Metrics
	Scanner  *scanner.Metrics
	Prober   *prober.Metrics
	Deleter  *deleter.Metrics
}

// NewMetrics registers the pipeline's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	rt := pipeline.NewMetrics(reg)
	return &Metrics{Pipeline: rt, Scanner: scanner.NewMetrics(reg, rt),
		Prober: prober.NewMetrics(reg, rt), Deleter: deleter.NewMetrics(reg, rt)}
}
