package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The protocol of DESIGN §6 for all targets of a request at once. Each step is one round
// trip for every block of the request instead of one per target: one batch read, one CAS per
// block, one wait, one batch re-read, the unlinks, one CAD per block. Targets of one block
// share that block's CAS and CAD: the new value applies every target's change in turn to the
// bytes read, so they never conflict with one another.

// targetState is where one target of a request stands.
type targetState int

const (
	stateOpen    targetState = iota // to be judged against the next read of its block
	stateRiding                     // changed in the next conditional write of its block
	stateMarked                     // held in DELETING by this delivery (steps 1–2 done)
	stateCleared                    // unlinked; its location goes in the next CAD of its block
	stateDone                       // res is final
)

// reqTarget is one target of a request.
type reqTarget struct {
	res      TargetResult
	state    targetState
	expected []byte
	deleting []byte         // expected with the status DELETING: the bytes our CAS writes
	loc      *kvcm.Location // the specs to unlink, once marked
	err      error          // the transient error of a target done with OutcomeError
}

// reqBlock is one block of a request with its targets in request order, and its bytes as
// last read or written (cur), which the next conditional write expects. blk, when not nil,
// is cur decoded.
type reqBlock struct {
	key     int64
	targets []*reqTarget
	cur     []byte
	blk     *kvcm.Block
}

func (t *reqTarget) finish(outcome, detail string) {
	t.res.Outcome, t.res.Detail, t.state = outcome, detail, stateDone
}

// fail ends the target with a transient error: the request will be redelivered and the next
// delivery resumes from what Redis holds then (invariant 6).
func (t *reqTarget) fail(err error) {
	t.err = transientError{err}
	t.finish(subjects.OutcomeError, err.Error())
}

func (b *reqBlock) each(s targetState, f func(t *reqTarget)) {
	for _, t := range b.targets {
		if t.state == s {
			f(t)
		}
	}
}

// clears reports whether a target of the block already clears location id.
func (b *reqBlock) clears(id string) bool {
	for _, t := range b.targets {
		if t.state == stateCleared && t.res.Target.Location == id {
			return true
		}
	}
	return false
}

func (b *reqBlock) has(s targetState) bool {
	for _, t := range b.targets {
		if t.state == s {
			return true
		}
	}
	return false
}

// request is the protocol's state for the targets of one request.
type request struct {
	p        Protocol
	store    meta.BatchStore
	instance string
	targets  []*reqTarget
	blocks   []*reqBlock // in order of first appearance
}

func (p Protocol) newRequest(store meta.Store, instance string, targets []subjects.Target) *request {
	r := &request{p: p, store: batchOf(store), instance: instance, targets: make([]*reqTarget, len(targets))}
	ts := make([]reqTarget, len(targets))
	var byKey map[int64]*reqBlock
	if len(targets) > 1 {
		byKey = make(map[int64]*reqBlock, len(targets))
	}
	for i, tg := range targets {
		t := &ts[i]
		t.res, t.expected = TargetResult{Target: tg}, []byte(tg.Expected)
		r.targets[i] = t
		b := byKey[tg.Key]
		if b == nil {
			b = &reqBlock{key: tg.Key}
			if byKey != nil {
				byKey[tg.Key] = b
			}
			r.blocks = append(r.blocks, b)
		}
		b.targets = append(b.targets, t)
		// The bytes our own CAS writes: only the status token differs. Seeing them on a
		// redelivery means an earlier delivery got past step 2.
		var err error
		if t.deleting, err = kvcm.LocationWithStatus(t.expected, kvcm.StatusDeleting); err != nil {
			t.finish(subjects.OutcomeNoopMismatch, fmt.Sprintf("expected bytes unusable: %v", err))
		}
	}
	return r
}

