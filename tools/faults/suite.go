package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// Config is one run of the suite.
type Config struct {
	// Seed drives every random choice (kill moments and targets, the writer, the keyspace).
	Seed uint64
	// Kills is the number of kill -9 of each kill scenario.
	Kills int
	// Instances and Blocks (per instance) size the seeded keyspace.
	Instances, Blocks int
	// RoundPause is the stages' round_pause: short, so rounds follow each other.
	RoundPause time.Duration
	// Outage is how long Redis stays unreachable, and the longest NATS downtime.
	Outage time.Duration
	// WriterFor is how long the concurrent writer writes.
	WriterFor time.Duration
	// Scenarios selects scenarios by name, each optionally with the layout it runs in
	// ("stuck-deleting:legacy"); empty runs them all.
	Scenarios []string
	// Layout is the block layout the scenarios seed and write (a scenario named with a layout
	// of its own runs in that one): LayoutLocation, LayoutLegacy, or LayoutBoth (also when
	// empty).
	Layout string
	// Bins are the stage binaries by command name (scanner, prober, deleter).
	Bins map[string]string
	// WorkDir holds each scenario's servers' files, data and process logs.
	WorkDir string
	// Out receives progress lines; nil discards them.
	Out io.Writer
	// RSSLimit caps the peak resident set size of every stage process, in bytes.
	RSSLimit int64
	// GoroutineLimit caps the goroutines of every stage process at the end of a scenario.
	GoroutineLimit int
	// ScenarioTimeout bounds one scenario.
	ScenarioTimeout time.Duration
}

// Defaults of a full run.
func DefaultConfig() Config {
	return Config{Kills: 5, Instances: 3, Blocks: 400, RoundPause: time.Second, Outage: 3 * time.Second,
		WriterFor: 5 * time.Second, RSSLimit: 256 << 20, GoroutineLimit: 200, ScenarioTimeout: 3 * time.Minute}
}

// Values of Config.Layout.
const (
	// LayoutLocation runs every scenario in the location layout (today's KVCM).
	LayoutLocation = "location"
	// LayoutLegacy runs every scenario in the legacy layout (KVCM f6aa2b2).
	LayoutLegacy = "legacy"
	// LayoutBoth runs every scenario in the location layout, and the scenarios whose faults
	// meet what differs between the layouts (the deleter's writes cut by a kill, a KVCM-like
	// writer, block ages, stuck DELETING) in the legacy layout too. The other faults (the
	// scanner's and the prober's kills, Redis and NATS restarts and outages, failovers) touch
	// nothing that depends on the layout, and -layout legacy runs them in it.
	LayoutBoth = "both"
)

// driverGoroutineSlack is how many more goroutines than before a scenario the driver may hold
// after it (runtime and client background work that winds down on its own schedule).
const driverGoroutineSlack = 5

// Result is the outcome of one scenario.
type Result struct {
	Scenario string
	About    string
	// Layout is the block layout the scenario ran in: location or legacy.
	Layout string
	Report Report
	// Rounds is the number of rounds after the fault ended until everything was as expected.
	Rounds     int
	Restarts   int
	PeakRSS    int64 // bytes, the largest of any stage process
	Goroutines int   // the most of any stage process at the end
	// DriverLeak is the number of the driver's goroutines the scenario left behind.
	DriverLeak int
	Notes      string
	Duration   time.Duration
	Err        error
}

// OK reports whether the scenario kept every invariant.
func (r Result) OK() bool { return r.Err == nil }

