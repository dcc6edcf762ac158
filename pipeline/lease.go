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

// LeaseRecord is the value of a store's lease key (subjects.StoreLeaseKey).
type LeaseRecord struct {
	Holder    string `json:"holder"`
	Store     string `json:"store,omitempty"`
	SinceUs   int64  `json:"since_us"`   // when this holder acquired the lease
	RenewedUs int64  `json:"renewed_us"` // last renewal
}

// ErrLeaseLost: the lease is someone else's now, or it expired before it could be renewed.
// The walk it fenced stops at once.
var ErrLeaseLost = errors.New("lease lost")

// errNotHeld: a renewal of a lease released, dropped or never acquired (wraps ErrLeaseLost).
var errNotHeld = fmt.Errorf("%w: not held", ErrLeaseLost)

// Lease is a scanner's lease on one metadata store: a key in a KV bucket whose bucket-wide TTL
// is the lease TTL. Acquire creates the key, Renew updates it by revision (never get-then-put),
// Release deletes it by revision. A renewal that fails for a transient reason (a timeout, a
// NATS node changing leader) leaves the lease held until its TTL would pass, counted from the
// start of the last successful renewal, so the caller retries meanwhile; a renewal the server
// refuses (the revision moved on: someone else holds it) loses it at once. Held turns false
// in both cases, so a stalled process stops acting on its own.
type Lease struct {
	kv     jetstream.KeyValue
	key    string
	store  string
	holder string
	ttl    time.Duration
	now    func() time.Time

	// op serialises the server calls, so a renewal in flight never races a release.
	op sync.Mutex

	mu         sync.Mutex
	rev        uint64
	since      time.Time
	validUntil time.Time
}

// NewLease returns holder's lease on store, in kv (a bucket whose TTL is ttl).
func NewLease(kv jetstream.KeyValue, store, holder string, ttl time.Duration) *Lease {
	return &Lease{kv: kv, key: subjects.StoreLeaseKey(store), store: store, holder: holder, ttl: ttl, now: time.Now}
}

// Store is the store the lease is on.
func (l *Lease) Store() string { return l.store }

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
		return false, fmt.Errorf("acquire lease of %s: %w", l.store, err)
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
		return fmt.Errorf("renew lease of %s: %w", l.store, errNotHeld)
	}
	if !start.Before(valid) {
		l.Drop()
		return fmt.Errorf("renew lease of %s: %w: expired %s ago", l.store, ErrLeaseLost, start.Sub(valid))
	}
	val, err := l.record(since, start)
	if err != nil {
		return err
	}
	newRev, err := l.kv.Update(ctx, l.key, val, rev)
	if err != nil {
		if refused(err) {
			l.Drop()
			return fmt.Errorf("renew lease of %s: %w: %w", l.store, ErrLeaseLost, err)
		}
		return fmt.Errorf("renew lease of %s: %w", l.store, err)
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
	val, err := json.Marshal(LeaseRecord{Holder: l.holder, Store: l.store, SinceUs: since.UnixMicro(), RenewedUs: renewed.UnixMicro()})
	if err != nil {
		return nil, fmt.Errorf("encode lease of %s: %w", l.store, err)
	}
	return val, nil
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
		return fmt.Errorf("release lease of %s: %w", l.store, err)
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
	keys, err := listKeys(ctx, kv, subjects.StoreLeaseFilter())
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

// ReadLease returns the lease of the first store (by name) that has one, if any: the whole
// answer for a cluster of one metadata store; ReadLeases lists them all.
func ReadLease(ctx context.Context, kv jetstream.KeyValue) (*LeaseRecord, uint64, error) {
	leases, err := ReadLeases(ctx, kv)
	if err != nil || len(leases) == 0 {
		return nil, 0, err
	}
	return &leases[0].Record, leases[0].Revision, nil
}

// listKeys lists the keys of kv matching filter (none: an empty list).
func listKeys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
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
