package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
)

// CountersCommand: counters repair | undo | log — KVCM's persisted counters of an instance.
func CountersCommand() *Command {
	return &Command{
		Name:    "counters",
		Summary: "recount an instance's KVCM counters and repair them on a stopped KVCM (counters repair|undo|log)",
		Help: "KVCM's leader keeps each instance's key count and bytes per storage type in memory, persists them\n" +
			"to kvcache:instance_<id>:metadata and never recounts them: what kvcm-gc deletes stays counted.\n" +
			"repair recounts an instance and shows both; --apply writes the recount while every KVCM\n" +
			"replica is stopped (docs/runbook.md, \"KVCM's counters drift\").",
		Sub: []*Command{countersRepairCommand(), countersUndoCommand(), countersLogCommand()},
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// countersFlags are the flags repair and undo share.
type countersFlags struct {
	instance     string
	apply, json  bool
	settle       time.Duration
	lockURIs     stringList
	lockKeys     stringList
	allowInexact bool
}

func (f *countersFlags) register(fs *flag.FlagSet) {
	*f = countersFlags{}
	fs.StringVar(&f.instance, "instance", "", "the KVCM instance id (required)")
	fs.BoolVar(&f.apply, "apply", false, "write; without it nothing is written (every KVCM replica must be stopped)")
	fs.DurationVar(&f.settle, "settle", 15*time.Second, "how long the metadata hash must stay "+
		"unwritten, with no leader lock, right before the write "+
		"(a stopping KVCM leader persists once more after it releases its lock)")
	fs.Var(&f.lockURIs, "lock-uri", "another Redis where KVCM's leader lock may be (KVCM's "+
		"kvcm.coordination.uri); repeatable. "+
		"The registry's Redis and the metadata store are always checked")
	fs.Var(&f.lockKeys, "lock-key", "another key of KVCM's leader lock (when its coordination "+
		"URI names another cluster_name); repeatable")
	fs.BoolVar(&f.json, "json", false, "print JSON")
}

func (f *countersFlags) check(cmd string) error {
	switch {
	case f.instance == "":
		return fmt.Errorf("counters %s: needs --instance", cmd)
	case f.settle < 0:
		return fmt.Errorf("counters %s: --settle %s: must not be negative", cmd, f.settle)
	}
	return nil
}

func countersRepairCommand() *Command {
	var f countersFlags
	return &Command{
		Name:    "repair",
		Summary: "recount an instance; show persisted and recounted counters side by side; --apply writes the recount",
		Help: "Refuses while KVCM's leader lock exists (kvcm_<cluster>_lock: and kvcm_lock: forms, on the metadata\n" +
			"store, the registry's Redis and every --lock-uri) and aborts, writing nothing, when the lock appears\n" +
			"or the hash is written while it runs. It rewrites only values of what the hash holds (never adds or\n" +
			"removes a member: KVCM's recovery fails on one it does not know), with a compare-and-set on the\n" +
			"bytes it read, and records the old and new bytes in a counters event first (counters undo).",
		Config: true, Tool: true,
		Flags: func(fs *flag.FlagSet) {
			f.register(fs)
			fs.BoolVar(&f.allowInexact, "allow-inexact", false, "apply even when the recount is "+
				"not exact (URIs KVCM's versions read differently, locations decoded best effort)")
		},
		Check: func(*Env) error { return f.check("repair") },
		Run: func(ctx context.Context, e *Env) error {
			cfg, deps, done, err := e.countersClients(ctx, f)
			if err != nil {
				return err
			}
			defer done()
			cfg.AllowInexact = f.allowInexact
			rep, err := ops.RepairCounters(ctx, cfg, deps)
			return e.countersResult(rep, err, f.json)
		},
	}
}

func countersUndoCommand() *Command {
	var f countersFlags
	var seq uint64
	return &Command{
		Name:    "undo",
		Summary: "write back what an applied repair changed (counters undo --instance ID --seq N), as safely as a repair",
		Help: "Reads the applied counters event at sequence N of the EVENTS stream (counters log lists them) and\n" +
			"writes each field's old bytes back, only where the hash still holds what the repair wrote, under\n" +
			"the same lock checks as a repair.",
		Config: true, Tool: true,
		Flags: func(fs *flag.FlagSet) {
			f.register(fs)
			seq = 0
			fs.Uint64Var(&seq, "seq", 0, "the EVENTS sequence of the applied counters event (required)")
		},
		Check: func(*Env) error {
			if seq == 0 {
				return errors.New("counters undo: needs --seq")
			}
			return f.check("undo")
		},
		Run: func(ctx context.Context, e *Env) error {
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			ev, err := ops.CountersEventAt(ctx, js, names, seq)
			if err != nil {
				return err
			}
			cfg, deps, done, err := e.countersClients(ctx, f)
			if err != nil {
				return err
			}
			defer done()
			deps.Publish = ops.CountersPublisher(js, names)
			rep, err := ops.UndoCounters(ctx, cfg, deps, ev)
			return e.countersResult(rep, err, f.json)
		},
	}
}

func countersLogCommand() *Command {
	var instance string
	var since time.Duration
	var asJSON bool
	return &Command{
		Name:    "log",
		Summary: "list the counters events: every repair's and undo's fields, old and new bytes",
		Config:  true, Tool: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&instance, "instance", "", "only this instance")
			fs.DurationVar(&since, "since", 0, "only events within this long before now (0: all EVENTS holds)")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		Run: func(ctx context.Context, e *Env) error {
			js, names, err := e.opsClients(ctx)
			if err != nil {
				return err
			}
			es, err := ops.CountersLog(ctx, js, names, instance, sinceTime(since))
			if err != nil {
				return err
			}
			return writeList(e.Stdout, asJSON, es, ops.WriteCountersLog)
		},
	}
}

// countersClients opens what a repair or an undo needs: the instance's metadata store (found
// in the registry, writable only with --apply), the lock checks outside it, and with --apply
// the event publisher. done closes them.
func (e *Env) countersClients(
	ctx context.Context,
	f countersFlags,
) (ops.CountersConfig, ops.CountersDeps, func(), error) {
	c := e.Config
	cfg := ops.CountersConfig{Cluster: c.Cluster, Instance: f.instance, Apply: f.apply, Settle: f.settle,
		LockKeys: append(kvcm.LeaderLockKeys(c.Cluster), f.lockKeys...)}
	deps := ops.CountersDeps{Logger: e.Logger}
	var closers []func() error
	done := func() {
		for _, c := range slices.Backward(closers) {
			_ = c()
		}
	}
	fail := func(err error) (ops.CountersConfig, ops.CountersDeps, func(), error) {
		done()
		return cfg, deps, func() {}, err
	}
	if err := c.Require(config.Needs{Registry: true}); err != nil {
		return fail(UsageError(fmt.Errorf("configuration: %w", err)))
	}
	regConn, err := c.RegistryConn()
	if err != nil {
		return fail(UsageError(err))
	}
	pool := redismeta.NewPool(redismeta.PoolOptions{Defaults: c.MetaConn(), URIs: c.Meta.StoreURIs,
		Store: redismeta.StoreOptions{DryRun: !f.apply}, Logger: e.Logger})
	closers = append(closers, pool.Close)
	registry, err := redismeta.OpenRegistryReader(regConn, redismeta.RegistryOptions{Cluster: c.Cluster,
		GroupStoreURIs: c.Meta.GroupStoreURIs, Learn: pool.Learn, Logger: e.Logger})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, registry.Close)
	reg, err := registry.ReadRegistry(ctx)
	if err != nil {
		return fail(fmt.Errorf("read the registry: %w", err))
	}
	i := slices.IndexFunc(reg.Instances, func(in meta.Instance) bool { return in.ID == f.instance })
	if i < 0 {
		for _, s := range reg.Skipped {
			if s.Instance == f.instance {
				return fail(fmt.Errorf("instance %q: not collected: %s", f.instance, s.Reason))
			}
		}
		return fail(fmt.Errorf("instance %q: not in the registry of cluster %q", f.instance, c.Cluster))
	}
	st, err := pool.Store(reg.Instances[i].Store)
	if err != nil {
		return fail(err)
	}
	cs, ok := st.(ops.CountersStore)
	if !ok {
		return fail(fmt.Errorf("metadata store %s cannot write a metadata hash", reg.Instances[i].Store))
	}
	deps.Store = cs
	// The registry's Redis, and every --lock-uri: KVCM's coordination URI may name any.
	lockConns := []redismeta.ConnOptions{regConn}
	for _, u := range f.lockURIs {
		conn, err := redismeta.ParseURI(u)
		if err != nil {
			return fail(UsageError(fmt.Errorf("--lock-uri: %w", err)))
		}
		lockConns = append(lockConns, conn)
	}
	for _, conn := range lockConns {
		rc, err := redismeta.NewClient(conn)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, rc.Close)
		deps.OtherLocks = append(deps.OtherLocks, func(ctx context.Context) error {
			return redismeta.LeaderLock(ctx, rc, cfg.LockKeys)
		})
	}
	if f.apply {
		js, names, err := e.opsClients(ctx)
		if err != nil {
			return fail(err)
		}
		deps.Publish = ops.CountersPublisher(js, names)
	}
	return cfg, deps, done, nil
}

// countersResult prints what a repair or an undo found, also when it failed after the recount.
func (e *Env) countersResult(rep *ops.CountersReport, err error, asJSON bool) error {
	if rep != nil {
		perr := writeTable(e.Stdout, asJSON, rep)
		if err == nil {
			err = perr
		}
	}
	return err
}
