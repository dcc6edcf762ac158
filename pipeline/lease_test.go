package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/testenv"
)

func leaseBucket(t *testing.T, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	js := testenv.StartNATS(t).JetStream(t)
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "LEASE", TTL: ttl, History: 1})
	require.NoError(t, err)
	return kv
}

func TestLeaseOneHolderAtATime(t *testing.T) {
	ctx := context.Background()
	kv := leaseBucket(t, time.Minute)
	a, b := NewLease(kv, "a", time.Minute), NewLease(kv, "b", time.Minute)

	held, err := a.Refresh(ctx)
	require.NoError(t, err)
	require.True(t, held)
	held, err = b.Refresh(ctx)
	require.NoError(t, err)
	require.False(t, held, "b cannot take a held lease")
	rev1, ok := a.Held()
	require.True(t, ok)

	held, err = a.Refresh(ctx) // renewal by revision
	require.NoError(t, err)
	require.True(t, held)
	rev2, _ := a.Held()
	require.Greater(t, rev2, rev1, "the fencing token grows")

	rec, _, err := ReadLease(ctx, kv)
	require.NoError(t, err)
	require.Equal(t, "a", rec.Holder)

	require.NoError(t, a.Release(ctx))
	_, ok = a.Held()
	require.False(t, ok)
	held, err = b.Refresh(ctx)
	require.NoError(t, err)
	require.True(t, held, "a released lease is taken at once")
}

func TestLeaseLostWhenSomeoneElseWrote(t *testing.T) {
	ctx := context.Background()
	kv := leaseBucket(t, time.Minute)
	a := NewLease(kv, "a", time.Minute)
	_, err := a.Refresh(ctx)
	require.NoError(t, err)
	// Another writer replaced the key (e.g. the lease expired and was taken).
	_, err = kv.Put(ctx, LeaseKey, []byte(`{"holder":"b"}`))
	require.NoError(t, err)
	held, err := a.Refresh(ctx)
	require.Error(t, err)
	require.False(t, held)
	_, ok := a.Held()
	require.False(t, ok, "a failed renewal drops the lease at once")
}

func TestLeaseExpiresLocally(t *testing.T) {
	ctx := context.Background()
	kv := leaseBucket(t, time.Minute)
	now := time.Now()
	a := NewLease(kv, "a", time.Second)
	a.now = func() time.Time { return now }
	_, err := a.Refresh(ctx)
	require.NoError(t, err)
	_, ok := a.Held()
	require.True(t, ok)
	now = now.Add(time.Second) // no renewal for a whole TTL: a stalled leader stops acting
	_, ok = a.Held()
	require.False(t, ok)
}
