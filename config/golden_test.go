package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files of the help and the printed configuration")

// TestGoldenSurface pins what users see of the configuration: every key's flag, environment
// variable, type, default and help (`help`), the defaults as YAML (--print-config) and the
// refusal of each stage key out of bounds, so
// moving a key between the packages that own them cannot change them unnoticed. go test
// ./config -run Golden -update rewrites the files after a change made on purpose.
func TestGoldenSurface(t *testing.T) {
	var help, printed bytes.Buffer
	WriteHelp(&help)
	require.NoError(t, Default().Print(&printed))
	// The refusals in the order of their keys' names: which part of the code finds a
	// mistake first is no part of the surface.
	lines := strings.Split(badStages().Validate().Error(), "\n")
	slices.Sort(lines)
	refused := []byte(strings.Join(lines, "\n") + "\n")
	for name, got := range map[string][]byte{"help.golden": help.Bytes(), "print-config.golden": printed.Bytes(),
		"refused.golden": refused} {
		path := filepath.Join("testdata", name)
		if *update {
			require.NoError(t, os.WriteFile(path, got, 0o644))
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%s changed; -update rewrites it if that is meant", name)
	}
}

// badStages is the defaults with every key of the stages out of bounds: what Validate says
// of each (refused.golden) is the third part of the surface.
func badStages() Config {
	c := Default()
	for name, text := range map[string]string{
		"scan_interval": "0s", "round_pause": "-1s", "scan_batch_size": "0", "max_keys_per_second": "-1",
		"backpressure_high_water": "0", "scanner.max_stores": "-1",
		"scanner.duty": "1.5", "scanner.burst_keys": "0", "scanner.redis_cpu_ceiling": "1", "scanner.redis_cpu_every": "1ms", "collect_unregistered_instances": "true",
		"unregistered_grace": "1h", "unregistered_max_keys_per_round": "0",
		"orphan_writing_grace": "59m", "probe_chunk_size": "513", "registry_refresh": "0s",
		"excluded_storage_types": "hf3fs,bogus", "collect_deleting": "true", "deleting_grace": "1m",
		"max_inflight_delete_requests": "0", "delete_delay": "-1s", "cas_retries": "0", "empty_block": "drop",
		"sweep_grace": "1m", "sweep_quarantine": "0s", "sweep_interval": "0s", "sweep_round_pause": "-1s",
		"sweep_batch_size": "0", "max_inflight_sweep_batches": "0",
		"jetstream.deleter_ack_wait": "0s", "jetstream.sweeper_ack_wait": "0s",
	} {
		k, ok := Lookup(name)
		if !ok {
			panic("no key " + name)
		}
		if err := k.Set(&c, text); err != nil {
			panic(err)
		}
	}
	return c
}
