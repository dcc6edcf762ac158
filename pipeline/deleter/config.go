package deleter

import (
	"errors"
	"fmt"
	"time"
)

// Config steers the deleter (DESIGN §6). Its yaml and help tags are the configuration keys
// the deleter owns (config assembles them); a field tagged "-" is wiring, set by whoever builds
// the deleter.
type Config struct {
	// DeleteDelay is the read lease between the CAS to DELETING and the physical delete. Default 0.
	DeleteDelay time.Duration `yaml:"delete_delay" help:"read lease between marking a location DELETING and deleting its data"`
	// CASRetries is how many times a conflicting CAS/CAD re-reads and retries. Default 3.
	CASRetries int `yaml:"cas_retries" help:"attempts of a compare-and-swap that lost to a concurrent write"`
	// Duty (delete_duty; 0: off) is the share of each metadata store's time this process's
	// reads and conditional writes may take: after a pipeline that took t from its send to
	// its last reply, the next waits (1−duty)/duty × t (pace.go, DESIGN §6.9). Default
	// DefaultDuty.
	Duty float64 `yaml:"delete_duty" help:"share of each metadata store's time this deleter's reads and conditional writes may take: after a pipeline that took t from send to last reply, the next waits (1-duty)/duty x t (0: off)"`

	// AckWait must equal the consumer's AckWait (jetstream.deleter_ack_wait), which app gives
	// the deleter's consumer: it keeps a message whose handler still runs (delete_delay) in
	// flight at a third of it.
	AckWait time.Duration `yaml:"-"`
	// UnlinkWorkers is how many goroutines unlink the data files of one request at once
	// (each with a chunk of at least 32 files). Default 16.
	UnlinkWorkers int `yaml:"-"`
}

// KeepFor is how long the deleter's consumer keeps a request in flight while its handler
// runs: delete_delay, which the protocol waits on purpose, plus one AckWait of work. A
// handler that runs longer is taken for hung: the server redelivers the request one AckWait
// later, and at the last delivery dead-letters it (DESIGN §3.5).
func (c Config) KeepFor() time.Duration {
	return c.DeleteDelay + c.AckWait
}

// DefaultDuty is delete_duty's default: the scanner's (scanner.duty), so that a store's walk
// and its deletes together keep Redis busy at most a fifth of the time.
const DefaultDuty = 0.1

// DefaultConfig returns the deleter's defaults.
func DefaultConfig() Config {
	return Config{CASRetries: 3, Duty: DefaultDuty, AckWait: 60 * time.Second, UnlinkWorkers: 16}
}

// Validate checks the deleter's keys, each error naming its key. New refuses a Config that
// fails it, and wiring fields out of bounds.
func (c Config) Validate() error {
	var errs []error
	if c.DeleteDelay < 0 {
		errs = append(errs, fmt.Errorf("delete_delay: must be >= 0, got %s", c.DeleteDelay))
	}
	if c.CASRetries < 1 {
		errs = append(errs, fmt.Errorf("cas_retries: must be >= 1, got %d", c.CASRetries))
	}
	if !(c.Duty >= 0 && c.Duty <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("delete_duty: must be between 0 (off) and 1, got %g", c.Duty))
	}
	return errors.Join(errs...)
}
