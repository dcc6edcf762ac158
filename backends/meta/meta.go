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
	Instance string // the instance the key belongs to
	BlockKey int64
	URI      []byte // raw __uri__; nil when the field is absent or empty (block absent, as in KVCM)
	LRUTime  string // raw __lru_time__; "" when absent
}

// Page is the result of one maintenance scan call.
type Page struct {
	// Next is the cursor to pass to the next call; 0 when the walk (of the instance or the store) is done.
	Next uint64
	// Entries are the keys of this page that parsed, with their fields, in SCAN order.
	Entries []Entry
	// BadKeys are keys of the instances asked for that are not canonical block keys, or not
	// hashes; skipped.
	BadKeys []string
	// Unowned counts the keys of a store-wide page that belong to no instance the caller
	// accepted (other instances, or not block keys); they are not read.
	Unowned int
}

// Scanner is the read-only maintenance scan.
type Scanner interface {
	// ScanPage issues one SCAN cursor MATCH <pattern> COUNT count for the instance and one
	// pipelined HMGET __uri__ __lru_time__ of the keys it returned. On error the caller keeps
	// its cursor. Read commands only.
	ScanPage(ctx context.Context, instanceID string, cursor uint64, count int) (Page, error)
	// ScanStore issues one SCAN cursor MATCH kvcache:instance_* COUNT count over the whole
	// store and one pipelined HMGET __uri__ __lru_time__ of the keys of the instances owns
	// accepts (kvcm.OwnerOf): one walk reads the blocks of every instance the store holds,
	// where ScanPage would walk the store once per instance. Next is 0 when the store is done.
	ScanStore(ctx context.Context, cursor uint64, count int, owns func(instanceID string) bool) (Page, error)
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

// CondWrite is one conditional write of a batch: __uri__ of block BlockKey becomes Next only
// if it is Expected byte for byte.
type CondWrite struct {
	BlockKey int64
	Expected []byte
	Next     []byte
}

// URIRead is one block's __uri__ read by a batch.
type URIRead struct {
	// URI is the raw __uri__; nil when the field or the key is absent, or the field is empty.
	URI []byte
	// Err is a failure about this block alone (for Redis, a server reply such as WRONGTYPE or a
	// key-pattern NOPERM); URI is then nil and means nothing.
	Err error
}

// BatchStore is a Store that also reads and writes many blocks of one instance in one round
// trip. The deleter uses it when its store has it, and the single-block methods otherwise.
// A batch is not atomic: every item is its own read or its own conditional write, exactly as
// the single-block method would do it, and items are independent of one another.
type BatchStore interface {
	Store
	// GetURIs reads __uri__ of every block (one entry per key, in order). A returned error
	// means the batch as a whole got no answer (network, context); the reads are then unknown.
	GetURIs(ctx context.Context, instanceID string, blockKeys []int64) ([]URIRead, error)
	// CASMany is CAS for every write (one error per write, in order): nil, ErrConflict,
	// ErrDryRun (a dry-run store sends nothing), or an error about that write alone. A
	// returned error means the batch as a whole got no answer: each write may or may not
	// have been applied, and the caller must read again before it relies on either.
	CASMany(ctx context.Context, instanceID string, writes []CondWrite) ([]error, error)
	// CADMany is CAD for every write, with CASMany's errors.
	CADMany(ctx context.Context, instanceID string, writes []CondWrite) ([]error, error)
}
