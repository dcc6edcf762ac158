package faults

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// TestRoundRecordedAfterOnEnd: a round is over for the lag (ended, lastEnded) as soon as the
// watch sees it, and recorded, which its row waits for, only once onEnd has returned. A row
// that read the round's end before onEnd stored it showed negative writes and no memory
// figures, since it subtracted the last round's counters from nothing.
func TestRoundRecordedAfterOnEnd(t *testing.T) {
	w := newRoundWatch(nil, nil)
	var told [][2]uint64
	w.onEnd = func(from, r uint64, _ time.Time) {
		told = append(told, [2]uint64{from, r})
		for x := from; x <= r; x++ {
			require.True(t, w.ended(x), "round %d is over while onEnd runs", x)
			require.False(t, w.recorded(x), "round %d is recorded before onEnd returned", x)
		}
		require.Equal(t, r, w.lastEnded())
	}
	now := time.Now()

	w.record(pipeline.Checkpoint{Round: 1, InRound: true}, now)
	require.Empty(t, told)
	require.False(t, w.recorded(1))

	w.record(pipeline.Checkpoint{Round: 2, InRound: true, LastRoundKeys: 10, LastRoundDuration: 1000}, now)
	require.Equal(t, [][2]uint64{{1, 1}}, told)
	require.True(t, w.recorded(1))
	require.False(t, w.recorded(2))
	require.Equal(t, time.Second, w.duration(1))

	// Rounds 2 and 3 seen over at once (a fault kept the checkpoint from being read).
	w.record(pipeline.Checkpoint{Round: 4, InRound: true, LastRoundKeys: 10}, now)
	require.Equal(t, [][2]uint64{{1, 1}, {2, 3}}, told)
	require.True(t, w.recorded(3))
	require.False(t, w.recorded(4))

	// The same checkpoint again tells nothing new.
	w.record(pipeline.Checkpoint{Round: 4, InRound: true, LastRoundKeys: 10}, now)
	require.Len(t, told, 2)

	// After its end (not in round), round 4 is over.
	w.record(pipeline.Checkpoint{Round: 4, LastRoundKeys: 12}, now)
	require.Equal(t, [][2]uint64{{1, 1}, {2, 3}, {4, 4}}, told)
	require.True(t, w.recorded(4))
}
