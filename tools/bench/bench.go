// Package bench measures kvcm-gc against the raw limits of the machine it runs on. It starts
// its own Redis and NATS JetStream, seeds a synthetic KVCM keyspace in each block layout
// (today's location layout and the legacy one), and in one run times, per layout, the raw
// Redis and file-system operations the stages are made of, each stage alone, the whole
// pipeline, each stage's peak memory at two keyspace sizes, and the latency a KVCM-like read
// load sees while kvcm-gc runs (with Redis and kvcm-gc on cores of their own, as in
// production, and sharing both cores). Every kvcm-gc figure is reported next to the raw
// figure of the same layout in the same run, so the ratios hold on a noisy machine where
// absolute numbers do not.
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
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/bench/stage"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// Phases of a run; Config.Phases selects some (the keyspaces are always seeded).
const (
	PhaseRaw     = "raw"     // raw baselines
	PhaseAlone   = "alone"   // each stage alone on the main keyspace
	PhaseSmall   = "small"   // each stage alone on the small keyspace (peak memory at two sizes)
	PhaseServing = "serving" // read latency with kvcm-gc off, default and unpaced
	PhaseE2E     = "e2e"     // the whole pipeline on the main keyspace
	// PhasePace is the scan rate against the serving p99 (fixed rates and the adaptive
	// pacer), a round of the adaptive walk, and its answer to a step of the load (pace.go).
	PhasePace = "pace"
	// PhaseCost measures what a walk costs Redis, by Redis's own counters, per key and per
	// page, for several page sizes and pipeline depths (cost.go).
	PhaseCost = "cost"
	// PhaseDuty is the raw duty walk: the store read paced by the duty with nothing of the
	// pipeline around it (duty.go).
	PhaseDuty = "duty"
	// PhaseDeleterDuty runs each stage alone on the main keyspace once per delete_duty of
	// Config.DeleterDuties: the deleter's share of Redis's main thread (deleterduty.go).
	PhaseDeleterDuty = "deleterduty"
	// PhaseScale runs each stage alone on a metadata-only keyspace at a tenth of
	// Config.ScaleBlocks and at ScaleBlocks, location layout only (scale.go).
	PhaseScale = "scale"
	// PhaseAB runs each stage alone with the stage binary and with Config.ABStageBin in
	// alternation, to measure a change (not part of the default phases).
	PhaseAB = "ab"
	// PhaseStores times a scanner round over two metadata stores (a redis-server each, half
	// the main keyspace's blocks in each) with one replica, then two (not part of the
	// default phases).
	PhaseStores = "stores"
)

// AllPhases in the order they run (for each layout; PhaseSmall first, on a keyspace of its
// own).
var AllPhases = []string{PhaseRaw, PhaseCost, PhaseDuty, PhaseAlone, PhaseDeleterDuty, PhaseSmall, PhaseServing, PhasePace, PhaseE2E, PhaseScale}

// keyspaceDB holds the keyspace under measurement, one at a time. The legacy layout allows
// no other database than 0: a KVCM of that layout ignores db= and keeps its blocks in DB 0, so
// kvcm-gc leaves legacy keys of any other database alone.
const keyspaceDB = 0

