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
	// (no catch-up after a slow tick), the pace of a walk without Duty. Default 1s.
	ScanInterval time.Duration `yaml:"scan_interval" help:"with scanner.duty 0 (the fixed pace), least time between two SCAN pages of a store's walk (no catch-up after a slow page)"`
	// RoundPause is the cooldown between the end of a round and the start of the next; it is
	// stored in the state bucket so it survives restarts. Default 24h.
	RoundPause time.Duration `yaml:"round_pause" help:"pause between the end of a full scan round and the start of the next"`
	// ScanFailureBudget bounds the retries of a store's SCAN: once reads of the store have
	// failed for this long with no page read in between, retried with the scanner's backoff
	// (RegistryBackoff), the store's round ends failed (walk.go). Default 10m: a Redis
	// failover or restart (seconds to a minute or two) is ridden out, a store refusing SCAN
	// (an ACL, a broken proxy) does not hold its round open for ever.
	ScanFailureBudget time.Duration `yaml:"scan_failure_budget" help:"how long a store's SCAN may keep failing, retried with backoff and no page read in between, before the store's round ends failed (the other stores' rounds go on)"`
	// FailedRoundPause is the pause after a round that ended failed, before the store's next
	// round starts over from the beginning of its keyspace; never longer than RoundPause.
	// Default 1h: a store that recovers is walked again within the hour rather than a
	// round_pause later, and one that keeps failing tries a round an hour (and alerts).
	FailedRoundPause time.Duration `yaml:"failed_round_pause" help:"pause after a store's round ended failed before its next round starts over (at most round_pause)"`
	// ScanBatchSize is SCAN's COUNT hint and the most delete targets one batch may produce
	// (the prober's cap of a delete request too). Default 256.
	ScanBatchSize int `yaml:"scan_batch_size" help:"SCAN COUNT hint, and the most delete targets one batch may produce"`
	// MaxKeysPerSecond caps the scan rate (0: no cap beyond the duty, or ScanInterval).
	MaxKeysPerSecond float64 `yaml:"max_keys_per_second" help:"cap on a store walk's keys per second, to protect a busy Redis (0: no cap beyond scanner.duty, or scan_interval)"`
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

	// LeaseRenew is how often a replica renews the store leases it holds (default a third of
	// the lease TTL): each store has a lease holder, no replica leads the others.
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
	// Duty (scanner.duty; 0: off) paces each store's walk by its share of Redis's time: after
	// a round trip that held Redis for t (TIME first and last in its pipeline, Redis's own
	// clock), the next waits (1−duty)/duty × t, at least duty.DefaultFloor and at most
	// duty.DefaultCap (pace.go). Default DefaultDuty. With 0, the walk is paced by
	// ScanInterval alone (the fixed pace), max_keys_per_second capping both.
	Duty float64 `yaml:"duty" help:"share of each metadata store's time its walk may take: after a round trip that held Redis for t (Redis's clock), the next waits (1-duty)/duty x t (0: off, the fixed pace of scan_interval; max_keys_per_second caps both)"`
	// BurstKeys (scanner.burst_keys) is the most keys one round trip of a duty-paced walk
	// reads: the longest a page holds Redis's event loop at once, and so the longest a
	// serving request can wait behind it. Default DefaultBurstKeys.
	BurstKeys int `yaml:"burst_keys" help:"most keys one round trip of a duty-paced walk reads: the longest it holds Redis at once (64 keys: about 0.4 ms)"`
	// CPUCeiling (scanner.redis_cpu_ceiling; 0: off) holds a duty-paced walk while the
	// store's main thread is busier than this share of its time, all clients included, by
	// Redis's own count (INFO cpu, read every CPUEvery). A server that refuses INFO leaves
	// the duty alone to pace the walk, and status says so.
	CPUCeiling float64 `yaml:"redis_cpu_ceiling" help:"hold a duty-paced walk while the store's main thread is busier than this share of its time, all clients included, by INFO cpu (0: off; a server refusing INFO is paced by the duty alone)"`
	// CPUEvery (scanner.redis_cpu_every) is the time between two readings of INFO cpu for
	// CPUCeiling. Default DefaultCPUEvery.
	CPUEvery time.Duration `yaml:"redis_cpu_every" help:"time between two readings of INFO cpu for redis_cpu_ceiling"`
	// KVCMPersistGap (scanner.kvcm_persist_gap) is the longest time between two persists of
	// an instance's counters by KVCM's leader: its metrics recorder persists every 5s,
	// gated by persist_metadata_interval_time_ms (1s by default). The audit's last reading of
	// a round comes this long after the walk's last page, so that it holds every change KVCM
	// made during the walk (pipeline/audit.go). Default DefaultKVCMPersistGap.
	KVCMPersistGap time.Duration `yaml:"kvcm_persist_gap" help:"longest time between two persists of an instance's counters by KVCM's leader (its recorder persists every 5s, gated by persist_metadata_interval_time_ms): the audit of KVCM's counters reads them a last time this long after a round's walk"`
}

