package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LeaseKey is the key of the scanner's leader lease in the lease bucket.
const LeaseKey = "scanner"

// LeaseRecord is the value of the lease key.
type LeaseRecord struct {
	Holder    string `json:"holder"`
	SinceUs   int64  `json:"since_us"`   // when this holder acquired the lease
	RenewedUs int64  `json:"renewed_us"` // last renewal
}

// Lease is the scanner's leader lease: a key in a KV bucket whose TTL is the lease TTL.
// Create acquires it, Update by revision renews it (never get-then-put). A failed renewal
// means the lease is lost, and Held turns false at once; Held also turns false when the
// last successful renewal is older than the TTL, so a stalled process stops acting on its own.
type Lease struct {
	kv     jetstream.KeyValue
	holder string
	ttl    time.Duration
	now    func() time.Time

	mu         sync.Mutex
	rev        uint64
	since      time.Time
	validUntil time.Time
}

// NewLease returns a lease on kv (a bucket whose TTL is ttl) for holder.
func NewLease(kv jetstream.KeyValue, holder string, ttl time.Duration) *Lease {
	return &Lease{kv: kv, holder: holder, ttl: ttl, now: time.Now}
}

// Held reports whether the lease is held now, with its revision (the fencing token).
func (l *Lease) Held() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 || !l.now().Before(l.validUntil) {
		return 0, false
	}
	return l.rev, true
}

// Refresh acquires the lease when it is free, or renews it when held. It returns whether the
// lease is held afterwards. An error while holding it drops the lease (fail closed).
func (l *Lease) Refresh(ctx context.Context) (bool, error) {
	l.mu.Lock()
	rev, since := l.rev, l.since
	l.mu.Unlock()
	// The TTL counts from when the server stores the value, which is after start: counting the
	// local validity from start keeps it on the safe side.
	start := l.now()
	if rev == 0 {
		since = start
	}
	val, err := json.Marshal(LeaseRecord{Holder: l.holder, SinceUs: since.UnixMicro(), RenewedUs: start.UnixMicro()})
	if err != nil {
		return false, fmt.Errorf("encode lease: %w", err)
	}
	var newRev uint64
	if rev == 0 {
		newRev, err = l.kv.Create(ctx, LeaseKey, val)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // another replica holds it
		}
	} else {
		newRev, err = l.kv.Update(ctx, LeaseKey, val, rev)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.rev = 0
		if rev != 0 {
			return false, fmt.Errorf("renew lease: %w", err)
		}
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	l.rev, l.since, l.validUntil = newRev, since, start.Add(l.ttl)
	return true, nil
}

// Drop forgets the lease locally (after a fencing failure).
func (l *Lease) Drop() {
	l.mu.Lock()
	l.rev = 0
	l.mu.Unlock()
}

// Release deletes the lease key if this replica still holds it, so another replica can take
// over without waiting for the TTL.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	rev := l.rev
	l.rev = 0
	l.mu.Unlock()
	if rev == 0 {
		return nil
	}
	if err := l.kv.Delete(ctx, LeaseKey, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	return nil
}

// ReadLease returns the current lease record, if any.
func ReadLease(ctx context.Context, kv jetstream.KeyValue) (*LeaseRecord, uint64, error) {
	e, err := kv.Get(ctx, LeaseKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read lease: %w", err)
	}
	var r LeaseRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("decode lease: %w", err)
	}
	return &r, e.Revision(), nil
}