// ParseLayouts reads the -layout flag: "location", "legacy" or "both" (location first).
func ParseLayouts(s string) ([]kvcm.Layout, error) {
	switch s {
	case "both", "":
		return []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy}, nil
	case "none":
		return nil, nil
	}
	l, ok := kvcm.ParseLayout(s)
	if !ok || (l != kvcm.LayoutLocation && l != kvcm.LayoutLegacy) {
		return nil, fmt.Errorf("layout %q: not location, legacy or both", s)
	}
	return []kvcm.Layout{l}, nil
}

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
	// Layouts are the block layouts measured, one after the other, each with keyspaces and
	// raw baselines of its own.
	Layouts []kvcm.Layout
	// SmallLayouts are the layouts of PhaseSmall (the memory comparison at two sizes).
	SmallLayouts []kvcm.Layout
	// RawMatch adds the raw per-instance MATCH walk (the former scanner's) on the legacy
	// keyspace.
	RawMatch bool
	// ServingPins are the placements of the serving windows (PinPinned, PinShared),
	// alternated in every repetition.
	ServingPins []string
	// Phases to run (nil: all but PhaseAB).
	Phases []string
	// ABStageBin is the stage binary to compare with StageBin in PhaseAB, ABReps times each.
	ABStageBin string
	ABReps     int
	// StoresReps is how many times PhaseStores alternates one replica and two.
	StoresReps int
	// PaceRates are the max_keys_per_second of PhasePace's curve (0: unpaced), at the
	// unpaced scan_batch_size; PaceSmallBatchRates are also run at scan_batch_size
	// PaceSmallBatch (shorter bursts). PaceReps repeats the curve's windows.
	PaceRates           []float64
	PaceSmallBatchRates []float64
	PaceSmallBatch      int
	PaceReps            int
	// PaceDuties are the curve's scanner.duty points (the rounds and the step walk at the
	// default duty).
	PaceDuties []float64
	// PaceStepRate is the read load after the load step (ServingRate before and after it).
	PaceStepRate int
	// ScaleBlocks is the larger keyspace of PhaseScale (the smaller is a tenth of it).
	ScaleBlocks int
	// CostPoints are PhaseCost's configurations (nil: DefaultCostPoints), each measured on
	// the first CostKeys keys of the SCAN order, CostReps times in alternating order. With
	// CostGrow above 1, a copy of the main keyspace grown CostGrow times (Keyspace.Grow) on
	// a redis-server of its own is then measured alternately with it.
	CostPoints         []CostPoint
	CostKeys, CostReps int
	CostGrow           int
	// Duties and DutyDepths are PhaseDuty's duties and pipeline depths, each window
	// DutyWindow, DutyReps times.
	Duties     []float64
	DutyDepths []int
	DutyWindow time.Duration
	DutyReps   int
	// DeleterDuties are PhaseDeleterDuty's delete_duty values (0: off), each run
	// DeleterDutyReps times, alternated.
	DeleterDuties   []float64
	DeleterDutyReps int
	// IdleWindow is how long PhaseE2E measures the stages idle once the round is over and
	// both consumers are drained (0: not measured).
	IdleWindow time.Duration
	// Keep leaves the working directory (logs, data) in place.
	Keep   bool
	Logger *slog.Logger
}

// UnpacedProfile is kvcm-gc allowed to go as fast as it can: no duty (scanner or deleter), no pause between
// ticks, no backpressure, the prober and the deleter with a worker per core.
func UnpacedProfile() stage.Profile {
	p := stage.DefaultProfile()
	p.Name = "unpaced"
	p.Duty, p.DeleteDuty, p.ScanInterval = 0, 0, time.Nanosecond
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
	redis     *servers.Redis
	nats      *proc
	natsURL   string
	nc        *nats.Conn
	js        jetstream.JetStream
	seq       int
	storesSeq int
	redisPid  int
	// cpus are the cores the harness may use (its affinity when it started); placed is set
	// while Redis, NATS and the harness are pinned (PinPinned).
	cpus   []int
	placed bool
	// removing removes the data files of the layout done last in the background, while the
	// next layout seeds (every measurement waits for it).
	removing *removal
	res      *Results
}

// Machine describes where a run happened.
type Machine struct {
	Cores int
	// CPUs are the cores the harness was allowed (the pinned serving placement splits them).
	CPUs         []int
	CPU          string
	MemoryGiB    float64
	Go           string
	RedisVersion string
	Kernel       string
	OS, Arch     string
}

// Results are everything a run measured.
type Results struct {
	Config  Config
	Machine Machine
	Started time.Time
	Elapsed time.Duration
	// Layouts hold the figures of each layout, in the order they ran.
	Layouts []*LayoutResults
	// Timings are how long each part of the run took, in order (what a run's length is
	// made of).
	Timings []Timing
	Errors  []string
}

