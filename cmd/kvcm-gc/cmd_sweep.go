package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/internal/cli"
)

// sweepCommands are the stage commands of the sweep of orphan data files (DESIGN §7); run
// includes both stages.
func sweepCommands() []*cli.Command {
	return []*cli.Command{
		cli.StageCommand("walker", "run the walker: walk swept storages, publish candidate orphan files (one walker per storage)", app.Stages{Walker: true}),
		cli.StageCommand("sweeper", "run the sweeper: quarantine orphan data files, check them again, unlink them", app.Stages{Sweeper: true}),
	}
}
