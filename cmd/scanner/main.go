// Command scanner runs kvcm-gc's scanner stage alone. Any number of replicas may run: they
// divide the metadata stores, each store walked by the replica holding its lease, and a
// replica takes over the stores of one that stops. A store's walk reads every block of the
// collected instances in it with read-only commands and publishes the pages as scan batches.
//
// Every setting comes from the configuration (--config file, KVCMGC_* environment, a flag per
// key; see --help). SIGTERM or SIGINT stops it gracefully and releases its store leases.
package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
)

func main() {
	cli.StageMain("scanner", "Runs the scanner: walks the metadata stores whose leases it holds "+
		"(replicas divide the stores) and publishes scan batches.", app.Stages{Scanner: true})
}