// Timing is the wall time of one part of a run.
type Timing struct {
	Layout kvcm.Layout
	Part   string
	Dur    time.Duration
}

// LayoutResults are everything measured on the keyspaces of one layout, each figure against
// the raw baselines of the same layout.
type LayoutResults struct {
	Layout      kvcm.Layout
	Main, Small *Keyspace
	Raw         *RawResults
	Alone       *AloneResults
	AloneSmall  *AloneResults
	Serving     []Latency
	Pace        *PaceResults
	E2E         *E2EResult
	// AB holds the alternated runs of PhaseAB: AB[i][0] with StageBin, AB[i][1] with ABStageBin.
	AB [][2]AloneResults
	// Stores is PhaseStores.
	Stores *StoresResult
	// Scale is PhaseScale.
	Scale *ScaleResults
	// Cost is PhaseCost on the main keyspace; CostPair the main keyspace against one
	// Config.CostGrow times as large, alternated.
	Cost     []*CostResults
	CostPair *CostPair
	// Duty is PhaseDuty.
	Duty []DutyRun
	// DeleterDuty is PhaseDeleterDuty.
	DeleterDuty []DeleterDutyRun
}

func (c Config) wants(phase string) bool {
	return (len(c.Phases) == 0 && phase != PhaseAB && phase != PhaseStores) || slices.Contains(c.Phases, phase)
}

// wantsMain reports whether a phase runs on the main keyspace.
func (c Config) wantsMain() bool {
	return c.needsFiles() || c.wants(PhaseCost) || c.wants(PhaseDuty)
}

// needsFiles reports whether a phase on the main keyspace needs its data files (the stat
// probe, the deleter's unlinks, the raw file baselines); without one it is seeded metadata
// only.
func (c Config) needsFiles() bool {
	for _, p := range []string{PhaseRaw, PhaseAlone, PhaseDeleterDuty, PhaseAB, PhaseServing, PhasePace, PhaseE2E} {
		if c.wants(p) {
			return true
		}
	}
	return false
}

// Run runs the benchmark; Report renders what it returns. A failing phase is recorded in the
// results and the run goes on with the next one.
func Run(ctx context.Context, cfg Config) (res *Results, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res = &Results{Config: cfg, Started: time.Now()}
	h := &Harness{cfg: cfg, log: log, stageBin: cfg.StageBin, res: res}
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

	for _, layout := range cfg.Layouts {
		lr := &LayoutResults{Layout: layout}
		res.Layouts = append(res.Layouts, lr)
		phaseErr := func(phase string, err error) {
			log.Error("phase failed", "layout", layout, "phase", phase, "err", err)
			res.Errors = append(res.Errors, fmt.Sprintf("%s layout, %s: %v", layout, phase, err))
		}
		failed := len(res.Errors)
		if err := h.runLayout(ctx, lr, phaseErr); err != nil {
			return res, fmt.Errorf("%s layout: %w", layout, err)
		}
		if !cfg.Keep && len(res.Errors) == failed {
			h.removeInBackground(lr)
		}
	}
	return res, nil
}

// timed records the wall time of a part of the run since started.
func (h *Harness) timed(layout kvcm.Layout, part string, started time.Time) {
	h.res.Timings = append(h.res.Timings, Timing{Layout: layout, Part: part, Dur: time.Since(started)})
}

// removeInBackground removes the data files of a layout's keyspaces while the next layout
// seeds its own; waitRemoval waits for it before anything is measured.
func (h *Harness) removeInBackground(lr *LayoutResults) {
	var roots []string
	for _, k := range []*Keyspace{lr.Main, lr.Small} {
		if k != nil {
			roots = append(roots, k.Spec.Root)
		}
	}
	h.waitRemoval()
	r := &removal{layout: lr.Layout, done: make(chan struct{})}
	h.removing = r
	go func() {
		defer close(r.done)
		started := time.Now()
		for _, root := range roots {
			if err := removeTree(root); err != nil {
				h.log.Warn("remove data files", "dir", root, "err", err)
			}
		}
		r.took = time.Since(started)
		h.log.Info("data files removed", "layout", lr.Layout, "took", r.took.Round(time.Millisecond))
	}()
}