// Run runs the selected scenarios one after the other, each on fresh servers, and returns
// their results. An error is returned only when the suite itself cannot run (unknown
// scenario, no binaries); a scenario that fails is a Result with Err.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	def := DefaultConfig()
	orDefault(&cfg.Kills, def.Kills)
	orDefault(&cfg.Instances, def.Instances)
	orDefault(&cfg.Blocks, def.Blocks)
	orDefault(&cfg.RoundPause, def.RoundPause)
	orDefault(&cfg.Outage, def.Outage)
	orDefault(&cfg.WriterFor, def.WriterFor)
	orDefault(&cfg.RSSLimit, def.RSSLimit)
	orDefault(&cfg.GoroutineLimit, def.GoroutineLimit)
	orDefault(&cfg.ScenarioTimeout, def.ScenarioTimeout)
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	for _, s := range stageCommands {
		if _, err := os.Stat(cfg.Bins[s]); err != nil {
			return nil, fmt.Errorf("stage binary %s: %w", s, err)
		}
	}
	run, err := plan(cfg)
	if err != nil {
		return nil, err
	}
	var out []Result
	for i, p := range run {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(cfg.Out, "--- %s (%s layout): %s\n", p.sc.name, p.layout, p.sc.about)
		r := runScenario(ctx, cfg, p.sc, p.layout, cfg.Seed+uint64(i)*0x9e3779b97f4a7c15)
		status := "ok"
		if r.Err != nil {
			status = "FAILED: " + r.Err.Error()
		}
		fmt.Fprintf(cfg.Out, "--- %s (%s layout): %s (%s)\n", p.sc.name, p.layout, status, r.Duration.Round(100*time.Millisecond))
		out = append(out, r)
	}
	return out, ctx.Err()
}

// orDefault sets *v to def when it is not set: zero, or negative.
func orDefault[T ~int | ~int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// planned is one scenario in one layout.
type planned struct {
	sc     scenario
	layout kvcm.Layout
}

// plan lists the runs cfg selects, in order: each scenario selected (all by default) in the
// layout it names, else in cfg.Layout's (both: the location layout, then the legacy layout
// for the scenarios marked legacy).
func plan(cfg Config) ([]planned, error) {
	var layouts []kvcm.Layout
	switch cfg.Layout {
	case LayoutLocation:
		layouts = []kvcm.Layout{kvcm.LayoutLocation}
	case LayoutLegacy:
		layouts = []kvcm.Layout{kvcm.LayoutLegacy}
	case LayoutBoth, "":
		layouts = []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy}
	default:
		return nil, fmt.Errorf("unknown layout %q (%s, %s or %s)", cfg.Layout, LayoutLocation, LayoutLegacy, LayoutBoth)
	}
	both := len(layouts) == 2
	names := cfg.Scenarios
	if len(names) == 0 {
		names = ScenarioNames()
	}
	var out []planned
	for _, spec := range names {
		name, layout, named := strings.Cut(spec, ":")
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q (%s)", name, strings.Join(ScenarioNames(), ", "))
		}
		sc := scenarios[i]
		if named {
			l, ok := kvcm.ParseLayout(layout)
			if !ok || l != kvcm.LayoutLocation && l != kvcm.LayoutLegacy {
				return nil, fmt.Errorf("scenario %q: unknown layout %q (%s or %s)", name, layout, LayoutLocation, LayoutLegacy)
			}
			out = append(out, planned{sc: sc, layout: l})
			continue
		}
		for _, l := range layouts {
			if !both || l == kvcm.LayoutLocation || sc.legacy {
				out = append(out, planned{sc: sc, layout: l})
			}
		}
	}
	return out, nil
}

// ScenarioNames lists the scenarios in the order they run.
func ScenarioNames() []string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

