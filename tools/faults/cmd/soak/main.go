// Command soak runs kvcm-gc's soak: every stage as its own process for many rounds on a seeded
// keyspace, while a KVCM-like workload writes, reads and deletes all the time, upstream's GC
// collects beside kvcm-gc, and a fault hits every few rounds. After each round it checks the
// keyspace against what KVCM wrote, the round's backlog, the streams' limits and each stage's
// memory, goroutines and open files; at the end their slope over the last rounds must be
// flat. It prints a table per run and writes it, with a plot, to -report; it exits 1 when a
// run fails, keeping the servers' files and the process logs.
package main

import (
	"context"
	"errors"
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
	var wf faults.WorkspaceFlags
	wf.Register(flag.CommandLine)
	cfg := faults.DefaultSoakConfig()
	configFlags(flag.CommandLine, &cfg)
	short := flag.Bool("short", false, "the short soak that make test runs (its sizes; the other flags given override them)")
	runs := flag.String("runs", "location/single,legacy/cluster", "runs, each <layout>/<single|cluster>, one after the other")
	leak := flag.String("leak", "", "plant a leak in one stage, <stage>:<bytes>/<period> (a test of the soak itself)")
	report := flag.String("report", ".", "directory receiving each run's table (soak-<run>.txt) and plot (soak-<run>.png)")
	flag.Parse()

	if *short {
		// The short soak's sizes, with the flags given set again on top of them.
		shortCfg := faults.ShortSoakConfig()
		given := flag.NewFlagSet("short", flag.ContinueOnError)
		configFlags(given, &shortCfg)
		flag.Visit(func(f *flag.Flag) {
			if given.Lookup(f.Name) != nil {
				_ = given.Set(f.Name, f.Value.String()) // parsed once already
			}
		})
		cfg = shortCfg
	}
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
	return faults.RunCommand("soak", "kvcm-gc soak", wf, func(ctx context.Context, ws *faults.Workspace) (bool, error) {
		cfg.Seed, cfg.WorkDir, cfg.Bins = ws.Seed, ws.Dir, ws.Bins
		if cfg.Leak.Stage != "" {
			leaky, err := faults.Build(ctx, filepath.Join(ws.Dir, "bin"), faults.LeakyStageBin)
			if err != nil {
				return false, err
			}
			cfg.Bins[faults.LeakyStageBin] = leaky[faults.LeakyStageBin]
		}
		cfg.ReportDir, cfg.Out = *report, os.Stderr
		results, err := faults.RunSoak(ctx, cfg)
		passed := true
		for _, r := range results {
			fmt.Println()
			if werr := faults.WriteSoakTable(os.Stdout, r, cfg); werr != nil {
				return false, errors.Join(err, werr)
			}
			fmt.Printf("table: %s, plot: %s\n", r.TablePath, r.PlotPath)
			passed = passed && r.OK()
		}
		return passed, err
	})
}

// configFlags adds to fs the flags of the soak's configuration, each defaulting to its value
// in cfg.
func configFlags(fs *flag.FlagSet, cfg *faults.SoakConfig) {
	faults.RegisterKeyspaceFlags(fs, &cfg.Instances, &cfg.Blocks, &cfg.RoundPause)
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "least rounds per run")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "least duration per run, from its first round (whole rounds)")
	fs.IntVar(&cfg.FaultEvery, "fault-every", cfg.FaultEvery, "rounds between two faults (0: none)")
	fs.IntVar(&cfg.FaultCycles, "fault-cycles", cfg.FaultCycles,
		"least whole cycles of every fault kind per run (twice as many on a cluster)")
	fs.IntVar(&cfg.CheckEvery, "check-every", cfg.CheckEvery, "rounds within which every key is read by a check")
	fs.DurationVar(&cfg.WritePeriod, "write-period", cfg.WritePeriod, "pause between two of KVCM's operations")
	fs.BoolVar(&cfg.Upstream, "upstream", cfg.Upstream, "run upstream KVCM's GC beside kvcm-gc")
	fs.Int64Var(&cfg.MaxStreamBytes, "max-stream-bytes", cfg.MaxStreamBytes, "max_bytes of each stream")
	fs.IntVar(&cfg.Steady.Window, "window", cfg.Steady.Window, "last rounds whose samples must be flat")
	fs.IntVar(&cfg.Steady.Batch, "batch", cfg.Steady.Batch, "rounds of one batch mean of the steadiness fit")
	fs.Float64Var(&cfg.Steady.MaxSlope, "max-slope", cfg.Steady.MaxSlope,
		"largest slope per round allowed, as a share of the mean")
	fs.IntVar(&cfg.Steady.WarmRounds, "warm-rounds", cfg.Steady.WarmRounds, "rounds a process runs before its samples count")
	fs.BoolVar(&cfg.Steady.Conclude, "conclude", cfg.Steady.Conclude,
		"a figure whose steadiness the run cannot tell fails it")
}
