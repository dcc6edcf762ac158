package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// The soak: many rounds under a living KVCM. Every stage runs as its own process (the sweep's
// walker and sweeper too) on a seeded keyspace while KVCM's workload writes, reads and deletes
// all the time and upstream's own GC collects beside kvcm-gc; every few rounds a fault hits (a
// kill -9 of any stage, a Redis restart, a NATS restart or, on a JetStream cluster, the loss of
// a node). After every round the keyspace is checked against the model of what KVCM wrote,
// the round's backlog must drain, the streams must be within their limits, and each stage's
// resident set, heap, goroutines and open files are sampled; at the end their slope over the
// last rounds must be flat.

// SoakRun is one soak run: a block layout on a JetStream topology.
type SoakRun struct {
	Layout kvcm.Layout
	// Cluster runs JetStream as three nats-server processes, every stream and bucket at
	// replicas 3: its NATS fault is the loss of one node. Without, one server embedded in the
	// driver, restarted on its store.
	Cluster bool
}

func (r SoakRun) String() string {
	t := "single"
	if r.Cluster {
		t = "cluster"
	}
	return r.Layout.String() + "/" + t
}

// SoakConfig is one soak: its runs, one after the other, each on fresh servers.
type SoakConfig struct {
	// Seed drives every choice (keyspace, workload, faults, their moments).
	Seed uint64
	Runs []SoakRun
	// Instances and Blocks (per instance) size the seeded keyspace.
	Instances, Blocks int
	// Rounds is the least number of rounds of a run; Duration, when longer, keeps it going
	// (whole rounds) until that much time has passed since its first round started.
	Rounds   int
	Duration time.Duration
	// RoundPause is the stages' round_pause.
	RoundPause time.Duration
	// FaultEvery is the number of rounds between two faults (0: no faults), FaultCycles the
	// least number of whole cycles of every fault kind a run holds (it runs on until then).
	FaultEvery, FaultCycles int
	// WritePeriod is the pause between two of KVCM's operations. `make soak`'s 20ms, at most
	// 50 a second, make some 7 garbage locations a second, within the pace of the deleter the
	// soak runs (2 requests in flight, delete_delay 100ms); at 5ms the workload, on a machine
	// that let it near its rate (170 a second), made 25 a second, more than the deleter and
	// upstream's GC took, and every round's drain grew longer than the round.
	WritePeriod time.Duration
	// CrashAge bounds how long after its writer's crash a crashed write session becomes an
	// orphan (0: no crashed sessions).
	CrashAge [2]time.Duration
	// CheckEvery: each check after a round reads the keys written since the last one, those
	// of garbage due and of marks seen, and a share of the others, so that every key is read
	// at least every CheckEvery rounds.
	CheckEvery int
	// LagFails: a check that ends after the next round did, with no fault to slow it, fails
	// the run (else it is noted).
	LagFails bool
	// Upstream runs upstream KVCM's own GC beside kvcm-gc.
	Upstream bool
	// MaxStreamBytes is each stream's max_bytes.
	MaxStreamBytes int64
	// Steady is the rule each stage's figures are judged by.
	Steady SteadyRule
	// Leak, when its Stage is set, plants a leak in that stage (the soak's test of itself;
	// Bins must hold LeakyStageBin).
	Leak Leak
	// DrainTimeout bounds the wait for a round's backlog after its end.
	DrainTimeout time.Duration
	// RunTimeout bounds one run (0: Duration + Rounds × 5 min).
	RunTimeout time.Duration
	// Bins are the stage binaries and nats-server (Build).
	Bins map[string]string
	// WorkDir holds the servers' files, data and process logs; ReportDir (default WorkDir)
	// receives each run's table and plot.
	WorkDir, ReportDir string
	// Out receives the progress and the tables; nil discards them.
	Out io.Writer
}

