package storage

import (
	"context"
	"fmt"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// noClientBackend serves the storages kvcm-gc has no client for: mooncake and pace (and any
// type it does not know). Their objects live in remote memory pools that only an RPC could
// query, so every probe answers Unknown (never a guess: Missing would delete metadata of data
// that may well be there) and physical deletes are ErrUnsupported, which the caller counts.
type noClientBackend struct {
	name     string
	typ      kvcm.StorageType
	keyCount uint64
	dryRun   bool
}

func (b *noClientBackend) Name() string            { return b.name }
func (b *noClientBackend) Type() kvcm.StorageType  { return b.typ }
func (b *noClientBackend) KeyCountPerFile() uint64 { return b.keyCount }

// MightExist answers Unknown for every URI.
func (b *noClientBackend) MightExist(ctx context.Context, uris []kvcm.DataURI) ([]Result, error) {
	if len(uris) > MaxProbeChunk {
		return nil, fmt.Errorf("probe %d uris on %s: %w", len(uris), b.name, ErrTooMany)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("probe %s: %w", b.name, err)
	}
	return make([]Result, len(uris)), nil // the zero Result is Unknown
}

// Delete returns ErrDryRun in dry-run mode (checked first, like every backend), else
// ErrUnsupported.
func (b *noClientBackend) Delete(_ context.Context, uri kvcm.DataURI) error {
	if b.dryRun {
		return fmt.Errorf("delete %s: %w", uri, ErrDryRun)
	}
	return fmt.Errorf("delete %s on %s storage %s: %w", uri, b.typ, b.name, ErrUnsupported)
}
