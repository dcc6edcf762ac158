package deleter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/duty"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// timedStore is a metadata store whose reads and conditional writes each take took (on the
// bubble's clock), recording when each started and how many ran at once.
type timedStore struct {
	meta.Store // nil: nothing else is called
	took       atomic.Int64

	mu       sync.Mutex
	starts   []time.Time
	busy     time.Duration
	inFlight int
	most     int
}

func (s *timedStore) run() {
	d := time.Duration(s.took.Load())
	s.mu.Lock()
	s.starts = append(s.starts, time.Now())
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	time.Sleep(d)
	s.mu.Lock()
	s.inFlight--
	s.busy += d
	s.mu.Unlock()
}

func (s *timedStore) ReadBlocks(_ context.Context, _ string, keys []int64) ([]meta.BlockRead, error) {
	s.run()
	return make([]meta.BlockRead, len(keys)), nil
}

func (s *timedStore) CASMany(_ context.Context, _ string, w []meta.CondWrite) ([]error, error) {
	s.run()
	return make([]error, len(w)), nil
}

func (s *timedStore) CADMany(_ context.Context, _ string, w []meta.CondWrite) ([]meta.CADResult, error) {
	s.run()
	return make([]meta.CADResult, len(w)), nil
}

// gaps are the times between consecutive starts.
func (s *timedStore) gaps() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(s.starts); i++ {
		out = append(out, s.starts[i].Sub(s.starts[i-1]))
	}
	return out
}

// pacedDeleter returns a deleter of delete_duty d over st, and st as the deleter sees it.
func pacedDeleter(t *testing.T, d float64, st *timedStore) (*Deleter, meta.Store, *duty.Gate) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Duty = d
	del, err := New(cfg, Deps{Stores: oneStore{st}, Metrics: NewMetrics(prometheus.NewRegistry(), nil)})
	require.NoError(t, err)
	paced, gate := del.paced("redis-a:6379", st)
	return del, paced, gate
}

// pipelines runs one request's pipelines, as the protocol sends them: read, CAS, re-read, CAD.
func pipelines(ctx context.Context, st meta.Store) error {
	keys, writes := []int64{1, 2, 3}, make([]meta.CondWrite, 3)
	if _, err := st.ReadBlocks(ctx, "inst", keys); err != nil {
		return err
	}
	if _, err := st.CASMany(ctx, "inst", writes); err != nil {
		return err
	}
	if _, err := st.ReadBlocks(ctx, "inst", keys); err != nil {
		return err
	}
	_, err := st.CADMany(ctx, "inst", writes)
	return err
}

// TestDeleterPaceKeepsDuty: the pipelines of concurrent requests on one store take the
// duty's share of its time, one at a time, and the gauges say so.
func TestDeleterPaceKeepsDuty(t *testing.T) {
	for _, dutyRatio := range []float64{0.05, 0.1, 0.3} {
		synctest.Test(t, func(t *testing.T) {
			st := &timedStore{}
			st.took.Store(int64(2 * time.Millisecond))
			del, paced, gate := pacedDeleter(t, dutyRatio, st)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			start := time.Now()
			var wg sync.WaitGroup
			for range 2 { // max_inflight_delete_requests
				wg.Go(func() {
					for pipelines(ctx, paced) == nil {
						del.metrics.recordPace("redis-a:6379", gate)
					}
				})
			}
			wg.Wait()
			share := st.busy.Seconds() / time.Since(start).Seconds()
			require.InDelta(t, dutyRatio, share, 0.002, "the store's busy share")
			require.Equal(t, 1, st.most, "one pipeline at a time on a store")
			require.InDelta(t, dutyRatio, testenv.GaugeValue(t, del.metrics.PaceShare.WithLabelValues("redis-a:6379")), 0.002)
			require.Equal(t, dutyRatio, testenv.GaugeValue(t, del.metrics.PaceDuty.WithLabelValues("redis-a:6379")))
		})
	}
}

// TestDeleterPaceFloorCapBackOff: pipelines answered at once still leave the store the floor
// between them; one that took very long waits no more than the cap; when pipelines slow down,
// the wait after each grows with them.
func TestDeleterPaceFloorCapBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		st := &timedStore{}
		_, paced, gate := pacedDeleter(t, 0.1, st)

		require.NoError(t, pipelines(ctx, paced)) // answered at once
		require.Equal(t, duty.ReasonFloor, gate.Pace().Reason)
		for _, g := range st.gaps() {
			require.Equal(t, duty.DefaultFloor, g, "the floor between two pipelines")
		}

		st.starts = nil
		st.took.Store(int64(time.Millisecond))
		require.NoError(t, pipelines(ctx, paced))
		require.Equal(t, 9*time.Millisecond, gate.Pace().Wait, "(1-0.1)/0.1 of 1 ms")
		st.took.Store(int64(4 * time.Millisecond))
		require.NoError(t, pipelines(ctx, paced))
		require.Equal(t, 36*time.Millisecond, gate.Pace().Wait, "four times slower, four times the wait")
		require.Equal(t, duty.ReasonDuty, gate.Pace().Reason)
		gaps := st.gaps()
		require.Equal(t, 10*time.Millisecond, gaps[2], "1 ms and its wait")
		require.Equal(t, 40*time.Millisecond, gaps[len(gaps)-1], "4 ms and its wait")

		st.starts = nil
		st.took.Store(int64(time.Second)) // the duty would wait 9 s after it
		require.NoError(t, pipelines(ctx, paced))
		require.Equal(t, duty.DefaultCap, gate.Pace().Wait)
		require.Equal(t, duty.ReasonCap, gate.Pace().Reason)
		for _, g := range st.gaps() {
			require.Equal(t, time.Second+duty.DefaultCap, g, "at most the cap after a slow pipeline")
		}
	})
}

// TestDeleterPaceOffAndCancel: delete_duty 0 leaves the store as it is; a request whose
// context ends while it waits for the pace fails without sending anything.
func TestDeleterPaceOffAndCancel(t *testing.T) {
	st := &timedStore{}
	_, same, gate := pacedDeleter(t, 0, st)
	require.Same(t, st, same.(*timedStore))
	require.Nil(t, gate)

	synctest.Test(t, func(t *testing.T) {
		st := &timedStore{}
		st.took.Store(int64(time.Second))
		_, paced, _ := pacedDeleter(t, 0.1, st)
		require.NoError(t, pipelines(t.Context(), paced))
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond) // within the 1 s wait
		defer cancel()
		_, err := paced.CASMany(ctx, "inst", make([]meta.CondWrite, 1))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "delete_duty")
		require.Len(t, st.starts, 4, "nothing sent after the request")
		require.False(t, errors.Is(err, meta.ErrConflict))
	})
}