func runScenario(parent context.Context, cfg Config, sc scenario, layout kvcm.Layout, seedValue uint64) (res Result) {
	started := time.Now()
	res = Result{Scenario: sc.name, About: sc.about, Layout: layout.String()}
	defer func() { res.Duration = time.Since(started) }()
	ctx, cancel := context.WithTimeout(parent, cfg.ScenarioTimeout)
	defer cancel()
	base := runtime.NumGoroutine()
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Out, "    "+format+"\n", a...) }

	e, err := newEnv(ctx, cfg, sc, layout, seedValue, logf)
	if err != nil {
		res.Err = fmt.Errorf("set up: %w", err)
		return res
	}
	closed := false
	closeEnv := func() {
		if !closed {
			closed = true
			e.close()
		}
	}
	defer closeEnv()
	fail := func(err error) Result {
		res.Err = err
		res.Restarts, res.PeakRSS = e.restarts, e.peakRSS()
		return res
	}

	if sc.setup != nil {
		if err := sc.setup(ctx, e); err != nil {
			return fail(fmt.Errorf("set up: %w", err))
		}
	}
	if err := e.snapshot(ctx); err != nil {
		return fail(err)
	}
	notes, expect, err := sc.run(ctx, e)
	res.Notes = notes
	if err != nil {
		return fail(err)
	}
	var ck pipeline.Checkpoint
	if err := e.waitFor(ctx, "the checkpoint after the fault", func() bool {
		var err error
		ck, err = e.checkpoint(ctx)
		return err == nil
	}); err != nil {
		return fail(fmt.Errorf("read checkpoint after the fault: %w", err))
	}
	if expect == nil {
		x := Expect{Before: e.before, Locs: e.base, Present: e.present}
		expect = &x
	}
	rounds, rep, err := converge(ctx, e, *expect, ck.Round)
	res.Rounds, res.Report = rounds, rep
	if err != nil {
		return fail(err)
	}
	if sc.after != nil {
		more, err := sc.after(ctx, e)
		res.Notes = strings.TrimPrefix(res.Notes+"; "+more, "; ")
		if err != nil {
			return fail(err)
		}
	}
	n, err := e.goroutines(ctx)
	if err != nil {
		return fail(err)
	}
	res.Goroutines = n
	if err := e.stopAll(); err != nil {
		return fail(fmt.Errorf("graceful stop: %w", err))
	}
	res.Restarts, res.PeakRSS = e.restarts, e.peakRSS()
	closeEnv()

	var errs []error
	if res.PeakRSS > cfg.RSSLimit {
		errs = append(errs, fmt.Errorf("peak RSS %d MiB above the limit of %d MiB", res.PeakRSS>>20, cfg.RSSLimit>>20))
	}
	if res.Goroutines > cfg.GoroutineLimit {
		errs = append(errs, fmt.Errorf("%d goroutines in a stage process, above the limit of %d", res.Goroutines, cfg.GoroutineLimit))
	}
	// The driver's own goroutines (NATS server, clients, writer) must wind down.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base+driverGoroutineSlack && time.Now().Before(deadline) {
		time.Sleep(pollPeriod) // goroutines exit on their own schedule; nothing to await
	}
	res.DriverLeak = max(runtime.NumGoroutine()-base, 0)
	if runtime.NumGoroutine() > base+driverGoroutineSlack {
		errs = append(errs, fmt.Errorf("%d goroutines left in the driver after the scenario", res.DriverLeak))
	}
	res.Err = errors.Join(errs...)
	return res
}

// converge waits, round by round after the fault ended (during round r0), until Redis and
// the files are exactly as expected, at most two rounds: every garbage location must be gone
// within two rounds after the fault.
func converge(ctx context.Context, e *env, x Expect, r0 uint64) (int, Report, error) {
	const maxRounds = 2
	var rep Report
	for k := uint64(0); k <= maxRounds; k++ {
		n := r0 + k
		if err := e.waitFor(ctx, fmt.Sprintf("the end of round %d", n), func() bool {
			ck, err := e.checkpoint(ctx)
			return err == nil && (ck.Round > n || ck.Round == n && !ck.InRound)
		}); err != nil {
			return int(k), rep, err
		}
		if err := e.waitFor(ctx, "the consumers to drain", func() bool { return e.drained(ctx) }); err != nil {
			return int(k), rep, err
		}
		var err error
		rdbs := e.clients()
		if rep, err = x.Check(ctx, rdbs[0], rdbs[1:]...); err != nil {
			return int(k), rep, err
		}
		if rep.OK() {
			return int(k), rep, nil
		}
		e.logf("after round %d: %d mismatches, e.g. %s", n, rep.Mismatch, first(rep.Problems))
	}
	return maxRounds, rep, fmt.Errorf("%w: not as expected %d rounds after the fault: %s", errViolation, maxRounds,
		strings.Join(rep.Problems, "; "))
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
