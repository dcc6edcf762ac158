// Command soak runs kvcm-gc's soak: every stage as its own process for many rounds on a seeded
// keyspace, while a KVCM-like workload writes, reads and deletes all the time, upstream's GC
// collects beside kvcm-gc, and a fault hits every few rounds. After each round it checks the
// keyspace against what KVCM wrote, the round's backlog, the streams' limits and each stage's
// memory, goroutines and open files; at the end their slope over the last rounds must be
// flat. It prints a table per run and writes it, with a plot, to -report; it exits 1 when a
// run fails, keeping the servers' files and the process logs.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/faults"
)

func main() {
	os.Exit(run())
}

func run() int {
	def := faults.DefaultSoakConfig()
	short := flag.Bool("short", false, "the short soak that make test runs (its sizes; the other flags given override them)")
	seed := flag.Uint64("seed", 0, "seed of every random choice (0: a new one, printed)")
	runs := flag.String("runs", "location/single,legacy/cluster", "runs, each <layout>/<single|cluster>, one after the other")
	instances := flag.Int("instances", def.Instances, "KVCM instances in the keyspace")
	blocks := flag.Int("blocks", def.Blocks, "blocks per instance")
	rounds := flag.Int("rounds", def.Rounds, "least rounds per run")
	duration := flag.Duration("duration", def.Duration, "least duration per run, from its first round (whole rounds)")
	roundPause := flag.Duration("round-pause", def.RoundPause, "round_pause of the stages")
	faultEvery := flag.Int("fault-every", def.FaultEvery, "rounds between two faults (0: none)")
	faultCycles := flag.Int("fault-cycles", def.FaultCycles, "least whole cycles of every fault kind per run (twice as many on a cluster)")
	checkEvery := flag.Int("check-every", def.CheckEvery, "rounds within which every key is read by a check")
	writePeriod := flag.Duration("write-period", def.WritePeriod, "pause between two of KVCM's operations")
	upstream := flag.Bool("upstream", def.Upstream, "run upstream KVCM's GC beside kvcm-gc")
	maxBytes := flag.Int64("max-stream-bytes", def.MaxStreamBytes, "max_bytes of each stream")
	window := flag.Int("window", def.Steady.Window, "last rounds whose samples must be flat")
	batch := flag.Int("batch", def.Steady.Batch, "rounds of one batch mean of the steadiness fit")
	maxSlope := flag.Float64("max-slope", def.Steady.MaxSlope, "largest slope per round allowed, as a share of the mean")
	warm := flag.Int("warm-rounds", def.Steady.WarmRounds, "rounds a process runs before its samples count")
	conclude := flag.Bool("conclude", def.Steady.Conclude, "a figure whose steadiness the run cannot tell fails it")
	leak := flag.String("leak", "", "plant a leak in one stage, <stage>:<bytes>/<period> (a test of the soak itself)")
	work := flag.String("work", "", "directory for servers' files and logs (default a new temporary one, removed after a passing run)")
	report := flag.String("report", ".", "directory receiving each run's table (soak-<run>.txt) and plot (soak-<run>.png)")
	flag.Parse()

	cfg := def
	if *short {
		cfg = faults.ShortSoakConfig()
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	pick := func(name string, apply func()) {
		if set[name] || !*short {
			apply()
		}
	}
	pick("instances", func() { cfg.Instances = *instances })
	pick("blocks", func() { cfg.Blocks = *blocks })
	pick("rounds", func() { cfg.Rounds = *rounds })
	pick("duration", func() { cfg.Duration = *duration })
	pick("round-pause", func() { cfg.RoundPause = *roundPause })
	pick("fault-every", func() { cfg.FaultEvery = *faultEvery })
	pick("fault-cycles", func() { cfg.FaultCycles = *faultCycles })
	pick("check-every", func() { cfg.CheckEvery = *checkEvery })
	pick("write-period", func() { cfg.WritePeriod = *writePeriod })
	pick("upstream", func() { cfg.Upstream = *upstream })
	pick("max-stream-bytes", func() { cfg.MaxStreamBytes = *maxBytes })
	pick("window", func() { cfg.Steady.Window = *window })
	pick("batch", func() { cfg.Steady.Batch = *batch })
	pick("max-slope", func() { cfg.Steady.MaxSlope = *maxSlope })
	pick("warm-rounds", func() { cfg.Steady.WarmRounds = *warm })
	pick("conclude", func() { cfg.Steady.Conclude = *conclude })
	if *leak != "" {
		l, err := faults.ParseLeak(*leak)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			return 2
		}
		cfg.Leak = l
	}
	cfg.Runs = nil
	for _, spec := range strings.Split(*runs, ",") {
		layout, topo, _ := strings.Cut(strings.TrimSpace(spec), "/")
		l, ok := kvcm.ParseLayout(layout)
		if !ok || l != kvcm.LayoutLocation && l != kvcm.LayoutLegacy || topo != "single" && topo != "cluster" {
			fmt.Fprintf(os.Stderr, "soak: run %q: want <location|legacy>/<single|cluster>\n", spec)
			return 2
		}
		cfg.Runs = append(cfg.Runs, faults.SoakRun{Layout: l, Cluster: topo == "cluster"})
	}
	ctx, stop := faults.Interrupted()
	defer stop()
	ws, err := faults.Prepare(ctx, "kvcm-gc soak", "kvcm-gc-soak-", *seed, *work)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	cfg.Seed, cfg.WorkDir, cfg.Bins = ws.Seed, ws.Dir, ws.Bins
	if cfg.Leak.Stage != "" {
		leaky, err := faults.Build(ctx, filepath.Join(ws.Dir, "bin"), faults.LeakyStageBin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			return 1
		}
		cfg.Bins[faults.LeakyStageBin] = leaky[faults.LeakyStageBin]
	}
	cfg.ReportDir, cfg.Out = *report, os.Stderr
	results, err := faults.RunSoak(ctx, cfg)
	failed := err != nil
	for _, r := range results {
		fmt.Println()
		if werr := faults.WriteSoakTable(os.Stdout, r, cfg); werr != nil {
			fmt.Fprintln(os.Stderr, "soak:", werr)
			return 1
		}
		fmt.Printf("table: %s, plot: %s\n", r.TablePath, r.PlotPath)
		failed = failed || !r.OK()
	}
	fmt.Printf("total %s\n", ws.Elapsed())
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
	}
	if failed {
		fmt.Printf("FAILED (reproduce with -seed %d); logs and server files kept in %s\n", cfg.Seed, ws.Dir)
		return 1
	}
	ws.Passed()
	return 0
}
