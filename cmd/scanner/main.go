// Command scanner runs kvcm-gc's scanner stage alone. Any number of replicas may run: one
// holds the leader lease and scans, the others wait to take over. The leader walks every
// block of every collected KVCM instance with read-only commands and publishes the pages as
// scan batches.
//
// Every setting comes from the configuration (--config file, KVCMGC_* environment, a flag per
// key; see --help). SIGTERM or SIGINT stops it gracefully and releases the lease.
package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/internal/cli"
)

func main() {
	cli.StageMain("scanner", "Runs the leader-elected scanner: reads every block of every collected instance and publishes scan batches.", app.Stages{Scanner: true})
}
