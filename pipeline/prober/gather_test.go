package prober

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// recorder is the publish function of a gatherer under test: it records every request and
// fails while fail is set, or, as a stream's publish does, once its context has ended.
type recorder struct {
	mu   sync.Mutex
	reqs []subjects.DeleteRequest
	fail error
}

func (r *recorder) publish(ctx context.Context, req subjects.DeleteRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.reqs = append(r.reqs, req)
	return nil
}

func (r *recorder) requests() []subjects.DeleteRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]subjects.DeleteRequest(nil), r.reqs...)
}

func gatherTargets(key int64, n int) []subjects.Target {
	ts := make([]subjects.Target, n)
	for i := range ts {
		ts[i] = subjects.Target{Key: key, Location: fmt.Sprintf("loc-%d", i), Reason: subjects.ReasonOrphanWriting,
			Expected: subjects.RawText(`{"status":1}`)}
	}
	return ts
}

var gk = gatherKey{instance: "i1", group: "g", store: "s", round: 3}

func gatherBase() subjects.DeleteRequest {
	return subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: "c", Instance: "i1", Group: "g", Store: "s", Round: 3,
		JudgedAt: 1}
}

// addAsync runs t.add in a goroutine and returns its result channel.
func addAsync(ctx context.Context, t *ticket, seq uint64, targets []subjects.Target) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ch <- t.add(ctx, gatherBase(), subjects.Source{Stream: "BATCH", Seq: seq}, targets, nil)
	}()
	return ch
}

// pending asserts that ch has not delivered once every goroutine of the test's bubble is
// blocked: the batch waits for its request.
func pending(t *testing.T, ch <-chan error) {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-ch:
		t.Fatalf("add returned %v before its request was published", err)
	default:
	}
}

// idle asserts that g holds no request and judges no batch: nothing of a test is left in it.
func idle(t *testing.T, g *gatherer) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Empty(t, g.open)
	assert.Empty(t, g.judging)
}

func TestGatherConcurrentBatchesMakeOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGatherer(256, 0, rec.publish)
		ctx := context.Background()
		t1, t2, t3 := g.start(gk), g.start(gk), g.start(gk)
		e1 := addAsync(ctx, t1, 1, gatherTargets(1, 2))
		e2 := addAsync(ctx, t2, 2, gatherTargets(2, 3))
		pending(t, e1)
		pending(t, e2)
		require.Empty(t, rec.requests(), "published while a batch of the instance was still being judged")
		require.NoError(t, <-addAsync(ctx, t3, 3, gatherTargets(3, 1)))
		require.NoError(t, <-e1)
		require.NoError(t, <-e2)

		reqs := rec.requests()
		require.Len(t, reqs, 1)
		r := reqs[0]
		assert.Len(t, r.Targets, 6)
		seqs := []uint64{r.Source.Seq}
		for _, s := range r.Sources {
			seqs = append(seqs, s.Seq)
		}
		assert.ElementsMatch(t, []uint64{1, 2, 3}, seqs)
		require.NoError(t, r.Validate())
		// The id names every batch: the same targets from other batches are another request.
		other := r
		other.Sources = r.Sources[:1]
		assert.NotEqual(t, subjects.DeleteMsgID(r), subjects.DeleteMsgID(other))
	})
}

func TestGatherCancelPublishesWhatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGatherer(256, 0, rec.publish)
		t1, t2 := g.start(gk), g.start(gk)
		e1 := addAsync(context.Background(), t1, 1, gatherTargets(1, 2))
		pending(t, e1)
		t2.cancel(context.Background()) // the other batch found nothing (or failed)
		require.NoError(t, <-e1)
		reqs := rec.requests()
		require.Len(t, reqs, 1)
		assert.Len(t, reqs[0].Targets, 2)
		assert.Empty(t, reqs[0].Sources)

		// cancel after add is a no-op: the key's count is not decremented twice.
		t3, t4 := g.start(gk), g.start(gk)
		require.NoError(t, <-func() <-chan error {
			t3.cancel(context.Background())
			return addAsync(context.Background(), t4, 4, gatherTargets(4, 1))
		}())
		t4.cancel(context.Background())
		t3.cancel(context.Background())
		idle(t, g)
	})
}

func TestGatherFullRequestIsPublished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGatherer(4, 0, rec.publish)
		ctx := context.Background()
		t1, t2, t3, t4 := g.start(gk), g.start(gk), g.start(gk), g.start(gk)
		e1 := addAsync(ctx, t1, 1, gatherTargets(1, 3))
		pending(t, e1)
		e2 := addAsync(ctx, t2, 2, gatherTargets(2, 3)) // does not fit: the first request goes
		require.NoError(t, <-e1)
		pending(t, e2)
		e3 := addAsync(ctx, t3, 3, gatherTargets(3, 1)) // fills the second to 4: it goes
		require.NoError(t, <-e2)
		require.NoError(t, <-e3)
		t4.cancel(context.Background())

		reqs := rec.requests()
		require.Len(t, reqs, 2)
		for _, r := range reqs {
			assert.LessOrEqual(t, len(r.Targets), 4)
		}
		assert.Len(t, reqs[0].Targets, 3)
		assert.Len(t, reqs[1].Targets, 4)
	})
}

func TestGatherPublishFailureFailsEveryBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{fail: errors.New("stream unavailable")}
		g := newGatherer(256, 0, rec.publish)
		ctx := context.Background()
		t1, t2 := g.start(gk), g.start(gk)
		e1 := addAsync(ctx, t1, 1, gatherTargets(1, 2))
		e2 := addAsync(ctx, t2, 2, gatherTargets(2, 2))
		assert.ErrorContains(t, <-e1, "stream unavailable")
		assert.ErrorContains(t, <-e2, "stream unavailable")

		// The redelivered batches make a new request.
		rec.mu.Lock()
		rec.fail = nil
		rec.mu.Unlock()
		require.NoError(t, <-addAsync(ctx, g.start(gk), 1, gatherTargets(1, 2)))
		require.Len(t, rec.requests(), 1)
	})
}

func TestGatherSameLocationIsOneTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGatherer(256, 0, rec.publish)
		ctx := context.Background()
		t1, t2 := g.start(gk), g.start(gk)
		e1 := addAsync(ctx, t1, 1, gatherTargets(7, 2))
		pending(t, e1)
		require.NoError(t, <-addAsync(ctx, t2, 2, gatherTargets(7, 2))) // the same page, published twice
		require.NoError(t, <-e1)
		reqs := rec.requests()
		require.Len(t, reqs, 1)
		assert.Len(t, reqs[0].Targets, 2)
	})
}

func TestGatherKeepsInstancesApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGatherer(256, 0, rec.publish)
		ctx := context.Background()
		other := gk
		other.instance = "i2"
		t1, t2 := g.start(gk), g.start(other)
		e1 := addAsync(ctx, t1, 1, gatherTargets(1, 1))
		require.NoError(t, <-e1, "a batch of another instance being judged held this one back")
		t2.cancel(context.Background())
		require.Len(t, rec.requests(), 1)
	})
}

func TestGatherContextEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGatherer(256, 0, rec.publish)
		ctx, cancel := context.WithCancel(context.Background())
		t1, t2 := g.start(gk), g.start(gk)
		e1 := addAsync(ctx, t1, 1, gatherTargets(1, 1))
		pending(t, e1)
		cancel()
		assert.ErrorIs(t, <-e1, context.Canceled)
		// Its targets still go with the request: a no-op for the deleter if the batch comes back.
		t2.cancel(context.Background())
		g.wait()
		require.Len(t, rec.requests(), 1)
	})
}

// TestGatherLinger: with a linger, a request stays open for batches of its instance that come
// after it (nothing else of the instance held), until it is full or the linger has passed.
func TestGatherLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGatherer(4, time.Hour, rec.publish)
		e1 := addAsync(context.Background(), g.start(gk), 1, gatherTargets(1, 2))
		pending(t, e1) // alone, yet not published: a later batch may join
		e2 := addAsync(context.Background(), g.start(gk), 2, gatherTargets(2, 2))
		require.NoError(t, <-e1)
		require.NoError(t, <-e2)
		reqs := rec.requests()
		require.Len(t, reqs, 1, "full: published at once, with both batches")
		assert.Len(t, reqs[0].Targets, 4)
		assert.Len(t, reqs[0].Sources, 1)
		start := time.Now()
		g.wait() // the linger of the published request ends with it, not an hour later
		assert.Zero(t, time.Since(start))

		// A request that does not fill up is published once the linger has passed, not before.
		const linger = 10 * time.Millisecond
		rec2 := &recorder{}
		g2 := newGatherer(256, linger, rec2.publish)
		e3 := addAsync(context.Background(), g2.start(gk), 3, gatherTargets(3, 1))
		time.Sleep(linger - time.Nanosecond)
		pending(t, e3)
		require.Empty(t, rec2.requests())
		time.Sleep(time.Nanosecond)
		require.NoError(t, <-e3)
		require.Len(t, rec2.requests(), 1)
		g2.wait()
		idle(t, g2)
	})
}

// TestGatherLingerEndsWithItsContext: a lingering request whose batch goes back (its context
// ended: the consumer's drain is over) is given up at once, not an hour later: the gatherer's
// goroutines end with the handlers' context.
func TestGatherLingerEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGatherer(256, time.Hour, rec.publish)
		ctx, cancel := context.WithCancel(context.Background())
		e1 := addAsync(ctx, g.start(gk), 1, gatherTargets(1, 1))
		pending(t, e1)
		start := time.Now()
		cancel()
		assert.ErrorIs(t, <-e1, context.Canceled)
		g.wait()
		assert.Zero(t, time.Since(start), "the linger outlived its context")
		assert.Empty(t, rec.requests(), "published under an ended context")
		g.mu.Lock()
		defer g.mu.Unlock()
		assert.Empty(t, g.open)
	})
}
