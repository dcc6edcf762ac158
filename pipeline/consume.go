package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Waits of the consumer's retries (backoff.Policy, with jitter). A message that failed its n-th
// delivery is redelivered after about RedeliveryInitial·2^(n−1), at most RedeliveryMax; a
// failed fetch is retried after about FetchRetryInitial, doubling up to FetchRetryMax.
const (
	RedeliveryInitial = time.Second
	RedeliveryMax     = time.Minute
	FetchRetryInitial = 250 * time.Millisecond
	FetchRetryMax     = 5 * time.Second
)

// Handler processes one message. nil acknowledges it; an error wrapping subjects.ErrPoison
// terminates it (never retried, recorded); any other error is transient and redelivered later.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Consumer runs a Handler over a durable pull consumer with a bounded number of workers.
// It fetches only as many messages as it has free workers, so nothing waits in a client-side
// buffer while its ack timer runs (the prefetch trap).
type Consumer struct {
	stage      string
	consumer   jetstream.Consumer
	workers    int
	maxDeliver int
	drain      time.Duration
	fetchWait  time.Duration
	keepEvery  time.Duration
	keepFor    time.Duration
	handle     Handler
	events     *EventLog
	metrics    *Metrics
	log        *slog.Logger
}

// ConsumerConfig is how a consumer consumes.
type ConsumerConfig struct {
	Stage   string
	Workers int // handlers running at once; default 1
	// MaxDeliver is the consumer's MaxDeliver: the last failing delivery is dead-lettered
	// (0: never).
	MaxDeliver int
	// Drain is how long in-flight messages may take to finish after shutdown starts. Default 10s.
	Drain time.Duration
	// FetchWait bounds one pull request. Default 2s.
	FetchWait time.Duration
	// AckWait, when positive, is the consumer's AckWait: a message whose handler still runs
	// is kept in flight with InProgress every third of it, so a slow handler (delete_delay, a
	// slow file system) is not redelivered to another replica meanwhile. 0: never.
	AckWait time.Duration
	// KeepFor, when positive, bounds how long a handler's message is kept in flight: a
	// handler still running after it is taken for hung, and the server redelivers the
	// message one AckWait later (at the last delivery: the max-deliveries advisory, a dead
	// letter). 0: for as long as the handler runs.
	KeepFor time.Duration
}

// ConsumerDeps are what a consumer is wired to. Consumer and Handle are required; nil Events
// records no poison or dead letter, a nil Metrics counts on an unregistered set, a nil Logger
// discards.
type ConsumerDeps struct {
	Consumer jetstream.Consumer
	Handle   Handler
	Events   *EventLog
	Metrics  *Metrics
	Logger   *slog.Logger
}

// NewConsumer returns the consume loop of cfg.Stage.
func NewConsumer(cfg ConsumerConfig, deps ConsumerDeps) (*Consumer, error) {
	var refused Refusals
	refused.Need(deps.Consumer != nil, "no JetStream consumer")
	refused.Need(deps.Handle != nil, "no handler")
	if err := refused.Err("consumer of " + cfg.Stage); err != nil {
		return nil, err
	}
	c := &Consumer{stage: cfg.Stage, consumer: deps.Consumer, workers: max(cfg.Workers, 1), maxDeliver: cfg.MaxDeliver,
		drain: cfg.Drain, fetchWait: cfg.FetchWait, keepEvery: cfg.AckWait / 3, keepFor: cfg.KeepFor,
		handle: deps.Handle, events: deps.Events,
		metrics: orUnregistered(deps.Metrics), log: OrDiscard(deps.Logger)}
	if c.drain <= 0 {
		c.drain = 10 * time.Second
	}
	if c.fetchWait <= 0 {
		c.fetchWait = 2 * time.Second
	}
	return c, nil
}

// redelivery is the policy of redelivery delays.
func redelivery() backoff.Policy { return backoff.New(RedeliveryInitial, RedeliveryMax) }

// Run consumes until ctx is done, then lets in-flight handlers finish (bounded by Drain).
func (c *Consumer) Run(ctx context.Context) error {
	workers, drain, fetchWait := c.workers, c.drain, c.fetchWait
	// Handlers outlive ctx by at most drain, so a shutdown never cuts a CAS/CAD sequence short
	// without reason, yet never hangs.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(drain, hcancel) })
	defer stop()

	slots := make(chan struct{}, workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	retry := backoff.New(FetchRetryInitial, FetchRetryMax).Start()
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
		for free < workers {
			select {
			case slots <- struct{}{}:
				free++
				continue
			default:
			}
			break
		}
		fctx, fcancel := context.WithTimeout(ctx, fetchWait)
		batch, err := c.consumer.Fetch(free, jetstream.FetchContext(fctx))
		if err != nil {
			fcancel()
			for range free {
				<-slots
			}
			if ctx.Err() != nil {
				return nil
			}
			c.metrics.opError(c.stage, "fetch")
			wait := retry.Next()
			c.log.Warn("fetch", "stage", c.stage, "failures", retry.Failures(), "retry_in", wait, "err", err)
			_ = backoff.Sleep(ctx, wait) // a broken connection must not spin (invariant 7)
			continue
		}
		retry.Reset()
		got := 0
		for msg := range batch.Messages() {
			got++
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				c.process(ctx, hctx, msg)
			}()
		}
		fcancel()
		for range free - got {
			<-slots
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.Canceled) &&
			!errors.Is(err, context.DeadlineExceeded) &&
			!errors.Is(err, jetstream.ErrNoMessages) {
			c.log.Debug("fetch ended", "stage", c.stage, "err", err)
		}
	}
	return nil
}

