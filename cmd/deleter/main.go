// Command deleter runs kvcm-gc's deleter stage alone. Any number of replicas may run; the
// deleter consumer's MaxAckPending (max_inflight_delete_requests) caps the deletes in flight
// across all of them. Each target is marked DELETING, its data removed, and its location
// removed, every step a compare-and-swap on the exact bytes the prober judged.
//
// Every setting comes from the configuration (--config file, KVCMGC_* environment, a flag per
// key; see --help). SIGTERM or SIGINT stops it gracefully: in-flight requests finish or go
// back to the server, where a redelivery resumes them.
package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
)

func main() {
	cli.StageMain("deleter", "Runs the deleter: executes delete requests with exact-value "+
		"compare-and-swap deletes.", app.Stages{Deleter: true})
}