// removal is a background removal of a layout's data files.
type removal struct {
	layout kvcm.Layout
	done   chan struct{}
	took   time.Duration // set before done is closed
}

// waitRemoval waits for a background removal of data files, if one runs, and records how long
// it took.
func (h *Harness) waitRemoval() {
	if r := h.removing; r != nil {
		<-r.done
		h.removing = nil
		h.res.Timings = append(h.res.Timings, Timing{Layout: r.layout, Part: "removing its data files", Dur: r.took})
	}
}

// removeTree removes dir with a worker per core, each taking whole directories three levels
// down (a keyspace's files are under <root>/<storage>/<instance>/<spec>/): unlinks in
// different directories run in parallel, where os.RemoveAll goes one by one.
func removeTree(dir string) error {
	subs, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*"))
	work := make(chan string)
	errs := make([]error, runtime.NumCPU())
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for d := range work {
				errs[w] = errors.Join(errs[w], os.RemoveAll(d))
			}
		})
	}
	for _, d := range subs {
		work <- d
	}
	close(work)
	wg.Wait()
	return errors.Join(append(errs, os.RemoveAll(dir))...)
}

// runLayout runs the phases on the keyspaces of one layout, each in keyspaceDB in turn: the
// small one first (the memory comparison), then the main one. A failing phase is recorded
// with phaseErr and the next one runs; an error that leaves no keyspace to go on with is
// returned.
func (h *Harness) runLayout(ctx context.Context, lr *LayoutResults, phaseErr func(string, error)) (err error) {
	cfg, log, layout := h.cfg, h.log, lr.Layout
	// A keyspace is ready once the previous layout's files are gone, so no measurement
	// shares the file system with their removal.
	ks := func(name string, blocks int) (*Keyspace, error) {
		started := time.Now()
		k, err := SeedKeyspace(ctx, h.redis.Client(), h.redis.URI(), KeyspaceSpec{Cluster: name, Layout: layout, DB: keyspaceDB,
			Instances: cfg.Instances, Blocks: blocks, Locations: cfg.Locations, Garbage: cfg.Garbage, Tricky: cfg.Tricky,
			Seed: cfg.Seed, Root: filepath.Join(h.workDir, "data-"+layout.String()+"-"+name),
			NoFiles: name == "main" && !cfg.needsFiles()}, log)
		h.waitRemoval()
		h.timed(layout, "seed and link "+name, started)
		return k, err
	}
	phase := func(p string) string { return layout.String() + "-" + p }
	// measure runs phase p, timed under name; a failure is recorded with phaseErr and the
	// next phase runs.
	measure := func(p, name string, run func() error) {
		started := time.Now()
		if err := run(); err != nil {
			phaseErr(p, err)
		}
		h.timed(layout, name, started)
	}
	if cfg.wants(PhaseSmall) && slices.Contains(cfg.SmallLayouts, layout) {
		if lr.Small, err = ks("small", cfg.SmallBlocks); err != nil {
			return err
		}
		defer lr.Small.Close()
		measure(PhaseSmall, "each stage alone, small", func() error {
			a, err := h.runAlone(ctx, phase("alone-small"), lr.Small, cfg.Unpaced)
			lr.AloneSmall = &a
			return err
		})
	}
	if cfg.wantsMain() {
		if lr.Main, err = ks("main", cfg.Blocks); err != nil {
			return err
		}
		defer lr.Main.Close()
	}
	main := lr.Main

	if cfg.wants(PhaseRaw) {
		log.Info("raw baselines", "layout", layout)
		measure(PhaseRaw, "raw baselines", func() error {
			raw, err := h.raw(ctx, main)
			if err == nil {
				lr.Raw = raw
			}
			return err
		})
	}
	if cfg.wants(PhaseCost) {
		measure(PhaseCost, "walk cost", func() error {
			c, err := h.cost(ctx, main)
			lr.Cost = append(lr.Cost, c)
			return err
		})
	}
	if cfg.wants(PhaseCost) && cfg.CostGrow > 1 {
		measure(PhaseCost, fmt.Sprintf("walk cost against a keyspace %d times as large", cfg.CostGrow), func() (err error) {
			lr.CostPair, err = h.costGrown(ctx, main)
			return err
		})
	}
	if cfg.wants(PhaseDuty) {
		measure(PhaseDuty, "raw duty walk", func() (err error) {
			lr.Duty, err = h.dutyPhase(ctx, main)
			return err
		})
	}
	collected := false
	if cfg.wants(PhaseAlone) || cfg.wants(PhaseAB) || cfg.wants(PhaseDeleterDuty) {
		started := time.Now()
		if err := main.Snapshot(ctx); err != nil {
			return err
		}
		h.timed(layout, "snapshot", started)
	}
	if cfg.wants(PhaseAB) {
		for rep := 1; rep <= max(cfg.ABReps, 1); rep++ {
			var pair [2]AloneResults
			for i, bin := range []string{cfg.StageBin, cfg.ABStageBin} {
				if collected {
					if err := main.Restore(ctx); err != nil {
						return err
					}
				}
				a, err := h.runAloneWith(ctx, phase(fmt.Sprintf("ab-%d-%c", rep, 'a'+i)), main, cfg.Unpaced, bin)
				if err != nil {
					phaseErr(PhaseAB, err)
				}
				pair[i], collected = a, true
			}
			lr.AB = append(lr.AB, pair)
		}
	}
	if cfg.wants(PhaseAlone) {
		if collected {
			if err := main.Restore(ctx); err != nil {
				return err
			}
		}
		measure(PhaseAlone, "each stage alone, main", func() error {
			a, err := h.runAlone(ctx, phase("alone-main"), main, cfg.Unpaced)
			lr.Alone, collected = &a, true
			return err
		})
	}
	if cfg.wants(PhaseDeleterDuty) && len(cfg.DeleterDuties) > 0 {
		restore := func() error {
			if !collected {
				collected = true
				return nil
			}
			return main.Restore(ctx)
		}
		measure(PhaseDeleterDuty, "the deleter under delete_duty", func() (err error) {
			lr.DeleterDuty, err = h.deleterDuty(ctx, phase, main, restore)
			return err
		})
	}
	if collected && (cfg.wants(PhaseServing) || cfg.wants(PhasePace) || cfg.wants(PhaseE2E)) {
		log.Info("restore main keyspace", "layout", layout)
		started := time.Now()
		if err := main.Restore(ctx); err != nil {
			return err
		}
		h.timed(layout, "restore", started)
	}
	if cfg.wants(PhaseServing) {
		measure(PhaseServing, "serving", func() (err error) {
			lr.Serving, err = h.serving(ctx, phase("serving"), main, cfg.Unpaced)
			return err
		})
	}
	if cfg.wants(PhasePace) {
		measure(PhasePace, "pace", func() (err error) {
			lr.Pace, err = h.pace(ctx, phase("pace"), main)
			return err
		})
	}
	if cfg.wants(PhaseE2E) {
		measure(PhaseE2E, "end to end", func() error {
			e, err := h.runE2E(ctx, phase("e2e-main"), main, cfg.Unpaced)
			lr.E2E = &e
			return err
		})
	}
	if cfg.wants(PhaseStores) {
		measure(PhaseStores, "stores", func() (err error) {
			lr.Stores, err = h.runStores(ctx, layout, cfg.Unpaced)
			return err
		})
	}
	// Last: its keyspace replaces the main one in keyspaceDB.
	if cfg.wants(PhaseScale) && layout == kvcm.LayoutLocation {
		measure(PhaseScale, "scale", func() (err error) {
			lr.Scale, err = h.scale(ctx, layout)
			return err
		})
	}
	return nil
}

