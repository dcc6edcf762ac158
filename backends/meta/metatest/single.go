package metatest

import (
	"context"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// The suite's single-block helpers: one item of the store's batch methods.

// readBlock reads one block whole.
func readBlock(c context.Context, st meta.Store, inst string, block int64) (meta.BlockRead, error) {
	r, err := st.ReadBlocks(c, inst, []int64{block})
	if err != nil {
		return meta.BlockRead{}, err
	}
	return r[0], nil
}

// getURI reads one block's __uri__ as a legacy-layout reader sees it: ok is false when the
// key or the field is absent, or the field is empty.
func getURI(c context.Context, st meta.Store, inst string, block int64) ([]byte, bool, error) {
	r, err := readBlock(c, st, inst, block)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return nil, false, err
	}
	return r.Entry.URI, r.Entry.URI != nil, nil
}

// cas is one legacy-layout CAS of __uri__.
func cas(c context.Context, st meta.Store, inst string, block int64, expected, next []byte) error {
	errs, err := st.CASMany(c, inst, []meta.CondWrite{{BlockKey: block, Layout: kvcm.LayoutLegacy, Expected: expected, Next: next}})
	if err != nil {
		return err
	}
	return errs[0]
}

// cad is one legacy-layout CAD of __uri__.
func cad(c context.Context, st meta.Store, inst string, block int64, expected, next []byte) error {
	res, err := st.CADMany(c, inst, []meta.CondWrite{{BlockKey: block, Layout: kvcm.LayoutLegacy, Expected: expected, Next: next}})
	if err != nil {
		return err
	}
	return res[0].Err
}
