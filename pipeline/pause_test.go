package pipeline

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestConsumerPause(t *testing.T) {
	until := time.Date(2025, 1, 2, 15, 0, 0, 0, time.UTC)
	ts := time.Date(2025, 1, 2, 14, 0, 0, 0, time.UTC)
	require.Equal(t, PauseState{Stage: "deleter"}, ConsumerPause("deleter", nil))
	require.Equal(t, PauseState{Stage: "deleter"}, ConsumerPause("deleter", &jetstream.ConsumerInfo{}))
	got := ConsumerPause("deleter", &jetstream.ConsumerInfo{Paused: true, Config: jetstream.ConsumerConfig{PauseUntil: &until}})
	require.Equal(t, PauseState{Stage: "deleter", Paused: true, Until: until}, got)
	got = ConsumerPause("prober", &jetstream.ConsumerInfo{Paused: true, TimeStamp: ts, PauseRemaining: time.Hour})
	require.Equal(t, PauseState{Stage: "prober", Paused: true, Until: until}, got)
}

func TestPauseRecordActive(t *testing.T) {
	until := time.Date(2025, 1, 2, 15, 0, 0, 0, time.UTC)
	p := PauseRecord{UntilUs: until.UnixMicro()}
	require.True(t, p.Active(until.Add(-time.Microsecond)))
	require.False(t, p.Active(until))
	require.True(t, p.Until().Equal(until))
}
