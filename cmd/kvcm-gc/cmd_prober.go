package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/internal/cli"
)

func init() {
	register(cli.StageCommand("prober", "run the prober: judge scan batches, publish delete requests", app.Stages{Prober: true}))
}