// DefaultSoakConfig is `make soak`: 200,000 blocks, the location layout on one server and the
// legacy layout on a cluster, each run at least 30 minutes and long enough for its fault
// cycles (every kind once on one server, twice on the cluster) and for the steadiness rule's
// window after a warm-up. The choice of the rule is explained at defaultSteady.
func DefaultSoakConfig() SoakConfig {
	return SoakConfig{Runs: []SoakRun{{Layout: kvcm.LayoutLocation}, {Layout: kvcm.LayoutLegacy, Cluster: true}},
		Instances: 4, Blocks: 50_000, Rounds: 20, Duration: 30 * time.Minute, RoundPause: 2 * time.Second,
		FaultEvery: 3, FaultCycles: 1, WritePeriod: 20 * time.Millisecond, CrashAge: [2]time.Duration{20 * time.Second, time.Minute},
		CheckEvery: 10, LagFails: true, Upstream: true, MaxStreamBytes: 1 << 30, Steady: defaultSteady, DrainTimeout: 5 * time.Minute}
}

// defaultSteady is `make soak`'s rule: every figure of every stage, 1% of its mean a round at
// most over the last 60 rounds, fitted through 10 batches of 6 rounds, each process's first 5
// rounds left out; a figure the run cannot tell fails it.
//
// Why these numbers. A stage's figures, the least reading of each round at 200,000 blocks,
// scatter from round to round by 1.5 to 6% of their mean (resident set), 1.3 to 6% (live heap;
// 14% in a process just restarted), 1 to 5% (heap in use), with a lag-1 correlation of up to
// 0.57: a high round is followed by high ones (a 20-round run at load 30 to 40). Over 10 rounds
// a slope has a standard error of about 1% of the mean a round, so the old 10-round window could
// read noise as a 1% trend both ways. Over 60 rounds in batches of 6 the batch means forget their
// neighbours (TestFitSegmentsCoverage: 91-95% coverage at a correlation of 0.7, where a plain
// fit covers 63-67%), and the interval's half width comes to about 0.2 to 0.5% of the mean a
// round: a flat figure is told flat, and one growing by 1% a round (60% over the window) is told
// growing. The run goes on until it holds such a window of each stage's one process (the stages
// are killed no more once the fault cycles are done): the rule concludes, or the run fails.
var defaultSteady = SteadyRule{Window: 60, Batch: 6, WarmRounds: 5, MaxSlope: 0.01, Conclude: true}

// ShortSoakConfig is the soak `make test` runs: both runs of `make soak` on a small keyspace,
// 12 short rounds each (under a minute per run) with a fault every 2 rounds until the quiet
// ones: the first three of the schedule, a kill -9 of a stage, a Redis restart and the run's
// first NATS fault. Every key is read at least every 3 rounds. Its rounds are a few seconds,
// the checks' share of a loaded machine under the race detector too little to keep up with
// them: a check that ends after the next round is noted, not failed (in `make soak` it fails).
//
// Its figures are judged over the last 6 rounds without batches, each process's first 4
// left out (the stage killed in round 2 is judged too), at 3% of the mean a round; a figure
// that short a run cannot tell is reported, not failed. The limit is looser than `make
// soak`'s: at the short soak's pace a stage's resident set still climbs to the high-water
// mark of its heap through the last rounds (a sweeper read +2.1% a round over rounds 5-12,
// 95%: +1.1% to +3.1%, 34.6 to 41.0 MiB, on a machine at load 42). Such a window still tells
// a leak of a goroutine or a file a round, or of a tenth of a stage's live heap a round, from
// the scatter of a sound run (TestShortSoakJudges, TestSoakShortLeak).
func ShortSoakConfig() SoakConfig {
	c := DefaultSoakConfig()
	c.Instances, c.Blocks, c.Rounds, c.Duration = 2, 1500, 12, 0
	c.RoundPause, c.WritePeriod, c.MaxStreamBytes = 2*time.Second, 10*time.Millisecond, 64<<20
	c.FaultEvery, c.FaultCycles, c.CheckEvery, c.LagFails = 2, 0, 3, false
	c.CrashAge = [2]time.Duration{3 * time.Second, 10 * time.Second}
	c.Steady = SteadyRule{Window: 6, Batch: 1, WarmRounds: 4, MaxSlope: 0.03}
	c.DrainTimeout = time.Minute
	return c
}

