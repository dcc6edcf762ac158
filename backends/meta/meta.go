// Package meta defines kvcm-gc's view of a KVCM metadata store: a side-effect-free
// maintenance scan and exact-bytes conditional writes. Implementations live in
// subpackages (redis); metatest holds the conformance suite every implementation runs.
package meta

import (
	"context"
	"errors"
)

var (
	// ErrConflict: a conditional write found __uri__ different from the expected bytes
	// (or the key gone). Nothing was written.
	ErrConflict = errors.New("conditional write conflict")
	// ErrDryRun: the store is in dry-run mode and refuses every write (DESIGN §8.8).
	ErrDryRun = errors.New("dry-run: write refused")
)

// Entry is one block read by a maintenance scan.
type Entry struct {
	Key      string // the full Redis key
	BlockKey int64
	URI      []byte // raw __uri__; nil when the field is absent or empty (block absent, as in KVCM)
	LRUTime  string // raw __lru_time__; "" when absent
}

// Page is the result of one maintenance scan call.
type Page struct {
	// Next is the cursor to pass to the next call; 0 when the instance's keyspace is done.
	Next uint64
	// Entries are the keys of this page that parsed, with their fields, in SCAN order.
	Entries []Entry
	// BadKeys matched the instance's pattern but are not canonical block keys; skipped.
	BadKeys []string
}

// Scanner is the read-only maintenance scan.
type Scanner interface {
	// ScanPage issues one SCAN cursor MATCH <pattern> COUNT count for the instance and one
	// pipelined HMGET __uri__ __lru_time__ of the keys it returned. On error the caller keeps
	// its cursor. Read commands only.
	ScanPage(ctx context.Context, instanceID string, cursor uint64, count int) (Page, error)
}

// Store is a metadata store: the scan plus the deleter's reads and conditional writes.
type Store interface {
	Scanner
	// GetURI reads the current __uri__ of one block; ok is false when it is absent or empty.
	GetURI(ctx context.Context, instanceID string, blockKey int64) (uri []byte, ok bool, err error)
	// CAS sets __uri__ to next only if it equals expected byte-for-byte (one Lua script).
	// Returns ErrConflict otherwise (also when the key is gone). Never writes another field.
	CAS(ctx context.Context, instanceID string, blockKey int64, expected, next []byte) error
	// CAD is CAS whose empty next deletes the whole key (no location remains).
	CAD(ctx context.Context, instanceID string, blockKey int64, expected, next []byte) error
}
