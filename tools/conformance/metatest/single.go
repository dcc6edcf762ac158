package metatest

import (
	"context"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Single-block helpers over a store's batch methods, legacy layout, for tests.

// ScanInstance is one store-scan page reading the keys of one instance only.
func ScanInstance(c context.Context, st meta.Scanner, inst string, cursor uint64, count int) (meta.Page, error) {
	return st.ScanStore(c, cursor, count, func(id string) bool { return id == inst })
}

// GetURI reads one block's __uri__ as a legacy-layout reader sees it: ok is false when the
// key or the field is absent, or the field is empty.
func GetURI(c context.Context, st meta.Store, inst string, block int64) ([]byte, bool, error) {
	r, err := st.ReadBlocks(c, inst, []int64{block})
	if err == nil {
		err = r[0].Err
	}
	if err != nil {
		return nil, false, err
	}
	return r[0].Entry.URI, r[0].Entry.URI != nil, nil
}

// CAS is one legacy-layout CAS of __uri__.
func CAS(c context.Context, st meta.Store, inst string, block int64, expected, next []byte) error {
	errs, err := st.CASMany(c, inst, []meta.CondWrite{{BlockKey: block, Layout: kvcm.LayoutLegacy, Expected: expected, Next: next}})
	if err != nil {
		return err
	}
	return errs[0]
}

// CAD is one legacy-layout CAD of __uri__.
func CAD(c context.Context, st meta.Store, inst string, block int64, expected, next []byte) error {
	errs, err := CADErrs(st.CADMany(c, inst, []meta.CondWrite{{BlockKey: block, Layout: kvcm.LayoutLegacy, Expected: expected, Next: next}}))
	if err != nil {
		return err
	}
	return errs[0]
}

// CADErrs is a CADMany's answer as CASMany's.
func CADErrs(res []meta.CADResult, err error) ([]error, error) {
	if err != nil {
		return nil, err
	}
	return meta.Errs(res), nil
}
