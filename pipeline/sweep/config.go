package sweep

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// MinGrace is the smallest sweep_grace accepted: a file younger than it may be one a
// client is still writing for a WRITING location, and a file's age is its mtime, which a
// client's clock and a slow write can both bend.
const MinGrace = time.Hour

// Config steers the sweep of orphan data files (DESIGN §7): the walker's pace and the
// sweepers' rules. One configuration serves both stages. Its yaml and help tags are the
// configuration keys the sweep owns (config assembles them); a field tagged "-" is wiring,
// set by whoever builds the stages, most of it from keys other components own.
type Config struct {
	// Storages are the storages swept (storage.overrides.<name>.sweep: true), by global unique
	// name. None: the stages run and do nothing.
	Storages []string `yaml:"-"`
	// Grace is the least age of a file, by its mtime, before it may be judged. Default 24h, at
	// least MinGrace.
	Grace time.Duration `yaml:"sweep_grace" help:"least age of a data file, by its mtime, before the sweep judges it; at least 1h"`
	// Quarantine is how long a file stays in quarantine before the last check and the unlink.
	// Default 1h.
	Quarantine time.Duration `yaml:"sweep_quarantine" help:"how long an orphan file stays in quarantine (moved beside the data, checked again) before it is unlinked"`
	// Interval is the least time between two pages of a walk. Default 1s.
	Interval time.Duration `yaml:"sweep_interval" help:"least time between two pages of a swept storage's walk"`
	// RoundPause is the pause between the end of a storage's walk and the start of its next.
	// Default 24h.
	RoundPause time.Duration `yaml:"sweep_round_pause" help:"pause between the end of a swept storage's walk and the start of its next"`
	// BatchSize is the most entries one page of a walk reads, hence the most files of one
	// batch. Default 256.
	BatchSize int `yaml:"sweep_batch_size" help:"files one page of a walk reads, and the most files of one sweep batch"`

	// HighWater: a page is not walked while the sweeper consumer has more than this many
	// batches pending + unacknowledged (the scanner's backpressure_high_water). Default 100.
	HighWater uint64 `yaml:"-"`
	// RegistryRefresh is how long a registry snapshot is reused (the prober's
	// registry_refresh). Default 30s.
	RegistryRefresh time.Duration `yaml:"-"`
	// AckWait must equal the sweeper consumer's AckWait (jetstream.sweeper_ack_wait), which
	// app gives that consumer: it keeps a batch whose sweep still runs in flight at a third
	// of it.
	AckWait time.Duration `yaml:"-"`
	// LeaseRenew is how often the walker renews its leases (default a third of the lease TTL).
	LeaseRenew time.Duration `yaml:"-"`
	// Holder identifies this walker replica in the leases (default host name + pid).
	Holder string `yaml:"-"`
	// CollectUnregistered (the scanner's collect_unregistered_instances) lets the sweep
	// reclaim the files of an instance the registry no longer lists once the scanner may
	// collect its keys (pipeline.CollectableUnregistered, by the scanners' store checkpoints
	// and UnregisteredGrace, the scanner's unregistered_grace), and each file's block is gone
	// like any orphan's.
	CollectUnregistered bool          `yaml:"-"`
	UnregisteredGrace   time.Duration `yaml:"-"`
}

// DefaultConfig returns the defaults of DESIGN §9.
func DefaultConfig() Config {
	return Config{Grace: 24 * time.Hour, Quarantine: time.Hour, Interval: time.Second, RoundPause: 24 * time.Hour,
		BatchSize: 256, HighWater: 100, RegistryRefresh: 30 * time.Second, AckWait: 60 * time.Second}
}

// Validate checks the sweep's keys, each error naming its key. NewWalker and NewSweeper
// refuse a Config that fails it, and wiring fields out of bounds.
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
	return errors.Join(errs...)
}

// refuse adds to r the wiring fields out of bounds.
func (c Config) refuse(r *pipeline.Refusals) {
	r.Need(c.HighWater > 0, "high water must be > 0")
	r.Need(c.RegistryRefresh > 0, "registry refresh must be > 0")
	r.Need(c.AckWait > 0, "ack wait must be > 0")
	r.Need(!c.CollectUnregistered || c.UnregisteredGrace > 0, "unregistered grace must be > 0")
	r.Need(!slices.Contains(c.Storages, ""), "a swept storage has an empty name")
}

// swept reports whether storage is swept.
func (c Config) swept(storage string) bool { return slices.Contains(c.Storages, storage) }
