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
	// A stream's fill against its max_bytes (subjects.StreamFillOf): read by the prober's
	// process for BATCHES, by the deleter's for DELETES and EVENTS.
	MetricStreamBytes      = "kvcm_gc_stream_bytes"
	MetricStreamMaxBytes   = "kvcm_gc_stream_max_bytes"
	MetricStreamDiscarding = "kvcm_gc_stream_discarding"
	MetricStreamLost       = "kvcm_gc_stream_lost_messages"
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
	streamBytes, streamMaxBytes, streamDiscarding, streamLost         *prometheus.Desc

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
	// fills are the streams read with the stage (by stream name), Lost of the stage's input.
	fills map[string]subjects.Fill
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
			"Messages of the stage's input stream not yet delivered to its consumer (backlog), "+
				"from consumer info.", consumerLabels, nil),
		ackPending: prometheus.NewDesc(MetricAckPending,
			"Messages delivered to the stage's consumer and not yet acknowledged (in flight), "+
				"from consumer info.", consumerLabels, nil),
		maxAckPending: prometheus.NewDesc(MetricMaxAckPending,
			"The consumer's MaxAckPending: the cap on messages in flight across all replicas.", consumerLabels, nil),
		redelivered: prometheus.NewDesc(MetricRedelivered,
			"Messages redelivered at least once and not yet acknowledged, from consumer info.", consumerLabels, nil),
		waiting: prometheus.NewDesc(MetricWaiting,
			"Pull requests of the stage's replicas waiting at the server, from consumer info.", consumerLabels, nil),
		paused: prometheus.NewDesc(
			MetricPaused,
			"1 while the stage is paused by an operator (consumer pause; a walk's pause in the state bucket).",
			[]string{"stage"},
			nil,
		),
		pauseEnd: prometheus.NewDesc(MetricPauseEnd,
			"Unix time the stage's pause ends (0 when not paused).", []string{"stage"}, nil),
		up: prometheus.NewDesc(MetricUp,
			"1 when the stage's JetStream statistics were read at this scrape, 0 when the read "+
				"failed (the other series then hold the last values read).", []string{"stage"}, nil),
		infoAge: prometheus.NewDesc(MetricInfoAge,
			"Seconds since the consumer numbers were read from the server: about 0 when this "+
				"scrape read them, growing while reads fail.", consumerLabels, nil),
		streamBytes: prometheus.NewDesc(MetricStreamBytes,
			"Bytes the stream holds (what its max_bytes counts), from stream info.", []string{"stream"}, nil),
		streamMaxBytes: prometheus.NewDesc(MetricStreamMaxBytes,
			"The stream's max_bytes (-1: unlimited).", []string{"stream"}, nil),
		streamDiscarding: prometheus.NewDesc(MetricStreamDiscarding,
			"1 while the stream is within one message of its max_bytes: every message stored "+
				"discards the oldest.", []string{"stream"}, nil),
		streamLost: prometheus.NewDesc(MetricStreamLost,
			"Messages the stream discarded before the stage's consumer acknowledged them (work "+
				"not done this round).", []string{"stream"}, nil),
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
func Register(
	reg prometheus.Registerer,
	js jetstream.JetStream,
	names subjects.Names,
	stages []string,
	opts ...Option,
) error {
	if reg == nil || len(stages) == 0 {
		return nil
	}
	return reg.Register(New(js, names, stages, opts...))
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ackPending, c.maxAckPending, c.redelivered, c.waiting, c.infoAge,
		c.paused, c.pauseEnd, c.up, c.streamBytes, c.streamMaxBytes, c.streamDiscarding, c.streamLost} {
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
	for stream, f := range r.fills {
		ch <- prometheus.MustNewConstMetric(c.streamBytes, prometheus.GaugeValue, float64(f.Bytes), stream)
		ch <- prometheus.MustNewConstMetric(c.streamMaxBytes, prometheus.GaugeValue, float64(f.MaxBytes), stream)
		discarding := 0.0
		if f.Discarding {
			discarding = 1
		}
		ch <- prometheus.MustNewConstMetric(c.streamDiscarding, prometheus.GaugeValue, discarding, stream)
		ch <- prometheus.MustNewConstMetric(c.streamLost, prometheus.GaugeValue, float64(f.Lost), stream)
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
	r := reading{at: now, info: info, stream: stream, cons: consumer, pause: pipeline.ConsumerPause(stage, info),
		fills: map[string]subjects.Fill{}}
	streams := []string{stream}
	if stage == pipeline.StageDeleter {
		streams = append(streams, c.names.EventsStream())
	}
	for _, name := range streams {
		st, err := c.js.Stream(ctx, name)
		if err != nil {
			c.log.Warn("read stream info for metrics", "stage", stage, "stream", name, "err", err)
			continue // the consumer numbers still count
		}
		si := st.CachedInfo()
		var ci *jetstream.ConsumerInfo
		if name == stream {
			ci = info
		}
		r.fills[name] = subjects.StreamFillOf(si.Config, si.State, ci)
	}
	return r, true
}
