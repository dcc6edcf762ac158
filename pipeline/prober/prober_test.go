package prober

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// flakyRegistry fails while down and counts the reads.
type flakyRegistry struct {
	mu    sync.Mutex
	down  bool
	reads int
}

func (r *flakyRegistry) ReadRegistry(context.Context) (*meta.Registry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	if r.down {
		return nil, errors.New("connection refused")
	}
	return &meta.Registry{Storages: map[string]kvcm.StorageConfig{}}, nil
}

// TestProberRegistryBackoff: while the registry fails, the prober reads it again only after
// the registry backoff's wait, however many batches arrive, and with a previous storage table
// it keeps judging with it; once a read succeeds the waits start over.
func TestProberRegistryBackoff(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	reg := &flakyRegistry{down: true}
	cfg := DefaultConfig()
	cfg.RegistryRefresh = 10 * time.Second
	p, err := New(cfg, Deps{Registry: reg, Guard: guard.None{}, Publisher: noPublisher{}, Now: func() time.Time { return now }})
	require.NoError(t, err)

	// No table yet: every batch fails, but only the first one reads the registry.
	for range 100 {
		_, err := p.storages(ctx)
		require.ErrorContains(t, err, "read registry: connection refused")
	}
	require.Equal(t, 1, reg.reads)
	now = now.Add(RegistryRetryInitial) // at least the first wait
	_, err = p.storages(ctx)
	require.Error(t, err)
	require.Equal(t, 2, reg.reads)
	// The second wait is longer than the first one can be.
	now = now.Add(RegistryRetryInitial / 2)
	_, err = p.storages(ctx)
	require.Error(t, err)
	require.Equal(t, 2, reg.reads, "no read within the second wait")

	reg.down = false
	now = now.Add(2 * RegistryRetryInitial)
	snap, err := p.storages(ctx)
	require.NoError(t, err)
	set := snap.set
	require.NotNil(t, set)
	require.Equal(t, 3, reg.reads)

	// With a table, a failed refresh keeps the table, and so do the batches of the wait.
	reg.down = true
	now = now.Add(cfg.RegistryRefresh)
	for range 100 {
		got, err := p.storages(ctx)
		require.NoError(t, err)
		require.Same(t, set, got.set)
	}
	require.Equal(t, 4, reg.reads)
	reg.down = false
	now = now.Add(RegistryRetryInitial)
	_, err = p.storages(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, reg.reads)
}
