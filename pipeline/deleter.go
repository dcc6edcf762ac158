package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
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
}

// Protocol is the deleter's per-target delete protocol (DESIGN §6).
type Protocol struct {
	Config DeleterConfig
	// KeepAlive is called while the protocol waits delete_delay, at least every third of
	// Config.AckWait, so the message stays in flight without holding a worker's slot.
	KeepAlive func()
}

// errTransient marks a failure worth a redelivery (Redis unreachable, context cancelled).
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

// Marked is a target whose location this delivery holds in DELETING (steps 1–2 done).
type Marked struct{ t *reqTarget }

// Delete runs the whole protocol for one target. Handlers with many targets use DeleteAll,
// which runs each step for all of them at once and waits delete_delay once per request.
func (p Protocol) Delete(ctx context.Context, store meta.Store, storages storage.Set, instance string, t subjects.Target) (TargetResult, error) {
	res, err := p.DeleteAll(ctx, store, storages, instance, []subjects.Target{t})
	return res[0], err
}

// Mark does steps 1–2: it checks the location's bytes against the expected bytes and CASes it
// to DELETING, re-reading on conflict. It returns a Marked location to finish, or a final
// result (a no-op, or would_delete in dry-run). A returned error is transient: the request
// must be redelivered, and the next delivery resumes where this one stopped (invariant 6).
func (p Protocol) Mark(ctx context.Context, store meta.Store, instance string, t subjects.Target) (*Marked, TargetResult, error) {
	r := p.newRequest(store, instance, []subjects.Target{t})
	r.mark(ctx)
	rt := r.targets[0]
	if rt.state == stateMarked {
		return &Marked{t: rt}, rt.res, nil
	}
	return nil, rt.res, rt.err
}

// Wait is step 3: delete_delay, the read lease for clients that already hold the URI. After a
// crash it restarts, which is only conservative.
func (p Protocol) Wait(ctx context.Context) error {
	if err := p.wait(ctx); err != nil {
		return transientError{err}
	}
	return nil
}

// Finish does steps 4–5: the re-read that finds our DELETING mark still there, the physical
// delete of every spec (best effort; "already absent" is success; shared files are never
// unlinked), then the CAD of our DELETING location. A Marked is finished once.
func (p Protocol) Finish(ctx context.Context, store meta.Store, storages storage.Set, instance string, m *Marked) (TargetResult, error) {
	t := m.t
	if t.state != stateMarked {
		return t.res, t.err
	}
	r := &request{p: p, store: batchOf(store), instance: instance, targets: []*reqTarget{t},
		blocks: []*reqBlock{{key: t.res.Target.Key, targets: []*reqTarget{t}}}}
	r.finish(ctx, storages)
	return t.res, t.err
}

func (p Protocol) wait(ctx context.Context) error {
	if p.Config.DeleteDelay <= 0 {
		return nil
	}
	every := p.Config.AckWait / 3
	if every <= 0 {
		every = time.Second
	}
	deadline := time.NewTimer(p.Config.DeleteDelay)
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
			if p.KeepAlive != nil {
				p.KeepAlive()
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
