package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// LeaseRecord is the value of a lease key: a scanner's lease on a metadata store
// (subjects.StoreLeaseKey, Store set) or a sweep walker's on a storage (subjects.SweepKey in
// the same bucket, Storage set).
type LeaseRecord struct {
	Holder    string `json:"holder"`
	Store     string `json:"store,omitempty"`
	Storage   string `json:"storage,omitempty"`
	SinceUs   int64  `json:"since_us"`   // when this holder acquired the lease
	RenewedUs int64  `json:"renewed_us"` // last renewal
}

// on names what the record's lease is on.
func (r LeaseRecord) on() string {
	if r.Store != "" {
		return r.Store
	}
	return r.Storage
}

// ErrLeaseLost: the lease is someone else's now, or it expired before it could be renewed.
// The walk it fenced stops at once.
var ErrLeaseLost = errors.New("lease lost")

// ErrNotHeld is the error of a renewal of a lease released, dropped or never acquired (it
// wraps ErrLeaseLost).
var ErrNotHeld = fmt.Errorf("%w: not held", ErrLeaseLost)

// Lease is a walk's lease: a scanner's on one metadata store, a sweep walker's on one storage.
// It is a key in a KV bucket whose bucket-wide TTL is the lease TTL. Acquire creates the key,
// Renew updates it by revision (never get-then-put), Release deletes it by revision. A
// renewal that fails for a transient reason (a timeout, a NATS node changing leader) leaves
// the lease held until its TTL would pass, counted from the start of the last successful
// renewal, so the caller retries meanwhile; a renewal the server refuses (the revision moved
// on: someone else holds it) loses it at once. Held turns false in both cases, so a stalled
// process stops acting on its own.
type Lease struct {
	kv  jetstream.KeyValue
	key string
	rec LeaseRecord // the holder and what the lease is on; the times are set by each write
	ttl time.Duration
	now func() time.Time

	// op serialises the server calls, so a renewal in flight never races a release.
	op sync.Mutex

	mu         sync.Mutex
	rev        uint64
	since      time.Time
	validUntil time.Time
}

// NewLease returns the lease of key in kv (a bucket whose TTL is ttl): rec names the holder
// and what the lease is on, and is written with the times of each acquisition and renewal.
func NewLease(kv jetstream.KeyValue, key string, rec LeaseRecord, ttl time.Duration) *Lease {
	rec.SinceUs, rec.RenewedUs = 0, 0
	return &Lease{kv: kv, key: key, rec: rec, ttl: ttl, now: time.Now}
}

// NewStoreLease returns holder's lease on a metadata store.
func NewStoreLease(kv jetstream.KeyValue, store, holder string, ttl time.Duration) *Lease {
	return NewLease(kv, subjects.StoreLeaseKey(store), LeaseRecord{Holder: holder, Store: store}, ttl)
}

// DefaultLeaseRenew is how often a lease of TTL ttl is renewed when the configuration says
// nothing (renew <= 0): a third of the TTL, so two renewals may fail before it expires, and
// never more often than every 100ms.
func DefaultLeaseRenew(renew, ttl time.Duration) time.Duration {
	if renew > 0 {
		return renew
	}
	return max(ttl/3, 100*time.Millisecond)
}

// Held reports whether the lease is held now, with its revision (the fencing token: it only
// grows, whoever holds the lease).
func (l *Lease) Held() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 || !l.now().Before(l.validUntil) {
		return 0, false
	}
	return l.rev, true
}

// ValidUntil is when the lease ends unless renewed (zero when not held).
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 {
		return time.Time{}
	}
	return l.validUntil
}

// Acquire takes the lease if it is free. It reports false, without error, when someone holds it.
func (l *Lease) Acquire(ctx context.Context) (bool, error) {
	l.op.Lock()
	defer l.op.Unlock()
	// The TTL counts from when the server stores the value, which is after start: counting
	// the local validity from start keeps it on the safe side.
	start := l.now()
	val, err := l.record(start, start)
	if err != nil {
		return false, err
	}
	rev, err := l.kv.Create(ctx, l.key, val)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("acquire lease of %s: %w", l.rec.on(), err)
	}
	l.mu.Lock()
	l.rev, l.since, l.validUntil = rev, start, start.Add(l.ttl)
	l.mu.Unlock()
	return true, nil
}

