package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// NewStoreLease returns holder's lease on a metadata store.
func NewStoreLease(kv jetstream.KeyValue, store, holder string, ttl time.Duration) *Lease {
	return NewLease(kv, subjects.StoreLeaseKey(store), LeaseRecord{Holder: holder, Store: store}, ttl)
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
