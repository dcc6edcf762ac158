// Package app wires kvcm-gc's stages to their backends and to JetStream: what the binaries
// run. It holds no decisions; those are in pipeline.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Options is everything a kvcm-gc process needs, whatever stages it runs.
type Options struct {
	Cluster string
	Prefix  string
	// Registry is the connection to KVCM's registry Redis (scanner, prober).
	Registry redismeta.ConnOptions
	// Meta are the defaults of every metadata store connection (credentials, TLS, timeouts);
	// MetaURIs maps store names to URIs; GroupStoreURIs overrides a group's store URI.
	Meta           redismeta.ConnOptions
	MetaURIs       map[string]string
	GroupStoreURIs map[string]string
	Storage        storage.Options
	// DryRun makes the Redis writer and the storage deleter refuse every write (DESIGN §8.8).
	DryRun bool
	// EmptyBlock is what the deleter's CAD does with a block whose last location goes.
	EmptyBlock meta.EmptyBlock
	// Guard is "none" or "redis" (a hash per instance under GuardKeyPrefix on GuardConn).
	Guard          string
	GuardConn      redismeta.ConnOptions
	GuardKeyPrefix string

	Scanner        pipeline.ScannerConfig
	Prober         pipeline.ProberConfig
	Deleter        pipeline.DeleterConfig
	JetStream      subjects.Settings
	ProberWorkers  int
	DeleterWorkers int
	// Sweep is the walker's and the sweepers' configuration (the swept storages among it);
	// SweeperWorkers the batches one sweeper process handles at once.
	Sweep          pipeline.SweepConfig
	SweeperWorkers int
	// SkipEnsure leaves stream and consumer creation to someone else (least-privilege users).
	SkipEnsure bool

	Logger  *slog.Logger
	Metrics *pipeline.Metrics
	Reg     prometheus.Registerer
	// Health, when set, is filled with the readiness checks of the stages Run starts (/readyz).
	Health *Health
}

// Stages selects what a process runs.
type Stages struct{ Scanner, Prober, Deleter, Walker, Sweeper bool }

// All runs every stage.
var All = Stages{Scanner: true, Prober: true, Deleter: true, Walker: true, Sweeper: true}

