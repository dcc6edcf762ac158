// Command prober runs kvcm-gc's prober stage alone, as many replicas as the probing load
// needs. It judges scan batches (orphan WRITING past the grace, SERVING whose data is
// definitively missing) and publishes delete requests carrying the exact bytes it judged.
//
// Every setting comes from the configuration (--config file, KVCMGC_* environment, a flag per
// key; see --help). SIGTERM or SIGINT stops it gracefully: in-flight batches finish or go
// back to the server.
package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
)

func main() {
	cli.StageMain(
		"prober",
		"Runs the prober: judges scan batches and publishes delete requests.",
		app.Stages{Prober: true},
	)
}