func (h *Harness) raw(ctx context.Context, k *Keyspace) (*RawResults, error) {
	r := RawResults{Layout: k.Spec.Layout}
	var err error
	count := max(h.cfg.Unpaced.ScanBatchSize, 1)
	legacy := k.Spec.Layout == kvcm.LayoutLegacy
	// The scans are the longest raw loops: the bare one, the scanner's target, twice (the
	// faster counts), the legacy layout's whole-block read once between the two, so
	// background load falls on both alike.
	for rep := range 2 {
		bare, err := scanBare(ctx, k.rdb, count, !legacy)
		if err != nil {
			return nil, err
		}
		if bare.PerSec() > r.ScanBare.PerSec() {
			r.ScanBare = bare
		}
		if legacy && rep == 0 {
			if r.ScanAll, err = scanBare(ctx, k.rdb, count, true); err != nil {
				return nil, err
			}
		}
	}
	if r.ScanStore, err = scanStore(ctx, k, count); err != nil {
		return nil, fmt.Errorf("store walk: %w", err)
	}
	if legacy && h.cfg.RawMatch {
		if r.ScanMatch, err = scanLoop(ctx, k.rdb, scanPatterns(k), count, false); err != nil {
			return nil, err
		}
	}
	if err := measureRedisWrites(ctx, k, rawWriteLocs, &r); err != nil {
		return nil, err
	}
	if err := measureFiles(k, runtime.NumCPU(), rawUnlinks, &r); err != nil {
		return nil, err
	}
	if err := measureSequential(ctx, k, max(h.cfg.Unpaced.DeleterWorkers, 1), rawSequentialLocs, &r); err != nil {
		return nil, err
	}
	payload, err := samplePage(ctx, k, count)
	if err != nil {
		return nil, err
	}
	r.ScanPerMsg, r.PublishBytes = count, len(payload)
	n := min((k.Counts.Blocks+count-1)/count, rawPublishMax)
	if r.Publish, err = best(2, func() (Rate, error) { return measurePublish(ctx, h.js, payload, n) }); err != nil {
		return nil, err
	}
	return &r, nil
}

