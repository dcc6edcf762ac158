package prober

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// MinOrphanWritingGrace is the smallest orphan_writing_grace accepted (DESIGN §8.2): it must
// exceed every client's write session lifetime with a margin.
const MinOrphanWritingGrace = time.Hour

// MinDeletingGrace is the smallest deleting_grace accepted.
const MinDeletingGrace = time.Hour

// Config steers the prober (DESIGN §5). Its yaml and help tags are the configuration keys the
// prober owns (config assembles them); a field tagged "-" is wiring, set by whoever builds
// the prober.
type Config struct {
	// OrphanWritingGrace is the least age of a WRITING location before it is an orphan
	// candidate. Default 24h, at least MinOrphanWritingGrace.
	OrphanWritingGrace time.Duration `yaml:"orphan_writing_grace" help:"least age of a WRITING location before it is an orphan; at least 1h"`
	// KVCMGC says KVCM's own GC runs beside kvcm-gc (KVCM's kvcm.cache_gc.enabled). Default
	// true: it is on in today's KVCM's shipped configuration and in its parser's default, so
	// a deployment that says nothing most likely runs it (DESIGN §13.5). With it, rule 1
	// leaves an orphan WRITING location of the location layout to KVCM until KVCMGCGrace +
	// KVCMGCMargin: KVCM's delete lowers its counters, kvcm-gc's cannot, so kvcm-gc collects
	// only what KVCM's GC leaves behind. Where KVCM has no GC (before its #244, or disabled),
	// on costs only time: orphans wait 30h instead of 24h; set it false there.
	KVCMGC bool `yaml:"kvcm_gc" help:"KVCM's own GC runs beside kvcm-gc (kvcm.cache_gc.enabled, on in today's KVCM): orphan WRITING of the location layout is left to it until kvcm_gc_grace + kvcm_gc_margin, since its delete lowers KVCM's counters and kvcm-gc's cannot"`
	// KVCMGCGrace is KVCM's orphan_writing_grace_period_ms. Default 24h (KVCM's), at least
	// 1h (KVCM's minimum).
	KVCMGCGrace time.Duration `yaml:"kvcm_gc_grace" help:"KVCM's kvcm.cache_gc.orphan_writing_grace_period_ms (24h unless changed there; at least 1h)"`
	// KVCMGCMargin is how long past KVCMGCGrace an orphan stays KVCM's: at least one round
	// of KVCM's GC (every registered instance's keys at 2560 per second, then 5 min).
	// Default 6h.
	KVCMGCMargin time.Duration `yaml:"kvcm_gc_margin" help:"how long past kvcm_gc_grace an orphan WRITING stays KVCM's: at least one round of KVCM's GC (all keys / 2560 per second, plus 5 min)"`
	// ProbeChunkSize is the most URIs in one MightExist call. Default and maximum 512.
	ProbeChunkSize int `yaml:"probe_chunk_size" help:"most storage URIs in one existence probe, 1..512"`
	// RegistryRefresh is how long a registry snapshot (storage table) is reused (the sweep
	// reads it too). Default 30s.
	RegistryRefresh time.Duration `yaml:"registry_refresh" help:"how long the prober reuses a snapshot of the registry's storage table"`
	// ExcludedTypes are the types (KVCM's names) that never enter the storage-missing rule.
	ExcludedTypes []string `yaml:"excluded_storage_types" help:"storage types (hf3fs, mooncake, pace, file, vcns_hf3fs) never judged storage-missing"`
	// CollectDeleting enables rule 3, stuck DELETING (collect_deleting). Default false.
	CollectDeleting bool `yaml:"collect_deleting" help:"also collect stuck DELETING locations (left by a KVCM crash or failover mid-delete), DELETING with the same bytes for deleting_grace"`
	// DeletingGrace is the least time a location must have been DELETING, with the same
	// bytes, before it is a stuck-DELETING candidate. Default 24h, at least MinDeletingGrace.
	DeletingGrace time.Duration `yaml:"deleting_grace" help:"least time a location must have been DELETING with the same bytes before it is stuck; at least 1h, and above every group's delay_before_delete_ms + 1h"`

	// MaxTargets caps the targets of one delete request (the scanner's scan_batch_size).
	// Default 256.
	MaxTargets int `yaml:"-"`
	// Workers is how many batches are judged at once (workers.prober). Default 1. The
	// consumer may hold more: those waiting to be judged, or for the delete request their
	// targets went into, are gathered with the ones being judged (gather.go).
	Workers int `yaml:"-"`
	// GatherLinger is how long a delete request stays open for more targets of its instance
	// (gather.go): it is published when it holds MaxTargets targets or GatherLinger after its
	// first ones. Default 50ms; 0 publishes it as soon as no other batch of the instance is
	// held.
	GatherLinger time.Duration `yaml:"-"`
}

