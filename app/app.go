// Package app wires kvcm-gc's stages to their backends and to JetStream: what the binaries
// run. It holds no decisions; those are in pipeline and its stage packages.
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
	"golang.org/x/sync/errgroup"

	"github.com/kvcm-gc/kvcm-gc/backends/guard/redisguard"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
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

	Scanner        scanner.Config
	Prober         prober.Config
	Deleter        deleter.Config
	JetStream      subjects.Settings
	ProberWorkers  int
	DeleterWorkers int
	// Sweep is the walker's and the sweepers' configuration (the swept storages among it);
	// SweeperWorkers the batches one sweeper process handles at once.
	Sweep          sweep.Config
	SweeperWorkers int
	// SkipEnsure leaves stream and consumer creation to someone else (least-privilege users).
	SkipEnsure bool
	// APITimeout bounds one JetStream request whose caller sets no deadline; 0 means
	// DefaultAPITimeout. Shorter than the client's own 5 s, so a request lost in a leader
	// change is sent again sooner.
	APITimeout time.Duration

	Logger *slog.Logger
	// Metrics and SweepMetrics are the stages' metrics; either left nil is registered on Reg
	// (nil: on a registry of its own).
	Metrics      *Metrics
	SweepMetrics *sweep.Metrics
	Reg          prometheus.Registerer
	// Health, when set, is filled with the readiness checks of the stages Run starts (/readyz).
	Health *Health
}

// Stages selects what a process runs.
type Stages struct{ Scanner, Prober, Deleter, Walker, Sweeper bool }

// All runs every stage.
var All = Stages{Scanner: true, Prober: true, Deleter: true, Walker: true, Sweeper: true}

// Defaults of Run.
const (
	// DefaultAPITimeout bounds a JetStream request whose caller sets no deadline of its own.
	DefaultAPITimeout = subjects.DefaultCallTimeout
	// StartupRetryInitial and StartupRetryMax are the waits between the attempts of startup
	// to create the topology and to open a consumer or a bucket (the backoff policy, with
	// jitter).
	StartupRetryInitial = 100 * time.Millisecond
	StartupRetryMax     = 5 * time.Second
)