// SoakResult is the outcome of one run.
type SoakResult struct {
	Run    SoakRun
	Seed   uint64
	Rows   []SoakRow
	Steady []Steadiness
	// Ops are KVCM's operations by name, Upstream what upstream's GC collected.
	Ops      map[string]int64
	Upstream int
	Problems []string
	Notes    []string
	// FaultsHit are the rounds each kind of fault hit.
	FaultsHit map[string][]uint64
	Duration  time.Duration
	// TablePath and PlotPath are the files written.
	TablePath, PlotPath string
	Err                 error
}

// OK reports whether the run kept every invariant and stayed steady.
func (r SoakResult) OK() bool { return r.Err == nil }

// RunSoak runs the soak's runs one after the other. An error is returned only when the soak
// cannot run at all; a failed run is a SoakResult with Err.
func RunSoak(ctx context.Context, cfg SoakConfig) ([]SoakResult, error) {
	def := DefaultSoakConfig()
	if len(cfg.Runs) == 0 {
		cfg.Runs = def.Runs
	}
	orDefault(&cfg.Instances, def.Instances)
	orDefault(&cfg.Blocks, def.Blocks)
	orDefault(&cfg.Rounds, def.Rounds)
	if cfg.Steady.Window <= 0 {
		cfg.Steady = def.Steady
	}
	orDefault(&cfg.CheckEvery, def.CheckEvery)
	orDefault(&cfg.RoundPause, def.RoundPause)
	orDefault(&cfg.WritePeriod, def.WritePeriod)
	if cfg.MaxStreamBytes == 0 {
		cfg.MaxStreamBytes = def.MaxStreamBytes
	}
	orDefault(&cfg.DrainTimeout, def.DrainTimeout)
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.ReportDir == "" {
		cfg.ReportDir = cfg.WorkDir
	}
	bins := slices.Clone(soakStages)
	if cfg.Leak.Stage != "" {
		bins = append(bins, LeakyStageBin)
	}
	for _, s := range bins {
		if _, err := os.Stat(cfg.Bins[s]); err != nil {
			return nil, fmt.Errorf("stage binary %s: %w", s, err)
		}
	}
	var out []SoakResult
	for i, run := range cfg.Runs {
		if ctx.Err() != nil {
			break
		}
		seedValue := cfg.Seed + uint64(i)*0x9e3779b97f4a7c15
		fmt.Fprintf(cfg.Out, "--- soak %s: %d×%d blocks, at least %d rounds", run, cfg.Instances, cfg.Blocks, cfg.Rounds)
		if cfg.Duration > 0 {
			fmt.Fprintf(cfg.Out, " and %s", cfg.Duration)
		}
		fmt.Fprintln(cfg.Out)
		res := runSoak(ctx, cfg, run, seedValue)
		status := "ok"
		if res.Err != nil {
			status = "FAILED: " + res.Err.Error()
		}
		fmt.Fprintf(cfg.Out, "--- soak %s: %s (%s)\n", run, status, res.Duration.Round(time.Second))
		out = append(out, res)
	}
	return out, ctx.Err()
}

// soakStages are the stage processes of a soak, one of each.
var soakStages = []string{stageScanner, stageProber, stageDeleter, stageWalker, stageSweeper}

// soak is one run in progress.
type soak struct {
	cfg     SoakConfig
	run     SoakRun
	e       *env
	sm      *soakModel
	work    *kvcmWorkload
	up      *soakUpstream
	rounds  *roundWatch
	stages  *stageWatch
	streams *streamWatch
	keys    *keyWatch
	sched   *faultSchedule
	samples []stageSample
	events  eventTally
	// The faults, struck by their own goroutine (faults) while the rounds are checked: what hit
	// each round (a round's collection may take one round more), and the round the last one hit.
	fmu         sync.Mutex
	faultRounds map[uint64]string
	faultSpans  []faultSpan
	lastFault   uint64
	lastKill    uint64
	// excusedIn is the round in which the last excused lagging check ended: a check after it
	// starts that late, the rounds' checks running one after another.
	excusedIn uint64
	// seedDrained is when round 1's drain, the seed's garbage, was over.
	seedDrained time.Time
	rng         *rand.Rand
	logf        func(format string, a ...any)

	// ends are the run's figures at the end of each round (0: the start).
	ends map[uint64]roundEnd
	// byRound counts kvcm-gc's delete outcomes by the round of their request.
	byRound map[uint64]*roundOutcomes

	mu       sync.Mutex
	problems []string
	table    []SoakRow
	notesOut boundedLog
}

