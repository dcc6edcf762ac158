package scanner

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// countingPublisher counts the batches a scanner starts to store, each stored at once.
type countingPublisher struct{ n atomic.Int64 }

func (c *countingPublisher) PublishAsync(string, []byte, string) (pipeline.AckWait, error) {
	c.n.Add(1)
	return func(context.Context) error { return nil }, nil
}

// TestPublishFencing: a page's batches are published only while the store's lease is held
// (DESIGN §4.1 fencing), on the walk's goroutine and in the background alike. The check sits
// where the batches go out, so a recording goroutine that runs late publishes nothing once
// the lease has lapsed.
func TestPublishFencing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		pub := &countingPublisher{}
		s, err := New(DefaultConfig(), Deps{LeaseTTL: time.Minute, JS: failingJS{}, Publisher: pub})
		require.NoError(t, err)
		lease := pipeline.NewStoreLease(createKV{}, "s", "me", time.Minute)
		held, err := lease.Acquire(ctx)
		require.NoError(t, err)
		require.True(t, held)
		d := s.newDriver(&walkHandle{store: "s", lease: lease, wake: make(chan struct{}, 1), done: make(chan struct{})})
		d.bctx = ctx
		a := actPublish{now: time.Now(), round: 1, leaseRev: 7, instances: map[string]meta.Instance{"i": {ID: "i"}},
			page: meta.Page{Entries: []meta.Entry{{Key: kvcm.BlockKey("i", 1), Instance: "i", BlockKey: 1,
				Layout: kvcm.LayoutLegacy, URI: []byte(`{"a":"b"}`), LRUTime: "1"}}}}

		rec := &recording{}
		require.True(t, d.send(ctx, a, rec), "held: sent")
		require.EqualValues(t, 1, pub.n.Load(), "held: the page's batch went out")

		time.Sleep(time.Minute) // lapsed: not renewed in time
		require.Equal(t, evRecorded{err: pipeline.ErrLeaseLost, failure: failLease}, d.publish(ctx, a))
		a.async = true
		require.Nil(t, d.publish(ctx, a), "in the background: the outcome comes at the await")
		require.Equal(t, evRecorded{err: pipeline.ErrLeaseLost, failure: failLease}, d.await())
		require.EqualValues(t, 1, pub.n.Load(), "nothing published after the lease lapsed")
	})
}

// createKV is a lease bucket that stores every new key at revision 7.
type createKV struct{ jetstream.KeyValue }

func (createKV) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	return 7, nil
}

// failingJS stands in for a JetStream context whose asynchronous publishes all fail.
type failingJS struct{ jetstream.JetStream }

var errDown = errors.New("connection refused")

func (failingJS) PublishAsync(string, []byte, ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return nil, errDown
}
