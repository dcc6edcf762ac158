package cli

import (
	"context"
	"flag"

	"github.com/kvcm-gc/kvcm-gc/ops"
)

// ReportCommand: report [--round N] [--instance ID] [--json] [--no-progress].
func ReportCommand() *Command {
	var q ops.ReportQuery
	var asJSON, noProgress bool
	return &Command{
		Name:    "report",
		Summary: "what a round's deletes free, or in a dry run would free: locations, files, bytes",
		Help: "Sums up the delete outcomes of a round: the locations the deleter removed (deleted, partial)\n" +
			"or in a dry run would remove (would_delete), with the data objects their spec URIs name and\n" +
			"their bytes (the URIs' size=, as KVCM accounts them), by instance, storage and reason, and by\n" +
			"storage and reason. The round is each metadata store's current one unless --round says\n" +
			"which; a round still being walked is reported so far. It reads the delete requests in DELETES\n" +
			"(kept for jetstream.max_age) and the delete events in EVENTS, and writes nothing.",
		Config: true, Tool: true,
		Flags: func(fs *flag.FlagSet) {
			fs.Uint64Var(&q.Round, "round", 0, "the round of every store to report (0: each store's current round)")
			fs.StringVar(&q.Instance, "instance", "", "only this KVCM instance id")
			fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
			fs.BoolVar(&noProgress, "no-progress", false, "draw no progress bar on stderr")
		},
		Run: func(ctx context.Context, e *Env) error {
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			if !noProgress && !asJSON {
				q.Progress = e.Stderr
			}
			r, err := ops.Report(ctx, js, names, q)
			if err != nil {
				return err
			}
			return writeTable(e.Stdout, asJSON, r)
		},
	}
}
