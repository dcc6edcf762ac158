package prober

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The prober gathers the targets of batches of one instance held at the same time (being
// judged, or waiting for one of the prober's workers: the consumer holds up to its max ack
// pending batches) into one delete request, up to MaxTargets: a scan page holds a few garbage locations of each
// instance, and a request of a dozen targets costs the deleter nearly as much as one of a
// few hundred (every protocol step is one round trip for the whole request).
//
// The chain stays at-least-once: a batch's handler returns, and so the batch is acknowledged,
// only once the request holding its targets is stored; if the publish fails, every batch of
// the request is redelivered. With no linger, gathering never waits for batches that are not
// there: a request is published as soon as no other batch of its instance is held, or when it
// is full. With a linger (Config.GatherLinger, 50ms by default) it is published when
// full or that long after its first targets, whatever comes in the meantime: a prober that
// keeps up with the scanner holds a batch or two of an instance at a time, and would publish
// requests of a dozen targets.
// A request is named by all its batches (subjects.DeleteMsgID), so a redelivery that gathers
// them otherwise is a new request, never a dropped one; targets judged twice cost the
// deleter a no-op.
//
// A request is published under the context of the batch that completes it (or, lingering,
// of the batch that opened it): the handler's, which the consumer bounds by its drain. Every
// publish and every linger runs in a goroutine of the gatherer's group, which wait joins: the
// prober waits for it once its consumer has returned.

// gatherKey is what the batches of one request share.
type gatherKey struct {
	instance, group, store string
	round                  uint64
}

// gathering is one request being gathered.
type gathering struct {
	req  subjects.DeleteRequest
	seen map[locKey]bool
	once sync.Once
	done chan struct{} // closed once published (or failed)
	err  error
}

type locKey struct {
	key int64
	id  string
}

// gatherer collects requests; the zero value is not usable (newGatherer).
type gatherer struct {
	max int
	// linger, when positive, is how long a request stays open for batches of its instance
	// still to come: it is published when full or linger after its first targets, not as soon
	// as no other batch of the instance is held.
	linger  time.Duration
	publish func(ctx context.Context, req subjects.DeleteRequest) error

	mu      sync.Mutex
	open    map[gatherKey]*gathering
	judging map[gatherKey]int // batches of the key being judged now

	// running are the publishes started in the background and the lingers still waiting.
	running sync.WaitGroup
}

func newGatherer(max int, linger time.Duration, publish func(context.Context, subjects.DeleteRequest) error) *gatherer {
	return &gatherer{
		max:     max,
		linger:  linger,
		publish: publish,
		open:    map[gatherKey]*gathering{},
		judging: map[gatherKey]int{},
	}
}

// flushLater publishes r in the background, under ctx.
func (g *gatherer) flushLater(ctx context.Context, r *gathering) {
	g.running.Go(func() { r.flush(ctx, g.publish) })
}

// lingerFor publishes r, linger after its first targets (or once ctx, the context of the
// batch that opened it, ends), unless it has been published already.
func (g *gatherer) lingerFor(ctx context.Context, k gatherKey, r *gathering) {
	g.running.Go(func() {
		t := time.NewTimer(g.linger)
		defer t.Stop()
		select {
		case <-r.done:
			return
		case <-t.C:
		case <-ctx.Done():
		}
		g.mu.Lock()
		if g.open[k] == r {
			delete(g.open, k)
		}
		g.mu.Unlock()
		r.flush(ctx, g.publish)
	})
}

// wait joins every publish and linger the gatherer started.
func (g *gatherer) wait() { g.running.Wait() }

// ticket is one batch of a key being judged: it either adds its targets (add) or ends
// without any (cancel); whichever comes first ends its judging.
type ticket struct {
	g    *gatherer
	k    gatherKey
	once sync.Once
}

// start records a batch of k being judged.
func (g *gatherer) start(k gatherKey) *ticket {
	g.mu.Lock()
	g.judging[k]++
	g.mu.Unlock()
	return &ticket{g: g, k: k}
}

// end ends the ticket's judging; g.mu must be held. A request of its key left with no batch
// being judged is taken out and returned, to be flushed.
func (t *ticket) end() (flush *gathering) {
	t.once.Do(func() {
		g := t.g
		if g.judging[t.k]--; g.judging[t.k] <= 0 {
			delete(g.judging, t.k)
			if g.linger <= 0 {
				flush = g.open[t.k]
				delete(g.open, t.k)
			}
		}
	})
	return flush
}

// cancel ends a batch that adds no targets (none found, or it failed): a request that was
// waiting for it is published now, under ctx.
func (t *ticket) cancel(ctx context.Context) {
	t.g.mu.Lock()
	r := t.end()
	t.g.mu.Unlock()
	if r != nil {
		t.g.flushLater(ctx, r)
	}
}

// add gives the targets of the judged batch (from src) to the request of its key and waits
// until that request is stored.
func (t *ticket) add(ctx context.Context, base subjects.DeleteRequest, src subjects.Source, targets []subjects.Target,
	storages map[string]subjects.StorageInfo) error {
	g, k := t.g, t.k
	g.mu.Lock()
	r := g.open[k]
	if r != nil && len(r.req.Targets)+len(targets) > g.max {
		// Full: publish what it holds, and start another.
		delete(g.open, k)
		g.flushLater(ctx, r)
		r = nil
	}
	if r == nil {
		r = &gathering{req: base, seen: make(map[locKey]bool, len(targets)), done: make(chan struct{})}
		r.req.Source, r.req.Sources, r.req.Targets, r.req.Storages = src, nil, nil, map[string]subjects.StorageInfo{}
		g.open[k] = r
		if g.linger > 0 {
			g.lingerFor(ctx, k, r)
		}
	} else {
		r.req.Sources = append(r.req.Sources, src)
	}
	for _, tg := range targets {
		// The same location from two batches (a page published twice) is one target.
		if lk := (locKey{tg.Key, tg.Location}); !r.seen[lk] {
			r.seen[lk] = true
			r.req.Targets = append(r.req.Targets, tg)
		}
	}
	maps.Copy(r.req.Storages, storages)
	r.req.JudgedAt = max(r.req.JudgedAt, base.JudgedAt)
	flush := t.end() // r itself when no other batch of the key is being judged
	if flush == nil && len(r.req.Targets) >= g.max {
		delete(g.open, k)
		flush = r
	}
	g.mu.Unlock()
	if flush != nil {
		flush.flush(ctx, g.publish)
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		// The batch goes back; the request may still be stored with its targets, which is
		// only a no-op for the deleter later.
		return fmt.Errorf("wait for the delete request: %w", ctx.Err())
	}
}

// flush publishes r under ctx, once.
func (r *gathering) flush(ctx context.Context, publish func(context.Context, subjects.DeleteRequest) error) {
	r.once.Do(func() {
		r.err = publish(ctx, r.req)
		close(r.done)
	})
}
