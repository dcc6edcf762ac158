package app

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// watchDeadLetters starts, in g, the max-deliveries listener of a consuming stage: the messages
// whose last delivery the stage never answered (it hung past AckWait, or its process died)
// become deadletter events that `dlq list` shows. It subscribes before it returns, so call it
// before the stage's consumer starts.
func watchDeadLetters(ctx context.Context, g *errgroup.Group, nc *nats.Conn, names subjects.Names, events *pipeline.EventLog,
	m *pipeline.Metrics, log *slog.Logger, stage string) error {
	d, err := pipeline.WatchDeadLetters(stage, pipeline.DeadLettersDeps{Conn: nc, Names: names, Events: events, Metrics: m,
		Logger: log.With("stage", stage)})
	if err != nil {
		return err
	}
	g.Go(func() error { return d.Run(ctx) })
	return nil
}