// Run runs the selected stages on nc until ctx is done, then shuts them down gracefully:
// fetching stops, in-flight messages finish (bounded), the lease is released.
//
// Startup converges: creating the topology, then opening the consumers and buckets, is
// retried with the backoff policy for as long as JetStream fails in ways that heal (no
// answer during a leader election, too few peers yet); only a real conflict, a refusal, or
// ctx ending makes Run return early. /readyz says what it is waiting for meanwhile.
func Run(ctx context.Context, nc *nats.Conn, o Options, which Stages) (err error) {
	defer func() {
		// Stopped while it was still starting (opening buckets, consumers): a shutdown, not
		// a failure.
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil
		}
	}()
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := o.Reg
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, sm := o.Metrics, o.SweepMetrics
	if m == nil {
		m = NewMetrics(reg)
	}
	if sm == nil {
		sm = sweep.NewMetrics(reg)
	}
	names, err := subjects.NewNames(o.Prefix, o.Cluster)
	if err != nil {
		return err
	}
	apiTimeout := o.APITimeout
	if apiTimeout <= 0 {
		apiTimeout = DefaultAPITimeout
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(apiTimeout))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	o.Health.starting("creating the jetstream topology")
	defer o.Health.stopped()
	if !o.SkipEnsure {
		if err := subjects.Ensure(ctx, js, names, o.JetStream, subjects.WithCallTimeout(apiTimeout),
			subjects.WithEnsureLogger(log),
			subjects.WithEnsureRetry(backoff.New(StartupRetryInitial, StartupRetryMax))); err != nil {
			return err
		}
	}
	o.Health.starting("opening consumers and buckets")
	op := opener{js: js, timeout: apiTimeout, ensured: !o.SkipEnsure, log: log}
	events, err := pipeline.NewEventLog(pipeline.EventLogConfig{Names: names, DryRun: o.DryRun},
		pipeline.EventLogDeps{JS: js, Metrics: m.Pipeline, Logger: log})
	if err != nil {
		return err
	}
	pool := redismeta.NewPool(redismeta.PoolOptions{Defaults: o.Meta, URIs: o.MetaURIs,
		// Only the deleter writes: a process without it opens every store refusing writes, so no
		// other stage can write by mistake (and none tries to load the CAS scripts).
		Store: redismeta.StoreOptions{DryRun: o.DryRun || !which.Deleter, EmptyBlock: o.EmptyBlock}, Logger: log})
	defer pool.Close()
	stores := &usedStores{StoreResolver: pool}

	// The deleter does not read the registry (its least-privilege user may not), so its
	// readiness pings the stores it was configured with or sent to.
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
	// kvcm_gc_dry_run of each stage run here: the sweep's deletes go through the storage
	// deleter, the pipeline's through the Redis writer.
	for stage, run := range map[string]bool{pipeline.StageScanner: which.Scanner, pipeline.StageProber: which.Prober,
		pipeline.StageDeleter: which.Deleter} {
		if run {
			m.Pipeline.SetDryRun(stage, o.DryRun)
		}
	}
	for stage, run := range map[string]bool{pipeline.StageWalker: which.Walker, pipeline.StageSweeper: which.Sweeper} {
		if run {
			m.Pipeline.SetDryRun(stage, so.DryRun)
		}
	}

	var state, leaseKV, observed jetstream.KeyValue
	// The sweeper reads the scanners' checkpoints only to reclaim unregistered instances' files.
	if which.Scanner || which.Walker || which.Deleter && o.EmptyBlock == meta.EmptyBlockDelete ||
		which.Sweeper && o.sweepConfig().CollectUnregistered {
		if state, err = op.bucket(ctx, names.StateBucket()); err != nil {
			return err
		}
	}
	if which.Scanner || which.Walker {
		if leaseKV, err = op.bucket(ctx, names.LeaseBucket()); err != nil {
			return err
		}
	}
	if which.Prober && o.Prober.CollectDeleting {
		if observed, err = op.bucket(ctx, names.ObservedBucket()); err != nil {
			return err
		}
	}
	var proberCons, deleterCons, sweeperCons jetstream.Consumer
	if which.Prober {
		if proberCons, err = op.consumer(ctx, names.BatchesStream(), names.ProberConsumer()); err != nil {
			return err
		}
	}
	if which.Deleter {
		if deleterCons, err = op.consumer(ctx, names.DeletesStream(), names.DeleterConsumer()); err != nil {
			return err
		}
	}
	if which.Sweeper {
		if sweeperCons, err = op.consumer(ctx, names.SweepStream(), names.SweeperConsumer()); err != nil {
			return err
		}
	}
	// The sweep of orphan data files (DESIGN §7): with no swept storage its stages run and do
	// nothing, so sweeping a storage is a configuration change only.
	sweepCfg := o.sweepConfig()
	if sweepCfg.Holder == "" {
		host, _ := os.Hostname()
		sweepCfg.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}

	checks := readiness{o: o, nc: nc, js: js, names: names, registry: registry, pool: pool, stores: stores, which: which}
	closeChecks := checks.register(o.Health)
	defer closeChecks()

	// Every stage is built before any starts (dskit's services manager: all in New state
	// before one starts), so a stage that fails to build leaves nothing running behind Run's
	// deferred closes of the pool, the registry and the guard.
	var stages []built
	var watchers []*pipeline.DeadLetters
	started := false
	defer func() {
		if !started {
			stopWatchers(watchers)
		}
	}()
	// consume builds the consume loop of a consuming stage, handing cons's messages to handle,
	// and subscribes to the stage's max-deliveries advisories before the loop starts, so none
	// is missed: the messages whose last delivery the stage never answered (it hung past
	// AckWait, or its process died) become deadletter events that `dlq list` shows.
	consume := func(
		cfg pipeline.ConsumerConfig, cons jetstream.Consumer, handle pipeline.Handler,
	) (*pipeline.Consumer, error) {
		c, err := pipeline.NewConsumer(cfg, pipeline.ConsumerDeps{Consumer: cons, Handle: handle, Events: events,
			Metrics: m.Pipeline, Logger: log})
		if err != nil {
			return nil, err
		}
		d, err := pipeline.WatchDeadLetters(cfg.Stage, pipeline.DeadLettersDeps{Conn: nc, Names: names, Events: events,
			Metrics: m.Pipeline, Logger: log.With("stage", cfg.Stage)})
		if err != nil {
			return nil, err
		}
		watchers = append(watchers, d)
		return c, nil
	}
	if which.Scanner {
		cfg := o.Scanner
		if cfg.Holder == "" {
			host, _ := os.Hostname()
			cfg.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
		}
		sizes := newStoreSizes(pool)
		defer sizes.close()
		sc, err := scanner.New(cfg, scanner.Deps{Names: names, Registry: registry, Stores: stores,
			JS: js, Leases: leaseKV, LeaseTTL: o.JetStream.LeaseTTL, State: state, Sizes: sizes.size,
			Publisher: pipeline.JSPublisher{JS: js}, Events: events, Backlog: Backlog(js, names),
			MaxPayload: int(nc.MaxPayload()), Metrics: m.Scanner, Logger: log.With("stage", pipeline.StageScanner)})
		if err != nil {
			return err
		}
		stages = append(stages, built{stage: pipeline.StageScanner, extra: sc.LeaseState, run: sc.Run})
	}
	if which.Prober {
		gd, closeGuard, err := redisguard.Open(o.Guard, o.GuardConn, o.GuardKeyPrefix)
		if err != nil {
			return err
		}
		defer closeGuard()
		var observer prober.DeletingObserver
		if observed != nil {
			// A first sight must outlive the grace and the round pause between two sights.
			observer = prober.KVObserver{KV: observed, TTL: prober.ObservationTTL(o.Prober.DeletingGrace, o.Scanner.RoundPause)}
		}
		pcfg := o.Prober
		pcfg.Workers = o.ProberWorkers
		p, err := prober.New(pcfg, prober.Deps{Names: names, Registry: registry, StorageOptions: so,
			Guard: gd, Observer: observer, Publisher: pipeline.JSPublisher{JS: js}, Events: events, Metrics: m.Prober,
			Logger: log.With("stage", pipeline.StageProber)})
		if err != nil {
			return err
		}
		// The consumer holds every batch the server lets through (its max ack pending): while
		// ProberWorkers are judged, the others of their instance wait to join their delete
		// request, so a backlog makes requests of up to scan_batch_size targets.
		c, err := consume(pipeline.ConsumerConfig{Stage: pipeline.StageProber,
			Workers: max(o.ProberWorkers, o.JetStream.ProberMaxAckPending), MaxDeliver: o.JetStream.MaxDeliver},
			proberCons, p.Handle)
		if err != nil {
			return err
		}
		// Run ends the handlers' context once they have returned; the requests the prober
		// still publishes in the background end with it, and Wait joins them.
		stages = append(stages, built{stage: pipeline.StageProber,
			run: func(ctx context.Context) error { defer p.Wait(); return c.Run(ctx) }})
	}
	if which.Deleter {
		// The deleter keeps kvcm-gc's share of KVCM's counters' drift in the STATE bucket:
		// deleted keys and removed locations' bytes (DESIGN §13.4).
		d, err := deleter.New(o.Deleter, deleter.Deps{Names: names, Stores: stores, StorageOptions: so,
			Events: events, State: state, Metrics: m.Deleter, Logger: log.With("stage", pipeline.StageDeleter)})
		if err != nil {
			return err
		}
		c, err := consume(pipeline.ConsumerConfig{Stage: pipeline.StageDeleter, Workers: o.DeleterWorkers,
			MaxDeliver: o.JetStream.MaxDeliver, AckWait: o.Deleter.AckWait, KeepFor: o.Deleter.KeepFor()},
			deleterCons, d.Handle)
		if err != nil {
			return err
		}
		stages = append(stages, built{stage: pipeline.StageDeleter, run: c.Run})
	}
	if which.Walker {
		w, err := sweep.NewWalker(sweepCfg, sweep.WalkerDeps{Names: names, Registry: registry, StorageOptions: so,
			Leases: leaseKV, LeaseTTL: o.JetStream.LeaseTTL, State: state, Publisher: pipeline.JSPublisher{JS: js},
			Events: events, Backlog: SweepBacklog(js, names), MaxPayload: int(nc.MaxPayload()),
			Metrics: sm, Logger: log.With("stage", pipeline.StageWalker)})
		if err != nil {
			return err
		}
		if len(sweepCfg.Storages) == 0 {
			log.Info("no storage is swept (storage.overrides.<name>.sweep); the walker idles", "stage", pipeline.StageWalker)
		}
		stages = append(stages, built{stage: pipeline.StageWalker, run: w.Run})
	}
	if which.Sweeper {
		sw, err := sweep.NewSweeper(sweepCfg, sweep.SweeperDeps{Names: names, Registry: registry, Stores: stores,
			State: state, StorageOptions: so, Events: events, Metrics: sm, Logger: log.With("stage", pipeline.StageSweeper)})
		if err != nil {
			return err
		}
		c, err := consume(pipeline.ConsumerConfig{Stage: pipeline.StageSweeper, Workers: o.SweeperWorkers,
			MaxDeliver: o.JetStream.MaxDeliver, AckWait: sweepCfg.AckWait},
			sweeperCons, sw.Handle)
		if err != nil {
			return err
		}
		stages = append(stages, built{stage: pipeline.StageSweeper, run: c.Run})
	}

	// Nothing below returns before g.Wait: what starts is joined.
	started = true
	g, gctx := errgroup.WithContext(ctx)
	for _, d := range watchers {
		g.Go(func() error { return d.Run(gctx) })
	}
	for _, b := range stages {
		a := checks.stage(o.Health, b.stage, b.extra)
		g.Go(func() error { defer a.set(false); return b.run(gctx) })
	}
	o.Health.setRunning()
	return g.Wait()
}

