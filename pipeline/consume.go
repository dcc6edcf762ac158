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
	Stage      string
	Consumer   jetstream.Consumer
	Workers    int
	MaxDeliver int // the consumer's MaxDeliver: the last failing delivery is dead-lettered
	Handle     Handler
	Events     *EventLog
	Metrics    *Metrics
	Logger     *slog.Logger
	// Drain is how long in-flight messages may take to finish after shutdown starts. Default 10s.
	Drain time.Duration
	// FetchWait bounds one pull request. Default 2s.
	FetchWait time.Duration
}

// redelivery is the policy of redelivery delays.
func redelivery() backoff.Policy { return backoff.New(RedeliveryInitial, RedeliveryMax) }

// Run consumes until ctx is done, then lets in-flight handlers finish (bounded by Drain).
func (c *Consumer) Run(ctx context.Context) error {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	workers := max(c.Workers, 1)
	drain := c.Drain
	if drain <= 0 {
		drain = 10 * time.Second
	}
	fetchWait := c.FetchWait
	if fetchWait <= 0 {
		fetchWait = 2 * time.Second
	}
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
		batch, err := c.Consumer.Fetch(free, jetstream.FetchContext(fctx))
		if err != nil {
			fcancel()
			for range free {
				<-slots
			}
			if ctx.Err() != nil {
				return nil
			}
			c.Metrics.opError(c.Stage, "fetch")
			wait := retry.Next()
			c.Logger.Warn("fetch", "stage", c.Stage, "failures", retry.Failures(), "retry_in", wait, "err", err)
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
		if err := batch.Error(); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrNoMessages) {
			c.Logger.Debug("fetch ended", "stage", c.Stage, "err", err)
		}
	}
	return nil
}

// process runs the handler and disposes of the message: the one place that decides ack,
// redelivery, termination and dead-lettering.
func (c *Consumer) process(runCtx, ctx context.Context, msg jetstream.Msg) {
	err := c.handle(ctx, msg)
	md, mdErr := msg.Metadata()
	var delivered uint64 = 1
	if mdErr == nil {
		delivered = md.NumDelivered
	}
	switch {
	case err == nil:
		if aerr := msg.Ack(); aerr != nil {
			c.Logger.Warn("ack", "stage", c.Stage, "err", aerr)
		}
		c.Metrics.Messages.WithLabelValues(c.Stage, MsgAck).Inc()
	case errors.Is(err, subjects.ErrPoison):
		c.record(ctx, msg, md, subjects.EventPoison, err)
		_ = msg.TermWithReason(truncate(err.Error(), 200))
		c.Metrics.Messages.WithLabelValues(c.Stage, MsgTerm).Inc()
		c.Logger.Warn("message terminated", "stage", c.Stage, "err", err)
	case c.MaxDeliver > 0 && delivered >= uint64(c.MaxDeliver):
		c.record(ctx, msg, md, subjects.EventDeadLetter, err)
		_ = msg.TermWithReason(truncate("max deliveries: "+err.Error(), 200))
		c.Metrics.Messages.WithLabelValues(c.Stage, MsgTerm).Inc()
		c.Logger.Warn("message dead-lettered", "stage", c.Stage, "deliveries", delivered, "err", err)
	case runCtx.Err() != nil:
		// Shutting down: hand the message back at once for another replica.
		_ = msg.Nak()
		c.Metrics.Messages.WithLabelValues(c.Stage, MsgNak).Inc()
	default:
		// NakWithDelay, never a bare Nak: a persistent failure must not become a redelivery
		// storm, and the jitter keeps messages that failed together (an outage) from all
		// coming back at the same instant.
		_ = msg.NakWithDelay(redelivery().Delay(int(min(delivered, 1<<20))))
		c.Metrics.Messages.WithLabelValues(c.Stage, MsgNak).Inc()
		c.Logger.Warn("message failed; redelivery later", "stage", c.Stage, "deliveries", delivered, "err", err)
	}
}

// handle runs the handler and turns a panic into an error: one bad message must not take the
// process down; it is redelivered with backoff and dead-lettered at MaxDeliver.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.Logger.Error("handler panic", "stage", c.Stage, "panic", r)
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return c.Handle(ctx, msg)
}

func (c *Consumer) record(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, kind string, err error) {
	if c.Events == nil {
		return
	}
	e := subjects.Event{Kind: kind, Stage: c.Stage, Reason: truncate(err.Error(), 500)}
	if inst, ierr := c.Events.Names.InstanceOf(msg.Subject()); ierr == nil {
		e.Instance = inst
	}
	if md != nil {
		e.Source = &subjects.Source{Stream: md.Stream, Seq: md.Sequence.Stream, MsgID: msg.Headers().Get(jetstream.MsgIDHeader)}
	}
	f := c.Events.Emit(ctx, e)
	_ = c.Events.Wait(ctx, []jetstream.PubAckFuture{f})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