// Defaults of the duty pace (pace.go says how they were chosen, BENCHMARKS.md measures them).
const (
	// DefaultDuty: a walk keeps Redis's main thread busy at most a tenth of the time.
	DefaultDuty = 0.1
	// DefaultBurstKeys: a round trip of 64 HGETALL holds Redis for about 0.4 ms at the
	// 6.32 µs of Redis CPU per key of the 10M-block keyspace (0.3 ms at 1M blocks).
	DefaultBurstKeys = 64
	// DefaultCPUEvery is the time between two readings of INFO cpu.
	DefaultCPUEvery = 5 * time.Second
	// DefaultKVCMPersistGap: KVCM's recorder loop persists every 5s, plus a second of margin.
	DefaultKVCMPersistGap = 6 * time.Second
)

// MinUnregisteredGrace is the smallest unregistered_grace the configuration accepts.
const MinUnregisteredGrace = 24 * time.Hour

// DefaultConfig returns the scanner's defaults.
func DefaultConfig() Config {
	return Config{ScanInterval: time.Second, RoundPause: 24 * time.Hour, ScanBatchSize: 256, HighWater: 100,
		ScanFailureBudget: 10 * time.Minute, FailedRoundPause: time.Hour,
		Tuning: Tuning{Duty: DefaultDuty, BurstKeys: DefaultBurstKeys, CPUEvery: DefaultCPUEvery,
			KVCMPersistGap: DefaultKVCMPersistGap},
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
	if c.ScanFailureBudget <= 0 {
		errs = append(errs, fmt.Errorf("scan_failure_budget: must be > 0 (a store's SCAN is not retried for ever), got %s",
			c.ScanFailureBudget))
	}
	if c.FailedRoundPause < 0 {
		errs = append(errs, fmt.Errorf("failed_round_pause: must be >= 0, got %s", c.FailedRoundPause))
	}
	if c.ScanBatchSize <= 0 {
		errs = append(errs, fmt.Errorf("scan_batch_size: must be > 0, got %d", c.ScanBatchSize))
	}
	if c.MaxKeysPerSecond < 0 {
		errs = append(errs, fmt.Errorf("max_keys_per_second: must be >= 0, got %g", c.MaxKeysPerSecond))
	}
	if !(c.Duty >= 0 && c.Duty <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("scanner.duty: must be between 0 (off: the fixed pace of "+
			"scan_interval) and 1, got %g", c.Duty))
	}
	if c.Duty > 0 && c.BurstKeys <= 0 {
		errs = append(errs, fmt.Errorf("scanner.burst_keys: must be > 0 with scanner.duty set, got %d", c.BurstKeys))
	}
	if !(c.CPUCeiling >= 0 && c.CPUCeiling < 1) {
		errs = append(
			errs,
			fmt.Errorf("scanner.redis_cpu_ceiling: must be at least 0 (off) and below 1, got %g", c.CPUCeiling),
		)
	}
	if c.CPUCeiling > 0 && c.Duty == 0 {
		errs = append(errs, errors.New("scanner.redis_cpu_ceiling: holds a duty-paced walk only; set scanner.duty too"))
	}
	if c.CPUCeiling > 0 && c.CPUEvery < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("scanner.redis_cpu_every: must be at least 100ms, got %s", c.CPUEvery))
	}
	if c.KVCMPersistGap <= 0 {
		errs = append(errs, fmt.Errorf("scanner.kvcm_persist_gap: must be > 0, got %s", c.KVCMPersistGap))
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
