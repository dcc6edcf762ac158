package pipeline

import (
	"bytes"
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
type Marked struct {
	res      TargetResult
	loc      *kvcm.Location
	deleting []byte
}

// Delete runs the whole protocol for one target. Handlers with many targets use Mark for
// each, one Wait, then Finish for each, so delete_delay is waited once per request.
func (p Protocol) Delete(ctx context.Context, store meta.Store, storages storage.Set, instance string, t subjects.Target) (TargetResult, error) {
	m, res, err := p.Mark(ctx, store, instance, t)
	if err != nil || m == nil {
		return res, err
	}
	if err := p.Wait(ctx); err != nil {
		return m.res, err
	}
	return p.Finish(ctx, store, storages, instance, m)
}

// Mark does steps 1–2: it checks the location's bytes against the expected bytes and CASes it
// to DELETING, re-reading on conflict. It returns a Marked location to finish, or a final
// result (a no-op, or would_delete in dry-run). A returned error is transient: the request
// must be redelivered, and the next delivery resumes where this one stopped (invariant 6).
func (p Protocol) Mark(ctx context.Context, store meta.Store, instance string, t subjects.Target) (*Marked, TargetResult, error) {
	res := TargetResult{Target: t}
	expected := []byte(t.Expected)
	// The bytes our own CAS writes: only the status token differs. Seeing them on a
	// redelivery means an earlier delivery got past step 2.
	deleting, err := kvcm.LocationWithStatus(expected, kvcm.StatusDeleting)
	if err != nil {
		res.Outcome, res.Detail = subjects.OutcomeNoopMismatch, fmt.Sprintf("expected bytes unusable: %v", err)
		return nil, res, nil
	}
	for attempt := 1; ; attempt++ {
		cur, blk, l, outcome, err := p.read(ctx, store, instance, t)
		if err != nil {
			return nil, res, err
		}
		if outcome != "" {
			res.Outcome, res.Detail = outcome, "before CAS"
			return nil, res, nil
		}
		if bytes.Equal(l.Raw, deleting) {
			res.Resumed = true
			return &Marked{res: res, loc: l, deleting: deleting}, res, nil
		}
		if !bytes.Equal(l.Raw, expected) {
			// Invariant 1: a concurrent FinishWrite, refresh or another deleter won.
			res.Outcome, res.Detail = subjects.OutcomeNoopMismatch, "location changed since it was judged"
			return nil, res, nil
		}
		next, err := blk.WithStatus(t.Location, kvcm.StatusDeleting)
		if err != nil {
			res.Outcome, res.Detail = subjects.OutcomeNoopMismatch, fmt.Sprintf("re-encode: %v", err)
			return nil, res, nil
		}
		err = store.CAS(ctx, instance, t.Key, cur, next)
		switch {
		case err == nil:
			// l still describes the specs; only its status changed.
			return &Marked{res: res, loc: l, deleting: deleting}, res, nil
		case errors.Is(err, meta.ErrDryRun):
			res.Outcome, res.Detail = subjects.OutcomeWouldDelete, "dry-run: CAS refused by the store"
			return nil, res, nil
		case errors.Is(err, meta.ErrConflict) && attempt < p.Config.CASRetries:
			continue
		case errors.Is(err, meta.ErrConflict):
			// The block keeps changing; the next round judges it again.
			res.Outcome, res.Detail = subjects.OutcomeNoopMismatch, fmt.Sprintf("CAS conflict %d times", attempt)
			return nil, res, nil
		default:
			return nil, res, transientError{fmt.Errorf("cas block %d: %w", t.Key, err)}
		}
	}
}

// Wait is step 3: delete_delay, the read lease for clients that already hold the URI. After a
// crash it restarts, which is only conservative.
func (p Protocol) Wait(ctx context.Context) error {
	if err := p.wait(ctx); err != nil {
		return transientError{err}
	}
	return nil
}

// Finish does steps 4–5: the physical delete of every spec (best effort; "already absent" is
// success; shared files are never unlinked), then the CAD of our DELETING location.
func (p Protocol) Finish(ctx context.Context, store meta.Store, storages storage.Set, instance string, m *Marked) (TargetResult, error) {
	res, t := m.res, m.res.Target
	// Re-read after the delay, as KVCM's own delete task does: if our DELETING mark is no
	// longer there (KVCM finished the write anyway, or someone removed it), the data may be
	// in use again and must not be unlinked. The same read serves the first CAD attempt.
	cur, blk, l, outcome, err := p.read(ctx, store, instance, t)
	if err != nil {
		return res, err
	}
	if outcome != "" || !bytes.Equal(l.Raw, m.deleting) {
		if outcome == "" {
			outcome = subjects.OutcomeNoopMismatch
		}
		res.Outcome, res.Detail = outcome, "location changed after CAS; data left in place"
		return res, nil
	}
	res.PhysicalSkips = map[string]int{}
	for _, spec := range m.loc.Specs {
		if reason := physicalDelete(ctx, storages, spec.URI); reason != "" {
			res.PhysicalSkips[reason]++
		}
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if cur, blk, l, outcome, err = p.read(ctx, store, instance, t); err != nil {
				return res, err
			}
			if outcome == subjects.OutcomeNoopGone {
				break // someone else finished the job
			}
			if outcome != "" || !bytes.Equal(l.Raw, m.deleting) {
				// Rewritten after the unlink (e.g. KVCM's unconditional FinishWrite): left as it is.
				res.Outcome, res.Detail = subjects.OutcomeNoopMismatch, "location changed after CAS"
				return res, nil
			}
		}
		next, empty, err := blk.Without(t.Location)
		if err != nil {
			return res, transientError{fmt.Errorf("re-encode without %s: %w", t.Location, err)}
		}
		if empty {
			next = nil
		}
		err = store.CAD(ctx, instance, t.Key, cur, next)
		if err == nil {
			break
		}
		if errors.Is(err, meta.ErrConflict) && attempt < p.Config.CASRetries {
			continue
		}
		// A conflict storm or an outage: the redelivery resumes from DELETING.
		return res, transientError{fmt.Errorf("cad block %d: %w", t.Key, err)}
	}
	res.Outcome = subjects.OutcomeDeleted
	for _, r := range []string{PhysSkipFailed, PhysSkipUnknownStorage, PhysSkipBadURI, PhysSkipUnsupported} {
		if res.PhysicalSkips[r] > 0 {
			res.Outcome = subjects.OutcomePartial
		}
	}
	return res, nil
}

