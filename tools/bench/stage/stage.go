// Package stage runs kvcm-gc stages in a process of their own for the benchmark harness, so
// each stage's peak memory and CPU time can be read from the operating system exactly as an
// operator would see them, and a stage's CPU profile holds nothing of the harness. It links
// only what a production stage binary links (app and its backends), never the NATS server or
// the harness, so the memory figures are not inflated by the measuring code.
package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcm-gc/kvcm-gc/app"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/internal/httpserver"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Stage names a process runs ("all" runs the three in one process).
const (
	Scanner = pipeline.StageScanner
	Prober  = pipeline.StageProber
	Deleter = pipeline.StageDeleter
	All     = "all"
)

// Profile is one kvcm-gc configuration. Every process of one run must use the same profile:
// the JetStream settings in it define the consumers, and a process whose settings differ
// would fail to ensure them.
type Profile struct {
	// Name labels the profile in the report ("unpaced", "default").
	Name string `json:"name"`
	// ScanInterval is scan_interval; ScanBatchSize is scan_batch_size (SCAN's COUNT and the
	// delete-request target cap).
	ScanInterval  time.Duration `json:"scan_interval"`
	ScanBatchSize int           `json:"scan_batch_size"`
	// RoundPause is round_pause; 0 keeps the default (24h: one round per run).
	RoundPause time.Duration `json:"round_pause"`
	// MaxKeysPerSecond is max_keys_per_second, the cap on each store walk (0: none).
	MaxKeysPerSecond float64 `json:"max_keys_per_second,omitempty"`
	// Duty is scanner.duty (0: off, the fixed pace of ScanInterval), BurstKeys
	// scanner.burst_keys (0: the default), CPUCeiling scanner.redis_cpu_ceiling (0: off).
	Duty       float64 `json:"duty"`
	BurstKeys  int     `json:"burst_keys,omitempty"`
	CPUCeiling float64 `json:"redis_cpu_ceiling,omitempty"`
	// DeleteDuty is delete_duty (0: off, the deleter bound by its in-flight cap alone).
	DeleteDuty float64 `json:"delete_duty,omitempty"`
	// HighWater is the scanner's backpressure mark; a huge value turns backpressure off.
	HighWater uint64 `json:"high_water"`
	// ProberWorkers and DeleterWorkers are each process's concurrent handlers.
	ProberWorkers  int `json:"prober_workers"`
	DeleterWorkers int `json:"deleter_workers"`
	// ProberMaxAckPending and DeleterMaxAckPending are the consumers' in-flight caps
	// (DeleterMaxAckPending is max_inflight_delete_requests).
	ProberMaxAckPending  int `json:"prober_max_ack_pending"`
	DeleterMaxAckPending int `json:"deleter_max_ack_pending"`
	// MaxBytes is each stream's max_bytes (0: the default; -1: no cap).
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// ProbeStat turns on the stat probe of file storages (KVCM's own behaviour, probe none,
	// never finds a storage-missing location).
	ProbeStat bool `json:"probe_stat"`
	// DryRun makes the stages write nothing, so a run can be repeated on the same keyspace.
	DryRun bool `json:"dry_run"`
}

// DefaultProfile is kvcm-gc as shipped: the duty pace (scanner.duty 0.1, bursts of 64), batch 256, high-water 100,
// max_inflight_delete_requests 2, delete_duty 0.1; with the stat probe, so storage-missing garbage is found.
func DefaultProfile() Profile {
	sc := scanner.DefaultConfig()
	js := subjects.DefaultSettings()
	return Profile{Name: "default", Duty: sc.Duty, DeleteDuty: deleter.DefaultConfig().Duty, ScanInterval: sc.ScanInterval, ScanBatchSize: sc.ScanBatchSize, HighWater: sc.HighWater,
		ProberWorkers: 1, DeleterWorkers: js.DeleterMaxAckPending, ProberMaxAckPending: js.ProberMaxAckPending,
		DeleterMaxAckPending: js.DeleterMaxAckPending, ProbeStat: true}
}

// Spec is everything one stage process needs; the harness passes it as JSON.
type Spec struct {
	Stage    string  `json:"stage"`
	NATSURL  string  `json:"nats_url"`
	RedisURI string  `json:"redis_uri"` // the registry's URI; metadata stores come from it
	Cluster  string  `json:"cluster"`
	Prefix   string  `json:"prefix"`
	Profile  Profile `json:"profile"`
	// CPUProfile, when set, receives the process's CPU profile.
	CPUProfile string `json:"cpu_profile,omitempty"`
	// MetricsOut, when set, receives the process's metrics as JSON when it stops.
	MetricsOut string `json:"metrics_out,omitempty"`
	// ServeAddrOut, when set, makes the process serve /metrics on a free loopback port while
	// it runs, and receives that port's address ("127.0.0.1:port") once it listens: the
	// harness reads an adaptive walk's pace from it as it changes.
	ServeAddrOut string `json:"serve_addr_out,omitempty"`
}

// Settings are the JetStream settings of a profile.
func (p Profile) Settings() subjects.Settings {
	js := subjects.DefaultSettings()
	if p.ProberMaxAckPending > 0 {
		js.ProberMaxAckPending = p.ProberMaxAckPending
	}
	if p.DeleterMaxAckPending > 0 {
		js.DeleterMaxAckPending = p.DeleterMaxAckPending
	}
	if p.MaxBytes != 0 {
		js.MaxBytes = p.MaxBytes
	}
	return js
}

