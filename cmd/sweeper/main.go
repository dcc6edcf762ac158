// Command sweeper runs kvcm-gc's sweeper alone: the second stage of the sweep of orphan data
// files (DESIGN §7). Any number of replicas may run; the sweeper consumer's MaxAckPending
// (max_inflight_sweep_batches) caps the batches in flight across all of them. A file no
// location of its block names is moved into a quarantine beside the data, the block read
// again (a location that names it now moves it back), and after sweep_quarantine checked once
// more and unlinked.
//
// Every setting comes from the configuration (--config file, KVCMGC_* environment, a flag per
// key; see --help). SIGTERM or SIGINT stops it gracefully: batches in flight finish or go back
// to the server, where a redelivery resumes them from the files' state.
package main

import (
	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
)

func main() {
	cli.StageMain("sweeper", "Runs the sweeper: moves orphan data files into quarantine, checks "+
		"them again, unlinks them.", app.Stages{Sweeper: true})
}
