package sweep

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// MinGrace is the smallest sweep_grace accepted: a file younger than it may be one a
// client is still writing for a WRITING location, and a file's age is its mtime, which a
// client's clock and a slow write can both bend.
const MinGrace = time.Hour

// Config steers the sweep of orphan data files (DESIGN §7): the walker's pace and the
// sweepers' rules. One configuration serves both stages.
type Config struct {
	// Storages are the storages swept (storage.overrides.<name>.sweep: true), by global unique
	// name. None: the stages run and do nothing.
	Storages []string
	// Grace is the least age of a file, by its mtime, before it may be judged (sweep_grace).
	// Default 24h, at least MinGrace.
	Grace time.Duration
	// Quarantine is how long a file stays in quarantine before the last check and the unlink
	// (sweep_quarantine). Default 1h.
	Quarantine time.Duration
	// Interval is the least time between two pages of a walk (sweep_interval). Default 1s.
	Interval time.Duration
	// RoundPause is the pause between the end of a storage's walk and the start of its next
	// (sweep_round_pause). Default 24h.
	RoundPause time.Duration
	// BatchSize is the most entries one page of a walk reads, hence the most files of one
	// batch (sweep_batch_size). Default 256.
	BatchSize int
	// HighWater: a page is not walked while the sweeper consumer has more than this many
	// batches pending + unacknowledged. Default 100.
	HighWater uint64
	// RegistryRefresh is how long a registry snapshot is reused. Default 30s.
	RegistryRefresh time.Duration
	// AckWait must equal the sweeper consumer's AckWait, which app gives that consumer: it
	// keeps a batch whose sweep still runs in flight at a third of it.
	AckWait time.Duration
	// LeaseRenew is how often the walker renews its leases (default a third of the lease TTL).
	LeaseRenew time.Duration
	// Holder identifies this walker replica in the leases (default host name + pid).
	Holder string
	// CollectUnregistered (collect_unregistered_instances) lets the sweep reclaim the files of
	// an instance the registry no longer lists once the scanner may collect its keys
	// (pipeline.CollectableUnregistered, by the scanners' store checkpoints and
	// UnregisteredGrace, unregistered_grace), and each file's block is gone like any orphan's.
	CollectUnregistered bool
	UnregisteredGrace   time.Duration
}

// DefaultConfig returns the defaults of DESIGN §9.
func DefaultConfig() Config {
	return Config{Grace: 24 * time.Hour, Quarantine: time.Hour, Interval: time.Second, RoundPause: 24 * time.Hour,
		BatchSize: 256, HighWater: 100, RegistryRefresh: 30 * time.Second, AckWait: 60 * time.Second}
}

// Validate names the offending key.
func (c Config) Validate() error {
	var errs []error
	if c.Grace < MinGrace {
		errs = append(errs, fmt.Errorf("sweep_grace: must be >= %s, got %s", MinGrace, c.Grace))
	}
	if c.Quarantine <= 0 {
		errs = append(errs, fmt.Errorf("sweep_quarantine: must be > 0, got %s", c.Quarantine))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("sweep_interval: must be > 0, got %s", c.Interval))
	}
	if c.RoundPause < 0 {
		errs = append(errs, fmt.Errorf("sweep_round_pause: must be >= 0, got %s", c.RoundPause))
	}
	if c.BatchSize <= 0 {
		errs = append(errs, fmt.Errorf("sweep_batch_size: must be > 0, got %d", c.BatchSize))
	}
	if c.HighWater == 0 {
		errs = append(errs, errors.New("backpressure_high_water: must be > 0"))
	}
	if c.RegistryRefresh <= 0 {
		errs = append(errs, fmt.Errorf("registry_refresh: must be > 0, got %s", c.RegistryRefresh))
	}
	if c.AckWait <= 0 {
		errs = append(errs, fmt.Errorf("jetstream.sweeper_ack_wait: must be > 0, got %s", c.AckWait))
	}
	if c.CollectUnregistered && c.UnregisteredGrace <= 0 {
		errs = append(errs, fmt.Errorf("unregistered_grace: must be > 0, got %s", c.UnregisteredGrace))
	}
	for _, s := range c.Storages {
		if s == "" {
			errs = append(errs, errors.New("storage.overrides: a swept storage has an empty name"))
		}
	}
	return errors.Join(errs...)
}

// swept reports whether storage is swept.
func (c Config) swept(storage string) bool { return slices.Contains(c.Storages, storage) }