func runSoak(parent context.Context, cfg SoakConfig, run SoakRun, seedValue uint64) (res SoakResult) {
	started := time.Now()
	res = SoakResult{Run: run, Seed: seedValue}
	defer func() {
		if res.Duration == 0 { // a run that stopped before its table
			res.Duration = time.Since(started)
		}
	}()
	timeout := cfg.RunTimeout
	if timeout <= 0 {
		timeout = cfg.Duration + time.Duration(cfg.Rounds)*5*time.Minute
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Out, "    "+format+"\n", a...) }

	fc := Config{Seed: seedValue, Instances: cfg.Instances, Blocks: cfg.Blocks, RoundPause: cfg.RoundPause, Bins: cfg.Bins,
		WorkDir: cfg.WorkDir, Out: cfg.Out}
	// noKVCMGC as flags() runs the stages. spreadYoung: the seeded young WRITING ripen a few a
	// round, so no round's drain (and the check after it) swells with thousands at once.
	sc := scenario{name: "soak", cluster: run.Cluster, sweepFiles: true, noKVCMGC: true, spreadYoung: true}
	e, err := newEnv(ctx, fc, sc, run.Layout, seedValue, logf)
	if err != nil {
		res.Err = fmt.Errorf("set up: %w", err)
		return res
	}
	defer e.close()
	s := &soak{cfg: cfg, run: run, e: e, faultRounds: map[uint64]string{}, logf: logf, ends: map[uint64]roundEnd{},
		byRound: map[uint64]*roundOutcomes{},
		rng:     rand.New(rand.NewPCG(seedValue, seedValue^0x632be59bd9b4e019))}
	err = s.loop(ctx)
	res.Rows, res.Steady, res.Notes = s.rows(), s.steadiness(), s.notes()
	if s.work != nil {
		res.Ops = s.work.opCounts()
	}
	if s.up != nil {
		res.Upstream = s.up.collected()
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if err := e.stopAll(); err != nil {
		errs = append(errs, fmt.Errorf("graceful stop: %w", err))
	}
	res.Problems = s.problems
	if len(s.problems) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d problems, the first: %s", errViolation, len(s.problems), s.problems[0]))
	}
	for _, st := range res.Steady {
		switch {
		case st.Fail && st.Verdict == VerdictGrows:
			errs = append(errs, fmt.Errorf("not steady: %s %s grows %+.2f%% of its mean per round (95%%: %+.2f%% to %+.2f%%) over the last %d rounds",
				st.Stage, st.Metric, 100*st.Rel, 100*st.RelLo, 100*st.RelHi, cfg.Steady.Window))
		case st.Fail:
			errs = append(errs, fmt.Errorf("cannot tell whether %s %s is steady: %+.2f%% of its mean per round (95%%: %+.2f%% to %+.2f%%) over the last %d rounds",
				st.Stage, st.Metric, 100*st.Rel, 100*st.RelLo, 100*st.RelHi, cfg.Steady.Window))
		}
	}
	if s.sched != nil && s.cfg.FaultEvery > 0 {
		res.FaultsHit = s.faultsHit()
		for _, k := range allKinds(run.Cluster) {
			if n := len(res.FaultsHit[k]); n < s.cycles() && err == nil {
				errs = append(errs, fmt.Errorf("fault %s hit %d times, of the %d the run must hold", kindName(k), n, s.cycles()))
			}
		}
	}
	if len(res.Rows) < cfg.Rounds && err == nil {
		errs = append(errs, fmt.Errorf("only %d rounds of %d", len(res.Rows), cfg.Rounds))
	}
	res.Err = errors.Join(errs...)
	res.Duration = time.Since(started) // before the table, whose result line gives it
	name := "soak-" + strings.ReplaceAll(run.String(), "/", "-")
	res.TablePath = filepath.Join(cfg.ReportDir, name+".txt")
	res.PlotPath = filepath.Join(cfg.ReportDir, name+".png")
	if werr := writeSoakFiles(res, cfg); werr != nil {
		res.Err = errors.Join(res.Err, werr)
	}
	return res
}

