package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// MinOrphanWritingGrace is the smallest orphan_writing_grace accepted (DESIGN §8.2): it must
// exceed every client's write session lifetime with a margin.
const MinOrphanWritingGrace = time.Hour

// ScannerConfig steers the scanner (DESIGN §4, §9).
type ScannerConfig struct {
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
	// no ScanInterval between pages (scanner_adaptive.go).
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

// ProberConfig steers the prober (DESIGN §5).
type ProberConfig struct {
	// OrphanWritingGrace is the least age of a WRITING location before it is an orphan
	// candidate. Default 24h, at least MinOrphanWritingGrace.
	OrphanWritingGrace time.Duration
	// ProbeChunkSize is the most URIs in one MightExist call. Default and maximum 512.
	ProbeChunkSize int
	// MaxTargets caps the targets of one delete request (scan_batch_size). Default 256.
	MaxTargets int
	// Workers is how many batches are judged at once (workers.prober). Default 1. The
	// consumer may hold more: those waiting to be judged, or for the delete request their
	// targets went into, are gathered with the ones being judged (gather.go).
	Workers int
	// GatherLinger is how long a delete request stays open for more targets of its instance
	// (gather.go): it is published when it holds MaxTargets targets or GatherLinger after its
	// first ones. Default 50ms; 0 publishes it as soon as no other batch of the instance is
	// held.
	GatherLinger time.Duration
	// ExcludedTypes never enter the storage-missing rule.
	ExcludedTypes []kvcm.StorageType
	// RegistryRefresh is how long a registry snapshot (storage table) is reused. Default 30s.
	RegistryRefresh time.Duration
	// CollectDeleting enables rule 3, stuck DELETING (collect_deleting). Default false.
	CollectDeleting bool
	// DeletingGrace is the least time a location must have been DELETING, with the same
	// bytes, before it is a stuck-DELETING candidate. Default 24h, at least MinDeletingGrace.
	DeletingGrace time.Duration
}

// DeleterConfig steers the deleter (DESIGN §6).
type DeleterConfig struct {
	// DeleteDelay is the read lease between the CAS to DELETING and the physical delete. Default 0.
	DeleteDelay time.Duration
	// CASRetries is how many times a conflicting CAS/CAD re-reads and retries. Default 3.
	CASRetries int
	// AckWait must equal the consumer's AckWait, which app gives the deleter's consumer: it
	// keeps a message whose handler still runs (delete_delay) in flight at a third of it.
	AckWait time.Duration
	// UnlinkWorkers is how many goroutines unlink the data files of one request at once
	// (each with a chunk of at least 32 files). Default 16.
	UnlinkWorkers int
}

// Defaults.
func DefaultScannerConfig() ScannerConfig {
	return ScannerConfig{ScanInterval: time.Second, RoundPause: 24 * time.Hour, ScanBatchSize: 256, HighWater: 100,
		UnregisteredGrace: 7 * 24 * time.Hour, UnregisteredMaxKeys: 10000}
}

func DefaultProberConfig() ProberConfig {
	return ProberConfig{OrphanWritingGrace: 24 * time.Hour, ProbeChunkSize: storage.MaxProbeChunk, MaxTargets: 256,
		RegistryRefresh: 30 * time.Second, DeletingGrace: 24 * time.Hour, GatherLinger: 50 * time.Millisecond}
}

// KeepFor is how long the deleter's consumer keeps a request in flight while its handler
// runs: delete_delay, which the protocol waits on purpose, plus one AckWait of work. A
// handler that runs longer is taken for hung: the server redelivers the request one AckWait
// later, and at the last delivery dead-letters it (DESIGN §3.5).
func (c DeleterConfig) KeepFor() time.Duration {
	return c.DeleteDelay + c.AckWait
}

func DefaultDeleterConfig() DeleterConfig {
	return DeleterConfig{CASRetries: 3, AckWait: 60 * time.Second, UnlinkWorkers: 16}
}

// Validate names the offending key (configuration names of DESIGN §9).
func (c ScannerConfig) Validate() error {
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
func (c ScannerConfig) adaptive() bool { return c.LatencyBudget > 0 && c.MaxKeysPerSecond == 0 }

func (c ProberConfig) Validate() error {
	var errs []error
	if c.OrphanWritingGrace < MinOrphanWritingGrace {
		errs = append(errs, fmt.Errorf("orphan_writing_grace: must be >= %s, got %s", MinOrphanWritingGrace, c.OrphanWritingGrace))
	}
	if c.ProbeChunkSize <= 0 || c.ProbeChunkSize > storage.MaxProbeChunk {
		errs = append(errs, fmt.Errorf("probe_chunk_size: must be in 1..%d, got %d", storage.MaxProbeChunk, c.ProbeChunkSize))
	}
	if c.MaxTargets <= 0 {
		errs = append(errs, fmt.Errorf("scan_batch_size: must be > 0, got %d", c.MaxTargets))
	}
	if c.RegistryRefresh <= 0 {
		errs = append(errs, fmt.Errorf("registry_refresh: must be > 0, got %s", c.RegistryRefresh))
	}
	if c.DeletingGrace < MinDeletingGrace {
		errs = append(errs, fmt.Errorf("deleting_grace: must be >= %s, got %s", MinDeletingGrace, c.DeletingGrace))
	}
	if c.GatherLinger < 0 || c.GatherLinger > maxGatherLinger {
		errs = append(errs, fmt.Errorf("gather linger: must be in 0..%s, got %s", maxGatherLinger, c.GatherLinger))
	}
	return errors.Join(errs...)
}

// maxGatherLinger bounds ProberConfig.GatherLinger far below any ack wait.
const maxGatherLinger = 10 * time.Second

func (c DeleterConfig) Validate() error {
	var errs []error
	if c.DeleteDelay < 0 {
		errs = append(errs, fmt.Errorf("delete_delay: must be >= 0, got %s", c.DeleteDelay))
	}
	if c.CASRetries < 1 {
		errs = append(errs, fmt.Errorf("cas_retries: must be >= 1, got %d", c.CASRetries))
	}
	if c.AckWait <= 0 {
		errs = append(errs, fmt.Errorf("jetstream.deleter_ack_wait: must be > 0, got %s", c.AckWait))
	}
	if c.UnlinkWorkers < 1 {
		errs = append(errs, fmt.Errorf("unlink workers: must be >= 1, got %d", c.UnlinkWorkers))
	}
	return errors.Join(errs...)
}