// DeleteAll runs the whole protocol for every target of one request, pipelined across its
// blocks, and waits delete_delay once. It returns one result per target, in order. The error
// joins the transient failures (their targets have OutcomeError): the request must be
// redelivered, and the next delivery resumes where this one stopped (invariant 6).
func (p Protocol) DeleteAll(ctx context.Context, store meta.Store, storages storage.Set, instance string, targets []subjects.Target) ([]TargetResult, error) {
	r := p.newRequest(store, instance, targets)
	r.mark(ctx)
	var waitErr error
	if r.any(stateMarked) {
		// One delete_delay per request, not per target.
		if waitErr = p.Wait(ctx); waitErr != nil {
			for _, t := range r.targets {
				if t.state == stateMarked { // resumed from DELETING on the redelivery
					t.finish(subjects.OutcomeError, waitErr.Error())
				}
			}
		}
	}
	r.finish(ctx, storages)
	out := make([]TargetResult, len(r.targets))
	errs := []error{waitErr}
	for i, t := range r.targets {
		out[i] = t.res
		errs = append(errs, t.err)
	}
	return out, errors.Join(errs...)
}

func (r *request) any(s targetState) bool {
	for _, t := range r.targets {
		if t.state == s {
			return true
		}
	}
	return false
}

// read reads the blocks' current bytes into cur and blk, and returns the blocks it could
// read. A block that could not be read fails every target of it in state s.
func (r *request) read(ctx context.Context, blocks []*reqBlock, s ...targetState) []*reqBlock {
	if len(blocks) == 0 {
		return nil
	}
	keys := make([]int64, len(blocks))
	for i, b := range blocks {
		keys[i] = b.key
	}
	reads, err := r.store.GetURIs(ctx, r.instance, keys)
	out := blocks[:0:0]
	for i, b := range blocks {
		rerr := err
		if rerr == nil {
			rerr = reads[i].Err
		}
		if rerr != nil {
			for _, st := range s {
				b.each(st, func(t *reqTarget) { t.fail(fmt.Errorf("read block %d: %w", b.key, rerr)) })
			}
			continue
		}
		uri := reads[i].URI
		switch {
		case uri == nil:
			b.cur, b.blk = nil, nil
		case b.blk != nil && bytes.Equal(uri, b.cur):
			// Unchanged since the last read (a resumed mark): decoded already.
		default:
			// A corrupt block leaves blk nil: nothing in it is ours to change.
			b.cur = uri
			b.blk, _ = kvcm.DecodeBlock(uri)
		}
		out = append(out, b)
	}
	return out
}

// mark does steps 1–2 for every open target: it judges each against its block's bytes and
// CASes the block to DELETING, re-reading and retrying only the blocks that conflicted
// (CASRetries attempts in all, as for a single target).
func (r *request) mark(ctx context.Context) {
	var pending []*reqBlock
	for _, b := range r.blocks {
		if b.has(stateOpen) {
			pending = append(pending, b)
		}
	}
	for attempt := 1; len(pending) > 0; attempt++ {
		var writes []meta.CondWrite
		var written []*reqBlock
		for _, b := range r.read(ctx, pending, stateOpen) {
			if next := b.judge(); next != nil {
				writes = append(writes, meta.CondWrite{BlockKey: b.key, Expected: b.cur, Next: next})
				written = append(written, b)
			}
		}
		pending = nil
		if len(writes) == 0 {
			return
		}
		errs, err := r.store.CASMany(ctx, r.instance, writes)
		for i, b := range written {
			werr := err
			if werr == nil {
				werr = errs[i]
			}
			switch {
			case werr == nil:
				// loc still describes the specs; only its status changed.
				b.each(stateRiding, func(t *reqTarget) { t.state = stateMarked })
				b.cur, b.blk = writes[i].Next, nil
			case errors.Is(werr, meta.ErrDryRun):
				b.each(stateRiding, func(t *reqTarget) {
					t.finish(subjects.OutcomeWouldDelete, "dry-run: CAS refused by the store")
				})
			case errors.Is(werr, meta.ErrConflict) && attempt < r.p.Config.CASRetries:
				b.each(stateRiding, func(t *reqTarget) { t.state, t.loc, t.res.Resumed = stateOpen, nil, false })
				pending = append(pending, b)
			case errors.Is(werr, meta.ErrConflict):
				// The block keeps changing; the next round judges it again.
				b.each(stateRiding, func(t *reqTarget) {
					t.finish(subjects.OutcomeNoopMismatch, fmt.Sprintf("CAS conflict %d times", attempt))
				})
			default:
				b.each(stateRiding, func(t *reqTarget) { t.fail(fmt.Errorf("cas block %d: %w", b.key, werr)) })
			}
		}
	}
}

