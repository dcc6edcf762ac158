package deleter

import (
	"context"
	"fmt"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/duty"
)

// The deleter's share of a metadata store's time (delete_duty, DESIGN §6.9). The protocol's
// pipelines (a request's batch read, its CAS, its re-read, its CAD) load the Redis the
// scanner walks; unpaced, two requests in flight kept Redis's main thread busy a quarter of
// the time and more in the bench. Each pipeline waits at its store's gate, the scanner's rule
// (internal/duty): one pipeline at a time per store in this process, whichever worker sends
// it; one that took t from its send to its last reply makes the next start no sooner than
// t/duty after it, which leaves Redis (1−duty)/duty × t to itself, between duty.DefaultFloor
// and duty.DefaultCap after the reply. The round trip counts more than Redis's own time (the
// client's encoding and decoding, the network, this process's wait for a core), so the share
// Redis sees stays under the duty (BENCHMARKS.md measures it). A slower Redis answers each
// pipeline later, and the deleter waits longer after it by itself.
//
// The gate is this process's: R deleter replicas on one store take up to R × duty of it.

// pacedStore is a store whose reads and conditional writes wait at a duty gate.
type pacedStore struct {
	meta.Store
	gate *duty.Gate
}

// begin waits for the store's pace and starts one pipeline of n items.
func (s pacedStore) begin(ctx context.Context, n int) (*duty.Op, error) {
	op, err := s.gate.Begin(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("wait for delete_duty: %w", err)
	}
	return op, nil
}

// ReadBlocks implements meta.Store, paced.
func (s pacedStore) ReadBlocks(ctx context.Context, instanceID string, blockKeys []int64) ([]meta.BlockRead, error) {
	op, err := s.begin(ctx, len(blockKeys))
	if err != nil {
		return nil, err
	}
	defer op.Done(-1)
	return s.Store.ReadBlocks(ctx, instanceID, blockKeys)
}

// CASMany implements meta.Store, paced.
func (s pacedStore) CASMany(ctx context.Context, instanceID string, writes []meta.CondWrite) ([]error, error) {
	op, err := s.begin(ctx, len(writes))
	if err != nil {
		return nil, err
	}
	defer op.Done(-1)
	return s.Store.CASMany(ctx, instanceID, writes)
}

// CADMany implements meta.Store, paced.
func (s pacedStore) CADMany(ctx context.Context, instanceID string, writes []meta.CondWrite) ([]meta.CADResult, error) {
	op, err := s.begin(ctx, len(writes))
	if err != nil {
		return nil, err
	}
	defer op.Done(-1)
	return s.Store.CADMany(ctx, instanceID, writes)
}

// recordPace sets the pace gauges of a store's gate.
func (m *Metrics) recordPace(name string, g *duty.Gate) {
	pc := g.Pace()
	m.PaceShare.WithLabelValues(name).Set(pc.Share)
	m.PaceWait.WithLabelValues(name).Set(pc.Wait.Seconds())
}
