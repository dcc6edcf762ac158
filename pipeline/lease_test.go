package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func leaseBucket(t *testing.T, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	js := testenv.StartNATS(t).JetStream(t)
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "LEASE", TTL: ttl, History: 1})
	require.NoError(t, err)
	return kv
}

// holds runs one Acquire or Refresh of a lease, which must not fail, and reports whether the
// lease is held after it.
func holds(t *testing.T, try func(context.Context) (bool, error)) bool {
	t.Helper()
	held, err := try(context.Background())
	require.NoError(t, err)
	return held
}

func TestLeaseOneHolderAtATime(t *testing.T) {
	ctx := context.Background()
	kv := leaseBucket(t, time.Minute)
	a, b := NewStoreLease(kv, "s1:6379", "a", time.Minute), NewStoreLease(kv, "s1:6379", "b", time.Minute)
	other := NewStoreLease(kv, "s2:6379", "b", time.Minute)

	require.True(t, holds(t, a.Acquire))
	require.False(t, holds(t, b.Acquire), "b cannot take a held lease")
	require.True(t, holds(t, other.Acquire), "each store has its own lease")
	rev1, ok := a.Held()
	require.True(t, ok)

	require.NoError(t, a.Renew(ctx)) // by revision
	rev2, _ := a.Held()
	require.Greater(t, rev2, rev1, "the fencing token grows")

	leases, err := ReadLeases(ctx, kv)
	require.NoError(t, err)
	require.Len(t, leases, 2)
	require.Equal(t, "s1:6379", leases[0].Store)
	require.Equal(t, "a", leases[0].Record.Holder)
	require.Equal(t, rev2, leases[0].Revision)
	rec, _, err := ReadLease(ctx, kv)
	require.NoError(t, err)
	require.Equal(t, "a", rec.Holder)

	require.NoError(t, a.Release(ctx))
	_, ok = a.Held()
	require.False(t, ok)
	require.True(t, holds(t, b.Acquire), "a released lease is taken at once")
	rev3, _ := b.Held()
	require.Greater(t, rev3, rev2, "the next holder's token is higher")
}

func TestLeaseLostWhenSomeoneElseWrote(t *testing.T) {
	ctx := context.Background()
	kv := leaseBucket(t, time.Minute)
	a := NewStoreLease(kv, "s1", "a", time.Minute)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	// Another writer replaced the key (e.g. the lease expired and was taken).
	_, err = kv.Put(ctx, subjects.StoreLeaseKey("s1"), []byte(`{"holder":"b"}`))
	require.NoError(t, err)
	err = a.Renew(ctx)
	require.ErrorIs(t, err, ErrLeaseLost)
	_, ok := a.Held()
	require.False(t, ok, "a refused renewal drops the lease at once")
	require.NoError(t, a.Release(ctx), "nothing to release")
	e, err := kv.Get(ctx, subjects.StoreLeaseKey("s1"))
	require.NoError(t, err)
	require.JSONEq(t, `{"holder":"b"}`, string(e.Value()), "the new holder's key is left alone")
}

func TestLeaseExpiresLocally(t *testing.T) {
	ctx := context.Background()
	kv := leaseBucket(t, time.Minute)
	now := time.Now()
	a := NewStoreLease(kv, "s1", "a", time.Second)
	a.now = func() time.Time { return now }
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	_, ok := a.Held()
	require.True(t, ok)
	now = now.Add(time.Second) // no renewal for a whole TTL: a stalled holder stops acting
	_, ok = a.Held()
	require.False(t, ok)
	require.ErrorIs(t, a.Renew(ctx), ErrLeaseLost, "too late to renew")
}

// flakyKV fails Update with a transient error while failing is set.
type flakyKV struct {
	jetstream.KeyValue
	failing atomic.Bool
}

var errUnavailable = errors.New("jetstream not available")

func (f *flakyKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if f.failing.Load() {
		return 0, errUnavailable
	}
	return f.KeyValue.Update(ctx, key, value, rev)
}

