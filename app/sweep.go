package app

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// sweepConfig is o.Sweep, or the defaults with no storage swept when o.Sweep is the zero
// value (options built without the sweep in mind: the sweep is off by default).
func (o Options) sweepConfig() sweep.Config {
	if o.Sweep.Grace == 0 && len(o.Sweep.Storages) == 0 {
		return sweep.DefaultConfig()
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
