package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/internal/cli"
)

func init() {
	register(cli.StageCommand("deleter", "run the deleter: execute delete requests with compare-and-swap deletes", app.Stages{Deleter: true}))
}
