package app

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHealth(t *testing.T) {
	var h Health
	_, err := h.Ready(context.Background())
	require.ErrorIs(t, err, ErrNotRunning, "not ready before Run registers its checks")
	h.starting("creating the jetstream topology")
	_, err = h.Ready(context.Background())
	require.ErrorIs(t, err, ErrNotRunning)
	require.ErrorContains(t, err, "starting: creating the jetstream topology", "says what startup waits for")

	h.add(func(context.Context) []checkLine { return []checkLine{{name: "nats", detail: "connected"}} })
	h.add(func(context.Context) []checkLine {
		return []checkLine{{name: "store a", detail: "ping ok"}, {name: "store b", detail: "ping ok"}}
	})
	h.setRunning()
	report, err := h.Ready(context.Background())
	require.NoError(t, err)
	require.Equal(t, "nats: connected\nstore a: ping ok\nstore b: ping ok\n", report, "lines in the order registered")

	h.add(func(context.Context) []checkLine {
		return []checkLine{{name: "store c", err: errors.New("connection refused")}}
	})
	report, err = h.Ready(context.Background())
	require.ErrorContains(t, err, "store c: connection refused")
	require.Contains(t, report, "store c: NOT READY: connection refused\n")

	h.stopped()
	_, err = h.Ready(context.Background())
	require.ErrorIs(t, err, ErrNotRunning, "not ready once Run has returned")

	// Without a Health, Run registers nothing.
	var none *Health
	none.add(func(context.Context) []checkLine { return nil })
	none.setRunning()
}
