package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// CounterValue returns the value of c.
func CounterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// GaugeValue returns the value of g.
func GaugeValue(t testing.TB, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
}

// RequireRefused fails the test unless err is an error whose text holds every one of want:
// a constructor's refusal of its inputs, naming each.
func RequireRefused(t testing.TB, err error, want ...string) {
	t.Helper()
	require.Error(t, err)
	for _, w := range want {
		require.ErrorContains(t, err, w)
	}
}
