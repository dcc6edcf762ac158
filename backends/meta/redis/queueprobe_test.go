package redismeta_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestProbeQueue: TIME on this host's own Redis gives a round trip and a latency within it
// (the two clocks are one); a command queued behind a script that holds Redis's event loop for
// 20 ms waits that long, and so does the latency; a user without +time is refused with
// meta.ErrProbeRefused, so the walk can fall back to PING.
func TestProbeQueue(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t)
	st, err := redismeta.OpenStore(ctx, redismeta.ConnOptions{Addr: srv.Addr()}, redismeta.StoreOptions{DryRun: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	for range 20 {
		rtt, oneWay, err := st.ProbeQueue(ctx)
		require.NoError(t, err)
		require.Positive(t, rtt)
		// TIME has microseconds: the latency may read up to 1 µs before the send.
		require.GreaterOrEqual(t, oneWay, -time.Microsecond)
		require.LessOrEqual(t, oneWay, rtt+time.Microsecond)
	}

	// Probes go out back to back while a script holds Redis's event loop for 20 ms: one of
	// them is queued behind it and waits. Should the scanner host not send one while the
	// script runs (descheduled for all of it), the script runs again.
	var most time.Duration
	for attempt := 0; attempt < 10 && most <= 5*time.Millisecond; attempt++ {
		busy := make(chan error, 1)
		go func() {
			busy <- srv.Client().Eval(ctx, `local s = redis.call('TIME')
repeat
  local n = redis.call('TIME')
until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 20000
return 1`, nil).Err()
		}()
		for done := false; !done; {
			_, oneWay, err := st.ProbeQueue(ctx)
			require.NoError(t, err)
			most = max(most, oneWay)
			select {
			case err := <-busy:
				require.NoError(t, err)
				done = true
			default:
			}
		}
	}
	require.Greater(t, most, 5*time.Millisecond, "a probe waited behind the script")

	srv.AddUser(t, "notime", "pw", "~*", "+scan", "+hgetall", "+ping")
	ro, err := redismeta.OpenStore(ctx, redismeta.ConnOptions{Addr: srv.Addr(), Username: "notime", Password: "pw"}, redismeta.StoreOptions{DryRun: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ro.Close()) })
	_, _, err = ro.ProbeQueue(ctx)
	require.ErrorIs(t, err, meta.ErrProbeRefused)
	require.NoError(t, ro.Ping(ctx), "PING is still allowed")
}
