package scanner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
)

// probeStore answers TIME probes (until refused) and PINGs, counting each.
type probeStore struct {
	meta.Store
	refuse       bool
	times, pings int
}

func (s *probeStore) ProbeQueue(context.Context) (time.Duration, time.Duration, error) {
	s.times++
	if s.refuse {
		return 0, 0, fmt.Errorf("%w: NOPERM", meta.ErrProbeRefused)
	}
	return 300 * time.Microsecond, -2 * time.Millisecond, nil
}

func (s *probeStore) Ping(context.Context) error { s.pings++; return nil }

// TestStoreProbe: the walk probes with TIME (latency first, then the round trip), and from
// the first refusal on with PING only; a store that cannot take TIME is probed with PING.
func TestStoreProbe(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)

	st := &probeStore{}
	probe := storeProbe(st, st, log)
	d, rtt, err := probe(ctx)
	require.NoError(t, err)
	require.Equal(t, -2*time.Millisecond, d)
	require.Equal(t, 300*time.Microsecond, rtt)
	require.Equal(t, 1, st.times)

	st.refuse = true
	for range 3 {
		d, rtt, err = probe(ctx)
		require.NoError(t, err)
		require.Equal(t, d, rtt, "PING's round trip is both")
	}
	require.Equal(t, 2, st.times, "TIME is not sent again once refused")
	require.Equal(t, 3, st.pings)

	plain := &pingOnly{}
	_, _, err = storeProbe(plain, plain, log)(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, plain.pings)

	failing := &probeStore{}
	probe = storeProbe(failing, pingErr{}, log)
	_, _, err = probe(ctx)
	require.NoError(t, err)
	_, _, err = storeProbe(&pingOnly{}, pingErr{}, log)(ctx)
	require.Error(t, err, "a failed probe is no sample")
}

type pingOnly struct {
	meta.Store
	pings int
}

func (s *pingOnly) Ping(context.Context) error { s.pings++; return nil }

type pingErr struct{}

func (pingErr) Ping(context.Context) error { return errors.New("down") }
