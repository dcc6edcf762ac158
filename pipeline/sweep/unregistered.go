package sweep

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// The files of unregistered instances (collect_unregistered_instances). The scanner sends the
// deleter the keys of an instance the registry no longer lists, once kvcm-gc saw it
// registered and it has been absent for unregistered_grace, the registry read whole and
// listing its group and another instance of its store; the deleter removes them and leaves
// their files (deleter.PhysSkipSweep). The sweep then takes that instance's per-block files
// as any collected instance's, under the same conditions, read from the same durable record:
// the scanners' store checkpoints (the instances each store's last round counted
// unregistered, and when a snapshot last listed each), checked against the sweep's own
// registry snapshot (pipeline.CollectableUnregistered). A file goes only when its block is
// gone from the store, as any orphan: while the keys are there, their locations name it.
// Whatever cannot be read (the registry, a checkpoint) keeps every such file.

// newUnregReader returns the reader of stage when cfg collects unregistered instances (nil
// when it does not), or an error without the STATE bucket it reads.
func newUnregReader(
	cfg Config,
	stage string,
	state jetstream.KeyValue,
	m *Metrics,
	log *slog.Logger,
) (*unregReader, error) {
	if !cfg.CollectUnregistered {
		return nil, nil
	}
	if state == nil {
		return nil, errors.New("collect_unregistered_instances: no state bucket to read the scanners' checkpoints from")
	}
	return &unregReader{state: state, grace: cfg.UnregisteredGrace, metrics: m, log: log, stage: stage}, nil
}

// unregReader reads the scanners' store checkpoints from the STATE bucket.
type unregReader struct {
	state   jetstream.KeyValue
	grace   time.Duration
	metrics *Metrics
	log     *slog.Logger
	stage   string
}

// add returns v judging the files of the unregistered instances that registry snapshot reg
// and the checkpoints of its stores let be collected at now. A checkpoint that cannot be read
// leaves v as it is: no such file is judged.
func (u *unregReader) add(ctx context.Context, v *View, reg *meta.Registry, now time.Time) *View {
	var cks []pipeline.Checkpoint
	for _, store := range storesOf(reg) {
		ck, _, err := pipeline.ReadStoreCheckpoint(ctx, u.state, store)
		if err != nil {
			u.metrics.opError(u.stage, opScannerCheckpoint)
			u.log.Warn("read a scanner checkpoint; no file of an unregistered instance is judged", "store", store, "err", err)
			return v
		}
		cks = append(cks, ck)
	}
	ok, refused := pipeline.CollectableUnregistered(reg, nil, cks, u.grace, now)
	return v.withUnregistered(ok, refused)
}

// storesOf returns the metadata stores of the collected instances of reg, sorted: the only
// ones whose unregistered instances may be collected (another instance of the store present).
func storesOf(reg *meta.Registry) []string {
	var out []string
	for _, in := range reg.Instances {
		if !slices.Contains(out, in.Store) {
			out = append(out, in.Store)
		}
	}
	slices.Sort(out)
	return out
}
