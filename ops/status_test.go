package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/testenv"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// statusSetup starts a server with the topology of cluster.
func statusSetup(t *testing.T, cluster string) (context.Context, jetstream.JetStream, subjects.Names) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	js := testenv.StartNATS(t).JetStream(t)
	names, err := subjects.NewNames("kvcmgc", cluster)
	require.NoError(t, err)
	require.NoError(t, subjects.Ensure(ctx, js, names, subjects.DefaultSettings()))
	return ctx, js, names
}

// silentJS leaves the info requests of one stream (and of its consumer) unanswered, as a
// stream whose leader is being elected does.
type silentJS struct {
	jetstream.JetStream
	stream string
}

func (s silentJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if name == s.stream {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.JetStream.Stream(ctx, name)
}

func (s silentJS) Consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	if stream == s.stream {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.JetStream.Consumer(ctx, stream, name)
}

// TestStatusSilentStream: status reads everything at once, each request bounded by the call
// timeout; a stream and a consumer that do not answer keep their rows, which say so.
func TestStatusSilentStream(t *testing.T) {
	ctx, js, names := statusSetup(t, "c1")

	start := time.Now()
	rep, err := ops.Status(ctx, silentJS{JetStream: js, stream: names.DeletesStream()}, names, ops.WithCallTimeout(300*time.Millisecond))
	require.NoError(t, err)
	require.Less(t, time.Since(start), 3*time.Second, "the silent stream costs one call timeout, not one per request")

	require.Len(t, rep.Streams, 3, "no row is dropped")
	require.Equal(t, names.DeletesStream(), rep.Streams[1].Name)
	require.Contains(t, rep.Streams[1].Error, "deadline exceeded")
	require.Empty(t, rep.Streams[0].Error)
	require.Len(t, rep.Consumers, 2)
	require.Equal(t, pipeline.StageDeleter, rep.Consumers[1].Stage)
	require.Contains(t, rep.Consumers[1].Error, "deadline exceeded")
	require.Empty(t, rep.Consumers[0].Error)
	require.False(t, rep.Consumers[0].ReadAt.IsZero(), "a consumer reading carries its time")
	require.GreaterOrEqual(t, rep.Consumers[0].AgeSeconds, 0.0)
	require.Len(t, rep.Problems, 2)

	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	require.Contains(t, out.String(), names.DeletesStream()+"  not read: context deadline exceeded")
	require.Contains(t, out.String(), "AGE")
}

// TestStatusHeldBack: a round that does not move says why: the scanner's pause, or a backlog
// above the high-water mark.
func TestStatusHeldBack(t *testing.T) {
	ctx, js, names := statusSetup(t, "c1")
	state, err := js.KeyValue(ctx, names.StateBucket())
	require.NoError(t, err)
	ck := pipeline.Checkpoint{Round: 1, InRound: true, Stores: 1, RoundStartedUs: time.Now().Add(-time.Minute).UnixMicro()}
	_, err = state.Put(ctx, subjects.CheckpointKey("127.0.0.1:6379"), mustJSON(t, ck))
	require.NoError(t, err)
	for range 3 {
		_, err := js.Publish(ctx, names.DeleteSubject("inst1"), []byte("{}"))
		require.NoError(t, err)
	}

	rep, err := ops.Status(ctx, js, names, ops.WithHighWater(2))
	require.NoError(t, err)
	require.Equal(t, "backpressure: deleter backlog 3 above backpressure_high_water 2; ticks are skipped until it drains", rep.Scanner.HeldBack)
	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	require.Contains(t, out.String(), "not moving: backpressure: deleter backlog 3")

	rep, err = ops.Status(ctx, js, names, ops.WithHighWater(100))
	require.NoError(t, err)
	require.Empty(t, rep.Scanner.HeldBack)

	_, err = ops.Pause(ctx, js, names, pipeline.StageScanner, time.Now().Add(time.Hour))
	require.NoError(t, err)
	rep, err = ops.Status(ctx, js, names, ops.WithHighWater(100))
	require.NoError(t, err)
	require.Contains(t, rep.Scanner.HeldBack, "paused by an operator until")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestStatusNoStores: a registry that names no metadata store is a warning naming the cluster.
func TestStatusNoStores(t *testing.T) {
	ctx, js, names := statusSetup(t, "nosuch")
	state, err := js.KeyValue(ctx, names.StateBucket())
	require.NoError(t, err)
	rep, err := ops.Status(ctx, js, names)
	require.NoError(t, err)
	require.Empty(t, rep.Warnings, "no scanner has read the registry yet")
	_, err = state.Put(ctx, subjects.StoresKey, mustJSON(t, pipeline.StoreIndex{Stores: []string{}, SavedUs: time.Now().UnixMicro()}))
	require.NoError(t, err)
	rep, err = ops.Status(ctx, js, names)
	require.NoError(t, err)
	require.Equal(t, []string{`no metadata store to walk: the registry of cluster "nosuch" names no instance group on a Redis store (a misspelt cluster name looks like this)`}, rep.Warnings)
	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	require.Contains(t, out.String(), "WARNINGS\n  no metadata store to walk")
}
