package config

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSweepDefaults(t *testing.T) {
	c := Default()
	require.Equal(t, 24*time.Hour, c.Sweep.Grace)
	require.Equal(t, time.Hour, c.Sweep.Quarantine)
	sw := c.SweepConfig()
	require.Empty(t, sw.Storages, "off by default")
	require.NoError(t, sw.Validate())
	require.Equal(t, 2, c.Settings().SweeperMaxAckPending)
}

// TestSweepKeys: sweep is opted into per storage, in the file and on the command line, and
// the sweep keys are validated by name.
func TestSweepKeys(t *testing.T) {
	file := writeFile(t, "cluster: c1\nsweep_quarantine: 2h\nstorage:\n  overrides:\n    nfs_01:\n      sweep: true\n    nfs_02:\n      probe: stat\n")
	c, err := load(t, []string{"--config", file, "--storage.overrides", "nfs_03.sweep=true", "--max_inflight_sweep_batches", "5"}, nil)
	require.NoError(t, err)
	sw := c.SweepConfig()
	require.Equal(t, []string{"nfs_01", "nfs_03"}, sw.Storages)
	require.Equal(t, 2*time.Hour, sw.Quarantine)
	require.Equal(t, 5, c.Settings().SweeperMaxAckPending)
	require.Equal(t, 5, c.SweeperWorkers(), "workers.sweeper 0 follows max_inflight_sweep_batches")

	k, ok := Lookup("storage.overrides")
	require.True(t, ok)
	require.Contains(t, k.Format(&c), "nfs_01.sweep=true")
	var out bytes.Buffer
	require.NoError(t, c.Print(&out))
	back, err := load(t, []string{"--config", writeFile(t, out.String())}, nil)
	require.NoError(t, err)
	require.Equal(t, sw.Storages, back.SweepConfig().Storages)

	_, err = load(t, []string{"--cluster", "c1", "--storage.overrides", "nfs.sweep=maybe"}, nil)
	require.ErrorContains(t, err, "sweep is not a boolean")

	for args, want := range map[string]string{
		"--sweep_grace=59m":                                   "sweep_grace: must be >= 1h0m0s",
		"--sweep_quarantine=0s":                               "sweep_quarantine: must be > 0",
		"--sweep_batch_size=0":                                "sweep_batch_size: must be > 0",
		"--max_inflight_sweep_batches=0":                      "max_inflight_sweep_batches: must be >= 1",
		"--storage.overrides=nfs.sweep=true,nfs.delete=false": "nfs: sweep needs physical deletes",
		"--jetstream.sweeper_ack_wait=0s":                     "jetstream.sweeper_ack_wait: must be > 0",
	} {
		_, err := load(t, []string{"--cluster", "c1", args}, nil)
		require.ErrorContains(t, err, want, args)
	}
}
