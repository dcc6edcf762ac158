package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/testenv"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// A poison message is terminated, a panicking one dead-lettered at MaxDeliver, and neither
// blocks the messages behind it; both are recorded as events with their stream sequence.
func TestConsumerDisposition(t *testing.T) {
	ctx := context.Background()
	js := testenv.StartNATS(t).JetStream(t)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	st := subjects.DefaultSettings()
	st.MaxDeliver = 2
	require.NoError(t, subjects.Ensure(ctx, js, names, st))
	for _, body := range []string{"poison", "panic", "ok1", "ok2"} {
		_, err := js.Publish(ctx, names.DeleteSubject("inst1"), []byte(body))
		require.NoError(t, err)
	}
	cons, err := js.Consumer(ctx, names.DeletesStream(), names.DeleterConsumer())
	require.NoError(t, err)
	// Redeliver the panicking message quickly.
	_, err = js.UpdateConsumer(ctx, names.DeletesStream(), jetstream.ConsumerConfig{Durable: names.DeleterConsumer(),
		FilterSubject: names.DeleteFilter(), AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 2, AckWait: time.Second,
		MaxAckPending: st.DeleterMaxAckPending})
	require.NoError(t, err)

	var mu sync.Mutex
	var okSeen []string
	m := NewMetrics(prometheus.NewRegistry())
	c := &Consumer{Stage: StageDeleter, Consumer: cons, Workers: 2, MaxDeliver: 2, Metrics: m,
		Events: &EventLog{JS: js, Names: names, Metrics: m},
		Handle: func(ctx context.Context, msg jetstream.Msg) error {
			switch string(msg.Data()) {
			case "poison":
				return errors.Join(subjects.ErrPoison, errors.New("undecodable"))
			case "panic":
				panic("boom")
			default:
				mu.Lock()
				okSeen = append(okSeen, string(msg.Data()))
				mu.Unlock()
				return nil
			}
		}}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(cctx) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 30*time.Second, 20*time.Millisecond)
	mu.Lock()
	require.ElementsMatch(t, []string{"ok1", "ok2"}, okSeen)
	mu.Unlock()

	kinds := map[string]uint64{}
	s, err := js.Stream(ctx, names.EventsStream())
	require.NoError(t, err)
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	b, err := oc.Fetch(10, jetstream.FetchMaxWait(time.Second))
	require.NoError(t, err)
	for msg := range b.Messages() {
		ev, err := subjects.DecodeEvent(msg.Data())
		require.NoError(t, err)
		require.NotNil(t, ev.Source)
		kinds[ev.Kind] = ev.Source.Seq
		require.Equal(t, "inst1", ev.Instance)
	}
	require.Equal(t, map[string]uint64{subjects.EventPoison: 1, subjects.EventDeadLetter: 2}, kinds)
}