// soakFlags are the flags of every stage process of a soak, after the fault suite's: rounds of
// the whole keyspace at a brisk pace, the sweep of the seeded NFS storage, the streams capped.
func (s *soak) flags() []string {
	f := append(slices.Clone(sweepFlags),
		"--scan_interval", "10ms", "--scan_batch_size", "256", "--backpressure_high_water", "2000",
		"--workers.prober", "4", "--workers.deleter", "4",
		"--sweep_batch_size", "64", "--sweep_interval", "20ms", "--sweep_round_pause", s.cfg.RoundPause.String(),
		"--jetstream.max_bytes", strconv.FormatInt(s.cfg.MaxStreamBytes, 10),
		// Its writer's orphans are just past orphan_writing_grace, and its model has kvcm-gc
		// take them: not left to KVCM's GC until 30h, as kvcm_gc (on by default) would.
		"--kvcm_gc=false")
	return f
}

func (s *soak) settings() subjects.Settings {
	st := s.e.settings()
	st.MaxBytes = s.cfg.MaxStreamBytes
	return st
}

// loop sets the run up and runs its rounds.
func (s *soak) loop(ctx context.Context) error {
	e := s.e
	e.extra = s.flags()
	e.leak = s.cfg.Leak
	if err := subjects.Ensure(ctx, e.js, e.names, s.settings()); err != nil {
		return fmt.Errorf("set up: limit the streams: %w", err)
	}
	if err := e.snapshot(ctx); err != nil {
		return err
	}
	// The model judges WRITING locations by the graces the stages run with.
	g, err := stageGraces(e.args())
	if err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	// Upstream's GC, as the coexistence scenario runs it: today's KVCM in the location layout,
	// the same collector over KVCM f6aa2b2's writes in the legacy one.
	if s.cfg.Upstream {
		s.up = newSoakUpstream(e.redis.Client(), e.layout, e.manifest.Instances, g.upstream, s.cfg.RoundPause)
	}
	if s.sm, err = newSoakModel(e.before, e.base, e.manifest, seed.EmptyKeep, s.up, g); err != nil {
		return err
	}
	_, fates := s.sm.counts()
	s.logf("seeded %d blocks: %d live locations, %d garbage, %d either (upstream's GC may take them)", e.keys, fates[Keep], fates[Go], fates[Either])
	s.work = newKVCMWorkload(s.sm, e.redis.Client(), e.layout, filepath.Join(e.dir, "data", "nfs"), e.manifest.Instances,
		s.cfg.WritePeriod, s.cfg.CrashAge, s.rng.Uint64())
	s.sched = newFaultSchedule(s.run.Cluster, s.rng.Uint64())
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	s.keys = newKeyWatch(e.clients())
	if err := s.keys.start(wctx, &wg); err != nil {
		return err
	}
	for _, st := range soakStages {
		if _, err := e.startStage(st); err != nil {
			return err
		}
	}
	s.rounds, s.stages, s.streams = newRoundWatch(e, s.sm), newStageWatch(e), newStreamWatch(e)
	s.rounds.onEnd = s.roundEnded
	s.ends[0] = s.snapshot(time.Now())
	wg.Go(func() { s.rounds.run(wctx) })
	wg.Go(func() { s.stages.run(wctx) })
	wg.Go(func() { s.streams.run(wctx) })
	wg.Go(func() { s.work.run(wctx) })
	if s.up != nil {
		if err := s.up.start(wctx); err != nil {
			return err
		}
		defer s.up.halt()
	}

	faults := s.startFaults(ctx)
	defer faults.stop()
	for r := uint64(1); ; r++ {
		if err := s.round(ctx, r); err != nil {
			return err
		}
		if err := faults.failed(); err != nil {
			return err
		}
		if s.over(r) {
			// A fault under way ends first: the last check reads a whole deployment.
			if err := faults.stop(); err != nil {
				return err
			}
			return s.finish(ctx, r)
		}
		if len(s.problems) >= maxProblems {
			return fmt.Errorf("%w: stopped after %d problems", errViolation, len(s.problems))
		}
	}
}

