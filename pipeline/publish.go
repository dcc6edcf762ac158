package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// What a stage publishes through: the synchronous and the asynchronous publish, and the
// JetStream implementation of both.

// Publisher stores one message in a stream with a Nats-Msg-Id (synchronously: it returns once
// the server has stored or deduplicated it).
type Publisher interface {
	Publish(ctx context.Context, subject string, data []byte, msgID string) error
}

// AckWait waits for the server's answer to an asynchronous publish: nil once the message is
// stored (or deduplicated).
type AckWait func(ctx context.Context) error

// AsyncPublisher starts storing one message in a stream with a Nats-Msg-Id and returns at
// once; the AckWait tells whether it was stored.
type AsyncPublisher interface {
	PublishAsync(subject string, data []byte, msgID string) (AckWait, error)
}

// AckTimeout bounds the wait for the acknowledgement of a walk's page of batches; a page not
// acknowledged by then is read and published again (the server drops the duplicates).
const AckTimeout = 30 * time.Second

// JSPublisher publishes through JetStream and waits for the server's acknowledgement.
type JSPublisher struct{ JS jetstream.JetStream }

// PublishAsync starts storing data on subject with the given Nats-Msg-Id and returns a wait
// for the server's acknowledgement.
func (p JSPublisher) PublishAsync(subject string, data []byte, msgID string) (AckWait, error) {
	f, err := p.JS.PublishAsync(subject, data, jetstream.WithMsgID(msgID))
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	return func(ctx context.Context) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", subject, err)
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w", subject, ctx.Err())
		}
	}, nil
}

// Publish stores data on subject with the given Nats-Msg-Id.
func (p JSPublisher) Publish(ctx context.Context, subject string, data []byte, msgID string) error {
	if _, err := p.JS.Publish(ctx, subject, data, jetstream.WithMsgID(msgID)); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}
