package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/demo"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

func demoCommand() *cli.Command {
	o := demo.Options{}
	var layout string
	return &cli.Command{
		Name: "demo",
		Summary: "start a redis-server, seed a KVCM keyspace with garbage, collect one round with the " +
			"all-in-one process, verify and report (needs redis-server on PATH)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&layout, "layout", "location", "block layout of the seeded keyspace: "+
				"location (today's KVCM) or legacy (KVCM f6aa2b2)")
			fs.BoolVar(&o.Ambiguous, "ambiguous", false, "legacy layout: also seed a few "+
				"upgraded blocks that hold both layouts (the location layout always has some)")
			fs.StringVar(&o.EmptyBlock, "empty-block", "", "the collector's empty_block, keep or "+
				"delete, which the verification checks (default: the collector's)")
			fs.IntVar(&o.Instances, "instances", 3, "KVCM instances to seed")
			fs.IntVar(&o.Blocks, "blocks", 20000, "blocks per instance (2 locations each)")
			fs.Float64Var(&o.Garbage, "garbage", 0.1, "fraction of locations that are garbage")
			fs.Float64Var(&o.Tricky, "tricky", 0.1, "fraction of locations that are live but look like garbage")
			fs.Uint64Var(&o.Seed, "seed", 1, "random seed of the keyspace")
			fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "longest the collection may take")
			fs.BoolVar(&o.Keep, "keep", false, "keep the work directory (Redis data, files, JetStream store)")
			fs.BoolVar(&o.NoSweep, "no-sweep", false, "leave out the sweep of orphan data files "+
				"(seeded files, walker and sweeper, their verification)")
			fs.BoolVar(&o.DryRun, "dry-run", false, "collect with dry_run: true (no sweep): "+
				"check that nothing changed and print what the deletes would free (kvcm-gc report)")
		},
		Check: func(*cli.Env) error {
			l, ok := kvcm.ParseLayout(layout)
			if !ok || l != kvcm.LayoutLocation && l != kvcm.LayoutLegacy {
				return fmt.Errorf("--layout %q: want location or legacy", layout)
			}
			if o.EmptyBlock != "" && o.EmptyBlock != seed.EmptyKeep && o.EmptyBlock != seed.EmptyDelete {
				return fmt.Errorf("--empty-block %q: want keep or delete", o.EmptyBlock)
			}
			o.Layout = l
			return nil
		},
		Run: func(ctx context.Context, e *cli.Env) error {
			o.Out, o.Err = e.Stdout, e.Stderr
			return demo.Run(ctx, o)
		},
	}
}