// judge is step 1 for the open targets of a block just read, in request order, each against
// the bytes the targets before it would leave. A target already in our DELETING form is
// marked at once (a redelivery after our own CAS); one still in its expected form rides on
// the block's CAS, whose new value judge returns (nil: nothing to write).
func (b *reqBlock) judge() []byte {
	if b.cur == nil {
		b.each(stateOpen, func(t *reqTarget) { t.finish(subjects.OutcomeNoopGone, "before CAS") })
		return nil
	}
	if b.blk == nil {
		b.each(stateOpen, func(t *reqTarget) { t.finish(subjects.OutcomeNoopMismatch, "before CAS") })
		return nil
	}
	var next []byte
	blk := b.blk
	b.each(stateOpen, func(t *reqTarget) {
		if blk == nil {
			// What the targets before this one leave, decoded only when a target follows.
			var err error
			if blk, err = kvcm.DecodeBlock(next); err != nil {
				t.finish(subjects.OutcomeNoopMismatch, fmt.Sprintf("re-encode: %v", err))
				return
			}
		}
		l, ok := blk.Find(t.res.Target.Location)
		switch {
		case !ok:
			t.finish(subjects.OutcomeNoopGone, "before CAS")
		case bytes.Equal(l.Raw, t.deleting):
			t.loc = l
			if stored, _ := b.blk.Find(t.res.Target.Location); stored != nil && bytes.Equal(stored.Raw, t.deleting) {
				// Our DELETING from an earlier delivery: marked whatever the block's CAS does.
				t.state, t.res.Resumed = stateMarked, true
			} else {
				t.state = stateRiding // a repeated target, marked by its first copy's CAS
			}
		case !bytes.Equal(l.Raw, t.expected):
			// Invariant 1: a concurrent FinishWrite, refresh or another deleter won.
			t.finish(subjects.OutcomeNoopMismatch, "location changed since it was judged")
		default:
			nb, err := blk.WithStatus(t.res.Target.Location, kvcm.StatusDeleting)
			if err != nil {
				t.finish(subjects.OutcomeNoopMismatch, fmt.Sprintf("re-encode: %v", err))
				return
			}
			t.loc, t.state = l, stateRiding
			next, blk = nb, nil
		}
	})
	return next
}

