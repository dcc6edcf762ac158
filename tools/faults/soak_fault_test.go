package faults

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFaultSchedule: each cycle of the schedule holds every kind of fault of its topology once,
// the stages in an order of its own, and begins with a stage's kill, a Redis restart and the
// topology's first NATS fault.
func TestFaultSchedule(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		f := newFaultSchedule(cluster, 42)
		kinds := allKinds(cluster)
		var orders [][]string
		for c := range 4 {
			var got []string
			for range kinds {
				got = append(got, f.take())
			}
			require.Equal(t, c+1, f.done())
			require.ElementsMatch(t, kinds, got, "cycle %d", c)
			require.Contains(t, got[0], faultKill)
			require.Equal(t, faultRedis, got[1])
			want := faultNATS
			if cluster {
				want = faultNodeLoss
			}
			require.Equal(t, want, got[2])
			orders = append(orders, got)
		}
		distinct := 0
		for i := 1; i < len(orders); i++ {
			if !slices.Equal(orders[i], orders[0]) {
				distinct++
			}
		}
		require.Positive(t, distinct, "the stages' order is drawn per cycle")
		require.Len(t, kinds, map[bool]int{false: 7, true: 8}[cluster])
	}
}

// TestParseLeak: -leak names a stage, a size and a period, and refuses anything else.
func TestParseLeak(t *testing.T) {
	l, err := ParseLeak("walker:256KiB/1s")
	require.NoError(t, err)
	require.Equal(t, Leak{Stage: "walker", Bytes: 256 << 10, Every: time.Second}, l)
	l, err = ParseLeak("prober:3MiB/250ms")
	require.NoError(t, err)
	require.Equal(t, Leak{Stage: "prober", Bytes: 3 << 20, Every: 250 * time.Millisecond}, l)
	l, err = ParseLeak("sweeper:4096/2s")
	require.NoError(t, err)
	require.Equal(t, 4096, l.Bytes)
	for _, bad := range []string{"", "walker", "walker:1KiB", "nats:1KiB/1s", "walker:0/1s", "walker:-1/1s", "walker:1GiB/1s", "walker:1KiB/0s", "walker:1KiB/x"} {
		_, err := ParseLeak(bad)
		require.Error(t, err, bad)
	}
}
