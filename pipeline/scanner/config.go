package scanner

import (
	"errors"
	"fmt"
	"time"
)

// Config steers the scanner (DESIGN §4, §9). Its yaml and help tags are the configuration
// keys the scanner owns (config assembles them into the file, the flags and the environment);
// a field tagged "-" is wiring, set by whoever builds the scanner.
type Config struct {
	// ScanInterval is the least time between the end of one tick and the start of the next
	// (no catch-up after a slow tick). Default 1s.
	ScanInterval time.Duration `yaml:"scan_interval" help:"least time between two SCAN pages of a store's walk (no catch-up after a slow page)"`
	// RoundPause is the cooldown between the end of a round and the start of the next; it is
	// stored in the state bucket so it survives restarts. Default 24h.
	RoundPause time.Duration `yaml:"round_pause" help:"pause between the end of a full scan round and the start of the next"`
	// ScanBatchSize is SCAN's COUNT hint and the most delete targets one batch may produce
	// (the prober's cap of a delete request too). Default 256.
	ScanBatchSize int `yaml:"scan_batch_size" help:"SCAN COUNT hint, and the most delete targets one batch may produce"`
	// MaxKeysPerSecond caps the scan rate (0: no cap beyond ScanInterval).
	MaxKeysPerSecond float64 `yaml:"max_keys_per_second" help:"cap on a store walk's keys per second, to protect a busy Redis (0: no cap beyond scan_interval)"`
	// HighWater: a tick is skipped while the prober's or the deleter's consumer has more than
	// this many messages pending + unacknowledged (the sweep's walker reads it for its own
	// consumer). Default 100.
	HighWater uint64 `yaml:"backpressure_high_water" help:"skip scanning while the prober's or the deleter's backlog (pending + unacknowledged messages) is above this"`
	// Tuning are the keys under scanner:.
	Tuning `yaml:"scanner"`
	// CollectUnregistered deletes the keys of instances the registry no longer lists
	// (collect_unregistered_instances, unregistered_collect.go). Default false. The sweep
	// reads it too, to reclaim their data files.
	CollectUnregistered bool `yaml:"collect_unregistered_instances" help:"also delete the keys of instances the registry no longer lists, once absent for unregistered_grace since kvcm-gc saw them registered; the sweep, where it runs, then reclaims their per-block data files"`
	// UnregisteredGrace is the least time an instance must have been absent from every
	// registry snapshot, since one listed it, before its keys go. Default 7d (the
	// configuration refuses less than MinUnregisteredGrace).
	UnregisteredGrace time.Duration `yaml:"unregistered_grace" help:"least time an instance must have been absent from every registry snapshot, since one listed it, before collect_unregistered_instances deletes its keys; at least 24h"`
	// UnregisteredMaxKeys caps the keys of unregistered instances a store's round sends to
	// the deleter. Default 10000.
	UnregisteredMaxKeys int `yaml:"unregistered_max_keys_per_round" help:"most keys of unregistered instances one round of a store deletes"`

	// LeaseRenew is how often the leader renews its lease (default a third of the lease TTL).
	LeaseRenew time.Duration `yaml:"-"`
	// Holder identifies this replica in the leases (default host name + pid).
	Holder string `yaml:"-"`
}

// Tuning are the settings of how scanner replicas share the metadata stores and pace their
// walks: the keys under scanner:.
type Tuning struct {
	// MaxStores caps the metadata stores this replica walks at once (scanner.max_stores; 0:
	// no cap). Replicas divide the stores: each takes free store leases up to its share (the
	// stores over the live replicas, rounded up, a capped replica leaving the rest of its part
	// to the others) and hands one back at a round boundary while it holds more; a store left
	// free for a whole lease TTL is taken by anyone with room.
	MaxStores int `yaml:"max_stores" help:"most metadata stores this replica walks at once (0: all); replicas divide the stores, each walking its share"`
	// LatencyBudget (scanner.latency_budget; 0: off) paces each store's walk adaptively when
	// MaxKeysPerSecond is 0: the fastest pace, and the burst size, at which the store's probe
	// latency stays within this rise over its idle latency (0.1: +10%). The walk then waits
	// no ScanInterval between pages (adaptive.go).
	LatencyBudget float64 `yaml:"latency_budget" help:"with max_keys_per_second 0, pace each store's walk adaptively: the fastest pace at which the store's probe latency rises at most this much over its idle latency (0.1: +10%; 0: off, paced by scan_interval)"`
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
