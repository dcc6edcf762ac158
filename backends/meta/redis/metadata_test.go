package redismeta_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestWatchMetadata: the metadata hash is written only as read, only while no leader lock
// exists, and only the fields returned.
func TestWatchMetadata(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	st := newStore(t, srv, redismeta.StoreOptions{})
	key := kvcm.MetadataKey("inst0")
	locks := kvcm.LeaderLockKeys("c1")
	reset := func() {
		require.NoError(t, rdb.Del(ctx, append([]string{key}, locks...)...).Err())
		require.NoError(t, rdb.HSet(ctx, key, kvcm.FieldKeyCount, "10", kvcm.FieldStorageUsage, `{"file":9}`, "other", "x").Err())
	}
	hash := func() map[string]string {
		m, err := rdb.HGetAll(ctx, key).Result()
		require.NoError(t, err)
		return m
	}
	before := map[string]string{kvcm.FieldKeyCount: "10", kvcm.FieldStorageUsage: `{"file":9}`, "other": "x"}

	t.Run("writes the fields returned, as read", func(t *testing.T) {
		reset()
		written, err := st.WatchMetadata(ctx, "inst0", locks, func(_ context.Context, tx meta.MetadataTx) (map[string]string, error) {
			require.Equal(t, key, tx.Key)
			require.Equal(t, before, tx.Fields)
			return map[string]string{kvcm.FieldStorageUsage: `{"file":0}`}, nil
		})
		require.NoError(t, err)
		require.Equal(t, map[string]string{kvcm.FieldStorageUsage: `{"file":0}`}, written)
		require.Equal(t, map[string]string{kvcm.FieldKeyCount: "10", kvcm.FieldStorageUsage: `{"file":0}`, "other": "x"}, hash())
	})

	for _, lock := range locks {
		t.Run("refuses while "+lock+" exists", func(t *testing.T) {
			reset()
			require.NoError(t, rdb.Set(ctx, lock, "10.0.0.1:6382_abc", 0).Err())
			called := false
			_, err := st.WatchMetadata(ctx, "inst0", locks, func(context.Context, meta.MetadataTx) (map[string]string, error) {
				called = true
				return map[string]string{kvcm.FieldKeyCount: "1"}, nil
			})
			require.ErrorIs(t, err, meta.ErrLeaderLock)
			require.ErrorContains(t, err, "10.0.0.1:6382_abc")
			require.False(t, called)
			require.Equal(t, before, hash())
		})
		t.Run("aborts when "+lock+" appears meanwhile", func(t *testing.T) {
			reset()
			_, err := st.WatchMetadata(ctx, "inst0", locks, func(ctx context.Context, tx meta.MetadataTx) (map[string]string, error) {
				// KVCM's leader takes the lock (SET NX PX) on another connection.
				require.NoError(t, rdb.SetNX(ctx, lock, "node", 0).Err())
				require.ErrorIs(t, tx.Locked(ctx), meta.ErrLeaderLock)
				return map[string]string{kvcm.FieldKeyCount: "1"}, nil
			})
			require.ErrorIs(t, err, meta.ErrConflict)
			require.Equal(t, before, hash())
		})
	}

	t.Run("aborts when the hash is written meanwhile", func(t *testing.T) {
		reset()
		_, err := st.WatchMetadata(ctx, "inst0", locks, func(ctx context.Context, _ meta.MetadataTx) (map[string]string, error) {
			// A stopping leader persists once more after deleting its lock: DEL + HSET.
			require.NoError(t, rdb.Del(ctx, key).Err())
			require.NoError(t, rdb.HSet(ctx, key, kvcm.FieldKeyCount, "11", kvcm.FieldStorageUsage, `{"file":10}`).Err())
			return map[string]string{kvcm.FieldKeyCount: "1"}, nil
		})
		require.ErrorIs(t, err, meta.ErrConflict)
		require.Equal(t, map[string]string{kvcm.FieldKeyCount: "11", kvcm.FieldStorageUsage: `{"file":10}`}, hash())
	})

	t.Run("a lock that is no string is a lock", func(t *testing.T) {
		reset()
		require.NoError(t, rdb.HSet(ctx, locks[1], "a", "b").Err())
		err := redismeta.LeaderLock(ctx, rdb, locks)
		require.ErrorIs(t, err, meta.ErrLeaderLock)
		require.NoError(t, redismeta.LeaderLock(ctx, rdb, locks[:1]))
	})

	t.Run("dry-run refuses the write", func(t *testing.T) {
		reset()
		dry := newStore(t, srv, redismeta.StoreOptions{DryRun: true})
		_, err := dry.WatchMetadata(ctx, "inst0", locks, func(context.Context, meta.MetadataTx) (map[string]string, error) {
			return map[string]string{kvcm.FieldKeyCount: "1"}, nil
		})
		require.ErrorIs(t, err, meta.ErrDryRun)
		written, err := dry.WatchMetadata(ctx, "inst0", locks, func(context.Context, meta.MetadataTx) (map[string]string, error) {
			return nil, nil
		})
		require.NoError(t, err, "reading is no write")
		require.Nil(t, written)
		require.Equal(t, before, hash())
	})
}

// TestReadMetadata: the hash as stored, an absent one as no field, from a dry-run store too.
func TestReadMetadata(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	st := newStore(t, srv, redismeta.StoreOptions{DryRun: true})
	var _ meta.MetadataReader = st
	got, err := st.ReadMetadata(ctx, "inst0")
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, rdb.HSet(ctx, kvcm.MetadataKey("inst0"), kvcm.FieldKeyCount, "3", kvcm.FieldStorageUsage, `{"file":9}`).Err())
	got, err = st.ReadMetadata(ctx, "inst0")
	require.NoError(t, err)
	require.Equal(t, map[string]string{kvcm.FieldKeyCount: "3", kvcm.FieldStorageUsage: `{"file":9}`}, got)
}

// TestReadMetadataMany: every instance's hash in one round trip, an absent one empty, a key of
// another type an error for that instance alone.
func TestReadMetadataMany(t *testing.T) {
	ctx := testenv.Context(t)
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	st := newStore(t, srv, redismeta.StoreOptions{DryRun: true})
	var _ meta.MetadataBatchReader = st
	require.NoError(t, rdb.HSet(ctx, kvcm.MetadataKey("a"), kvcm.FieldKeyCount, "3").Err())
	require.NoError(t, rdb.Set(ctx, kvcm.MetadataKey("bad"), "x", 0).Err())
	got, errs := st.ReadMetadataMany(ctx, []string{"a", "none", "bad"})
	require.Equal(t, []map[string]string{{kvcm.FieldKeyCount: "3"}, {}, nil}, got)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorContains(t, errs[2], "WRONGTYPE")
	require.ErrorContains(t, errs[2], kvcm.MetadataKey("bad"))
}
