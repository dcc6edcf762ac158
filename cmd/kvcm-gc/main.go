// Command kvcm-gc is kvcm-gc's all-in-one command line: each stage on its own (scanner,
// prober, deleter, and the sweep's walker and sweeper), all of them in one process with an
// embedded NATS JetStream server (run), the operator's commands (status, replay, dlq, pause,
// resume, ensure, report), the seed generator (seed), the one-command demonstration (demo) and the version.
//
// The command table is built here, in one place; each command declares its flags, help and
// run together where it is defined (package cli for the stages and the operator's commands,
// cmd_*.go for the others).
package main

import (
	"os"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
)

// commands is the command table, in the order the command list shows it.
func commands() []*cli.Command {
	table := []*cli.Command{
		cli.StageCommand("scanner", "run the scanner (any number of replicas: they divide the "+
			"metadata stores, a lease each)", app.Stages{Scanner: true}),
		cli.StageCommand("prober", "run the prober: judge scan batches, publish delete requests", app.Stages{Prober: true}),
		cli.StageCommand("deleter", "run the deleter: execute delete requests with "+
			"compare-and-swap deletes", app.Stages{Deleter: true}),
		cli.StageCommand("walker", "run the walker: walk swept storages, publish candidate "+
			"orphan files (one walker per storage)", app.Stages{Walker: true}),
		cli.StageCommand(
			"sweeper",
			"run the sweeper: quarantine orphan data files, check them again, unlink them",
			app.Stages{Sweeper: true},
		),
		cli.AllInOneCommand(),
	}
	table = append(table, cli.OperatorCommands()...)
	return append(table, seedCommand(), demoCommand(), versionCommand())
}

func main() {
	os.Exit(cli.Main("kvcm-gc", commands(), os.Args[1:], os.Stdout, os.Stderr))
}