// Renew extends a held lease by one TTL. An error wrapping ErrLeaseLost means the lease is
// gone for good; any other error is transient: the lease stays held until ValidUntil, and a
// renewal may be tried again meanwhile.
func (l *Lease) Renew(ctx context.Context) error {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	rev, since, valid := l.rev, l.since, l.validUntil
	l.mu.Unlock()
	start := l.now()
	if rev == 0 {
		return fmt.Errorf("renew lease of %s: %w", l.rec.on(), ErrNotHeld)
	}
	if !start.Before(valid) {
		l.Drop()
		return fmt.Errorf("renew lease of %s: %w: expired %s ago", l.rec.on(), ErrLeaseLost, start.Sub(valid))
	}
	val, err := l.record(since, start)
	if err != nil {
		return err
	}
	newRev, err := l.kv.Update(ctx, l.key, val, rev)
	if err != nil {
		if refused(err) {
			l.Drop()
			return fmt.Errorf("renew lease of %s: %w: %w", l.rec.on(), ErrLeaseLost, err)
		}
		return fmt.Errorf("renew lease of %s: %w", l.rec.on(), err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == rev { // not dropped meanwhile
		l.rev, l.validUntil = newRev, start.Add(l.ttl)
	}
	return nil
}

// refused reports whether the server answered a write by revision with "not that revision":
// the key expired or was written by someone else.
func refused(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

func (l *Lease) record(since, renewed time.Time) ([]byte, error) {
	r := l.rec
	r.SinceUs, r.RenewedUs = since.UnixMicro(), renewed.UnixMicro()
	val, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode lease of %s: %w", l.rec.on(), err)
	}
	return val, nil
}

// Refresh acquires the lease when it is not held and renews it when it is, and reports whether
// it is held afterwards: the one call of a keeper that renews a single lease.
func (l *Lease) Refresh(ctx context.Context) (bool, error) {
	l.mu.Lock()
	rev := l.rev
	l.mu.Unlock()
	if rev == 0 {
		return l.Acquire(ctx)
	}
	err := l.Renew(ctx)
	_, held := l.Held()
	return held, err
}

// Drop forgets the lease locally (after a fencing failure), leaving the key to expire.
func (l *Lease) Drop() {
	l.mu.Lock()
	l.rev = 0
	l.mu.Unlock()
}

// Release deletes the lease key if this holder still holds it, so another replica can take
// over without waiting for the TTL (it watches the key).
func (l *Lease) Release(ctx context.Context) error {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	rev, valid := l.rev, l.now().Before(l.validUntil)
	l.rev = 0
	l.mu.Unlock()
	if rev == 0 || !valid {
		return nil
	}
	if err := l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("release lease of %s: %w", l.rec.on(), err)
	}
	return nil
}

// StoreLease is one store's lease as the bucket holds it.
type StoreLease struct {
	Store    string
	Record   LeaseRecord
	Revision uint64
}

// ReadLeases returns every store lease of the bucket, sorted by store.
func ReadLeases(ctx context.Context, kv jetstream.KeyValue) ([]StoreLease, error) {
	keys, err := ListKeys(ctx, kv, subjects.StoreLeaseFilter())
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	var out []StoreLease
	for _, k := range keys {
		store, err := subjects.StoreOfLeaseKey(k)
		if err != nil {
			continue // not ours
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read lease of %s: %w", store, err)
		}
		var r LeaseRecord
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return nil, fmt.Errorf("decode lease of %s: %w", store, err)
		}
		out = append(out, StoreLease{Store: store, Record: r, Revision: e.Revision()})
	}
	slices.SortFunc(out, func(a, b StoreLease) int { return cmp.Compare(a.Store, b.Store) })
	return out, nil
}

// ReadLeaseKey returns the lease record of key, if any (nil and revision 0 when none).
func ReadLeaseKey(ctx context.Context, kv jetstream.KeyValue, key string) (*LeaseRecord, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read lease %s: %w", key, err)
	}
	var r LeaseRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("decode lease %s: %w", key, err)
	}
	return &r, e.Revision(), nil
}

// ReadLease returns the lease of the first store (by name) that has one, if any: the whole
// answer for a cluster of one metadata store; ReadLeases lists them all.
func ReadLease(ctx context.Context, kv jetstream.KeyValue) (*LeaseRecord, uint64, error) {
	leases, err := ReadLeases(ctx, kv)
	if err != nil || len(leases) == 0 {
		return nil, 0, err
	}
	return &leases[0].Record, leases[0].Revision, nil
}

// ListKeys lists the keys of kv matching filter (none: an empty list).
func ListKeys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop() // its ordered consumer is gone once every key was delivered
	if err := ctx.Err(); err != nil {
		// The lister also ends its list when ctx ends: what it gave may be a part.
		return nil, fmt.Errorf("list keys %s: %w", filter, err)
	}
	return keys, nil
}
