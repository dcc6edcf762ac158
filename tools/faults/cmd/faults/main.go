// Command faults runs kvcm-gc's fault suite: the stage binaries as separate processes on a
// seeded keyspace under kill -9, Redis and NATS restarts and outages, a scanner failover, a
// concurrent KVCM-like writer, clock skew and stuck DELETING, in either block layout
// (-layout), checking DESIGN §8 after each scenario. It prints a table of scenarios ×
// outcomes with the seed; -seed reproduces a run. It exits 1 when a scenario fails, keeping
// the servers' files and the process logs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/tools/faults"
)

func main() {
	var wf faults.WorkspaceFlags
	wf.Register(flag.CommandLine)
	cfg := faults.DefaultConfig()
	faults.RegisterKeyspaceFlags(flag.CommandLine, &cfg.Instances, &cfg.Blocks, &cfg.RoundPause)
	flag.IntVar(&cfg.Kills, "kills", cfg.Kills, "kill -9 per kill scenario")
	flag.DurationVar(&cfg.Outage, "outage", cfg.Outage, "how long Redis stays unreachable, and the longest NATS downtime")
	flag.DurationVar(&cfg.WriterFor, "writer-for", cfg.WriterFor, "how long the concurrent writer writes")
	flag.DurationVar(&cfg.ScenarioTimeout, "scenario-timeout", cfg.ScenarioTimeout, "bound of one scenario")
	only := flag.String("scenarios", "", "comma-separated scenarios to run, each optionally as name:location or name:legacy (default all: "+
		strings.Join(faults.ScenarioNames(), ", ")+")")
	flag.StringVar(&cfg.Layout, "layout", faults.LayoutBoth, "block layout of the keyspace: location, legacy, or both (every scenario in the location layout, the layout-sensitive ones in the legacy layout too)")
	quiet := flag.Bool("q", false, "print the table only")
	flag.Parse()

	os.Exit(faults.RunCommand("faults", "kvcm-gc fault suite", wf, func(ctx context.Context, ws *faults.Workspace) (bool, error) {
		cfg.Seed, cfg.Bins, cfg.WorkDir = ws.Seed, ws.Bins, ws.Dir
		if !*quiet {
			cfg.Out = os.Stderr
		}
		if *only != "" {
			cfg.Scenarios = strings.Split(*only, ",")
		}
		results, err := faults.Run(ctx, cfg)
		fmt.Println()
		if werr := faults.WriteTable(os.Stdout, ws.Seed, results); werr != nil {
			return false, errors.Join(err, werr)
		}
		return !slices.ContainsFunc(results, func(r faults.Result) bool { return !r.OK() }), err
	}))
}