// over reports whether the run may end after round r: its least rounds and duration run, every
// fault cycle it must hold struck, the last fault quietRounds rounds behind, and (a run that
// must conclude on its figures) the steadiness window after the warm-up of the last process a
// fault restarted, so that each stage's window is one process's.
func (s *soak) over(r uint64) bool {
	if int(r) < s.cfg.Rounds || time.Since(s.rounds.started(1)) < s.cfg.Duration {
		return false
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.cfg.FaultEvery > 0 && s.sched.done() < s.cycles() {
		return false
	}
	if s.cfg.Steady.Conclude && r < s.lastKill+uint64(s.cfg.Steady.WarmRounds+s.cfg.Steady.Window) {
		return false
	}
	return r >= s.lastFault+quietRounds
}

// cycles is the number of whole fault cycles the run must hold: FaultCycles on one server,
// twice as many on a cluster.
func (s *soak) cycles() int {
	if s.run.Cluster {
		return 2 * s.cfg.FaultCycles
	}
	return s.cfg.FaultCycles
}

// quietRounds are the last rounds of a run, in which no fault hits: the figures of the window
// end on a deployment that had time to recover from the last fault, not in its aftermath (a
// prober whose batches were redelivered after a node's loss holds more for a round or two).
const quietRounds = 5

// quiet reports whether round r is one of the run's last quietRounds, by the rounds or by the
// duration at the pace so far, once the fault cycles the run must hold are struck.
func (s *soak) quiet(r uint64) bool {
	s.fmu.Lock()
	cycles := s.sched.done()
	s.fmu.Unlock()
	if cycles < s.cycles() || int(r)+quietRounds <= s.cfg.Rounds {
		return false
	}
	if s.cfg.Duration <= 0 {
		return true
	}
	done := time.Since(s.rounds.started(1))
	return done+done/time.Duration(max(r-1, 1))*quietRounds >= s.cfg.Duration
}

// maxProblems stops a run that is going wrong.
const maxProblems = 50

// roundEnd is what the run was at the end of a round, as the round watch saw it end: the
// workload's and upstream's counters, each stage's figures over the round, the streams.
type roundEnd struct {
	at       time.Time
	steps    int64
	made     int64
	ops      map[string]int64
	up       int
	stages   []stageSample
	streams  []StreamFigures
	mergedTo uint64 // the watch saw this round end with that later one at once (whose figures are both's)
}

// snapshot reads the counters now.
func (s *soak) snapshot(at time.Time) roundEnd {
	c := roundEnd{at: at, steps: s.work.steps.Load(), made: s.work.garbageMade.Load(), ops: s.work.opCounts()}
	if s.up != nil {
		c.up = s.up.collected()
	}
	return c
}

// roundEnded is called by the round watch when it sees rounds up to r end (at once when it
// missed some: a fault kept the checkpoint from being read).
func (s *soak) roundEnded(from, r uint64, at time.Time) {
	c := s.snapshot(at)
	c.stages = s.stages.take()
	c.streams = s.streams.figures()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Rounds seen ending with r at once have nothing of their own: their rows span no time,
	// and r's row holds what all of them did.
	for x := from; x < r; x++ {
		e := s.ends[from-1]
		e.stages, e.mergedTo = nil, r
		s.ends[x] = e
	}
	s.ends[r] = c
}

// roundEnd returns what the run was at the end of round r.
func (s *soak) roundEnd(r uint64) roundEnd {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ends[r]
}

// round follows round r from its start to its checks.
func (s *soak) round(ctx context.Context, r uint64) error {
	e := s.e
	if err := e.waitFor(ctx, fmt.Sprintf("round %d", r), func() bool { return s.rounds.seen(r) }); err != nil {
		return err
	}
	row := SoakRow{Round: r}
	// Recorded, not only over: the figures the row reads are taken when the round is seen over.
	if err := e.waitFor(ctx, fmt.Sprintf("the end of round %d", r), func() bool { return s.rounds.recorded(r) }); err != nil {
		return err
	}
	row.Duration = s.rounds.duration(r)
	row.Keys = s.rounds.keys(r)
	row.Fault = s.faultOf(r)
	end, prev := s.roundEnd(r), s.roundEnd(r-1)
	if end.mergedTo > r {
		s.note("round %d was seen ending with round %d at once (the checkpoint could not be read meanwhile): round %d's row holds the figures of both", r, end.mergedTo, end.mergedTo)
	}
	// What happened in the round: from its end to the last round's (the first: from the start).
	row.Span = end.at.Sub(prev.at)
	row.Steps = int(end.steps - prev.steps)
	row.GarbageMade = int(end.made - prev.made)
	if r == 1 {
		row.GarbageMade += len(e.manifest.Garbage())
	}
	row.Upstream = end.up - prev.up
	for _, k := range []string{"start", "finish", "delete", "execute", "orphan", "crash", "lose", "failover", "upgrade", "legacy"} {
		row.Writes += int(end.ops[k] - prev.ops[k])
	}
	row.Streams = end.streams
	for i, st := range end.streams {
		for _, p := range prev.streams {
			if p.Name == st.Name {
				row.Streams[i].Lost -= min(p.Lost, st.Lost)
				row.Streams[i].Left -= min(p.Left, st.Left)
			}
		}
	}
	row.Stages = s.sample(r, end.stages)

	drain, err := s.drain(ctx, r)
	if err != nil {
		return fmt.Errorf("after round %d: %w", r, err)
	}
	row.Drain = drain
	if err := s.readEvents(ctx); err != nil {
		return fmt.Errorf("after round %d: %w", r, err)
	}
	started := time.Now()
	if err := s.keys.barrier(ctx); err != nil {
		s.note("after round %d: %v (every key read)", r, err)
	}
	touched, gap := s.keys.take()
	full := gap || r == 1
	scope := s.sm.scope(r, touched, full, s.cfg.CheckEvery, s.slack)
	rep, sw, err := checkAfterRound(e.manifest, func() (checkReport, error) {
		return s.sm.check(ctx, e.clients(), r, s.slack, scope)
	}, s.sm.changedByUpstream)
	if err != nil {
		return fmt.Errorf("after round %d: %w", r, err)
	}
	s.sm.mu.Lock()
	s.sm.checked = r
	s.sm.mu.Unlock()
	row.Check, row.CheckTime = rep, time.Since(started)
	// The check belongs to the round as long as it ended before the next one did: unless a
	// fault slowed the round, its drain or its check, or it is a full one (the first, with the
	// seed's garbage to collect, or every key read after a Redis restart or a cut of the
	// keyspace notifications: some 110,000 keys in `make soak`, longer than a round at load
	// 40), or it could only start once such a check ended after round r did. Its row says so
	// (IN).
	row.CheckedIn = s.rounds.lastEnded() + 1
	if row.CheckedIn > r+1 {
		row.Lagged = true
		switch {
		case full || s.excusedIn > r || s.faultDuring(s.rounds.started(r), time.Now()):
			s.excusedIn = row.CheckedIn
		case s.cfg.LagFails:
			s.problem("after round %d: the check ended in round %d: the checks lag the rounds", r, row.CheckedIn)
		default:
			s.note("after round %d: the check ended in round %d (the machine's load: %s)", r, row.CheckedIn, loadAverage())
		}
	}
	for _, p := range rep.Problems {
		s.problem("after round %d: %s", r, p)
	}
	row.Swept, row.SweepOrphans = sw.OrphansGone, sw.Orphans
	for _, p := range sw.Problems {
		s.problem("after round %d: %s", r, p)
	}
	for _, p := range s.work.takeProblems() {
		s.problem("round %d, KVCM: %s", r, p)
	}
	if s.up != nil {
		for _, p := range s.up.takeProblems() {
			s.problem("round %d, upstream GC: %s", r, p)
		}
	}
	for _, p := range s.sm.resolveLost(r, s.upstreamRemoved) {
		s.problem("after round %d: %s", r, p)
	}
	for _, p := range s.streams.takeLosses() {
		s.problem("round %d: %s", r, p)
	}
	if s.events.lost > 0 {
		s.problem("round %d: the EVENTS stream discarded %d events before they were read", r, s.events.lost)
		s.events.lost = 0
	}
	if rate := row.rate(); row.Span > 0 && rate < 0.5/s.cfg.WritePeriod.Seconds() && row.Fault == "" {
		s.note("round %d: KVCM's workload took %.0f steps a second, under half its rate of %.0f (the machine's load: %s)",
			r, rate, 1/s.cfg.WritePeriod.Seconds(), loadAverage())
	}
	s.addRow(row)
	fmt.Fprintln(s.cfg.Out, "    "+row.line())
	return nil
}

// upstreamRemoved reports whether upstream's GC removed location ref.
func (s *soak) upstreamRemoved(ref locRef) bool {
	return s.up != nil && s.up.removedRef(UpstreamRef{Key: ref.key, ID: ref.id})
}

// finish ends a run after round r: every key read once more, the sweep's orphans gone.
func (s *soak) finish(ctx context.Context, r uint64) error {
	if err := s.keys.barrier(ctx); err != nil {
		return err
	}
	s.keys.take()
	rep, err := s.sm.check(ctx, s.e.clients(), r, s.slack, checkScope{full: true})
	if err != nil {
		return fmt.Errorf("last check: %w", err)
	}
	for _, p := range rep.Problems {
		s.problem("last check: %s", p)
	}
	s.note("last check: every key (%d) read, %d live locations intact", rep.Keys, rep.Live)
	return s.sweepDone(ctx)
}

// slack is the extra rounds garbage due in round due may take: one when a fault hit the
// round that must collect it or the one before.
func (s *soak) slack(due uint64) uint64 {
	if s.faultOf(due) != "" || s.faultOf(due+1) != "" {
		return 1
	}
	return 0
}

func (s *soak) problem(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems = append(s.problems, fmt.Sprintf(format, a...))
}

// loadAverage is the machine's load average over the last minute ("?" when unknown).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	one, _, _ := strings.Cut(string(b), " ")
	return one
}

