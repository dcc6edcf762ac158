// Package bench measures kvcm-gc against the raw limits of the machine it runs on. It starts
// its own Redis and NATS JetStream, seeds a synthetic KVCM keyspace, and in one run times the
// raw Redis and file-system operations the stages are made of, each stage alone, the whole
// pipeline, each stage's peak memory at two keyspace sizes, and the latency a KVCM-like read
// load sees while kvcm-gc runs. Every kvcm-gc figure is reported next to the raw figure of the
// same run, so the ratios hold on a noisy machine where absolute numbers do not.
//
// The stages run as separate processes (package stage), as in production: their memory and
// CPU time are read from the operating system, and the harness's own work (the load
// generator, the raw loops) does not share their heap or scheduler.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/bench/stage"
	"github.com/kvcm-gc/kvcm-gc/internal/testenv"
)

// Phases of a run; Config.Phases selects some (the keyspaces are always seeded).
const (
	PhaseRaw     = "raw"     // raw baselines
	PhaseAlone   = "alone"   // each stage alone on the main keyspace
	PhaseSmall   = "small"   // each stage alone on the small keyspace (peak memory at two sizes)
	PhaseServing = "serving" // read latency with kvcm-gc off, default and unpaced
	PhaseE2E     = "e2e"     // the whole pipeline on the main keyspace
	// PhaseAB runs each stage alone with the stage binary and with Config.ABStageBin in
	// alternation, to measure a change (not part of the default phases).
	PhaseAB = "ab"
	// PhaseStores times a scanner round over two metadata stores (a redis-server each, half
	// the main keyspace's blocks in each) with one replica, then two (not part of the
	// default phases).
	PhaseStores = "stores"
)

// AllPhases in the order they run.
var AllPhases = []string{PhaseRaw, PhaseAlone, PhaseSmall, PhaseServing, PhaseE2E}

// Config is one benchmark run.
type Config struct {
	// Blocks is the main keyspace's size; SmallBlocks the second size for the memory
	// comparison. Both are spread over Instances.
	Blocks, SmallBlocks, Instances int
	// Locations per block, and the fractions of garbage and of tricky live locations.
	Locations       int
	Garbage, Tricky float64
	Seed            uint64
	// DataDir holds the run's working directory: data files, the JetStream store, logs.
	DataDir string
	// StageBin is the kvcmstage binary; Self is this binary (started again to serve NATS).
	StageBin, Self string
	// Out is the report file; Command is the command line recorded in it.
	Out, Command string
	// CPUProfile, when set, is a directory receiving a CPU profile of every stage process and
	// of the harness.
	CPUProfile string
	// ServingRate is the read load (requests per second); each of ServingReps repetitions
	// measures ServingWindow per mode.
	ServingRate   int
	ServingWindow time.Duration
	ServingReps   int
	// Unpaced is the kvcm-gc configuration of the throughput and end-to-end runs.
	Unpaced stage.Profile
	// Phases to run (nil: all but PhaseAB).
	Phases []string
	// ABStageBin is the stage binary to compare with StageBin in PhaseAB, ABReps times each.
	ABStageBin string
	ABReps     int
	// StoresReps is how many times PhaseStores alternates one replica and two.
	StoresReps int
	// Keep leaves the working directory (logs, data) in place.
	Keep   bool
	Logger *slog.Logger
}

// UnpacedProfile is kvcm-gc allowed to go as fast as it can: no pause between ticks, no
// backpressure, the prober and the deleter with a worker per core.
func UnpacedProfile() stage.Profile {
	p := stage.DefaultProfile()
	p.Name = "unpaced"
	p.ScanInterval = time.Nanosecond
	p.HighWater = 1 << 62
	p.ProberWorkers = runtime.NumCPU()
	return p
}

// Harness holds the servers of a run.
type Harness struct {
	cfg       Config
	log       *slog.Logger
	stageBin  string
	workDir   string
	logDir    string
	redis     *testenv.Redis
	nats      *proc
	natsURL   string
	nc        *nats.Conn
	js        jetstream.JetStream
	seq       int
	storesSeq int
	redisPid  int
}

// Machine describes where a run happened.
type Machine struct {
	Cores        int
	CPU          string
	MemoryGiB    float64
	Go           string
	RedisVersion string
	Kernel       string
	OS, Arch     string
}

