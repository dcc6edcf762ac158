// Command walker runs kvcm-gc's walker alone: the first stage of the sweep of orphan data
// files (DESIGN §7). For every storage whose override sets sweep it takes a lease (one walker
// walks a storage, any number of replicas share the storages), walks the storage's files
// page by page, checkpointed, and publishes the per-block files older than sweep_grace to the
// SWEEP stream; it also looks into the storage's quarantine so the sweepers finish or undo
// what is there. It reads the registry and the files and writes neither.
//
// Every setting comes from the configuration (--config file, KVCMGC_* environment, a flag per
// key; see --help). SIGTERM or SIGINT stops it gracefully: the pages published are recorded
// and the leases released.
package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
)

func main() {
	cli.StageMain(
		"walker",
		"Runs the walker: walks swept storages and publishes their candidate orphan files.",
		app.Stages{Walker: true},
	)
}
