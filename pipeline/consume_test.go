package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// A poison message is terminated, a panicking one dead-lettered at MaxDeliver, and neither
// blocks the messages behind it; both are recorded as events with their stream sequence.
func TestConsumerDisposition(t *testing.T) {
	ctx := context.Background()
	st := subjects.DefaultSettings()
	st.MaxDeliver = 2
	js, names := testenv.Topology(t, st)
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
	events, err := NewEventLog(EventLogConfig{Names: names}, EventLogDeps{JS: js, Metrics: m})
	require.NoError(t, err)
	c, err := NewConsumer(ConsumerConfig{Stage: StageDeleter, Workers: 2, MaxDeliver: 2}, ConsumerDeps{Consumer: cons, Metrics: m,
		Events: events,
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
		}})
	require.NoError(t, err)
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

// delayMsg is a message of a given delivery count that records the delay it is nak'ed with.
type delayMsg struct {
	jetstream.Msg
	delivered uint64
	delay     time.Duration
	naks      int
}

func (m *delayMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: m.delivered}, nil
}
func (m *delayMsg) Subject() string                    { return "kvcmgc.c1.delete.inst1" }
func (m *delayMsg) NakWithDelay(d time.Duration) error { m.delay, m.naks = d, m.naks+1; return nil }

// TestRedeliveryDelays: a failed message comes back after the capped exponential delay of its
// delivery count, less a random share: messages that failed together (an outage) return spread
// out, not all at the same instant.
func TestRedeliveryDelays(t *testing.T) {
	ctx := context.Background()
	c, err := NewConsumer(ConsumerConfig{Stage: StageDeleter, MaxDeliver: 100}, ConsumerDeps{Consumer: noConsumer{},
		Handle: func(context.Context, jetstream.Msg) error { return errors.New("redis down") }})
	require.NoError(t, err)
	for delivered, ceiling := range map[uint64]time.Duration{1: time.Second, 3: 4 * time.Second, 7: time.Minute, 50: time.Minute} {
		seen := map[time.Duration]bool{}
		for range 50 {
			m := &delayMsg{delivered: delivered}
			c.process(ctx, ctx, m)
			require.Equal(t, 1, m.naks)
			require.LessOrEqual(t, m.delay, ceiling, "delivery %d", delivered)
			require.GreaterOrEqual(t, m.delay, ceiling/2, "delivery %d", delivered)
			seen[m.delay] = true
		}
		require.Greater(t, len(seen), 25, "delivery %d: the delays are spread", delivered)
	}
}

// keepMsg is a message that counts the InProgress sent for it.
type keepMsg struct {
	jetstream.Msg
	mu         sync.Mutex
	inProgress int
	acked      bool
}

func (m *keepMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: 1}, nil
}
func (m *keepMsg) Subject() string { return "kvcmgc.c1.delete.inst1" }
func (m *keepMsg) InProgress() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inProgress++
	return nil
}
func (m *keepMsg) Ack() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acked = true
	return nil
}
func (m *keepMsg) sent() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inProgress
}

// TestConsumerKeepsSlowHandlersInFlight: while a handler runs, its message is kept in flight
// every third of the ack wait, and no more once it has returned; without an ack wait, never.
func TestConsumerKeepsSlowHandlersInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var m *keepMsg
		slow := func(context.Context, jetstream.Msg) error {
			time.Sleep(3500 * time.Millisecond)
			require.Equal(t, 3, m.sent(), "kept in flight at 1s, 2s and 3s")
			return nil
		}
		c, err := NewConsumer(ConsumerConfig{Stage: StageDeleter, AckWait: 3 * time.Second},
			ConsumerDeps{Consumer: noConsumer{}, Handle: slow})
		require.NoError(t, err)
		m = &keepMsg{}
		c.process(ctx, ctx, m)
		require.True(t, m.acked)
		time.Sleep(time.Minute)
		require.Equal(t, 3, m.sent(), "kept in flight after its handler returned")

		c, err = NewConsumer(ConsumerConfig{Stage: StageDeleter}, ConsumerDeps{Consumer: noConsumer{},
			Handle: func(context.Context, jetstream.Msg) error { time.Sleep(time.Hour); return nil }})
		require.NoError(t, err)
		m = &keepMsg{}
		c.process(ctx, ctx, m)
		require.Zero(t, m.sent())
	})
}

// TestConsumerGivesUpOnHungHandlers: past KeepFor a handler is taken for hung and its message
// is no longer kept in flight, so the server redelivers it and, at the last delivery,
// dead-letters it.
func TestConsumerGivesUpOnHungHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var m *keepMsg
		hung := func(context.Context, jetstream.Msg) error {
			time.Sleep(time.Hour)
			require.Equal(t, 2, m.sent(), "kept in flight at 1s and 2s only")
			return nil
		}
		c, err := NewConsumer(ConsumerConfig{Stage: StageDeleter, AckWait: 3 * time.Second, KeepFor: 2500 * time.Millisecond},
			ConsumerDeps{Consumer: noConsumer{}, Handle: hung})
		require.NoError(t, err)
		m = &keepMsg{}
		c.process(ctx, ctx, m)
		require.Equal(t, 2, m.sent())
	})
}
