package main

import (
	"context"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/internal/cli"
)

func init() {
	register(&cli.Command{
		Name: "run",
		Summary: "run every stage in one process, with an embedded NATS JetStream server " +
			"(file store in nats.embedded.store_dir) unless nats.url names one",
		Config: true,
		Run: func(ctx context.Context, e *cli.Env) error {
			return (&cli.Process{Stages: app.All, Embedded: true}).Run(ctx, e)
		},
	})
}
