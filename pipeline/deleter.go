package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TargetResult is the deleter's outcome for one target.
type TargetResult struct {
	Target  subjects.Target
	Outcome string // subjects.Outcome*
	Detail  string
	// PhysicalSkips counts spec URIs whose data was not unlinked, by PhysSkip* reason.
	PhysicalSkips map[string]int
	// Resumed is true when an earlier delivery had already moved the location to DELETING.
	Resumed bool
	// StorageType is the location's storage type (KVCM's name), once its data was handled.
	StorageType string
	// KeyDeleted is true on the last target of a block whose key the CAD deleted
	// (empty_block: delete): KVCM's key count still counts it.
	KeyDeleted bool
}

// Protocol is the deleter's delete protocol (DESIGN §6), run by DeleteAll for the targets of
// one request.
type Protocol struct {
	config DeleterConfig
	// keepAlive is called while the protocol waits delete_delay, at least every third of
	// config.AckWait, so the message stays in flight without holding a worker's slot.
	keepAlive func()
}

// NewProtocol returns the protocol with config c (validated by the caller, see
// DeleterConfig.Validate); keepAlive, when not nil, keeps the message in flight during
// delete_delay.
func NewProtocol(c DeleterConfig, keepAlive func()) Protocol {
	return Protocol{config: c, keepAlive: keepAlive}
}

func (p Protocol) wait(ctx context.Context) error {
	if p.config.DeleteDelay <= 0 {
		return nil
	}
	every := p.config.AckWait / 3
	if every <= 0 {
		every = time.Second
	}
	deadline := time.NewTimer(p.config.DeleteDelay)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait delete_delay: %w", ctx.Err())
		case <-deadline.C:
			return nil
		case <-tick.C:
			if p.keepAlive != nil {
				p.keepAlive()
			}
		}
	}
}

// physicalTarget parses one spec URI and finds its storage; reason says why its data must not
// (or cannot) be unlinked. A shared file (blkid, or key_count_per_file > 1) is never unlinked.
func physicalTarget(storages storage.Set, raw string) (kvcm.DataURI, storage.Backend, string) {
	u, err := kvcm.ParseDataURI(raw)
	if err != nil {
		return u, nil, PhysSkipBadURI
	}
	be, ok := storages.Lookup(u.Host)
	if !ok {
		return u, nil, PhysSkipUnknownStorage
	}
	if u.Shared() || be.KeyCountPerFile() > 1 {
		return u, nil, PhysSkipShared
	}
	return u, be, ""
}

// physicalSkip turns a storage delete's error into the reason the data was not unlinked ("" for
// none: deleted, or already absent).
func physicalSkip(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, storage.ErrShared):
		return PhysSkipShared
	case errors.Is(err, storage.ErrUnsupported):
		return PhysSkipUnsupported
	case errors.Is(err, storage.ErrDeleteDisabled), errors.Is(err, storage.ErrDryRun):
		return PhysSkipDisabled
	default:
		return PhysSkipFailed
	}
}
