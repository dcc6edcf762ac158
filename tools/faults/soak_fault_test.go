package faults

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFaultSlackWhenChecksLag replays a soak's false alarm: the checks after round 33 ran while
// round 38 was over already, and the fault they struck then hit round 39's collection of the
// garbage due in round 37 ("garbage since round 37 still there after round 38"). The slack
// must follow the rounds the fault hit, not the round whose checks struck it.
func TestFaultSlackWhenChecksLag(t *testing.T) {
	s := &soak{faultRounds: map[uint64]bool{}, rounds: newRoundWatch(nil, nil)}
	for r := uint64(1); r <= 38; r++ {
		s.rounds.ends[r] = s.rounds.ends[0]
	}
	s.markFault(33)
	for _, due := range []uint64{32, 33, 37, 38, 39} {
		require.EqualValues(t, 1, s.slack(due), "due %d", due)
	}
	for _, due := range []uint64{30, 35, 40} {
		require.EqualValues(t, 0, s.slack(due), "due %d: no fault hit its rounds", due)
	}
}
