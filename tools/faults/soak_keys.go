package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyWatch learns every key written in the stores, by whomever (KVCM's workload, kvcm-gc's
// deleter, upstream's GC), from Redis's keyspace notifications: a check after a round reads
// those keys, and need not read the others to find what the round changed. Notifications are
// at most once: a subscription cut (a Redis restart, a slow subscriber dropped) loses what was
// written meanwhile, so any cut makes the next check read every key (gap). A barrier orders the
// notifications with the check: a marker published after the round's writes arrives after
// their notifications, on the same connection.
type keyWatch struct {
	rdbs []redis.UniversalClient

	mu      sync.Mutex
	touched map[string]int // key → its store
	gap     bool
	// awaiting are the barrier markers sent and not yet taken back, true once received.
	awaiting map[string]bool
	wake     chan struct{} // closed and replaced when a marker arrives
	n        int           // markers sent
}

// keyEvents are the notify-keyspace-events classes: keyspace events (K) of every command kind
// (A: generic, string, list, set, hash, sorted set, stream, expired, evicted).
const keyEvents = "KA"

// barrierChannel carries the markers.
const barrierChannel = "kvcmgc-soak-barrier"

func newKeyWatch(rdbs []redis.UniversalClient) *keyWatch {
	return &keyWatch{rdbs: rdbs, touched: map[string]int{}, awaiting: map[string]bool{}, wake: make(chan struct{}), gap: true}
}

// start turns the notifications on in every store and listens until ctx ends.
func (k *keyWatch) start(ctx context.Context, wg *sync.WaitGroup) error {
	if err := k.configure(ctx); err != nil {
		return err
	}
	for i, rdb := range k.rdbs {
		ps := rdb.PSubscribe(ctx, "__keyspace@*__:*")
		if err := ps.Subscribe(ctx, barrierChannel); err != nil {
			_ = ps.Close()
			return fmt.Errorf("subscribe to keyspace notifications: %w", err)
		}
		// A receive waits in its read whatever ctx says: closing the subscription ends it.
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
		wg.Go(func() {
			defer stop()
			k.listen(ctx, i, ps)
		})
	}
	return nil
}

// configure turns the notifications on (CONFIG SET does not outlive a restart).
func (k *keyWatch) configure(ctx context.Context) error {
	for _, rdb := range k.rdbs {
		if err := rdb.ConfigSet(ctx, "notify-keyspace-events", keyEvents).Err(); err != nil {
			return fmt.Errorf("turn keyspace notifications on: %w", err)
		}
	}
	return nil
}

// restarted is called once a store restarted: its notifications are on again, and what it
// was written meanwhile is unknown.
func (k *keyWatch) restarted(ctx context.Context) error {
	k.mu.Lock()
	k.gap = true
	k.mu.Unlock()
	return k.configure(ctx)
}

// listen receives store i's notifications until ctx ends. Any error may have lost some (the
// subscription reconnects by itself).
func (k *keyWatch) listen(ctx context.Context, store int, ps *redis.PubSub) {
	for ctx.Err() == nil {
		msg, err := ps.Receive(ctx)
		if err != nil {
			k.mu.Lock()
			k.gap = true
			k.mu.Unlock()
			if errors.Is(err, redis.ErrClosed) || ctx.Err() != nil {
				return
			}
			_ = sleep(ctx, 50*time.Millisecond)
			continue
		}
		m, ok := msg.(*redis.Message)
		if !ok {
			continue
		}
		k.mu.Lock()
		if m.Channel == barrierChannel {
			if _, ok := k.awaiting[m.Payload]; ok {
				k.awaiting[m.Payload] = true
			}
			close(k.wake)
			k.wake = make(chan struct{})
		} else if _, key, ok := strings.Cut(m.Channel, "__:"); ok {
			k.touched[key] = store
		}
		k.mu.Unlock()
	}
}

// barrier returns once every notification of a write made before it was called has been
// received, in every store (or the wait failed: then the next take reports a gap).
func (k *keyWatch) barrier(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, rdb := range k.rdbs {
		if err := k.barrierOne(ctx, rdb); err != nil {
			k.mu.Lock()
			k.gap = true
			k.mu.Unlock()
			return fmt.Errorf("keyspace notifications: barrier: %w", err)
		}
	}
	return nil
}

func (k *keyWatch) barrierOne(ctx context.Context, rdb redis.UniversalClient) error {
	k.mu.Lock()
	k.n++
	marker := strconv.Itoa(k.n)
	k.awaiting[marker] = false
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.awaiting, marker)
		k.mu.Unlock()
	}()
	for {
		// Published again until it arrives: a subscription being made again misses it.
		if err := rdb.Publish(ctx, barrierChannel, marker).Err(); err != nil {
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		again := time.After(2 * time.Second)
		for {
			k.mu.Lock()
			wake, got := k.wake, k.awaiting[marker]
			k.mu.Unlock()
			if got {
				return nil
			}
			select {
			case <-wake:
				continue
			case <-again:
			case <-ctx.Done():
				return ctx.Err()
			}
			break
		}
	}
}

// take returns the keys written since the last take, and whether some may be missing.
func (k *keyWatch) take() (map[string]int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out, gap := k.touched, k.gap
	k.touched, k.gap = map[string]int{}, false
	return out, gap
}
