// Package storage probes and deletes the data behind KVCM location specs. One Backend per
// registered storage (global unique name), built from the registry's storage table plus local
// overrides (mount-path remapping, probe mode, physical delete on/off).
package storage

import (
	"context"
	"errors"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// MaxProbeChunk is the most URIs one MightExist call may carry (DESIGN §5).
const MaxProbeChunk = 512

// Result is the tri-state answer of a probe for one URI.
type Result int8

const (
	// Unknown: the backend cannot tell (no cheap probe, an error other than "not found", …).
	Unknown Result = iota
	// Present: the object might exist (KVCM's MightExist "true").
	Present
	// Missing: the object is definitively gone. The only answer that can make a location a candidate.
	Missing
)

func (r Result) String() string {
	switch r {
	case Present:
		return "present"
	case Missing:
		return "missing"
	default:
		return "unknown"
	}
}

var (
	// ErrUnsupported: the backend has no client here (mooncake, pace); nothing was done.
	ErrUnsupported = errors.New("storage operation unsupported")
	// ErrDryRun: the deleter is in dry-run mode and refuses every physical delete (DESIGN §8.8).
	ErrDryRun = errors.New("dry-run: physical delete refused")
	// ErrDeleteDisabled: physical deletes are switched off for this storage by configuration.
	ErrDeleteDisabled = errors.New("physical delete disabled for this storage")
	// ErrTooMany: more than MaxProbeChunk URIs in one MightExist call.
	ErrTooMany = errors.New("too many uris in one probe")
)

// Backend is one registered storage.
type Backend interface {
	// Name is the storage's global unique name (the URI host).
	Name() string
	// Type is the storage's KVCM type.
	Type() kvcm.StorageType
	// KeyCountPerFile is the storage's key_count_per_file (1 when unset); > 1 means files are shared.
	KeyCountPerFile() uint64
	// MightExist probes at most MaxProbeChunk URIs; the result has one entry per input, in order.
	// It does not modify uris (the prober hands out parts of a longer slice).
	// An error means the whole call's answers are unknown.
	MightExist(ctx context.Context, uris []kvcm.DataURI) ([]Result, error)
	// Delete removes the object behind one URI. "Already absent" is success (nil).
	Delete(ctx context.Context, uri kvcm.DataURI) error
}

// BatchDeleter is a Backend that deletes many objects in one call, sharing the work of
// reaching them. DeleteMany returns one error per URI, in order, each what Delete would return.
type BatchDeleter interface {
	DeleteMany(ctx context.Context, uris []kvcm.DataURI) []error
}

// Set resolves storages by name.
type Set interface {
	// Lookup returns the backend of a registered storage; ok is false when none is registered.
	Lookup(name string) (Backend, bool)
}

// ErrShared: the object may hold other blocks (blkid parameter or key_count_per_file > 1) and is
// never unlinked; the caller removes the location from metadata only and counts the skip.
var ErrShared = errors.New("shared data object: not unlinked")