// Results are everything a run measured.
type Results struct {
	Config      Config
	Machine     Machine
	Started     time.Time
	Elapsed     time.Duration
	Main, Small *Keyspace
	Raw         *RawResults
	Alone       *AloneResults
	AloneSmall  *AloneResults
	Serving     []Latency
	E2E         *E2EResult
	// AB holds the alternated runs of PhaseAB: AB[i][0] with StageBin, AB[i][1] with ABStageBin.
	AB [][2]AloneResults
	// Stores is PhaseStores.
	Stores *StoresResult
	Errors []string
}

func (c Config) wants(phase string) bool {
	return (len(c.Phases) == 0 && phase != PhaseAB && phase != PhaseStores) || slices.Contains(c.Phases, phase)
}

// Run runs the benchmark; Report renders what it returns. A failing phase is recorded in the
// results and the run goes on with the next one.
func Run(ctx context.Context, cfg Config) (res *Results, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res = &Results{Config: cfg, Started: time.Now()}
	h := &Harness{cfg: cfg, log: log, stageBin: cfg.StageBin}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if h.workDir, err = os.MkdirTemp(cfg.DataDir, "kvcmbench-"); err != nil {
		return nil, fmt.Errorf("create work directory: %w", err)
	}
	h.logDir = filepath.Join(h.workDir, "logs")
	if err := os.MkdirAll(h.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	log.Info("work directory", "dir", h.workDir)
	if cfg.CPUProfile != "" {
		if err := os.MkdirAll(cfg.CPUProfile, 0o755); err != nil {
			return nil, fmt.Errorf("create profile directory: %w", err)
		}
		f, err := os.Create(filepath.Join(cfg.CPUProfile, "harness.pprof"))
		if err != nil {
			return nil, fmt.Errorf("create harness profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, fmt.Errorf("start harness profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	defer h.close(res)
	if err := h.start(ctx); err != nil {
		return res, err
	}
	res.Machine = machine(ctx, h)

	phaseErr := func(phase string, err error) {
		log.Error("phase failed", "phase", phase, "err", err)
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", phase, err))
	}
	ks := func(name string, db, blocks int) (*Keyspace, error) {
		return SeedKeyspace(ctx, h.redis.Client(), h.redis.URI(), KeyspaceSpec{Cluster: name, DB: db,
			Instances: cfg.Instances, Blocks: blocks, Locations: cfg.Locations, Garbage: cfg.Garbage, Tricky: cfg.Tricky,
			Seed: cfg.Seed, Root: filepath.Join(h.workDir, "data-"+name)}, log)
	}
	const snapshotDB = 2
	if res.Main, err = ks("main", 0, cfg.Blocks); err != nil {
		return res, err
	}
	defer res.Main.Close()
	if cfg.wants(PhaseSmall) {
		if res.Small, err = ks("small", 1, cfg.SmallBlocks); err != nil {
			return res, err
		}
		defer res.Small.Close()
	}

	if cfg.wants(PhaseRaw) {
		log.Info("raw baselines")
		if raw, err := h.raw(ctx, res.Main); err != nil {
			phaseErr(PhaseRaw, err)
		} else {
			res.Raw = raw
		}
	}
	collected := false
	if cfg.wants(PhaseAlone) || cfg.wants(PhaseAB) {
		if err := res.Main.Snapshot(ctx, snapshotDB); err != nil {
			return res, err
		}
	}
	if cfg.wants(PhaseAB) {
		for rep := 1; rep <= max(cfg.ABReps, 1); rep++ {
			var pair [2]AloneResults
			for i, bin := range []string{cfg.StageBin, cfg.ABStageBin} {
				if collected {
					if err := res.Main.Restore(ctx, snapshotDB, true); err != nil {
						return res, err
					}
				}
				a, err := h.runAloneWith(ctx, fmt.Sprintf("ab-%d-%c", rep, 'a'+i), res.Main, cfg.Unpaced, bin)
				if err != nil {
					phaseErr(PhaseAB, err)
				}
				pair[i], collected = a, true
			}
			res.AB = append(res.AB, pair)
		}
	}
	if cfg.wants(PhaseAlone) {
		if collected {
			if err := res.Main.Restore(ctx, snapshotDB, true); err != nil {
				return res, err
			}
		}
		a, err := h.runAlone(ctx, "alone-main", res.Main, cfg.Unpaced)
		if err != nil {
			phaseErr(PhaseAlone, err)
		}
		res.Alone, collected = &a, true
	}
	if cfg.wants(PhaseSmall) {
		a, err := h.runAlone(ctx, "alone-small", res.Small, cfg.Unpaced)
		if err != nil {
			phaseErr(PhaseSmall, err)
		}
		res.AloneSmall = &a
	}
	if collected && (cfg.wants(PhaseServing) || cfg.wants(PhaseE2E)) {
		log.Info("restore main keyspace")
		if err := res.Main.Restore(ctx, snapshotDB, false); err != nil {
			return res, err
		}
	}
	if cfg.wants(PhaseServing) {
		l, err := h.serving(ctx, res.Main, cfg.Unpaced)
		if err != nil {
			phaseErr(PhaseServing, err)
		}
		res.Serving = l
	}
	if cfg.wants(PhaseE2E) {
		e, err := h.runE2E(ctx, "e2e-main", res.Main, cfg.Unpaced)
		if err != nil {
			phaseErr(PhaseE2E, err)
		}
		res.E2E = &e
	}
	if cfg.wants(PhaseStores) {
		st, err := h.runStores(ctx, cfg.Unpaced)
		if err != nil {
			phaseErr(PhaseStores, err)
		}
		res.Stores = st
	}
	return res, nil
}

func (h *Harness) raw(ctx context.Context, k *Keyspace) (*RawResults, error) {
	var r RawResults
	var err error
	count := max(h.cfg.Unpaced.ScanBatchSize, 1)
	// The scans are the longest raw loops: twice each, once the variant without a target.
	if r.ScanBare, err = best(2, func() (Rate, error) { return scanBare(ctx, k.rdb, count) }); err != nil {
		return nil, err
	}
	if r.ScanMatch, err = best(2, func() (Rate, error) { return scanLoop(ctx, k.rdb, scanPatterns(k), count) }); err != nil {
		return nil, err
	}
	if r.ScanMatchWide, err = best(1, func() (Rate, error) {
		return scanLoop(ctx, k.rdb, scanPatterns(k), count*len(k.Instances))
	}); err != nil {
		return nil, err
	}
	if err := measureRedisWrites(ctx, k, 200_000, &r); err != nil {
		return nil, err
	}
	if err := measureFiles(k, runtime.NumCPU(), 200_000, &r); err != nil {
		return nil, err
	}
	if err := measureSequential(ctx, k, max(h.cfg.Unpaced.DeleterWorkers, 1), 50_000, &r); err != nil {
		return nil, err
	}
	payload, err := samplePage(ctx, k, count)
	if err != nil {
		return nil, err
	}
	r.ScanPerMsg, r.PublishBytes = count, len(payload)
	n := (k.Counts.Blocks + count - 1) / count
	if r.Publish, err = best(2, func() (Rate, error) { return measurePublish(ctx, h.js, payload, n) }); err != nil {
		return nil, err
	}
	return &r, nil
}

// start starts Redis and NATS and connects to NATS.
func (h *Harness) start(ctx context.Context) error {
	var err error
	if h.redis, err = testenv.StartRedisServer(); err != nil {
		return err
	}
	if info, err := h.redis.Client().Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "process_id:"); ok {
				h.redisPid, _ = strconv.Atoi(v)
			}
		}
	}
	var nerr error
	h.nats, h.natsURL, nerr = startNATS(h.cfg.Self, filepath.Join(h.workDir, "jetstream"), filepath.Join(h.logDir, "nats.log"))
	if nerr != nil {
		return nerr
	}
	if h.nc, err = nats.Connect(h.natsURL); err != nil {
		return fmt.Errorf("connect to nats: %w", err)
	}
	if h.js, err = jetstream.New(h.nc); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}

// close stops the servers and removes the working directory (unless kept or the run failed).
func (h *Harness) close(res *Results) {
	if h.nc != nil {
		h.nc.Close()
	}
	if h.nats != nil {
		if _, err := h.nats.Stop(30 * time.Second); err != nil {
			h.log.Warn("stop nats", "err", err)
		}
	}
	if h.redis != nil {
		if err := h.redis.Close(); err != nil {
			h.log.Warn("stop redis", "err", err)
		}
	}
	res.Elapsed = time.Since(res.Started)
	if h.cfg.Keep || len(res.Errors) > 0 {
		h.log.Info("work directory kept", "dir", h.workDir)
		return
	}
	started := time.Now()
	if err := os.RemoveAll(h.workDir); err != nil {
		h.log.Warn("remove work directory", "err", err)
	}
	h.log.Info("work directory removed", "took", time.Since(started).Round(time.Millisecond))
}

func machine(ctx context.Context, h *Harness) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGiB = kb / (1 << 20)
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if info, err := h.redis.Client().Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
				m.RedisVersion = v
			}
		}
	}
	return m
}

// ErrFailed is returned by callers when a run recorded phase errors.
var ErrFailed = errors.New("benchmark phases failed")
