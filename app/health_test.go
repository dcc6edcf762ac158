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

	h.setRunning(true)
	h.add("nats", func(context.Context) (string, error) { return "connected", nil })
	a := (Options{Health: &h}).stageAlive("deleter", nil)
	report, err := h.Ready(context.Background())
	require.NoError(t, err)
	require.Equal(t, "nats: connected\ndeleter: running\n", report)

	h.add("redis registry", func(context.Context) (string, error) { return "", errors.New("connection refused") })
	a.set(false)
	report, err = h.Ready(context.Background())
	require.ErrorContains(t, err, "redis registry: connection refused")
	require.ErrorContains(t, err, "deleter: stopped")
	require.Contains(t, report, "redis registry: NOT READY: connection refused\n")

	h.setRunning(false)
	_, err = h.Ready(context.Background())
	require.ErrorIs(t, err, ErrNotRunning, "not ready once Run has returned")

	// Without a Health, Run registers nothing and the stage loops still run.
	require.NotNil(t, (Options{}).stageAlive("prober", nil))
}
