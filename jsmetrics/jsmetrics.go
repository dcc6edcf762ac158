// Package jsmetrics exports a stage's JetStream consumer statistics as Prometheus metrics, so
// a dashboard needs no separate NATS exporter: a process running the prober or the deleter
// reports its consumer's backlog (pending), work in flight (ack pending, against its cap),
// redeliveries, waiting pull requests and pause, read from the server on every scrape. The
// scanner, which has no consumer, reports its pause from the state bucket.
//
// Every replica of a stage exports the same server-side numbers: aggregate them with max, not
// sum (max by (stage) (kvcm_gc_consumer_pending_messages)).
package jsmetrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Metric names. They are exported so deploy/ can check that alerts and dashboards use only
// names that exist.
const (
	MetricPending       = "kvcm_gc_consumer_pending_messages"
	MetricAckPending    = "kvcm_gc_consumer_ack_pending_messages"
	MetricMaxAckPending = "kvcm_gc_consumer_max_ack_pending_messages"
	MetricRedelivered   = "kvcm_gc_consumer_redelivered_messages"
	MetricWaiting       = "kvcm_gc_consumer_waiting_pull_requests"
	MetricPaused        = "kvcm_gc_stage_paused"
	MetricPauseEnd      = "kvcm_gc_stage_pause_end_timestamp_seconds"
	MetricUp            = "kvcm_gc_jetstream_stats_up"
)

// DefaultTimeout bounds the server requests of one scrape.
const DefaultTimeout = 3 * time.Second

// Collector is a prometheus.Collector reading the stats of some stages on every scrape.
type Collector struct {
	js      jetstream.JetStream
	names   subjects.Names
	stages  []string
	timeout time.Duration
	log     *slog.Logger

	pending, ackPending, maxAckPending, redelivered, waiting *prometheus.Desc
	paused, pauseEnd, up                                     *prometheus.Desc
}

// Option configures a Collector.
type Option func(*Collector)

// WithTimeout bounds the server requests of one scrape (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(c *Collector) { c.timeout = d } }

// WithLogger receives one line per failed read; nil discards.
func WithLogger(l *slog.Logger) Option { return func(c *Collector) { c.log = l } }

// New returns a collector for the given stages (pipeline.StageScanner, StageProber,
// StageDeleter); unknown names are ignored.
func New(js jetstream.JetStream, names subjects.Names, stages []string, opts ...Option) *Collector {
	consumerLabels := []string{"stage", "stream", "consumer"}
	c := &Collector{
		js: js, names: names, timeout: DefaultTimeout, log: slog.New(slog.DiscardHandler),
		pending: prometheus.NewDesc(MetricPending,
			"Messages of the stage's input stream not yet delivered to its consumer (backlog), from consumer info.", consumerLabels, nil),
		ackPending: prometheus.NewDesc(MetricAckPending,
			"Messages delivered to the stage's consumer and not yet acknowledged (in flight), from consumer info.", consumerLabels, nil),
		maxAckPending: prometheus.NewDesc(MetricMaxAckPending,
			"The consumer's MaxAckPending: the cap on messages in flight across all replicas.", consumerLabels, nil),
		redelivered: prometheus.NewDesc(MetricRedelivered,
			"Messages redelivered at least once and not yet acknowledged, from consumer info.", consumerLabels, nil),
		waiting: prometheus.NewDesc(MetricWaiting,
			"Pull requests of the stage's replicas waiting at the server, from consumer info.", consumerLabels, nil),
		paused: prometheus.NewDesc(MetricPaused,
			"1 while the stage is paused by an operator (consumer pause; scanner pause in the state bucket).", []string{"stage"}, nil),
		pauseEnd: prometheus.NewDesc(MetricPauseEnd,
			"Unix time the stage's pause ends (0 when not paused).", []string{"stage"}, nil),
		up: prometheus.NewDesc(MetricUp,
			"1 when the stage's JetStream statistics were read at this scrape, 0 when the read failed.", []string{"stage"}, nil),
	}
	for _, s := range stages {
		switch s {
		case pipeline.StageScanner, pipeline.StageProber, pipeline.StageDeleter:
			c.stages = append(c.stages, s)
		}
	}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Register registers a collector for the stages a process runs on reg; a nil reg or no stage
// registers nothing.
func Register(reg prometheus.Registerer, js jetstream.JetStream, names subjects.Names, scanner, prober, deleter bool, opts ...Option) error {
	var stages []string
	for _, s := range []struct {
		on   bool
		name string
	}{{scanner, pipeline.StageScanner}, {prober, pipeline.StageProber}, {deleter, pipeline.StageDeleter}} {
		if s.on {
			stages = append(stages, s.name)
		}
	}
	if reg == nil || len(stages) == 0 {
		return nil
	}
	return reg.Register(New(js, names, stages, opts...))
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ackPending, c.maxAckPending, c.redelivered, c.waiting, c.paused, c.pauseEnd, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one consumer info request per consumer stage, one
// KV read for the scanner. A failed read reports up 0 and omits that stage's other series
// rather than reporting stale or invented numbers.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	for _, stage := range c.stages {
		st, ok := c.collectStage(ctx, ch, stage)
		up := 0.0
		if ok {
			up = 1
			paused, end := 0.0, 0.0
			if st.Paused {
				paused = 1
				end = float64(st.Until.UnixMilli()) / 1e3
			}
			ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, paused, stage)
			ch <- prometheus.MustNewConstMetric(c.pauseEnd, prometheus.GaugeValue, end, stage)
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, stage)
	}
}

func (c *Collector) collectStage(ctx context.Context, ch chan<- prometheus.Metric, stage string) (ops.PauseState, bool) {
	if stage == pipeline.StageScanner {
		st, err := ops.StagePause(ctx, c.js, c.names, stage)
		if err != nil {
			c.log.Warn("read scanner pause for metrics", "err", err)
			return st, false
		}
		return st, true
	}
	stream, consumer := c.names.BatchesStream(), c.names.ProberConsumer()
	if stage == pipeline.StageDeleter {
		stream, consumer = c.names.DeletesStream(), c.names.DeleterConsumer()
	}
	cons, err := c.js.Consumer(ctx, stream, consumer)
	if err != nil {
		c.log.Warn("read consumer info for metrics", "stage", stage, "stream", stream, "consumer", consumer, "err", err)
		return ops.PauseState{Stage: stage}, false
	}
	info := cons.CachedInfo()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, stage, stream, consumer)
	}
	gauge(c.pending, float64(info.NumPending))
	gauge(c.ackPending, float64(info.NumAckPending))
	gauge(c.maxAckPending, float64(info.Config.MaxAckPending))
	gauge(c.redelivered, float64(info.NumRedelivered))
	gauge(c.waiting, float64(info.NumWaiting))
	return ops.ConsumerPause(stage, info), true
}
