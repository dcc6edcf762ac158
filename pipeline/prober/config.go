package prober

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

// Config steers the prober (DESIGN §5).
type Config struct {
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

// DefaultConfig returns the prober's defaults.
func DefaultConfig() Config {
	return Config{OrphanWritingGrace: 24 * time.Hour, ProbeChunkSize: storage.MaxProbeChunk, MaxTargets: 256,
		RegistryRefresh: 30 * time.Second, DeletingGrace: 24 * time.Hour, GatherLinger: 50 * time.Millisecond}
}

func (c Config) Validate() error {
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

// maxGatherLinger bounds Config.GatherLinger far below any ack wait.
const maxGatherLinger = 10 * time.Second