// Sizes of the raw loops that do not walk the whole keyspace: enough for a steady rate,
// small enough that both layouts' baselines fit in a run.
const (
	rawWriteLocs      = 100_000 // garbage locations of the CAS and CAD loops
	rawUnlinks        = 100_000 // scratch links unlinked
	rawSequentialLocs = 10_000  // locations of the protocol by hand
	rawPublishMax     = 1_000   // messages published
)

// start starts Redis and NATS and connects to NATS.
func (h *Harness) start(ctx context.Context) error {
	var err error
	// DEBUG from the loopback only: the cost and scale phases read the keys' hash table with
	// DEBUG HTSTATS.
	if h.redis, err = servers.StartRedis("", servers.WithRedisArgs("--enable-debug-command", "local")); err != nil {
		return err
	}
	if info, err := h.redis.Client().Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "process_id:"); ok {
				h.redisPid, _ = strconv.Atoi(v)
			}
		}
	}
	h.cpus = allowedCPUs()
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
	h.waitRemoval()
	if h.cfg.Keep || len(res.Errors) > 0 {
		res.Elapsed = time.Since(res.Started)
		h.log.Info("work directory kept", "dir", h.workDir)
		return
	}
	started := time.Now()
	var errs []error
	if dirs, err := filepath.Glob(filepath.Join(h.workDir, "data-*")); err == nil {
		for _, d := range dirs {
			errs = append(errs, removeTree(d))
		}
	}
	if err := errors.Join(append(errs, os.RemoveAll(h.workDir))...); err != nil {
		h.log.Warn("remove work directory", "err", err)
	}
	h.timed(kvcm.LayoutNone, "removing the work directory", started)
	res.Elapsed = time.Since(res.Started)
	h.log.Info("work directory removed", "took", time.Since(started).Round(time.Millisecond))
}

func machine(ctx context.Context, h *Harness) Machine {
	m := Machine{Cores: runtime.NumCPU(), CPUs: h.cpus, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
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
