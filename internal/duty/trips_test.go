package duty

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTrips: round trips through Trips keep the duty by the time Took reports (the server's
// clock), or by the round trip when told not to trust it; one that failed before its Took is
// ended by the next Begin, by its round trip, and never holds the gate.
func TestTrips(t *testing.T) {
	for _, roundTrip := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ctx := t.Context()
			tr := NewTrips(NewGate(New(Config{Duty: 0.1}), nil))
			tr.RoundTrip = roundTrip
			start := time.Now()
			for range 100 {
				require.NoError(t, tr.Begin(ctx, 64))
				time.Sleep(4 * time.Millisecond) // the round trip
				tr.Took(64, time.Millisecond)    // of which the server's clock counts 1 ms
			}
			held, n := tr.Held()
			require.Equal(t, 100, n)
			require.Equal(t, 100*time.Millisecond, held)
			el := time.Since(start)
			if roundTrip {
				// 4 ms every 40 ms.
				require.InDelta(t, 4*time.Second, el, float64(50*time.Millisecond))
			} else {
				// 1 ms every 10 ms, the round trip's other 3 ms counted as the server's own.
				require.InDelta(t, time.Second, el, float64(50*time.Millisecond))
			}

			// A round trip that failed before Took: the next Begin ends it and waits its pace.
			require.NoError(t, tr.Begin(ctx, 64))
			time.Sleep(10 * time.Millisecond)
			before := time.Now()
			require.NoError(t, tr.Begin(ctx, 64))
			require.GreaterOrEqual(t, time.Since(before), 90*time.Millisecond, "10 ms at a duty of 0.1")
			tr.End()
			tr.End()
			require.NoError(t, tr.Begin(ctx, 0), "End released the gate")
			tr.Took(0, 0)
		})
	}
}

// TestTotals: the pacer's sums tell a walk bound by its round trips (each longer than
// held/duty less the floor: every wait the floor's) and a caller that starts late.
func TestTotals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tr := NewTrips(NewGate(New(Config{Duty: 0.2}), nil))
		for range 10 {
			require.NoError(t, tr.Begin(ctx, 64))
			time.Sleep(4900 * time.Microsecond) // held/duty is 5 ms: the floor after it is later
			tr.Took(64, time.Millisecond)
		}
		tot := tr.Gate().Totals()
		require.Equal(t, Totals{Ops: 10, Held: 10 * time.Millisecond, Floor: 10}, tot)
		require.Equal(t, 49*time.Millisecond, tr.RoundTrips())

		time.Sleep(3 * time.Millisecond) // due 200µs after the last reply: 2.8 ms late
		require.NoError(t, tr.Begin(ctx, 64))
		tr.Took(64, time.Millisecond)
		require.Equal(t, 2800*time.Microsecond, tr.Gate().Totals().Late)
	})
}
