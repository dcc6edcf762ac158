package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// EnsureCommand: ensure [--update] [--json].
func EnsureCommand() *Command {
	var asJSON, update bool
	return &Command{
		Name:    "ensure",
		Summary: "create the streams, consumers and buckets, or check them (--update: update them in place)",
		Help: "Run with credentials allowed to manage streams (an administrator's), before the stages, which\n" +
			"then need jetstream.skip_ensure and no such right. Creates every stream, consumer and bucket\n" +
			"that is missing and compares the ones that exist with the configuration (jetstream.*,\n" +
			"max_inflight_delete_requests, max_inflight_sweep_batches, subject_prefix, cluster).\n" +
			"Without --update it never changes an existing object: one that differs is listed field by\n" +
			"field (have, want, updatable) and the command exits 1. With --update the objects that differ\n" +
			"only in fields the server updates in place (max_bytes, max_age, replicas, max_ack_pending,\n" +
			"ack_wait, max_deliver, a bucket's ttl, …) are updated, keeping everything else (a consumer's\n" +
			"pause included); if one differs in a field the server cannot update (storage, retention, a\n" +
			"consumer's policies), nothing is updated, it is named and the command exits 1.\n" +
			"Exit 0: everything exists as configured.",
		Config: true, Tool: true,
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&update, "update", false, "update existing objects in the fields the "+
				"server updates in place (all or nothing)")
			fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
		},
		Run: func(ctx context.Context, e *Env) error {
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			r, err := ops.Ensure(ctx, js, names, e.Config.Settings(), update, subjects.WithCallTimeout(e.Config.JS.APITimeout),
				subjects.WithEnsureLogger(e.Logger))
			if err != nil {
				return fmt.Errorf("ensure: %w", err)
			}
			err = writeTable(e.Stdout, asJSON, r)
			if err != nil {
				return err
			}
			if r.Differs > 0 {
				return ErrReported
			}
			return nil
		},
	}
}
