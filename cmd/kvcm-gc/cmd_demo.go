package main

import (
	"context"
	"flag"
	"time"

	"github.com/kvcm-gc/kvcm-gc/internal/cli"
	"github.com/kvcm-gc/kvcm-gc/internal/demo"
)

func demoCommand() *cli.Command {
	o := demo.Options{}
	return &cli.Command{
		Name: "demo",
		Summary: "start a redis-server, seed a KVCM keyspace with garbage, collect one round with the " +
			"all-in-one process, verify and report (needs redis-server on PATH)",
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&o.Instances, "instances", 3, "KVCM instances to seed")
			fs.IntVar(&o.Blocks, "blocks", 20000, "blocks per instance (2 locations each)")
			fs.Float64Var(&o.Garbage, "garbage", 0.1, "fraction of locations that are garbage")
			fs.Float64Var(&o.Tricky, "tricky", 0.1, "fraction of locations that are live but look like garbage")
			fs.Uint64Var(&o.Seed, "seed", 1, "random seed of the keyspace")
			fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "longest the collection may take")
			fs.BoolVar(&o.Keep, "keep", false, "keep the work directory (Redis data, files, JetStream store)")
		},
		Run: func(ctx context.Context, e *cli.Env) error {
			o.Out, o.Err = e.Stdout, e.Stderr
			return demo.Run(ctx, o)
		},
	}
}
