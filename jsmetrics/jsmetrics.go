// Package jsmetrics exports a stage's JetStream consumer statistics as Prometheus metrics, so
// a dashboard needs no separate NATS exporter: a process running the prober, the deleter or
// the sweeper reports its consumer's backlog (pending), work in flight (ack pending, against
// its cap), redeliveries, waiting pull requests and pause, read from the server on every
// scrape. The scanner and the walker, which have no consumer, report their pause from the
// state bucket.
//
// Every replica of a stage exports the same server-side numbers: aggregate them with max, not
// sum (max by (stage) (kvcm_gc_consumer_pending_messages)).
//
// While the server does not answer (a leader change of the stream, an outage) a scrape reports
// the numbers last read, with kvcm_gc_consumer_info_age_seconds saying how old they are and
// kvcm_gc_jetstream_stats_up 0, rather than dropping the series or inventing values.
package jsmetrics

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

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
	MetricInfoAge       = "kvcm_gc_consumer_info_age_seconds"
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

	pending, ackPending, maxAckPending, redelivered, waiting, infoAge *prometheus.Desc
	paused, pauseEnd, up                                              *prometheus.Desc

	mu   sync.Mutex
	last map[string]reading // the last successful reading of each stage
}

// reading is what one stage's read returned, and when.
type reading struct {
	at     time.Time
	info   *jetstream.ConsumerInfo // nil for a walk (scanner, walker)
	stream string
	cons   string
	pause  pipeline.PauseState
}

// Option configures a Collector.
type Option func(*Collector)

// WithTimeout bounds the server requests of one scrape (default DefaultTimeout; d <= 0 keeps
// it).
func WithTimeout(d time.Duration) Option {
	return func(c *Collector) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithLogger receives one line per failed read; nil discards.
func WithLogger(l *slog.Logger) Option { return func(c *Collector) { c.log = l } }

// New returns a collector for the given stages (of pipeline.Stages); unknown names are
// ignored.
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
			"1 while the stage is paused by an operator (consumer pause; a walk's pause in the state bucket).", []string{"stage"}, nil),
		pauseEnd: prometheus.NewDesc(MetricPauseEnd,
			"Unix time the stage's pause ends (0 when not paused).", []string{"stage"}, nil),
		up: prometheus.NewDesc(MetricUp,
			"1 when the stage's JetStream statistics were read at this scrape, 0 when the read failed (the other series then hold the last values read).", []string{"stage"}, nil),
		infoAge: prometheus.NewDesc(MetricInfoAge,
			"Seconds since the consumer numbers were read from the server: about 0 when this scrape read them, growing while reads fail.", consumerLabels, nil),
		last: map[string]reading{},
	}
	for _, s := range stages {
		if slices.Contains(pipeline.Stages(), s) {
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
func Register(reg prometheus.Registerer, js jetstream.JetStream, names subjects.Names, stages []string, opts ...Option) error {
	if reg == nil || len(stages) == 0 {
		return nil
	}
	return reg.Register(New(js, names, stages, opts...))
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ackPending, c.maxAckPending, c.redelivered, c.waiting, c.infoAge,
		c.paused, c.pauseEnd, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one consumer info request per consumer stage, one
// KV read per walk, all at once, bounded by the timeout. A failed read reports up 0
// and the stage's last reading, whose age the info age gauge gives; a stage never read yet
// reports up 0 alone.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	now := time.Now()
	readings := make([]reading, len(c.stages))
	oks := make([]bool, len(c.stages))
	var wg sync.WaitGroup
	for i, stage := range c.stages {
		wg.Go(func() { readings[i], oks[i] = c.read(ctx, stage, now) })
	}
	wg.Wait()
	for i, stage := range c.stages {
		r, ok := readings[i], oks[i]
		c.mu.Lock()
		if ok {
			c.last[stage] = r
		} else if prev, seen := c.last[stage]; seen {
			r, ok = prev, true
		}
		c.mu.Unlock()
		up := 0.0
		if oks[i] {
			up = 1
		}
		if ok {
			c.emit(ch, stage, r, now)
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, stage)
	}
}

// emit sends the series of one stage's reading.
func (c *Collector) emit(ch chan<- prometheus.Metric, stage string, r reading, now time.Time) {
	if info := r.info; info != nil {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, stage, r.stream, r.cons)
		}
		gauge(c.pending, float64(info.NumPending))
		gauge(c.ackPending, float64(info.NumAckPending))
		gauge(c.maxAckPending, float64(info.Config.MaxAckPending))
		gauge(c.redelivered, float64(info.NumRedelivered))
		gauge(c.waiting, float64(info.NumWaiting))
		gauge(c.infoAge, max(now.Sub(r.at).Seconds(), 0))
	}
	paused, end := 0.0, 0.0
	if r.pause.Paused {
		paused = 1
		end = float64(r.pause.Until.UnixMilli()) / 1e3
	}
	ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, paused, stage)
	ch <- prometheus.MustNewConstMetric(c.pauseEnd, prometheus.GaugeValue, end, stage)
}

// read reads one stage's statistics.
func (c *Collector) read(ctx context.Context, stage string, now time.Time) (reading, bool) {
	stream, consumer, ok := pipeline.StageConsumer(c.names, stage)
	if !ok {
		st, err := pipeline.StagePause(ctx, c.js, c.names, stage)
		if err != nil {
			c.log.Warn("read stage pause for metrics", "stage", stage, "err", err)
			return reading{}, false
		}
		return reading{at: now, pause: st}, true
	}
	cons, err := c.js.Consumer(ctx, stream, consumer)
	if err != nil {
		c.log.Warn("read consumer info for metrics", "stage", stage, "stream", stream, "consumer", consumer, "err", err)
		return reading{}, false
	}
	info := cons.CachedInfo()
	return reading{at: now, info: info, stream: stream, cons: consumer, pause: pipeline.ConsumerPause(stage, info)}, true
}
