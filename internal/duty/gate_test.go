package duty

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// op runs one operation through g that takes d (on the bubble's clock) and holds the server
// for all of it.
func op(t *testing.T, ctx context.Context, g *Gate, keys int, d time.Duration) {
	t.Helper()
	o, err := g.Begin(ctx, keys)
	require.NoError(t, err)
	time.Sleep(d)
	o.Done(-1)
}

// TestGateKeepsDuty: operations through the gate, from one goroutine or several, hold the
// server for the duty's share of the time and never overlap.
func TestGateKeepsDuty(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprint(workers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				g := NewGate(New(Config{Duty: 0.2, Window: time.Second}), nil)
				var busy, inFlight, most atomic.Int64
				start := time.Now()
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for {
							o, err := g.Begin(ctx, 64)
							if err != nil {
								return
							}
							n := inFlight.Add(1)
							most.Store(max(most.Load(), n))
							time.Sleep(time.Millisecond)
							inFlight.Add(-1)
							busy.Add(int64(time.Millisecond))
							o.Done(-1)
						}
					})
				}
				wg.Wait()
				share := time.Duration(busy.Load()).Seconds() / time.Since(start).Seconds()
				require.InDelta(t, 0.2, share, 0.002)
				require.Equal(t, int64(1), most.Load(), "one operation at a time")
				require.InDelta(t, 0.2, g.Pace().Share, 0.002)
			})
		})
	}
}

// TestGateBackOff: when operations start taking longer, the gate's rate falls at the next
// operation.
func TestGateBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		g := NewGate(New(Config{Duty: 0.1}), nil)
		for range 10 {
			op(t, ctx, g, 64, time.Millisecond)
		}
		require.Equal(t, 9*time.Millisecond, g.Pace().Wait)
		before := time.Now()
		op(t, ctx, g, 64, 4*time.Millisecond)
		require.Equal(t, 36*time.Millisecond, g.Pace().Wait)
		op(t, ctx, g, 64, 4*time.Millisecond)
		require.Equal(t, (9+4+36+4)*time.Millisecond, time.Since(before), "the slow operation's wait came before the next")
	})
}

// TestGateCancel: a cancelled wait returns the context's error and frees the gate.
func TestGateCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate(New(Config{Duty: 0.01}), nil)
		op(t, t.Context(), g, 64, time.Second) // 99 s to wait, capped at DefaultCap
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := g.Begin(ctx, 64)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		time.Sleep(time.Second)
		o, err := g.Begin(t.Context(), 64)
		require.NoError(t, err, "the gate is free again")
		o.Done(-1)
		o.Done(-1) // a second Done does nothing
		o, err = g.Begin(t.Context(), 64)
		require.NoError(t, err)
		o.Done(0)
	})
}

// serverCPU is a server whose main thread is busy for a share of the time, set by the test.
type serverCPU struct {
	mu      sync.Mutex
	at      time.Time
	cpu     time.Duration
	share   float64
	err     error
	readsAt []time.Time
}

func (s *serverCPU) set(share float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	s.share = share
}

func (s *serverCPU) advance() {
	now := time.Now()
	s.cpu += time.Duration(float64(now.Sub(s.at)) * s.share)
	s.at = now
}

func (s *serverCPU) read(context.Context) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	s.readsAt = append(s.readsAt, s.at)
	return s.cpu, s.err
}

// TestCeilingHolds: the walk holds while the server's main thread is busier than the limit
// by its own count, read every few seconds, says why, and goes on once it is not.
func TestCeilingHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		srv := &serverCPU{at: time.Now(), share: 0.3}
		c := NewCeiling(CeilingConfig{Limit: 0.8, Every: 2 * time.Second, Read: srv.read})
		g := NewGate(New(Config{Duty: 0.1}), c)
		require.Equal(t, CeilingState{Limit: 0.8, Share: -1, State: CeilingUnread}, c.State())
		for range 1000 {
			op(t, ctx, g, 64, time.Millisecond) // 10 s
		}
		st := c.State()
		require.Equal(t, CeilingOK, st.State)
		require.InDelta(t, 0.3, st.Share, 0.01)
		require.Len(t, srv.readsAt, 5, "a reading every 2 s")

		srv.set(0.9)
		var ops atomic.Int64
		go func() {
			for {
				o, err := g.Begin(ctx, 64)
				if err != nil {
					return
				}
				time.Sleep(time.Millisecond)
				o.Done(-1)
				ops.Add(1)
			}
		}()
		time.Sleep(5 * time.Second) // the second reading after the change holds the walk
		require.Equal(t, CeilingBusy, c.State().State)
		require.InDelta(t, 0.9, c.State().Share, 0.01)
		require.Equal(t, ReasonBusy, g.Pace().Reason)
		n := ops.Load()
		time.Sleep(5 * time.Second)
		require.Equal(t, n, ops.Load(), "held while the server is busy")
		require.Equal(t, ReasonBusy, g.Pace().Reason)

		srv.set(0.2)
		time.Sleep(5 * time.Second)
		require.Equal(t, CeilingOK, c.State().State)
		require.NotEqual(t, ReasonBusy, g.Pace().Reason)
		require.Greater(t, ops.Load(), n+100, "going on")
	})
}

// TestCeilingRefused: a server that will not tell its CPU time leaves the duty alone to pace
// the walk, and is not asked again.
func TestCeilingRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &serverCPU{at: time.Now(), err: fmt.Errorf("INFO: NOPERM: %w", ErrRefused)}
		c := NewCeiling(CeilingConfig{Limit: 0.5, Every: time.Second, Read: srv.read})
		g := NewGate(New(Config{Duty: 0.1}), c)
		for range 1000 {
			op(t, t.Context(), g, 64, time.Millisecond)
		}
		st := c.State()
		require.Equal(t, CeilingRefused, st.State)
		require.ErrorIs(t, st.Err, ErrRefused)
		require.Len(t, srv.readsAt, 1)
		require.Equal(t, ReasonDuty, g.Pace().Reason)
	})
}

// TestCeilingFailedReadings: a reading that fails keeps the last state for a while, then no
// longer holds the walk on an old share; a counter that went back (a restarted server)
// starts again.
func TestCeilingFailedReadings(t *testing.T) {
	now := t0
	c := NewCeiling(CeilingConfig{Limit: 0.5, Every: time.Second, Read: func(context.Context) (time.Duration, error) { return 0, nil }})
	c.observe(now, 10*time.Second, nil)
	c.observe(now.Add(time.Second), 10*time.Second+900*time.Millisecond, nil)
	require.Equal(t, CeilingBusy, c.State().State)
	c.observe(now.Add(2*time.Second), 0, errors.New("i/o timeout"))
	require.Equal(t, CeilingBusy, c.State().State, "one failed reading")
	require.Error(t, c.State().Err)
	c.observe(now.Add(4*time.Second), 0, errors.New("i/o timeout"))
	require.Equal(t, CeilingUnread, c.State().State, "three periods without a reading")
	c.observe(now.Add(5*time.Second), 100*time.Millisecond, nil) // restarted: the counter went back
	require.Equal(t, CeilingUnread, c.State().State)
	c.observe(now.Add(6*time.Second), 400*time.Millisecond, nil)
	require.Equal(t, CeilingOK, c.State().State)
	require.InDelta(t, 0.3, c.State().Share, 1e-9)

	require.Nil(t, NewCeiling(CeilingConfig{Limit: 0, Read: c.cfg.Read}), "no limit, no ceiling")
	var none *Ceiling
	require.False(t, none.Busy(context.Background(), now))
	require.Equal(t, CeilingOff, none.State().State)
}
