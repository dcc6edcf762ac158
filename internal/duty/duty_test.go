package duty

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// walk runs operations on keys keys each for span from now: each starts when the pacer
// allows it plus late(i), takes rt(i) from its start to its answer, and held(i) of it on the
// server. It returns the end, the share of the span the operations held the server, and the
// keys per second.
func walk(p *Pacer, now time.Time, span time.Duration, keys int, rt, held, late func(i int) time.Duration) (time.Time, float64, float64) {
	end := now.Add(span)
	var busy time.Duration
	n := 0
	for i := 0; now.Before(end); i++ {
		now = now.Add(p.Wait(now) + late(i))
		p.Start(now, keys)
		now = now.Add(rt(i))
		p.Done(now, held(i))
		busy += held(i)
		n += keys
	}
	return now, busy.Seconds() / span.Seconds(), float64(n) / span.Seconds()
}

func c(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

const us = time.Microsecond

// TestShare: the operations hold the server for the duty's share of the time, whether they
// start exactly when allowed or late (a late start is credited against the next wait), and
// whether their time on the server is all of their round trip or part of it.
func TestShare(t *testing.T) {
	for _, duty := range []float64{0.02, 0.05, 0.1, 0.25, 0.5} {
		for _, tc := range []struct {
			name           string
			rt, held, late time.Duration
		}{
			{"round trip", 300 * us, 300 * us, 0},
			{"server time within the round trip", 300 * us, 220 * us, 0},
			{"late starts", 300 * us, 300 * us, 150 * us},
		} {
			p := New(Config{Duty: duty, Floor: 50 * us})
			_, share, _ := walk(p, t0, time.Minute, 64, c(tc.rt), c(tc.held), c(tc.late))
			require.InDelta(t, duty, share, 0.002, "duty %v, %s", duty, tc.name)
			require.Equal(t, ReasonDuty, p.Pace().Reason, "duty %v, %s", duty, tc.name)
			require.InDelta(t, duty, p.Pace().Share, 0.003, "the measured share, duty %v, %s", duty, tc.name)
		}
	}
}

// TestWaitAfterOperation: the wait after an operation is (1−duty)/duty times its time on the
// server, counted from its start (the part of its round trip outside the server counts as
// the server's own time).
func TestWaitAfterOperation(t *testing.T) {
	p := New(Config{Duty: 0.1})
	require.Zero(t, p.Wait(t0), "the first operation goes at once")
	p.Start(t0, 64)
	p.Done(t0.Add(300*us), 300*us)
	require.Equal(t, 2700*us, p.Pace().Wait)
	require.Equal(t, 2700*us, p.Wait(t0.Add(300*us)))
	require.Equal(t, 1700*us, p.Wait(t0.Add(1300*us)))
	require.Zero(t, p.Wait(t0.Add(3*time.Millisecond)))

	p.Start(t0.Add(3*time.Millisecond), 64)
	p.Done(t0.Add(3400*us), 200*us) // 200µs on the server's clock of a 400µs round trip
	require.Equal(t, 1600*us, p.Pace().Wait, "due 2ms after its start")
}

// TestFloorAndCap: the wait is at least the floor after operations too short for the duty to
// ask it, and at most the cap after one too slow.
func TestFloorAndCap(t *testing.T) {
	p := New(Config{Duty: 0.5, Floor: 200 * us, Cap: time.Second})
	p.Start(t0, 16)
	p.Done(t0.Add(20*us), 20*us)
	require.Equal(t, Pace{Duty: 0.5, Wait: 200 * us, Reason: ReasonFloor}, p.Pace())
	_, share, _ := walk(p, t0.Add(time.Second), time.Minute, 16, c(20*us), c(20*us), c(0))
	require.InDelta(t, 20.0/220, share, 0.001, "the floor sets the pace")

	p = New(Config{Duty: 0.1, Floor: 200 * us, Cap: time.Second})
	p.Start(t0, 64)
	p.Done(t0.Add(2*time.Second), 2*time.Second) // held up: 18 s by the duty
	require.Equal(t, Pace{Duty: 0.1, Wait: time.Second, Reason: ReasonCap}, p.Pace())
	require.Equal(t, time.Second, p.Wait(t0.Add(2*time.Second)))

	// Defaults.
	p = New(Config{Duty: 0.1})
	p.Start(t0, 1)
	p.Done(t0.Add(time.Microsecond), time.Microsecond)
	require.Equal(t, DefaultFloor, p.Pace().Wait)
	p.Start(t0.Add(time.Second), 1)
	p.Done(t0.Add(time.Hour), time.Hour)
	require.Equal(t, DefaultCap, p.Pace().Wait)
}

// TestBackOff: operations that take twice as long make the walk wait twice as long after each,
// from the first slow one on: a slower server is walked more slowly at the same share.
func TestBackOff(t *testing.T) {
	p := New(Config{Duty: 0.1})
	now, share, fast := walk(p, t0, 30*time.Second, 64, c(300*us), c(300*us), c(0))
	require.InDelta(t, 0.1, share, 0.002)
	require.Equal(t, 2700*us, p.Pace().Wait)

	p.Start(now, 64)
	now = now.Add(600 * us)
	p.Done(now, 600*us)
	require.Equal(t, 5400*us, p.Pace().Wait, "the first slow operation doubles the wait")

	_, share, slow := walk(p, now.Add(p.Wait(now)), 30*time.Second, 64, c(600*us), c(600*us), c(0))
	require.InDelta(t, 0.1, share, 0.002, "the same share")
	require.InDelta(t, fast/2, slow, fast*0.01, "at half the rate")
}

// TestCreditOneOperation: a start later than allowed is taken off the next wait only, and
// never below the floor: after a long idle the walk does not burst to catch up.
func TestCreditOneOperation(t *testing.T) {
	p := New(Config{Duty: 0.1, Floor: 200 * us})
	p.Start(t0, 64)
	p.Done(t0.Add(300*us), 300*us)
	late := t0.Add(10 * time.Second) // a pause of the caller's
	p.Start(late, 64)
	p.Done(late.Add(300*us), 300*us)
	require.Equal(t, 200*us, p.Pace().Wait, "the credit goes down to the floor")
	require.Equal(t, ReasonDuty, p.Pace().Reason)
	next := late.Add(500 * us)
	p.Start(next, 64)
	p.Done(next.Add(300*us), 300*us)
	require.Equal(t, 2700*us, p.Pace().Wait, "and no further")
}

// TestRateCap: max_keys_per_second keeps operations of n keys n/rate apart from start to
// start whatever the duty.
func TestRateCap(t *testing.T) {
	p := New(Config{Duty: 0.5, MaxRate: 1000})
	_, share, rate := walk(p, t0, time.Minute, 64, c(300*us), c(300*us), c(0))
	require.InDelta(t, 1000, rate, 20)
	require.InDelta(t, 300.0/64000, share, 0.0005)
	require.Equal(t, ReasonRate, p.Pace().Reason)
	require.Equal(t, 64*time.Millisecond-300*us, p.Pace().Wait)

	// A keyless operation (a SCAN that returned none of ours) is not held by the rate.
	p.Start(t0.Add(time.Hour), 0)
	p.Done(t0.Add(time.Hour+300*us), 300*us)
	require.Equal(t, ReasonDuty, p.Pace().Reason)
}

// TestHeldWithinRoundTrip: a server's time longer than the round trip (clocks of two servers
// behind a proxy) or negative counts as the round trip, or nothing.
func TestHeldWithinRoundTrip(t *testing.T) {
	p := New(Config{Duty: 0.1})
	p.Start(t0, 64)
	p.Done(t0.Add(300*us), time.Second)
	require.Equal(t, 2700*us, p.Pace().Wait)
	p.Start(t0.Add(time.Second), 64)
	p.Done(t0.Add(time.Second+300*us), -time.Second)
	require.Equal(t, DefaultFloor, p.Pace().Wait)
}

// TestDutyBounds: a duty outside (0, 1] is 1 (only the floor waits).
func TestDutyBounds(t *testing.T) {
	for _, d := range []float64{0, -1, 1.5} {
		p := New(Config{Duty: d})
		require.Equal(t, 1.0, p.Pace().Duty)
	}
}

// TestShareWindow: the measured share is over the last window, and starts afresh after an
// idle.
func TestShareWindow(t *testing.T) {
	p := New(Config{Duty: 0.1, Window: time.Second})
	now, _, _ := walk(p, t0, 3*time.Second, 64, c(300*us), c(300*us), c(0))
	require.InDelta(t, 0.1, p.Pace().Share, 0.005)
	p.Idle()
	p.Start(now.Add(time.Minute), 64)
	p.Done(now.Add(time.Minute+300*us), 300*us)
	require.InDelta(t, 0.1, p.Pace().Share, 0.005, "kept until the new window is over")
}