// Leak plants a leak in one stage of a soak: the stage runs as LeakyStageBin, which keeps
// Bytes more every Every. The soak must then find that stage's memory growing.
type Leak struct {
	Stage string
	Bytes int
	Every time.Duration
}

func (l Leak) String() string { return fmt.Sprintf("%s:%d/%s", l.Stage, l.Bytes, l.Every) }

// env is LeakyStageBin's environment.
func (l Leak) env() []string {
	return []string{"SOAK_LEAK_STAGE=" + l.Stage, "SOAK_LEAK_BYTES=" + strconv.Itoa(l.Bytes), "SOAK_LEAK_EVERY=" + l.Every.String()}
}

// ParseLeak parses <stage>:<bytes>/<period>, the bytes a number with an optional KiB or MiB:
// walker:256KiB/1s.
func ParseLeak(s string) (Leak, error) {
	stage, rest, ok1 := strings.Cut(s, ":")
	size, period, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || !slices.Contains(soakStages, stage) {
		return Leak{}, fmt.Errorf("leak %q: want <stage>:<bytes>/<period>, the stage one of %s", s, strings.Join(soakStages, ", "))
	}
	mult := 1
	for suffix, m := range map[string]int{"KiB": 1 << 10, "MiB": 1 << 20} {
		if v, ok := strings.CutSuffix(size, suffix); ok {
			size, mult = v, m
		}
	}
	n, err := strconv.Atoi(size)
	every, perr := time.ParseDuration(period)
	if err != nil || n <= 0 || perr != nil || every <= 0 {
		return Leak{}, fmt.Errorf("leak %q: want a positive size and period, as in walker:256KiB/1s", s)
	}
	return Leak{Stage: stage, Bytes: n * mult, Every: every}, nil
}