// read returns the block's current bytes and the target location, or a no-op outcome.
func (p Protocol) read(ctx context.Context, store meta.Store, instance string, t subjects.Target) ([]byte, *kvcm.Block, *kvcm.Location, string, error) {
	cur, ok, err := store.GetURI(ctx, instance, t.Key)
	if err != nil {
		return nil, nil, nil, "", transientError{fmt.Errorf("read block %d: %w", t.Key, err)}
	}
	if !ok {
		return nil, nil, nil, subjects.OutcomeNoopGone, nil
	}
	blk, err := kvcm.DecodeBlock(cur)
	if err != nil {
		return nil, nil, nil, subjects.OutcomeNoopMismatch, nil
	}
	l, ok := blk.Find(t.Location)
	if !ok {
		return nil, nil, nil, subjects.OutcomeNoopGone, nil
	}
	return cur, blk, l, "", nil
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

// physicalDelete removes the data behind one spec URI and returns why it did not, if it did
// not. A shared file (blkid, or key_count_per_file > 1) is never unlinked.
func physicalDelete(ctx context.Context, storages storage.Set, raw string) string {
	u, err := kvcm.ParseDataURI(raw)
	if err != nil {
		return PhysSkipBadURI
	}
	be, ok := storages.Lookup(u.Host)
	if !ok {
		return PhysSkipUnknownStorage
	}
	if u.Shared() || be.KeyCountPerFile() > 1 {
		return PhysSkipShared
	}
	err = be.Delete(ctx, u)
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
