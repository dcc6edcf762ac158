// Command faults runs kvcm-gc's fault suite: the stage binaries as separate processes on a
// seeded keyspace under kill -9, Redis and NATS restarts and outages, a scanner failover, a
// concurrent KVCM-like writer, clock skew and stuck DELETING, in either block layout
// (-layout), checking DESIGN §8 after each scenario. It prints a table of scenarios ×
// outcomes with the seed; -seed reproduces a run. It exits 1 when a scenario fails, keeping
// the servers' files and the process logs.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/tools/faults"
)

func main() {
	os.Exit(run())
}

func run() int {
	def := faults.DefaultConfig()
	seed := flag.Uint64("seed", 0, "seed of every random choice (0: a new one, printed)")
	kills := flag.Int("kills", def.Kills, "kill -9 per kill scenario")
	instances := flag.Int("instances", def.Instances, "KVCM instances in the keyspace")
	blocks := flag.Int("blocks", def.Blocks, "blocks per instance")
	roundPause := flag.Duration("round-pause", def.RoundPause, "round_pause of the stages")
	outage := flag.Duration("outage", def.Outage, "how long Redis stays unreachable, and the longest NATS downtime")
	writerFor := flag.Duration("writer-for", def.WriterFor, "how long the concurrent writer writes")
	timeout := flag.Duration("scenario-timeout", def.ScenarioTimeout, "bound of one scenario")
	only := flag.String("scenarios", "", "comma-separated scenarios to run, each optionally as name:location or name:legacy (default all: "+
		strings.Join(faults.ScenarioNames(), ", ")+")")
	layout := flag.String("layout", faults.LayoutBoth, "block layout of the keyspace: location, legacy, or both (every scenario in the location layout, the layout-sensitive ones in the legacy layout too)")
	work := flag.String("work", "", "directory for servers' files and logs (default a new temporary one, removed after a passing run)")
	quiet := flag.Bool("q", false, "print the table only")
	flag.Parse()

	ctx, stop := faults.Interrupted()
	defer stop()
	ws, err := faults.Prepare(ctx, "kvcm-gc fault suite", "kvcm-gc-faults-", *seed, *work)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	out := os.Stderr
	if *quiet {
		out = nil
	}
	cfg := faults.Config{Seed: ws.Seed, Kills: *kills, Instances: *instances, Blocks: *blocks, RoundPause: *roundPause,
		Outage: *outage, WriterFor: *writerFor, ScenarioTimeout: *timeout, Bins: ws.Bins, WorkDir: ws.Dir, Layout: *layout,
		RSSLimit: def.RSSLimit, GoroutineLimit: def.GoroutineLimit}
	if out != nil {
		cfg.Out = out
	}
	if *only != "" {
		cfg.Scenarios = strings.Split(*only, ",")
	}
	results, err := faults.Run(ctx, cfg)
	fmt.Println()
	if werr := faults.WriteTable(os.Stdout, ws.Seed, results); werr != nil {
		fmt.Fprintln(os.Stderr, "faults:", werr)
		return 1
	}
	fmt.Printf("total %s\n", ws.Elapsed())
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	for _, r := range results {
		if !r.OK() {
			fmt.Printf("FAILED; logs and server files kept in %s\n", ws.Dir)
			return 1
		}
	}
	ws.Passed()
	return 0
}
