package faults

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDrainTimeout: the seed's backlog, the first drain's and that of every round whose scan
// started before it was over, gets firstDrainFactor times DrainTimeout; a round started after
// it gets DrainTimeout.
func TestDrainTimeout(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC)
	w := &roundWatch{starts: map[uint64]time.Time{1: t0, 2: t0.Add(25 * time.Second), 3: t0.Add(50 * time.Second),
		4: t0.Add(6 * time.Minute)}}
	s := &soak{cfg: SoakConfig{DrainTimeout: 5 * time.Minute}, rounds: w}
	long, short := 5*time.Minute*firstDrainFactor, 5*time.Minute
	require.Equal(t, long, s.drainTimeout(1))
	require.Equal(t, long, s.drainTimeout(2), "the first drain is not over")
	s.seedDrained = t0.Add(5*time.Minute + 43*time.Second)
	require.Equal(t, long, s.drainTimeout(2), "started during the seed's drain")
	require.Equal(t, long, s.drainTimeout(3), "started during the seed's drain")
	require.Equal(t, short, s.drainTimeout(4))
	require.Equal(t, short, s.drainTimeout(5), "its start unseen: not the seed's")
}