// Options builds the app options of the spec.
func (s Spec) Options(reg prometheus.Registerer, log *slog.Logger) (app.Options, app.Stages, error) {
	var which app.Stages
	switch s.Stage {
	case Scanner:
		which.Scanner = true
	case Prober:
		which.Prober = true
	case Deleter:
		which.Deleter = true
	case All:
		which = app.All
	default:
		return app.Options{}, which, fmt.Errorf("stage %q: not scanner, prober, deleter or all", s.Stage)
	}
	conn, err := redismeta.ParseURI(s.RedisURI)
	if err != nil {
		return app.Options{}, which, fmt.Errorf("redis uri: %w", err)
	}
	p := s.Profile
	js := p.Settings()
	sc := scanner.DefaultConfig()
	if p.ScanInterval > 0 {
		sc.ScanInterval = p.ScanInterval
	}
	if p.ScanBatchSize > 0 {
		sc.ScanBatchSize = p.ScanBatchSize
	}
	if p.HighWater > 0 {
		sc.HighWater = p.HighWater
	}
	if p.RoundPause > 0 {
		sc.RoundPause = p.RoundPause
	}
	sc.MaxKeysPerSecond = p.MaxKeysPerSecond
	sc.KVCMPersistGap = 100 * time.Millisecond // no KVCM persists its counters in the bench
	sc.Duty, sc.CPUCeiling = p.Duty, p.CPUCeiling
	if p.BurstKeys > 0 {
		sc.BurstKeys = p.BurstKeys
	}
	pc := prober.DefaultConfig()
	pc.MaxTargets = sc.ScanBatchSize
	dc := deleter.DefaultConfig()
	dc.AckWait = js.DeleterAckWait
	dc.Duty = p.DeleteDuty
	so := storage.Options{DefaultProbe: storage.ProbeNone}
	if p.ProbeStat {
		so.DefaultProbe = storage.ProbeStat
	}
	return app.Options{
		Cluster: s.Cluster, Prefix: s.Prefix, Registry: conn, Meta: conn, Storage: so, DryRun: p.DryRun,
		Scanner: sc, Prober: pc, Deleter: dc, JetStream: js,
		ProberWorkers: max(p.ProberWorkers, 1), DeleterWorkers: max(p.DeleterWorkers, 1),
		Logger: log, Reg: reg,
	}, which, nil
}

// Run runs the spec's stage until ctx is done, then writes the CPU profile and the metrics.
func Run(ctx context.Context, s Spec, log *slog.Logger) (err error) {
	reg := prometheus.NewRegistry()
	opts, which, err := s.Options(reg, log)
	if err != nil {
		return err
	}
	if s.CPUProfile != "" {
		f, err := os.Create(s.CPUProfile)
		if err != nil {
			return fmt.Errorf("create cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("start cpu profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	if s.ServeAddrOut != "" {
		srv, serr := httpserver.Start("127.0.0.1:0", reg, func(context.Context) (string, error) { return "", nil }, log)
		if serr != nil {
			return serr
		}
		defer func() { err = errors.Join(err, srv.Shutdown(context.WithoutCancel(ctx))) }()
		// Written whole under another name, then renamed: the harness never reads half of it.
		tmp := s.ServeAddrOut + ".tmp"
		if err := os.WriteFile(tmp, []byte(srv.Addr().String()), 0o644); err != nil {
			return fmt.Errorf("write serve address: %w", err)
		}
		if err := os.Rename(tmp, s.ServeAddrOut); err != nil {
			return fmt.Errorf("write serve address: %w", err)
		}
	}
	nc, err := nats.Connect(s.NATSURL, nats.Name("kvcm-gc-bench-"+s.Stage), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to nats: %w", err)
	}
	defer nc.Close()
	app.TuneGC()
	runErr := app.Run(ctx, nc, opts, which)
	if s.MetricsOut != "" {
		runErr = errors.Join(runErr, writeMetrics(reg, s.MetricsOut))
	}
	return runErr
}

// Metrics are a process's metrics flattened to "name{label=value,…}" → value (histograms
// contribute their count and sum).
type Metrics map[string]float64

// Sum adds every series of the metric called name.
func (m Metrics) Sum(name string) float64 {
	var v float64
	for k, x := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			v += x
		}
	}
	return v
}

// Get returns the series of name whose labels include label="value".
func (m Metrics) Get(name, label, value string) float64 {
	var v float64
	want := label + "=" + value
	for k, x := range m {
		if !strings.HasPrefix(k, name+"{") {
			continue
		}
		for _, l := range strings.Split(strings.TrimSuffix(k[len(name)+1:], "}"), ",") {
			if l == want {
				v += x
			}
		}
	}
	return v
}

func writeMetrics(g prometheus.Gatherer, path string) error {
	mfs, err := g.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	out := Metrics{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[name] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[name] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[mf.GetName()+"_count"+strings.TrimPrefix(name, mf.GetName())] = float64(m.Histogram.GetSampleCount())
				out[mf.GetName()+"_sum"+strings.TrimPrefix(name, mf.GetName())] = m.Histogram.GetSampleSum()
			}
		}
	}
	data, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return fmt.Errorf("encode metrics: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	return nil
}

// ReadMetrics reads what a stage process wrote to its MetricsOut.
func ReadMetrics(path string) (Metrics, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	var m Metrics
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode metrics %s: %w", path, err)
	}
	return m, nil
}
