package redismeta_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestBatchWrongType: a key that is not a hash fails its own item, not a conflict, and the
// other items of the batch run.
func TestBatchWrongType(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testenv.Context(t)
	require.NoError(t, srv.Client().Set(ctx, kvcm.BlockKey("i", 1), "s", 0).Err())
	require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", 2), "__uri__", "v0").Err())
	st := newStore(t, srv, redismeta.StoreOptions{})
	reads, err := st.ReadBlocks(ctx, "i", []int64{1, 2})
	require.NoError(t, err)
	require.ErrorContains(t, reads[0].Err, "WRONGTYPE")
	require.NoError(t, reads[1].Err)
	require.Equal(t, []byte("v0"), reads[1].Entry.URI)
	for _, op := range []func() ([]error, error){
		func() ([]error, error) {
			return st.CASMany(ctx, "i", []meta.CondWrite{{Layout: kvcm.LayoutLegacy, BlockKey: 1, Expected: []byte("s"), Next: []byte("x")}, {Layout: kvcm.LayoutLegacy, BlockKey: 2, Expected: []byte("v0"), Next: []byte("v1")}})
		},
		func() ([]error, error) {
			res, err := st.CADMany(ctx, "i", []meta.CondWrite{{Layout: kvcm.LayoutLegacy, BlockKey: 1, Expected: []byte("s"), Next: nil}, {Layout: kvcm.LayoutLegacy, BlockKey: 2, Expected: []byte("v1"), Next: []byte("v2")}})
			errs := make([]error, len(res))
			for i, r := range res {
				errs[i] = r.Err
			}
			return errs, err
		},
	} {
		errs, err := op()
		require.NoError(t, err)
		require.ErrorContains(t, errs[0], "WRONGTYPE")
		require.False(t, errors.Is(errs[0], meta.ErrConflict))
		require.NoError(t, errs[1])
	}
	require.Equal(t, "s", srv.Client().Get(ctx, kvcm.BlockKey("i", 1)).Val())
	require.Equal(t, "v2", srv.Client().HGet(ctx, kvcm.BlockKey("i", 2), "__uri__").Val())
}

// TestBatchServerDown: a batch that gets no answer fails as a whole; after a restart (which
// also empties the script cache) the same store works again.
func TestBatchServerDown(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithRedisPersistence())
	ctx := testenv.Context(t)
	require.NoError(t, srv.Client().HSet(ctx, kvcm.BlockKey("i", 1), "__uri__", "v0").Err())
	st := newStore(t, srv, redismeta.StoreOptions{})
	w := []meta.CondWrite{{Layout: kvcm.LayoutLegacy, BlockKey: 1, Expected: []byte("v0"), Next: []byte("v1")}}
	srv.Stop()
	_, err := st.ReadBlocks(ctx, "i", []int64{1})
	require.Error(t, err)
	errs, err := st.CASMany(ctx, "i", w)
	require.Error(t, err)
	require.Nil(t, errs)
	_, err = st.CADMany(ctx, "i", w)
	require.Error(t, err)

	srv.Restart(t)
	errs, err = st.CASMany(ctx, "i", w)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	reads, err := st.ReadBlocks(ctx, "i", []int64{1})
	require.NoError(t, err)
	require.Equal(t, []byte("v1"), reads[0].Entry.URI)
}