// process runs the handler and disposes of the message: the one place that decides ack,
// redelivery, termination and dead-lettering.
func (c *Consumer) process(runCtx, ctx context.Context, msg jetstream.Msg) {
	stopKeep := c.keepInFlight(msg)
	err := c.run(ctx, msg)
	stopKeep()
	md, mdErr := msg.Metadata()
	var delivered uint64 = 1
	if mdErr == nil {
		delivered = md.NumDelivered
	}
	switch {
	case err == nil:
		if aerr := msg.Ack(); aerr != nil {
			c.log.Warn("ack", "stage", c.stage, "err", aerr)
		}
		c.metrics.Messages.WithLabelValues(c.stage, MsgAck).Inc()
	case errors.Is(err, subjects.ErrPoison):
		c.record(ctx, msg, md, subjects.EventPoison, err)
		_ = msg.TermWithReason(truncate(err.Error(), 200))
		c.metrics.Messages.WithLabelValues(c.stage, MsgTerm).Inc()
		c.log.Warn("message terminated", "stage", c.stage, "err", err)
	case c.maxDeliver > 0 && delivered >= uint64(c.maxDeliver):
		c.record(ctx, msg, md, subjects.EventDeadLetter, err)
		_ = msg.TermWithReason(truncate("max deliveries: "+err.Error(), 200))
		c.metrics.Messages.WithLabelValues(c.stage, MsgTerm).Inc()
		c.log.Warn("message dead-lettered", "stage", c.stage, "deliveries", delivered, "err", err)
	case runCtx.Err() != nil:
		// Shutting down: hand the message back at once for another replica.
		_ = msg.Nak()
		c.metrics.Messages.WithLabelValues(c.stage, MsgNak).Inc()
	default:
		// NakWithDelay, never a bare Nak: a persistent failure must not become a redelivery
		// storm, and the jitter keeps messages that failed together (an outage) from all
		// coming back at the same instant.
		_ = msg.NakWithDelay(redelivery().Delay(int(min(delivered, 1<<20))))
		c.metrics.Messages.WithLabelValues(c.stage, MsgNak).Inc()
		c.log.Warn("message failed; redelivery later", "stage", c.stage, "deliveries", delivered, "err", err)
	}
}

// keepInFlight sends InProgress for msg every keepEvery until stop is called or, with a
// keepFor, until keepFor has passed; stop returns once the keeper has ended. Without a
// keepEvery it does nothing.
func (c *Consumer) keepInFlight(msg jetstream.Msg) (stop func()) {
	if c.keepEvery <= 0 {
		return func() {}
	}
	done, kept := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(kept)
		t := time.NewTicker(c.keepEvery)
		defer t.Stop()
		var giveUp <-chan time.Time
		if c.keepFor > 0 {
			g := time.NewTimer(c.keepFor)
			defer g.Stop()
			giveUp = g.C
		}
		for {
			select {
			case <-done:
				return
			case <-giveUp:
				c.log.Warn("handler still running; no longer kept in flight", "stage", c.stage, "after", c.keepFor)
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() { close(done); <-kept }
}

// run runs the handler and turns a panic into an error: one bad message must not take the
// process down; it is redelivered with backoff and dead-lettered at MaxDeliver.
func (c *Consumer) run(ctx context.Context, msg jetstream.Msg) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panic", "stage", c.stage, "panic", r)
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return c.handle(ctx, msg)
}

func (c *Consumer) record(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, kind string, err error) {
	if c.events == nil {
		return
	}
	e := subjects.Event{Kind: kind, Stage: c.stage, Reason: truncate(err.Error(), 500)}
	if inst, ierr := c.events.names.InstanceOf(msg.Subject()); ierr == nil {
		e.Instance = inst
	}
	if md != nil {
		src := SourceOf(msg)
		e.Source = &src
	}
	f := c.events.Emit(ctx, e)
	_ = c.events.Wait(ctx, []jetstream.PubAckFuture{f})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
