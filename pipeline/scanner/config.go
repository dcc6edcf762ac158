package scanner

import (
	"errors"
	"fmt"
	"time"
)

// Config steers the scanner (DESIGN §4, §9).
type Config struct {
	// ScanInterval is the least time between the end of one tick and the start of the next
	// (no catch-up after a slow tick). Default 1s.
	ScanInterval time.Duration
	// RoundPause is the cooldown between the end of a round and the start of the next; it is
	// stored in the state bucket so it survives restarts. Default 24h.
	RoundPause time.Duration
	// ScanBatchSize is SCAN's COUNT hint and the most delete targets one batch may produce. Default 256.
	ScanBatchSize int
	// MaxKeysPerSecond caps the scan rate (0: no cap beyond ScanInterval).
	MaxKeysPerSecond float64
	// LatencyBudget (scanner.latency_budget; 0: off) paces each store's walk adaptively when
	// MaxKeysPerSecond is 0: the fastest pace, and the burst size, at which the store's probe
	// latency stays within this rise over its idle latency (0.1: +10%). The walk then waits
	// no ScanInterval between pages (adaptive.go).
	LatencyBudget float64
	// HighWater: a tick is skipped while the prober's or the deleter's consumer has more than
	// this many messages pending + unacknowledged. Default 100.
	HighWater uint64
	// LeaseRenew is how often the leader renews its lease (default a third of the lease TTL).
	LeaseRenew time.Duration
	// Holder identifies this replica in the leases (default host name + pid).
	Holder string
	// MaxStores caps the metadata stores this replica walks at once (scanner.max_stores; 0:
	// no cap). Replicas divide the stores: each takes free store leases up to its share (the
	// stores over the live replicas, rounded up, a capped replica leaving the rest of its part
	// to the others) and hands one back at a round boundary while it holds more; a store left
	// free for a whole lease TTL is taken by anyone with room.
	MaxStores int
	// CollectUnregistered deletes the keys of instances the registry no longer lists
	// (collect_unregistered_instances, unregistered_collect.go). Default false.
	CollectUnregistered bool
	// UnregisteredGrace is the least time an instance must have been absent from every
	// registry snapshot, since one listed it, before its keys go. Default 7d (the
	// configuration refuses less than MinUnregisteredGrace).
	UnregisteredGrace time.Duration
	// UnregisteredMaxKeys caps the keys of unregistered instances a store's round sends to
	// the deleter. Default 10000.
	UnregisteredMaxKeys int
}

// MinUnregisteredGrace is the smallest unregistered_grace the configuration accepts.
const MinUnregisteredGrace = 24 * time.Hour

// DefaultConfig returns the scanner's defaults.
func DefaultConfig() Config {
	return Config{ScanInterval: time.Second, RoundPause: 24 * time.Hour, ScanBatchSize: 256, HighWater: 100,
		UnregisteredGrace: 7 * 24 * time.Hour, UnregisteredMaxKeys: 10000}
}

// Validate names the offending key (configuration names of DESIGN §9).
func (c Config) Validate() error {
	var errs []error
	if c.ScanInterval <= 0 {
		errs = append(errs, fmt.Errorf("scan_interval: must be > 0, got %s", c.ScanInterval))
	}
	if c.RoundPause < 0 {
		errs = append(errs, fmt.Errorf("round_pause: must be >= 0, got %s", c.RoundPause))
	}
	if c.ScanBatchSize <= 0 {
		errs = append(errs, fmt.Errorf("scan_batch_size: must be > 0, got %d", c.ScanBatchSize))
	}
	if c.MaxKeysPerSecond < 0 {
		errs = append(errs, fmt.Errorf("max_keys_per_second: must be >= 0, got %g", c.MaxKeysPerSecond))
	}
	if c.LatencyBudget < 0 || c.LatencyBudget > 10 {
		errs = append(errs, fmt.Errorf("scanner.latency_budget: must be between 0 and 10, got %g", c.LatencyBudget))
	}
	if c.HighWater == 0 {
		errs = append(errs, errors.New("backpressure_high_water: must be > 0"))
	}
	if c.MaxStores < 0 {
		errs = append(errs, fmt.Errorf("scanner.max_stores: must be >= 0, got %d", c.MaxStores))
	}
	if c.CollectUnregistered && c.UnregisteredGrace <= 0 {
		errs = append(errs, fmt.Errorf("unregistered_grace: must be > 0, got %s", c.UnregisteredGrace))
	}
	if c.CollectUnregistered && c.UnregisteredMaxKeys <= 0 {
		errs = append(errs, fmt.Errorf("unregistered_max_keys_per_round: must be > 0, got %d", c.UnregisteredMaxKeys))
	}
	return errors.Join(errs...)
}

// adaptive reports whether store walks are paced by the latency budget.
func (c Config) adaptive() bool { return c.LatencyBudget > 0 && c.MaxKeysPerSecond == 0 }