// Run runs the selected stages on nc until ctx is done, then shuts them down gracefully:
// fetching stops, in-flight messages finish (bounded), the lease is released.
func Run(ctx context.Context, nc *nats.Conn, o Options, which Stages) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := o.Metrics
	if m == nil {
		reg := o.Reg
		if reg == nil {
			reg = prometheus.NewRegistry()
		}
		m = pipeline.NewMetrics(reg)
	}
	names, err := subjects.NewNames(o.Prefix, o.Cluster)
	if err != nil {
		return err
	}
	// Invalid settings stop the process before it touches anything (DESIGN §8.2: grace < 1h).
	var verrs []error
	if which.Scanner {
		verrs = append(verrs, o.Scanner.Validate())
	}
	if which.Prober {
		verrs = append(verrs, o.Prober.Validate())
	}
	if which.Deleter {
		verrs = append(verrs, o.Deleter.Validate())
	}
	if which.Walker || which.Sweeper {
		verrs = append(verrs, o.sweepConfig().Validate())
	}
	if err := errors.Join(verrs...); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if !o.SkipEnsure {
		if err := subjects.Ensure(ctx, js, names, o.JetStream); err != nil {
			return err
		}
	}
	events := &pipeline.EventLog{JS: js, Names: names, DryRun: o.DryRun, Logger: log, Metrics: m}
	pool := redismeta.NewPool(redismeta.PoolOptions{Defaults: o.Meta, URIs: o.MetaURIs,
		// Only the deleter writes: a process without it opens every store refusing writes, so no
		// other stage can write by mistake (and none tries to load the CAS scripts).
		Store: redismeta.StoreOptions{DryRun: o.DryRun || !which.Deleter, EmptyBlock: o.EmptyBlock}, Logger: log})
	defer pool.Close()

	var registry *redismeta.RegistryReader
	if which.Scanner || which.Prober || which.Walker || which.Sweeper {
		registry, err = redismeta.OpenRegistryReader(o.Registry, redismeta.RegistryOptions{Cluster: o.Cluster,
			GroupStoreURIs: o.GroupStoreURIs, Learn: pool.Learn, Logger: log})
		if err != nil {
			return err
		}
		defer registry.Close()
	}
	so := o.Storage
	so.DryRun = so.DryRun || o.DryRun

	if o.Health != nil {
		closeChecks, err := o.readiness(nc, pool, which)
		if err != nil {
			return err
		}
		defer closeChecks()
	}

	g, gctx := newGroup(ctx)
	if which.Scanner {
		state, err := js.KeyValue(ctx, names.StateBucket())
		if err != nil {
			return fmt.Errorf("open state bucket: %w", err)
		}
		leaseKV, err := js.KeyValue(ctx, names.LeaseBucket())
		if err != nil {
			return fmt.Errorf("open lease bucket: %w", err)
		}
		cfg := o.Scanner
		if cfg.Holder == "" {
			host, _ := os.Hostname()
			cfg.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
		}
		if cfg.LeaseRenew <= 0 {
			cfg.LeaseRenew = max(o.JetStream.LeaseTTL/3, 100*time.Millisecond)
		}
		lease := pipeline.NewLease(leaseKV, cfg.Holder, o.JetStream.LeaseTTL)
		sc := &pipeline.Scanner{Config: cfg, Names: names, Registry: registry, Stores: pool,
			Lease: lease, State: state,
			Publisher: pipeline.JSPublisher{JS: js}, Events: events, Backlog: Backlog(js, names),
			MaxPayload: int(nc.MaxPayload()), Metrics: m, Logger: log.With("stage", pipeline.StageScanner)}
		a := o.stageAlive(pipeline.StageScanner, func(ctx context.Context) (string, error) { return leaseState(ctx, lease, leaseKV) })
		g.Go(func() error { defer a.set(false); return sc.Run(gctx) })
	}
	if which.Prober {
		gd, err := o.guard()
		if err != nil {
			return err
		}
		p := &pipeline.Prober{Config: o.Prober, Names: names, Registry: registry, StorageOptions: so, Guard: gd,
			Publisher: pipeline.JSPublisher{JS: js}, Events: events, Metrics: m, Logger: log.With("stage", pipeline.StageProber)}
		if o.Prober.CollectDeleting {
			kv, err := js.KeyValue(ctx, names.ObservedBucket())
			if err != nil {
				return fmt.Errorf("open observation bucket: %w", err)
			}
			// A first sight must outlive the grace and the round pause between two sights.
			p.Observer = pipeline.KVObserver{KV: kv, TTL: 2*o.Prober.DeletingGrace + o.Scanner.RoundPause + 24*time.Hour}
		}
		cons, err := js.Consumer(ctx, names.BatchesStream(), names.ProberConsumer())
		if err != nil {
			return fmt.Errorf("open prober consumer: %w", err)
		}
		c := &pipeline.Consumer{Stage: pipeline.StageProber, Consumer: cons, Workers: max(o.ProberWorkers, 1),
			MaxDeliver: o.JetStream.MaxDeliver, Handle: p.Handle, Events: events, Metrics: m, Logger: log}
		a := o.stageAlive(pipeline.StageProber, nil)
		g.Go(func() error { defer a.set(false); return c.Run(gctx) })
	}
	if which.Deleter {
		d := &pipeline.Deleter{Config: o.Deleter, Names: names, Stores: pool, StorageOptions: so, Events: events,
			Metrics: m, Logger: log.With("stage", pipeline.StageDeleter)}
		if o.EmptyBlock == meta.EmptyBlockDelete {
			state, err := js.KeyValue(ctx, names.StateBucket())
			if err != nil {
				return fmt.Errorf("open state bucket: %w", err)
			}
			d.State = state
		}
		cons, err := js.Consumer(ctx, names.DeletesStream(), names.DeleterConsumer())
		if err != nil {
			return fmt.Errorf("open deleter consumer: %w", err)
		}
		c := &pipeline.Consumer{Stage: pipeline.StageDeleter, Consumer: cons, Workers: max(o.DeleterWorkers, 1),
			MaxDeliver: o.JetStream.MaxDeliver, Handle: d.Handle, Events: events, Metrics: m, Logger: log}
		a := o.stageAlive(pipeline.StageDeleter, nil)
		g.Go(func() error { defer a.set(false); return c.Run(gctx) })
	}
	if err := o.runSweep(ctx, g, gctx, sweepDeps{js: js, nc: nc, names: names, pool: pool, registry: registry,
		events: events, metrics: m, log: log, storage: so}, which); err != nil {
		g.cancel()
		_ = g.Wait()
		return err
	}
	return g.Wait()
}

func (o Options) guard() (guard.Guard, error) {
	switch o.Guard {
	case "", "none":
		return guard.None{}, nil
	case "redis":
		c, err := redismeta.NewClient(o.GuardConn)
		if err != nil {
			return nil, fmt.Errorf("copy guard: %w", err)
		}
		return newRedisGuard(c, o.GuardKeyPrefix), nil
	default:
		return nil, fmt.Errorf("guard: unknown kind %q (none, redis)", o.Guard)
	}
}

// Backlog reads the prober's and the deleter's pending + unacknowledged counts.
//
// The consumer handles are looked up once and kept: js.Consumer is itself a consumer info
// request, which would double the requests of every reading. A handle whose info request
// fails is looked up again next time (the consumer may have been recreated).
func Backlog(js jetstream.JetStream, names subjects.Names) pipeline.Backlog {
	var mu sync.Mutex
	handles := map[string]jetstream.Consumer{}
	read := func(ctx context.Context, stream, consumer string) (uint64, error) {
		mu.Lock()
		c := handles[stream]
		mu.Unlock()
		if c == nil {
			var err error
			if c, err = js.Consumer(ctx, stream, consumer); err != nil {
				return 0, err
			}
			mu.Lock()
			handles[stream] = c
			mu.Unlock()
		}
		info, err := c.Info(ctx)
		if err != nil {
			mu.Lock()
			delete(handles, stream)
			mu.Unlock()
			return 0, err
		}
		return info.NumPending + uint64(info.NumAckPending), nil
	}
	return func(ctx context.Context) (uint64, uint64, error) {
		p, err1 := read(ctx, names.BatchesStream(), names.ProberConsumer())
		d, err2 := read(ctx, names.DeletesStream(), names.DeleterConsumer())
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("read consumer backlog: %w", err)
		}
		return p, d, nil
	}
}
