package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// sweepDeps is what Run has built that the sweep stages use.
type sweepDeps struct {
	js       jetstream.JetStream
	nc       *nats.Conn
	names    subjects.Names
	pool     *redismeta.Pool
	registry *redismeta.RegistryReader
	events   *pipeline.EventLog
	metrics  *pipeline.Metrics
	log      *slog.Logger
	storage  storage.Options
}

// runSweep starts the walker and the sweeper of the sweep of orphan data files (DESIGN §7)
// when which asks for them. With no swept storage they run and do nothing, so enabling the
// sweep of a storage is a configuration change only.
func (o Options) runSweep(ctx context.Context, g *group, gctx context.Context, d sweepDeps, which Stages) error {
	if which.Walker {
		state, err := d.js.KeyValue(ctx, d.names.StateBucket())
		if err != nil {
			return fmt.Errorf("open state bucket: %w", err)
		}
		leases, err := d.js.KeyValue(ctx, d.names.LeaseBucket())
		if err != nil {
			return fmt.Errorf("open lease bucket: %w", err)
		}
		cfg := o.sweepConfig()
		if cfg.Holder == "" {
			host, _ := os.Hostname()
			cfg.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
		}
		w := &pipeline.Walker{Config: cfg, Names: d.names, Registry: d.registry, StorageOptions: d.storage,
			Leases: leases, LeaseTTL: o.JetStream.LeaseTTL, State: state, Publisher: pipeline.JSPublisher{JS: d.js},
			Events: d.events, Backlog: SweepBacklog(d.js, d.names), MaxPayload: int(d.nc.MaxPayload()),
			Metrics: d.metrics, Logger: d.log.With("stage", pipeline.StageWalker)}
		if len(cfg.Storages) == 0 {
			d.log.Info("no storage is swept (storage.overrides.<name>.sweep); the walker idles", "stage", pipeline.StageWalker)
		}
		a := o.stageAlive(pipeline.StageWalker, nil)
		g.Go(func() error { defer a.set(false); return w.Run(gctx) })
	}
	if which.Sweeper {
		sw := &pipeline.Sweeper{Config: o.sweepConfig(), Names: d.names, Registry: d.registry, Stores: d.pool,
			StorageOptions: d.storage, Events: d.events, Metrics: d.metrics, Logger: d.log.With("stage", pipeline.StageSweeper)}
		cons, err := d.js.Consumer(ctx, d.names.SweepStream(), d.names.SweeperConsumer())
		if err != nil {
			return fmt.Errorf("open sweeper consumer: %w", err)
		}
		c := &pipeline.Consumer{Stage: pipeline.StageSweeper, Consumer: cons, Workers: max(o.SweeperWorkers, 1),
			MaxDeliver: o.JetStream.MaxDeliver, Handle: sw.Handle, Events: d.events, Metrics: d.metrics, Logger: d.log}
		a := o.stageAlive(pipeline.StageSweeper, nil)
		g.Go(func() error { defer a.set(false); return c.Run(gctx) })
	}
	return nil
}

// sweepConfig is o.Sweep, or the defaults with no storage swept when o.Sweep is the zero
// value (options built without the sweep in mind: the sweep is off by default).
func (o Options) sweepConfig() pipeline.SweepConfig {
	if o.Sweep.Grace == 0 && len(o.Sweep.Storages) == 0 {
		return pipeline.DefaultSweepConfig()
	}
	return o.Sweep
}

// SweepBacklog reads the sweeper consumer's pending + unacknowledged batches. The consumer
// handle is looked up once and again only after a failed info request.
func SweepBacklog(js jetstream.JetStream, names subjects.Names) func(ctx context.Context) (uint64, error) {
	var mu sync.Mutex
	var c jetstream.Consumer
	return func(ctx context.Context) (uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		if c == nil {
			var err error
			if c, err = js.Consumer(ctx, names.SweepStream(), names.SweeperConsumer()); err != nil {
				return 0, fmt.Errorf("read sweeper backlog: %w", err)
			}
		}
		info, err := c.Info(ctx)
		if err != nil {
			c = nil
			return 0, fmt.Errorf("read sweeper backlog: %w", err)
		}
		return info.NumPending + uint64(info.NumAckPending), nil
	}
}
