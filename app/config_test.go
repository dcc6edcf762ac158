package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/config"
)

// TestOptionsOf: the stages get the configuration's settings, and the worker counts that
// follow their in-flight caps when unset.
func TestOptionsOf(t *testing.T) {
	c := config.Default()
	c.Cluster, c.MaxInflightDeletes, c.MaxInflightSweep = "c1", 3, 5
	c.Registry.URI, c.Registry.Username = "redis://r:6379", "gc"
	o, err := OptionsOf(c)
	require.NoError(t, err)
	require.Equal(t, "c1", o.Cluster)
	require.Equal(t, 3, o.JetStream.DeleterMaxAckPending)
	require.Equal(t, 3, o.DeleterWorkers, "workers.deleter 0 follows max_inflight_delete_requests")
	require.Equal(t, 5, o.SweeperWorkers, "workers.sweeper 0 follows max_inflight_sweep_batches")
	require.Equal(t, o.JetStream.DeleterAckWait, o.Deleter.AckWait)
	require.Equal(t, c.SweepConfig(), o.Sweep)
	require.Equal(t, "gc", o.Registry.Username)
	require.Equal(t, o.Registry, o.GuardConn, "no guard.uri: the guard's Redis is the registry's")

	c.Guard.URI = "redis://u@g:1"
	c.Guard.Username = "guard"
	_, err = OptionsOf(c)
	require.ErrorContains(t, err, "guard.uri", "a configuration the stages cannot use")
}
