package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestStreamWatchDiscards: a stream at its max_bytes that discards only messages its consumer
// acknowledged loses nothing, however many it discards; one that discards what its consumer
// never took is found out, whether or not a poll came between the publishes.
func TestStreamWatchDiscards(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := testenv.StartNATS(t).JetStream(t)
	names, err := subjects.NewNames(suitePrefix, suiteCluster)
	require.NoError(t, err)
	st := subjects.DefaultSettings()
	st.MaxBytes = 8 << 10
	require.NoError(t, subjects.Ensure(ctx, js, names, st))
	w := newStreamWatch(&env{js: js, names: names})
	w.poll(ctx)
	cons, err := js.Consumer(ctx, names.BatchesStream(), names.ProberConsumer())
	require.NoError(t, err)
	payload := []byte(strings.Repeat("b", 500))
	batches := func() StreamFigures {
		for _, f := range w.figures() {
			if f.Name == names.BatchesStream() {
				return f
			}
		}
		t.Fatal("no BATCHES figures")
		return StreamFigures{}
	}

	// Each batch taken and acknowledged before the next is published.
	for range 60 {
		_, err := js.Publish(ctx, names.BatchSubject("inst1"), payload)
		require.NoError(t, err)
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for m := range b.Messages() {
			require.NoError(t, m.DoubleAck(ctx))
		}
		require.NoError(t, b.Error())
		w.poll(ctx)
	}
	f := batches()
	require.Positive(t, f.Left, "the stream discarded acknowledged batches: %+v", f)
	require.Zero(t, f.Lost, "%+v", f)
	require.Empty(t, w.takeLosses())

	// Now nobody takes them: the stream discards batches its consumer never saw, between two
	// polls.
	for range 60 {
		_, err := js.Publish(ctx, names.BatchSubject("inst1"), payload)
		require.NoError(t, err)
	}
	w.poll(ctx)
	f = batches()
	require.Positive(t, f.Lost, "%+v", f)
	losses := w.takeLosses()
	require.Len(t, losses, 1)
	require.Contains(t, losses[0], "before "+names.ProberConsumer()+" acknowledged them")
	require.Positive(t, f.Backlog)
}
