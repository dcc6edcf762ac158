package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/kvcm-gc/kvcm-gc/internal/cli"
	"github.com/kvcm-gc/kvcm-gc/ops"
)

// opsCommand mounts the operator command name of package ops: it takes the configuration
// (file, environment, flags) like every stage, connects to NATS with it, and hands the
// command its own arguments. It panics on a name ops does not have: a build mistake.
func opsCommand(name string) *cli.Command {
	var oc ops.Command
	for _, c := range ops.Commands() {
		if c.Name == name {
			oc = c
		}
	}
	if oc.Run == nil {
		panic("kvcm-gc: package ops has no command " + name)
	}
	return &cli.Command{
		Name:    oc.Name,
		Summary: oc.Summary,
		Usage:   "[flags] [arguments]",
		Config:  true,
		Args:    true,
		Run: func(ctx context.Context, e *cli.Env) error {
			if help(e.Args) {
				// The command documents its own arguments, with no connection (a command
				// that wants one before it parses gets none and says so); the configuration
				// keys follow.
				_ = oc.Run(ctx, ops.Env{}, e.Args, e.Stdout, e.Stderr)
				return flag.ErrHelp
			}
			names, err := e.Names()
			if err != nil {
				return cli.UsageError(fmt.Errorf("configuration: %w", err))
			}
			nc, err := e.ConnectNATS(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			env := ops.Env{NC: nc, Names: names, OpenReplay: func(ctx context.Context) (*ops.ReplayDeps, error) {
				o, err := e.Config.AppOptions()
				if err != nil {
					return nil, err
				}
				return ops.OpenReplayDeps(ctx, ops.ReplaySetup{Cluster: o.Cluster, Registry: o.Registry, Meta: o.Meta,
					MetaURIs: o.MetaURIs, GroupStoreURIs: o.GroupStoreURIs, Storage: o.Storage, Prober: o.Prober, Sweep: o.Sweep,
					Guard: o.Guard, GuardConn: o.GuardConn, GuardKeyPrefix: o.GuardKeyPrefix, Logger: e.Logger})
			}}
			err = oc.Run(ctx, env, e.Args, e.Stdout, e.Stderr)
			if errors.Is(err, ops.ErrUsage) {
				return cli.UsageError(err)
			}
			return err
		},
	}
}

func help(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			return true
		}
	}
	return false
}
