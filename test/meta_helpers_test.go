package test

import (
	"context"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Single-block helpers over a store's batch methods, legacy layout.

func scanPage(ctx context.Context, st meta.Store, inst string, cursor uint64, count int) (meta.Page, error) {
	return st.ScanStore(ctx, cursor, count, func(id string) bool { return id == inst })
}

func getURI(ctx context.Context, st meta.Store, inst string, block int64) ([]byte, bool, error) {
	r, err := st.ReadBlocks(ctx, inst, []int64{block})
	if err == nil {
		err = r[0].Err
	}
	if err != nil {
		return nil, false, err
	}
	return r[0].Entry.URI, r[0].Entry.URI != nil, nil
}

func casOne(ctx context.Context, st meta.Store, inst string, block int64, expected, next []byte) error {
	errs, err := st.CASMany(ctx, inst, []meta.CondWrite{{BlockKey: block, Layout: kvcm.LayoutLegacy, Expected: expected, Next: next}})
	if err != nil {
		return err
	}
	return errs[0]
}

func cadOne(ctx context.Context, st meta.Store, inst string, block int64, expected, next []byte) error {
	res, err := st.CADMany(ctx, inst, []meta.CondWrite{{BlockKey: block, Layout: kvcm.LayoutLegacy, Expected: expected, Next: next}})
	if err != nil {
		return err
	}
	return res[0].Err
}
