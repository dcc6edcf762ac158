package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// EventLog publishes audit events to the EVENTS stream asynchronously. A stage that must not
// acknowledge its input before its events are stored waits on what Emit returns.
type EventLog struct {
	js      jetstream.JetStream
	names   subjects.Names
	dryRun  bool
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
}

// EventLogConfig is what the events say about where they come from.
type EventLogConfig struct {
	Names subjects.Names
	// DryRun marks every event as one of a dry run.
	DryRun bool
}

// EventLogDeps are the event log's collaborators. JS is required; a nil Metrics counts on an
// unregistered set, a nil Logger discards, a nil Now is time.Now.
type EventLogDeps struct {
	JS      jetstream.JetStream
	Metrics *Metrics
	Logger  *slog.Logger
	Now     func() time.Time
}

// NewEventLog returns the event log publishing to deps.JS.
func NewEventLog(cfg EventLogConfig, deps EventLogDeps) (*EventLog, error) {
	if deps.JS == nil {
		return nil, errors.New("event log: no JetStream context")
	}
	return &EventLog{js: deps.JS, names: cfg.Names, dryRun: cfg.DryRun, log: OrDiscard(deps.Logger),
		metrics: orUnregistered(deps.Metrics), now: OrNow(deps.Now)}, nil
}

// Emit fills the envelope (version, cluster, time, dry-run) and publishes e with a
// deterministic message id. It returns the publish future, or nil when the publish could
// not even be queued (logged and counted: an audit gap never blocks deletion decisions).
func (l *EventLog) Emit(ctx context.Context, e subjects.Event) jetstream.PubAckFuture {
	e.V = subjects.EventSchemaVersion
	e.Cluster = l.names.Cluster
	e.DryRun = e.DryRun || l.dryRun
	if e.At == 0 {
		e.At = l.now().UnixMicro()
	}
	data, err := subjects.Encode(e)
	if err == nil {
		var f jetstream.PubAckFuture
		f, err = l.js.PublishAsync(
			l.names.EventSubject(e.Kind, e.Instance),
			data,
			jetstream.WithMsgID(subjects.EventMsgID(e)),
		)
		if err == nil {
			return f
		}
	}
	l.failed(e.Stage, err)
	return nil
}

// eventWait bounds Wait: a server that never acknowledges (a missing publish permission, a
// stream gone) must not hang the stage; the audit gap is logged instead.
const eventWait = 30 * time.Second

// Wait waits for the futures Emit returned; it returns the first failure.
func (l *EventLog) Wait(ctx context.Context, fs []jetstream.PubAckFuture) error {
	ctx, cancel := context.WithTimeout(ctx, eventWait)
	defer cancel()
	var first error
	for _, f := range fs {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if first == nil {
				first = fmt.Errorf("store event: %w", err)
			}
		case <-ctx.Done():
			return fmt.Errorf("store events: %w", ctx.Err())
		}
	}
	return first
}

func (l *EventLog) failed(stage string, err error) {
	l.metrics.opError(stage, "event")
	l.log.Warn("publish event", "stage", stage, "err", err)
}