// built is a stage built and not yet started.
type built struct {
	stage string
	// extra is the stage's readiness beyond its loop running (nil: none).
	extra func(context.Context) (string, error)
	run   func(ctx context.Context) error
}

// stopWatchers ends the dead-letter subscriptions of stages that never started.
func stopWatchers(watchers []*pipeline.DeadLetters) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, d := range watchers {
		_ = d.Run(ctx) // with ctx ended, Run unsubscribes and returns
	}
}

// opener opens the consumers and buckets the stages use, retrying what heals by itself: on a
// cluster, an object just created may not have elected its leader yet, and its info request
// goes unanswered for a while.
type opener struct {
	js      jetstream.JetStream
	timeout time.Duration
	// ensured: this process created the objects, so "not found" is a replica catching up,
	// not an object nobody made.
	ensured bool
	log     *slog.Logger
}

func (op opener) retry(ctx context.Context, what string, f func(ctx context.Context) error) error {
	p := backoff.New(StartupRetryInitial, StartupRetryMax)
	return p.Retry(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, op.timeout)
		defer cancel()
		err := f(cctx)
		if err == nil {
			return nil
		}
		notFound := errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
			errors.Is(err, jetstream.ErrBucketNotFound)
		err = fmt.Errorf("open %s: %w", what, err)
		if subjects.Transient(err) || (notFound && op.ensured) {
			return err
		}
		return backoff.Permanent(err)
	}, func(err error, failures int, wait time.Duration) {
		op.log.Warn("open jetstream object; retrying", "what", what, "failures", failures, "retry_in", wait, "err", err)
	})
}

func (op opener) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := op.retry(ctx, "bucket "+name, func(ctx context.Context) (err error) {
		kv, err = op.js.KeyValue(ctx, name)
		return err
	})
	return kv, err
}

func (op opener) consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	var c jetstream.Consumer
	err := op.retry(ctx, "consumer "+stream+"/"+name, func(ctx context.Context) (err error) {
		c, err = op.js.Consumer(ctx, stream, name)
		return err
	})
	return c, err
}

// Backlog reads the prober's and the deleter's pending + unacknowledged counts.
//
// The consumer handles are looked up once and kept: js.Consumer is itself a consumer info
// request, which would double the requests of every reading. A handle whose info request
// fails is looked up again next time (the consumer may have been recreated).
func Backlog(js jetstream.JetStream, names subjects.Names) scanner.Backlog {
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
