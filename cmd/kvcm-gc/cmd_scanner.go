package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/internal/cli"
)

func init() {
	register(cli.StageCommand("scanner", "run the leader-elected scanner (any number of replicas; one scans)", app.Stages{Scanner: true}))
}