// A renewal that fails for a transient reason (a NATS node changing leader) keeps the lease
// until its TTL would pass, and a later renewal keeps it for good; only past the TTL is it lost.
func TestLeaseSurvivesTransientRenewalFailures(t *testing.T) {
	ctx := context.Background()
	kv := &flakyKV{KeyValue: leaseBucket(t, time.Minute)}
	now := time.Now()
	a := NewStoreLease(kv, "s1", "a", 10*time.Second)
	a.now = func() time.Time { return now }
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	rev, _ := a.Held()

	kv.failing.Store(true)
	now = now.Add(5 * time.Second)
	err = a.Renew(ctx)
	require.ErrorIs(t, err, errUnavailable)
	require.NotErrorIs(t, err, ErrLeaseLost)
	now = now.Add(4 * time.Second)
	require.Error(t, a.Renew(ctx))
	got, ok := a.Held()
	require.True(t, ok, "still within the TTL of the last renewal")
	require.Equal(t, rev, got)

	kv.failing.Store(false)
	require.NoError(t, a.Renew(ctx), "retried before the TTL passed")
	now = now.Add(9 * time.Second)
	_, ok = a.Held()
	require.True(t, ok, "the late renewal counts from its own start")

	kv.failing.Store(true)
	now = now.Add(2 * time.Second)
	require.Error(t, a.Renew(ctx))
	_, ok = a.Held()
	require.False(t, ok, "past the TTL: lost")
	require.ErrorIs(t, a.Renew(ctx), ErrLeaseLost)
}

// cutLister is a KeyValue whose key listing ends early, as nats.go's does when its context
// ends: the keys so far, then a closed channel and no error.
type cutLister struct {
	jetstream.KeyValue
	keys []string
}

func (c cutLister) ListKeysFiltered(ctx context.Context, _ ...string) (jetstream.KeyLister, error) {
	ch := make(chan string, len(c.keys))
	for _, k := range c.keys {
		ch <- k
	}
	close(ch)
	return cutKeys(ch), nil
}

type cutKeys chan string

func (k cutKeys) Keys() <-chan string { return k }
func (k cutKeys) Stop() error         { return nil }

// TestListKeysCutByContext: a listing that ended with its context is an error, never a part
// of the keys taken for all of them (a store's lease or checkpoint left out).
func TestListKeysCutByContext(t *testing.T) {
	kv := cutLister{keys: []string{"a"}}
	keys, err := ListKeys(context.Background(), kv, ">")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, keys)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	keys, err = ListKeys(ctx, kv, ">")
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, keys)
}

// TestLeaseOfAStorage: a sweep walker's lease, on a storage's key, is held by one walker at a
// time and lost at once when someone else writes its key.
func TestLeaseOfAStorage(t *testing.T) {
	ctx := context.Background()
	kv := leaseBucket(t, time.Minute)
	lease := func(storage, holder string) *Lease {
		return NewLease(kv, subjects.SweepKey(storage), LeaseRecord{Holder: holder, Storage: storage}, time.Minute)
	}
	a, b, other := lease("nfs", "a"), lease("nfs", "b"), lease("nfs2", "b")
	require.True(t, holds(t, a.Refresh))
	require.False(t, holds(t, b.Refresh), "one walker per storage")
	require.True(t, holds(t, other.Refresh), "a lease per storage")
	r1, _ := a.Held()
	require.True(t, holds(t, a.Refresh))
	r2, _ := a.Held()
	require.Greater(t, r2, r1)
	rec, _, err := ReadLeaseKey(ctx, kv, subjects.SweepKey("nfs"))
	require.NoError(t, err)
	require.Equal(t, "a", rec.Holder)
	require.Equal(t, "nfs", rec.Storage)

	// Someone else wrote the key: the renewal loses the lease at once.
	_, err = kv.Put(ctx, subjects.SweepKey("nfs"), []byte(`{"holder":"x"}`))
	require.NoError(t, err)
	held, err := a.Refresh(ctx)
	require.Error(t, err)
	require.False(t, held)
	_, ok := a.Held()
	require.False(t, ok)
	require.NoError(t, a.Release(ctx), "nothing to release")
	require.NoError(t, other.Release(ctx))
	require.False(t, holds(t, b.Refresh), "x holds it")
}