// DefaultConfig returns the prober's defaults.
func DefaultConfig() Config {
	return Config{
		OrphanWritingGrace: 24 * time.Hour,
		KVCMGC:             true,
		KVCMGCGrace:        24 * time.Hour,
		KVCMGCMargin:       6 * time.Hour,
		ProbeChunkSize:     storage.MaxProbeChunk,
		MaxTargets:         256,
		RegistryRefresh:    30 * time.Second,
		DeletingGrace:      24 * time.Hour,
		GatherLinger:       50 * time.Millisecond,
	}
}

// Validate checks the prober's keys, each error naming its key. New refuses a Config that
// fails it, and wiring fields out of bounds.
func (c Config) Validate() error {
	var errs []error
	if c.OrphanWritingGrace < MinOrphanWritingGrace {
		errs = append(
			errs,
			fmt.Errorf("orphan_writing_grace: must be >= %s, got %s", MinOrphanWritingGrace, c.OrphanWritingGrace),
		)
	}
	if c.KVCMGCGrace < time.Hour {
		errs = append(errs, fmt.Errorf("kvcm_gc_grace: must be >= 1h (KVCM's own minimum), got %s", c.KVCMGCGrace))
	}
	if c.KVCMGCMargin < 0 {
		errs = append(errs, fmt.Errorf("kvcm_gc_margin: must be >= 0, got %s", c.KVCMGCMargin))
	}
	if c.ProbeChunkSize <= 0 || c.ProbeChunkSize > storage.MaxProbeChunk {
		errs = append(errs, fmt.Errorf("probe_chunk_size: must be in 1..%d, got %d", storage.MaxProbeChunk, c.ProbeChunkSize))
	}
	if c.RegistryRefresh <= 0 {
		errs = append(errs, fmt.Errorf("registry_refresh: must be > 0, got %s", c.RegistryRefresh))
	}
	for _, t := range c.ExcludedTypes {
		if _, ok := kvcm.ParseStorageType(t); !ok {
			errs = append(errs, fmt.Errorf("excluded_storage_types: unknown storage type %q "+
				"(hf3fs, mooncake, pace, file, vcns_hf3fs)", t))
		}
	}
	if c.DeletingGrace < MinDeletingGrace {
		errs = append(errs, fmt.Errorf("deleting_grace: must be >= %s, got %s", MinDeletingGrace, c.DeletingGrace))
	}
	return errors.Join(errs...)
}

// WritingGrace is the least age of an orphan WRITING location of layout: orphan_writing_grace,
// and with kvcm_gc at least kvcm_gc_grace + kvcm_gc_margin for the location layout, the only
// one whose KVCM has a GC (f6aa2b2 has none).
func (c Config) WritingGrace(layout string) time.Duration {
	if c.KVCMGC && layout == subjects.LayoutLocation {
		return max(c.OrphanWritingGrace, c.KVCMGCGrace+c.KVCMGCMargin)
	}
	return c.OrphanWritingGrace
}

// excluded returns the test of a storage type against ExcludedTypes (names Validate checked;
// one it did not know excludes nothing).
func (c Config) excluded() func(kvcm.StorageType) bool {
	var types []kvcm.StorageType
	for _, name := range c.ExcludedTypes {
		if t, ok := kvcm.ParseStorageType(name); ok {
			types = append(types, t)
		}
	}
	return func(t kvcm.StorageType) bool { return slices.Contains(types, t) }
}

// maxGatherLinger bounds Config.GatherLinger far below any ack wait.
const maxGatherLinger = 10 * time.Second
