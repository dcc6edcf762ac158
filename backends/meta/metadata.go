package meta

import (
	"context"
	"errors"
	"fmt"
)

// A KVCM instance's metadata hash (kvcm.MetadataKey) holds KVCM's persisted counters. kvcm-gc
// writes it only to repair them, and only while no KVCM leader runs (DESIGN §2.5).

// ErrLeaderLock: a KVCM leader lock key exists, so a KVCM leader may be running.
var ErrLeaderLock = errors.New("kvcm leader lock held")

// LeaderLockError names the lock key found and its holder (KVCM's node id, not a secret).
type LeaderLockError struct {
	Key, Holder string
}

func (e *LeaderLockError) Error() string {
	return fmt.Sprintf("kvcm leader lock %s is held by %q", e.Key, e.Holder)
}

// Is makes errors.Is(err, ErrLeaderLock) hold.
func (e *LeaderLockError) Is(target error) bool { return target == ErrLeaderLock }

// MetadataTx is what a metadata transaction's callback reads with.
type MetadataTx struct {
	// Key is the instance's metadata hash.
	Key string
	// Fields is the hash as read inside the transaction (empty when it does not exist).
	Fields map[string]string
	// Locked checks the lock keys again (the transaction keeps guarding them anyway); a
	// callback that waits calls it to give up early.
	Locked func(ctx context.Context) error
}

// MetadataWriter compares and sets an instance's metadata hash.
type MetadataWriter interface {
	// WatchMetadata guards the hash and the lock keys from before it reads them until it
	// writes: it refuses with a *LeaderLockError while a lock key exists, reads the hash,
	// and calls fn, which returns the fields to set (nil: none). They are set only if the
	// hash and the lock keys are as read (else ErrConflict, nothing written); fields not
	// returned are left as they are. A dry-run store refuses the write with ErrDryRun.
	// written is what was set.
	WatchMetadata(ctx context.Context, instance string, lockKeys []string,
		fn func(ctx context.Context, tx MetadataTx) (map[string]string, error)) (written map[string]string, err error)
}

// MetadataReader reads an instance's metadata hash with read commands only (the scanner's
// audit of KVCM's counters, DESIGN §13.4). An absent hash reads as no field.
type MetadataReader interface {
	ReadMetadata(ctx context.Context, instance string) (map[string]string, error)
}

// MetadataBatchReader reads several instances' metadata hashes in one round trip (the audit
// reads them at every page of a walk); out[i] and errs[i] are instances[i]'s.
type MetadataBatchReader interface {
	ReadMetadataMany(ctx context.Context, instances []string) (out []map[string]string, errs []error)
}