// finish does steps 4–5 for every marked target: one re-read of their blocks, the physical
// deletes of those whose mark is still there, then one CAD per block.
func (r *request) finish(ctx context.Context, storages storage.Set) {
	var blocks []*reqBlock
	for _, b := range r.blocks {
		if b.has(stateMarked) {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 0 {
		return
	}
	// Re-read after the delay, as KVCM's own delete task does: if our DELETING mark is no
	// longer there (KVCM finished the write anyway, or someone removed it), the data may be
	// in use again and must not be unlinked. The same read serves the first CAD attempt.
	var cleared []*reqTarget
	for _, b := range r.read(ctx, blocks, stateMarked) {
		const detail = "location changed after CAS; data left in place"
		b.each(stateMarked, func(t *reqTarget) {
			var l *kvcm.Location
			ok := b.blk != nil
			if ok {
				l, ok = b.blk.Find(t.res.Target.Location)
			}
			switch {
			case b.cur != nil && b.blk == nil:
				t.finish(subjects.OutcomeNoopMismatch, detail)
			case !ok || b.clears(t.res.Target.Location):
				// Gone, or a repeated target whose first copy deletes it.
				t.finish(subjects.OutcomeNoopGone, detail)
			case !bytes.Equal(l.Raw, t.deleting):
				t.finish(subjects.OutcomeNoopMismatch, detail)
			default:
				t.state = stateCleared
				cleared = append(cleared, t)
			}
		})
	}
	r.unlink(ctx, storages, cleared)
	r.cad(ctx, blocks)
}

// unlink is step 4 for the cleared targets: the physical delete of every spec, best effort
// ("already absent" is success; shared files are never unlinked), grouped by storage.
func (r *request) unlink(ctx context.Context, storages storage.Set, cleared []*reqTarget) {
	type job struct {
		t      *reqTarget
		u      kvcm.DataURI
		reason string
	}
	var jobs []job
	byBackend := map[string][]int{} // job indexes by storage name
	var order []string
	for _, t := range cleared {
		for _, spec := range t.loc.Specs {
			u, be, reason := physicalTarget(storages, spec.URI)
			jobs = append(jobs, job{t: t, u: u, reason: reason})
			if reason != "" {
				continue
			}
			if _, ok := byBackend[be.Name()]; !ok {
				order = append(order, be.Name())
			}
			byBackend[be.Name()] = append(byBackend[be.Name()], len(jobs)-1)
		}
	}
	// A storage's files are deleted in one DeleteMany call per chunk (one root per directory
	// for the chunk), chunks of all storages spread over Parallelism workers, this goroutine
	// one of them. Contiguous chunks keep a target's directories together.
	type chunk struct {
		be  storage.Backend
		idx []int
	}
	var chunks []chunk
	workers := max(r.p.Config.Parallelism, 1)
	for _, name := range order {
		be, _ := storages.Lookup(name)
		idx := byBackend[name]
		size := max(minUnlinkChunk, (len(idx)+workers-1)/workers)
		for len(idx) > 0 {
			n := min(size, len(idx))
			chunks = append(chunks, chunk{be: be, idx: idx[:n]})
			idx = idx[n:]
		}
	}
	var next atomic.Int64
	work := func() {
		for c := int(next.Add(1)) - 1; c < len(chunks); c = int(next.Add(1)) - 1 {
			ch := chunks[c]
			uris := make([]kvcm.DataURI, len(ch.idx))
			for k, i := range ch.idx {
				uris[k] = jobs[i].u
			}
			for k, err := range deleteMany(ctx, ch.be, uris) {
				jobs[ch.idx[k]].reason = physicalSkip(err)
			}
		}
	}
	var wg sync.WaitGroup
	for range min(workers, len(chunks)) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	for _, j := range jobs {
		if j.reason == "" {
			continue
		}
		if j.t.res.PhysicalSkips == nil {
			j.t.res.PhysicalSkips = map[string]int{}
		}
		j.t.res.PhysicalSkips[j.reason]++
	}
}

// minUnlinkChunk: fewer files than this are not worth another goroutine and another set of
// directory roots.
const minUnlinkChunk = 32

// deleteMany deletes uris through be, in one call when it can.
func deleteMany(ctx context.Context, be storage.Backend, uris []kvcm.DataURI) []error {
	if bd, ok := be.(storage.BatchDeleter); ok {
		return bd.DeleteMany(ctx, uris)
	}
	errs := make([]error, len(uris))
	for i, u := range uris {
		errs[i] = be.Delete(ctx, u)
	}
	return errs
}

// cad is step 5: per block, one CAD of the bytes last read to those bytes without every
// cleared location (an empty result deletes the key). A conflict re-reads the block and
// retries with what is still ours.
func (r *request) cad(ctx context.Context, blocks []*reqBlock) {
	for attempt := 1; ; attempt++ {
		var writes []meta.CondWrite
		var written []*reqBlock
		for _, b := range blocks {
			if next, ok := b.without(); ok {
				writes = append(writes, meta.CondWrite{BlockKey: b.key, Expected: b.cur, Next: next})
				written = append(written, b)
			}
		}
		if len(writes) == 0 {
			return
		}
		errs, err := r.store.CADMany(ctx, r.instance, writes)
		var retry []*reqBlock
		for i, b := range written {
			werr := err
			if werr == nil {
				werr = errs[i]
			}
			switch {
			case werr == nil:
				b.each(stateCleared, (*reqTarget).deleted)
			case errors.Is(werr, meta.ErrConflict) && attempt < r.p.Config.CASRetries:
				retry = append(retry, b)
			default:
				// A conflict storm or an outage: the redelivery resumes from DELETING.
				b.each(stateCleared, func(t *reqTarget) { t.fail(fmt.Errorf("cad block %d: %w", b.key, werr)) })
			}
		}
		blocks = nil
		for _, b := range r.read(ctx, retry, stateCleared) {
			b.each(stateCleared, func(t *reqTarget) {
				var l *kvcm.Location
				ok := b.blk != nil
				if ok {
					l, ok = b.blk.Find(t.res.Target.Location)
				}
				switch {
				case b.cur == nil || (b.blk != nil && !ok):
					t.deleted() // someone else finished the job
				case b.blk == nil || !bytes.Equal(l.Raw, t.deleting):
					// Rewritten after the unlink (e.g. KVCM's unconditional FinishWrite): left as it is.
					t.finish(subjects.OutcomeNoopMismatch, "location changed after CAS")
				}
			})
			blocks = append(blocks, b)
		}
	}
}

// without returns the block's last-read bytes without every cleared location, removed in
// request order (next is nil when no location remains: the CAD deletes the key); ok is
// false when the block has nothing to remove.
func (b *reqBlock) without() (next []byte, ok bool) {
	blk, next := b.blk, b.cur
	b.each(stateCleared, func(t *reqTarget) {
		id := t.res.Target.Location
		if blk == nil && next != nil {
			// What the targets before this one leave, decoded only when a target follows.
			var err error
			if blk, err = kvcm.DecodeBlock(next); err != nil {
				t.fail(fmt.Errorf("re-encode without %s: %w", id, err))
				return
			}
		}
		if blk == nil {
			t.fail(fmt.Errorf("re-encode without %s: no location left", id))
			return
		}
		out, empty, err := blk.Without(id)
		if err != nil {
			t.fail(fmt.Errorf("re-encode without %s: %w", id, err))
			return
		}
		ok, next, blk = true, out, nil
		if empty {
			next = nil
		}
	})
	return next, ok
}

// deleted ends a target whose location is gone from the metadata.
func (t *reqTarget) deleted() {
	outcome := subjects.OutcomeDeleted
	for _, r := range []string{PhysSkipFailed, PhysSkipUnknownStorage, PhysSkipBadURI, PhysSkipUnsupported} {
		if t.res.PhysicalSkips[r] > 0 {
			outcome = subjects.OutcomePartial
		}
	}
	t.res.Outcome, t.state = outcome, stateDone
}

// batchOf returns the store's batch methods, or the single-block methods one after the other
// for a store without them (a wrapper that injects faults into one method keeps working).
func batchOf(s meta.Store) meta.BatchStore {
	if b, ok := s.(meta.BatchStore); ok {
		return b
	}
	return oneByOne{s}
}

type oneByOne struct{ meta.Store }

func (o oneByOne) GetURIs(ctx context.Context, instance string, keys []int64) ([]meta.URIRead, error) {
	out := make([]meta.URIRead, len(keys))
	for i, k := range keys {
		uri, ok, err := o.GetURI(ctx, instance, k)
		if ok {
			out[i].URI = uri
		}
		out[i].Err = err
	}
	return out, nil
}

func (o oneByOne) CASMany(ctx context.Context, instance string, ws []meta.CondWrite) ([]error, error) {
	errs := make([]error, len(ws))
	for i, w := range ws {
		errs[i] = o.CAS(ctx, instance, w.BlockKey, w.Expected, w.Next)
	}
	return errs, nil
}

func (o oneByOne) CADMany(ctx context.Context, instance string, ws []meta.CondWrite) ([]error, error) {
	errs := make([]error, len(ws))
	for i, w := range ws {
		errs[i] = o.CAD(ctx, instance, w.BlockKey, w.Expected, w.Next)
	}
	return errs, nil
}
