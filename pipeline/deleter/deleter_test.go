package deleter

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestAddRemoved: concurrent deleters' counts of deleted keys, removed locations and their
// bytes add up, per instance.
func TestAddRemoved(t *testing.T) {
	ctx := context.Background()
	js, n := testenv.Topology(t, subjects.DefaultSettings())
	kv, err := js.KeyValue(ctx, n.StateBucket())
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				require.NoError(t, AddRemoved(ctx, kv, "inst a.b", Removed{Keys: 2, Locations: 3, Bytes: map[string]uint64{"file": 100, "hf3fs": 0}}))
			}
		})
	}
	wg.Wait()
	require.NoError(t, AddRemoved(ctx, kv, "other", Removed{Keys: 1}))
	e, err := kv.Get(ctx, DeletedKeysKey("inst a.b"))
	require.NoError(t, err)
	var got DeletedKeys
	require.NoError(t, json.Unmarshal(e.Value(), &got))
	require.Equal(t, uint64(40), got.Keys)
	require.Equal(t, uint64(60), got.Locations)
	require.Equal(t, map[string]uint64{"file": 2000}, got.Bytes)
}

// TestDeleterKeepFor: the deleter's consumer keeps a request in flight for delete_delay, which
// the protocol waits on purpose, plus one AckWait of work.
func TestDeleterKeepFor(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DeleteDelay = 5 * time.Minute
	require.Equal(t, 6*time.Minute, cfg.KeepFor(), "delete_delay plus one AckWait of work")
}
