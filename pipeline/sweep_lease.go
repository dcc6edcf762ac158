package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// SweepLeaseRecord is the value of a walker's lease on a storage (subjects.SweepKey in the
// LEASE bucket).
type SweepLeaseRecord struct {
	Holder    string `json:"holder"`
	Storage   string `json:"storage"`
	SinceUs   int64  `json:"since_us"`
	RenewedUs int64  `json:"renewed_us"`
}

// sweepLease is a walker's lease on one storage: a key of the LEASE bucket, whose bucket-wide
// TTL is the lease TTL. Create acquires it, Update by revision renews it (never get-then-put),
// Delete by revision releases it. A renewal the server refuses loses it at once; a renewal
// that fails otherwise keeps it until the TTL, counted from the start of the last successful
// renewal, would pass. held turns false in both cases, so a stalled walker stops on its own.
type sweepLease struct {
	kv      jetstream.KeyValue
	key     string
	storage string
	holder  string
	ttl     time.Duration
	now     func() time.Time

	op sync.Mutex // serialises the server calls: a renewal in flight never races a release

	mu         sync.Mutex
	rev        uint64
	since      time.Time
	validUntil time.Time
}

func newSweepLease(kv jetstream.KeyValue, storage, holder string, ttl time.Duration, now func() time.Time) *sweepLease {
	return &sweepLease{kv: kv, key: subjects.SweepKey(storage), storage: storage, holder: holder, ttl: ttl, now: now}
}

// held reports whether the lease is held now, with its revision (the fencing token).
func (l *sweepLease) held() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 || !l.now().Before(l.validUntil) {
		return 0, false
	}
	return l.rev, true
}

// refresh acquires the lease when it is free or renews it when held, and reports whether it
// is held afterwards.
func (l *sweepLease) refresh(ctx context.Context) (bool, error) {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	rev, since, valid := l.rev, l.since, l.validUntil
	l.mu.Unlock()
	// The TTL counts from when the server stores the value, after start: counting from start
	// keeps the local validity on the safe side.
	start := l.now()
	if rev == 0 {
		since = start
	}
	val, err := json.Marshal(SweepLeaseRecord{Holder: l.holder, Storage: l.storage, SinceUs: since.UnixMicro(), RenewedUs: start.UnixMicro()})
	if err != nil {
		return false, fmt.Errorf("encode lease of %s: %w", l.storage, err)
	}
	var newRev uint64
	if rev == 0 {
		newRev, err = l.kv.Create(ctx, l.key, val)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // another walker leads this storage
		}
		if err != nil {
			return false, fmt.Errorf("acquire lease of %s: %w", l.storage, err)
		}
	} else {
		newRev, err = l.kv.Update(ctx, l.key, val, rev)
		if err != nil {
			lost := errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
				!start.Before(valid)
			if lost {
				l.drop()
			}
			return !lost && l.now().Before(valid), fmt.Errorf("renew lease of %s: %w", l.storage, err)
		}
	}
	l.mu.Lock()
	l.rev, l.since, l.validUntil = newRev, since, start.Add(l.ttl)
	l.mu.Unlock()
	return true, nil
}

// drop forgets the lease locally (after a fencing failure).
func (l *sweepLease) drop() {
	l.mu.Lock()
	l.rev = 0
	l.mu.Unlock()
}

// release deletes the lease key if this walker still holds it, so another can take over
// without waiting for the TTL.
func (l *sweepLease) release(ctx context.Context) error {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	rev := l.rev
	l.rev = 0
	l.mu.Unlock()
	if rev == 0 {
		return nil
	}
	if err := l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("release lease of %s: %w", l.storage, err)
	}
	return nil
}

// ReadSweepLease returns the walker's lease record of a storage, if any.
func ReadSweepLease(ctx context.Context, kv jetstream.KeyValue, storage string) (*SweepLeaseRecord, uint64, error) {
	e, err := kv.Get(ctx, subjects.SweepKey(storage))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read sweep lease of %s: %w", storage, err)
	}
	var r SweepLeaseRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("decode sweep lease of %s: %w", storage, err)
	}
	return &r, e.Revision(), nil
}
