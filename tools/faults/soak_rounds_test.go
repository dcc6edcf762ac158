package faults

import (
	"errors"
	"fmt"
	"strings"
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

// TestWriteFailures: the workload's failed writes are told apart by error and dated from the
// end of the Redis fault before them, so the soak's note says whether a restart explains them.
func TestWriteFailures(t *testing.T) {
	var f writeFailures
	t0 := time.Unix(1000, 0)
	f.add(errors.New("i/o timeout"), t0)
	f.faultEnded(t0.Add(time.Second))
	f.add(errors.New("EOF"), t0.Add(1100*time.Millisecond))
	f.add(errors.New("EOF"), t0.Add(1500*time.Millisecond))
	f.add(errors.New("i/o timeout"), t0.Add(4*time.Second))
	require.EqualValues(t, 4, f.total())
	require.Equal(t, `2 × "i/o timeout" (1 before any Redis fault, 1 from 3s to 3s after a Redis fault ended); `+
		`2 × "EOF" (2 from 100ms to 500ms after a Redis fault ended)`, f.String())

	// Past failureKinds distinct errors, the others are counted together.
	var g writeFailures
	for i := range failureKinds + 3 {
		g.add(fmt.Errorf("error %d", i), t0)
	}
	require.EqualValues(t, failureKinds+3, g.total())
	require.Contains(t, g.String(), `3 × "other" (3 before any Redis fault)`)
	require.Equal(t, failureKinds+1, strings.Count(g.String(), "×"))
}
