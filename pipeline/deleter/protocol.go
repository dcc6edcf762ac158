package deleter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The protocol of DESIGN §6 for all targets of a request at once. Each step is one round
// trip for every block of the request instead of one per target: one batch read, one CAS per
// cell, one wait, one batch re-read, the unlinks, one CAD per cell.
//
// A cell is what one conditional write compares and replaces: in the legacy layout the
// block's whole __uri__ (every target of the block shares it: the new value applies every
// target's change in turn to the bytes read, so they never conflict with one another), in the
// location layout one field L#<id> (one target). A target is only ever judged and written in
// the layout it was judged in (DESIGN §8.9).

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
	config Config
}

// NewProtocol returns the protocol with config c (validated by the caller, see
// Config.Validate). The consumer keeps the message in flight meanwhile
// (ConsumerConfig.AckWait), through delete_delay too.
func NewProtocol(c Config) Protocol {
	return Protocol{config: c}
}

// wait waits delete_delay, or until ctx is done.
func (p Protocol) wait(ctx context.Context) error {
	if p.config.DeleteDelay <= 0 {
		return nil
	}
	deadline := time.NewTimer(p.config.DeleteDelay)
	defer deadline.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("wait delete_delay: %w", ctx.Err())
	case <-deadline.C:
		return nil
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

// targetState is where one target of a request stands.
type targetState int

const (
	stateOpen    targetState = iota // to be judged against the next read of its cell
	stateRiding                     // changed in the next conditional write of its cell
	stateMarked                     // held in DELETING by this delivery (steps 1–2 done)
	stateCleared                    // unlinked; its location goes in the next CAD of its cell
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
	// stuck is a stuck-DELETING target: its expected bytes are DELETING already (no CAS), and
	// its data is unlinked only where the name cannot have been reused.
	stuck bool
}

// cellState is what the last read or write of a cell found in it.
type cellState uint8

const (
	cellUnread  cellState = iota // not read yet
	cellGone                     // the key or its field is absent
	cellChanged                  // the key is in another layout than the cell's (or one the store refuses)
	cellCorrupt                  // the bytes do not decode: nothing in them is ours to change
	cellWritten                  // the bytes our conditional write left, not decoded
	cellDecoded                  // the bytes decode: val
)

// reqCell is one cell of a request with its targets in request order, and its bytes as last
// read or written (cur: cellCorrupt, cellWritten, cellDecoded), which the next conditional write
// expects. val is cur decoded (cellDecoded); entry is the whole block as last read.
type reqCell struct {
	key      int64
	layout   kvcm.Layout
	location string // location layout: the field's location id
	targets  []*reqTarget
	state    cellState
	cur      []byte
	val      cellValue
	entry    *meta.Entry
}

// set records what the cell holds now.
func (c *reqCell) set(s cellState, cur []byte, val cellValue) {
	c.state, c.cur, c.val = s, cur, val
}

func (t *reqTarget) finish(outcome, detail string) {
	t.res.Outcome, t.res.Detail, t.state = outcome, detail, stateDone
}

// fail ends the target with a transient error: the request will be redelivered and the next
// delivery resumes from what Redis holds then (invariant 6).
func (t *reqTarget) fail(err error) {
	t.err = err
	t.finish(subjects.OutcomeError, err.Error())
}

func (c *reqCell) each(s targetState, f func(t *reqTarget)) {
	for _, t := range c.targets {
		if t.state == s {
			f(t)
		}
	}
}

// clears reports whether a target of the cell already clears location id.
func (c *reqCell) clears(id string) bool {
	for _, t := range c.targets {
		if t.state == stateCleared && t.res.Target.Location == id {
			return true
		}
	}
	return false
}

func (c *reqCell) has(s targetState) bool {
	for _, t := range c.targets {
		if t.state == s {
			return true
		}
	}
	return false
}

// request is the protocol's state for the targets of one request.
type request struct {
	p        Protocol
	store    meta.Store
	instance string
	targets  []*reqTarget
	cells    []*reqCell // in order of first appearance
}

func (p Protocol) newRequest(store meta.Store, instance string, targets []subjects.Target) *request {
	r := &request{p: p, store: store, instance: instance, targets: make([]*reqTarget, len(targets))}
	ts := make([]reqTarget, len(targets))
	type cellKey struct {
		key int64
		loc string // "" for a legacy cell
	}
	var byKey map[cellKey]*reqCell
	if len(targets) > 1 {
		byKey = make(map[cellKey]*reqCell, len(targets))
	}
	for i, tg := range targets {
		t := &ts[i]
		t.res, t.expected = TargetResult{Target: tg}, []byte(tg.Expected)
		r.targets[i] = t
		layout, ck := kvcm.LayoutLegacy, cellKey{key: tg.Key}
		if tg.Layout == subjects.LayoutLocation {
			layout, ck.loc = kvcm.LayoutLocation, tg.Location
		}
		c := byKey[ck]
		if c == nil {
			c = &reqCell{key: tg.Key, layout: layout, location: ck.loc}
			if byKey != nil {
				byKey[ck] = c
			}
			r.cells = append(r.cells, c)
		}
		c.targets = append(c.targets, t)
		// The bytes our own CAS writes: only the status token differs. Seeing them on a
		// redelivery means an earlier delivery got past step 2.
		var err error
		if t.deleting, err = kvcm.LocationWithStatus(t.expected, kvcm.StatusDeleting); err != nil {
			t.finish(subjects.OutcomeNoopMismatch, fmt.Sprintf("expected bytes unusable: %v", err))
		}
		if t.stuck = tg.Reason == subjects.ReasonStuckDeleting; t.stuck && t.state == stateOpen &&
			!bytes.Equal(t.deleting, t.expected) {
			t.finish(subjects.OutcomeNoopMismatch, "a stuck_deleting target whose judged bytes are not DELETING")
		}
	}
	return r
}

// DeleteAll runs the whole protocol for every target of one request, pipelined across its
// cells, and waits delete_delay once. It returns one result per target, in order. The error
// joins the transient failures (their targets have OutcomeError): the request must be
// redelivered, and the next delivery resumes where this one stopped (invariant 6).
func (p Protocol) DeleteAll(
	ctx context.Context,
	store meta.Store,
	storages storage.Set,
	instance string,
	targets []subjects.Target,
) ([]TargetResult, error) {
	r := p.newRequest(store, instance, targets)
	r.mark(ctx)
	var waitErr error
	if r.any(stateMarked) {
		// One delete_delay per request, not per target.
		if waitErr = p.wait(ctx); waitErr != nil {
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

// read reads the cells' blocks whole (one read per block) into cur, val and entry, and
// returns the cells it could read. A cell that could not be read fails every target of it in
// state s. A block no longer in the cell's layout reads as cellChanged: nothing in it is ours
// to change any more.
func (r *request) read(ctx context.Context, cells []*reqCell, s ...targetState) []*reqCell {
	if len(cells) == 0 {
		return nil
	}
	index := make(map[int64]int, len(cells))
	var keys []int64
	for _, c := range cells {
		if _, ok := index[c.key]; !ok {
			index[c.key] = len(keys)
			keys = append(keys, c.key)
		}
	}
	reads, err := r.store.ReadBlocks(ctx, r.instance, keys)
	out := cells[:0:0]
	for _, c := range cells {
		var rd *meta.BlockRead
		rerr := err
		if rerr == nil {
			rd = &reads[index[c.key]]
			rerr = rd.Err
		}
		if errors.Is(rerr, meta.ErrLayout) {
			// A layout this store refuses (a legacy key outside DB 0): as a changed cell.
			c.set(cellChanged, nil, nil)
			c.entry = nil
			out = append(out, c)
			continue
		}
		if rerr != nil {
			for _, st := range s {
				c.each(st, func(t *reqTarget) { t.fail(fmt.Errorf("read block %d: %w", c.key, rerr)) })
			}
			continue
		}
		c.load(&rd.Entry)
		out = append(out, c)
	}
	return out
}

// load sets the cell from its block as read whole.
func (c *reqCell) load(e *meta.Entry) {
	c.entry = e
	cur, present, sameLayout := c.field(e)
	switch {
	case !sameLayout:
		c.set(cellChanged, nil, nil)
	case !present:
		c.set(cellGone, nil, nil)
	case c.state == cellDecoded && bytes.Equal(cur, c.cur):
		// Unchanged since the last read (a resumed mark): decoded already.
	default:
		if val := decodeCell(c, cur); val != nil {
			c.set(cellDecoded, cur, val)
		} else {
			c.set(cellCorrupt, cur, nil)
		}
	}
}

// Outcomes of CheckTarget besides the no-op outcomes.
const (
	// CheckWouldDelete: the location holds the judged bytes; the CAS would be tried.
	CheckWouldDelete = "would_delete"
	// CheckWouldResume: the location holds our own DELETING form of the judged bytes; a
	// redelivery finishes the job.
	CheckWouldResume = "would_resume"
)

// CheckTarget is the deleter's step 1 for target t against its block as e shows it now (an
// absent key: layout none, no field), without writing anything: the protocol's own judgement
// before its CAS (DESIGN §6), for replay. The outcome is CheckWouldDelete, CheckWouldResume,
// subjects.OutcomeNoopGone or subjects.OutcomeNoopMismatch, with the protocol's detail.
func CheckTarget(e *meta.Entry, t subjects.Target) (outcome, detail string) {
	r := Protocol{}.newRequest(nil, e.Instance, []subjects.Target{t})
	rt, c := r.targets[0], r.cells[0]
	if rt.state == stateOpen {
		c.load(e)
		c.judge()
	}
	switch rt.state {
	case stateRiding:
		return CheckWouldDelete, "bytes equal the judged bytes: the CAS would succeed"
	case stateMarked:
		return CheckWouldResume, "DELETING by an earlier delivery: a redelivery finishes it"
	}
	return rt.res.Outcome, rt.res.Detail
}

// field returns the cell's current bytes in e: present is false when the field (or the
// key) is absent; sameLayout is false when the key exists in another layout than the cell's.
func (c *reqCell) field(e *meta.Entry) (cur []byte, present, sameLayout bool) {
	switch {
	case e.Layout == kvcm.LayoutNone:
		return nil, false, true // key gone, or no location field left
	case e.Layout != c.layout:
		return nil, false, false
	case c.layout == kvcm.LayoutLegacy:
		return e.URI, e.URI != nil, true
	}
	v, ok := e.Location(c.location)
	return v, ok && len(v) > 0, true
}

// mark does steps 1–2 for every open target: it judges each against its cell's bytes and
// CASes the cell to DELETING, re-reading and retrying only the cells that conflicted
// (CASRetries attempts in all, as for a single target).
func (r *request) mark(ctx context.Context) {
	var pending []*reqCell
	for _, c := range r.cells {
		if c.has(stateOpen) {
			pending = append(pending, c)
		}
	}
	for attempt := 1; len(pending) > 0; attempt++ {
		var writes []meta.CondWrite
		var written []*reqCell
		for _, c := range r.read(ctx, pending, stateOpen) {
			if next := c.judge(); next != nil {
				writes = append(writes, c.write(next))
				written = append(written, c)
			}
		}
		pending = nil
		if len(writes) == 0 {
			return
		}
		errs, err := r.store.CASMany(ctx, r.instance, writes)
		for i, c := range written {
			werr := err
			if werr == nil {
				werr = errs[i]
			}
			switch {
			case werr == nil:
				// loc still describes the specs; only its status changed.
				c.each(stateRiding, func(t *reqTarget) { t.state = stateMarked })
				c.set(cellWritten, writes[i].Next, nil)
			case errors.Is(werr, meta.ErrDryRun):
				c.each(stateRiding, func(t *reqTarget) {
					t.finish(subjects.OutcomeWouldDelete, "dry-run: CAS refused by the store")
				})
			case errors.Is(werr, meta.ErrLayout):
				// Invariant 9: the key gained fields of the other layout; it is ambiguous now.
				c.each(stateRiding, func(t *reqTarget) {
					t.finish(subjects.OutcomeNoopMismatch, "key layout changed since it was judged")
				})
			case errors.Is(werr, meta.ErrConflict) && attempt < r.p.config.CASRetries:
				c.each(stateRiding, func(t *reqTarget) { t.state, t.loc, t.res.Resumed = stateOpen, nil, false })
				pending = append(pending, c)
			case errors.Is(werr, meta.ErrConflict):
				// The cell keeps changing; the next round judges it again.
				c.each(stateRiding, func(t *reqTarget) {
					t.finish(subjects.OutcomeNoopMismatch, fmt.Sprintf("CAS conflict %d times", attempt))
				})
			default:
				c.each(stateRiding, func(t *reqTarget) { t.fail(fmt.Errorf("cas block %d: %w", c.key, werr)) })
			}
		}
	}
}

// write is the conditional write of the cell from its last-read bytes to next.
func (c *reqCell) write(next []byte) meta.CondWrite {
	return meta.CondWrite{BlockKey: c.key, Layout: c.layout, Location: c.location, Expected: c.cur, Next: next}
}

// judge is step 1 for the open targets of a cell just read, in request order, each against
// the bytes the targets before it would leave. A target already in our DELETING form is
// marked at once (a redelivery after our own CAS); one still in its expected form rides on
// the cell's CAS, whose new value judge returns (nil: nothing to write).
func (c *reqCell) judge() []byte {
	switch c.state {
	case cellGone:
		c.each(stateOpen, func(t *reqTarget) { t.finish(subjects.OutcomeNoopGone, "before CAS") })
		return nil
	case cellChanged:
		c.each(
			stateOpen,
			func(t *reqTarget) { t.finish(subjects.OutcomeNoopMismatch, "key layout changed since it was judged") },
		)
		return nil
	case cellDecoded:
	default: // unread, corrupt, or written and not read since: nothing in it is ours to change
		c.each(stateOpen, func(t *reqTarget) { t.finish(subjects.OutcomeNoopMismatch, "before CAS") })
		return nil
	}
	var next []byte
	val := c.val
	var pins *pipeline.MigrationPins // the block's copy guards, read at the first target that needs them
	c.each(stateOpen, func(t *reqTarget) {
		if val == nil {
			// What the targets before this one leave, decoded only when a target follows.
			if val = decodeCell(c, next); val == nil {
				t.finish(subjects.OutcomeNoopMismatch, "re-encode: the new value does not decode")
				return
			}
		}
		l, ok := val.find(t.res.Target.Location)
		switch {
		case !ok:
			t.finish(subjects.OutcomeNoopGone, "before CAS")
		case bytes.Equal(l.Raw, t.deleting):
			t.loc = l
			if stored, _ := c.val.find(t.res.Target.Location); stored != nil && bytes.Equal(stored.Raw, t.deleting) {
				// Our DELETING from an earlier delivery, or (stuck_deleting) the DELETING that
				// was judged, byte for byte: marked whatever the cell's CAS does.
				t.state, t.res.Resumed = stateMarked, !t.stuck
			} else {
				t.state = stateRiding // a repeated target, marked by its first copy's CAS
			}
		case !bytes.Equal(l.Raw, t.expected):
			// Invariant 1: a concurrent FinishWrite, refresh or another deleter won.
			t.finish(subjects.OutcomeNoopMismatch, "location changed since it was judged")
		default:
			// A guard written since the judgement pins its source, whose own bytes did not
			// change: the whole block as read now says whether the target is one.
			if pins == nil && c.entry != nil {
				p := pipeline.MigrationPinsOfEntry(c.entry)
				pins = &p
			}
			if pins != nil {
				if reason, detail := pins.Kept(l); reason != "" {
					t.finish(subjects.OutcomeNoopMismatch, reason+": "+detail)
					return
				}
			}
			nb, err := val.withStatus(t.res.Target.Location, kvcm.StatusDeleting)
			if err != nil {
				t.finish(subjects.OutcomeNoopMismatch, fmt.Sprintf("re-encode: %v", err))
				return
			}
			t.loc, t.state = l, stateRiding
			next, val = nb, nil
		}
	})
	return next
}

// finish does steps 4–5 for every marked target: one re-read of their blocks, the physical
// deletes of those whose mark is still there, then one CAD per cell.
func (r *request) finish(ctx context.Context, storages storage.Set) {
	var cells []*reqCell
	for _, c := range r.cells {
		if c.has(stateMarked) {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		return
	}
	// Re-read after the delay, as KVCM's own delete task does: if our DELETING mark is no
	// longer there (KVCM finished the write anyway, or someone removed it), the data may be
	// in use again and must not be unlinked. The same read serves the first CAD attempt.
	var cleared []*reqTarget
	read := r.read(ctx, cells, stateMarked)
	for _, c := range read {
		const detail = "location changed after CAS; data left in place"
		c.each(stateMarked, func(t *reqTarget) {
			var l *kvcm.Location
			ok := false
			switch c.state {
			case cellGone:
			case cellDecoded:
				l, ok = c.val.find(t.res.Target.Location)
			default: // changed, corrupt: nothing in it is ours
				t.finish(subjects.OutcomeNoopMismatch, detail)
				return
			}
			switch {
			case !ok || c.clears(t.res.Target.Location):
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
	r.unlink(ctx, storages, cleared, referencedElsewhere(read))
	r.cad(ctx, cells)
}

// dataRef names one data object: a storage and a path in it.
type dataRef struct{ host, path string }

// referencedElsewhere returns, per block key, the data objects that the block's locations name
// other than the ones this request clears, as the re-read shows them: the unlink leaves those
// alone (invariant 11: data is unlinked only where no location of the block, in any status,
// names it at the moment of the unlink). A block whose other locations cannot all be read
// (a corrupt value, an ambiguous key) maps to nil: none of its data is unlinked.
func referencedElsewhere(cells []*reqCell) map[int64]map[dataRef]bool {
	clearing := map[int64]map[string]bool{}
	entries := map[int64]*meta.Entry{}
	for _, c := range cells {
		if c.entry == nil {
			continue
		}
		entries[c.key] = c.entry
		c.each(stateCleared, func(t *reqTarget) {
			if clearing[c.key] == nil {
				clearing[c.key] = map[string]bool{}
			}
			clearing[c.key][t.res.Target.Location] = true
		})
	}
	out := make(map[int64]map[dataRef]bool, len(clearing))
	for key, ids := range clearing {
		refs, ok := blockRefs(entries[key], ids)
		if ok {
			out[key] = refs
		} else {
			out[key] = nil
		}
	}
	return out
}

// blockRefs lists the data objects named by the locations of e other than those in skip.
// ok is false when a location cannot be decoded (what it names is unknown).
func blockRefs(e *meta.Entry, skip map[string]bool) (map[dataRef]bool, bool) {
	ps := e.Parts()
	layout := ps.Layout()
	if layout != kvcm.LayoutLegacy && layout != kvcm.LayoutLocation {
		return nil, false
	}
	refs := map[dataRef]bool{}
	for p := range ps.Except(skip).All() { // ours are being cleared: not even decoded
		switch p.Kind {
		case kvcm.PartCorrupt:
			return nil, false
		case kvcm.PartTombstone:
			continue // names nothing
		}
		for _, s := range p.Loc.Specs {
			if u, err := kvcm.ParseDataURI(s.URI); err == nil {
				refs[dataRef{u.Host, u.Path}] = true
			}
		}
	}
	return refs, true
}

// unlink is step 4 for the cleared targets: the physical delete of every spec, best effort
// ("already absent" is success; shared files, and data another location of the block names,
// are never unlinked), grouped by storage.
func (r *request) unlink(
	ctx context.Context,
	storages storage.Set,
	cleared []*reqTarget,
	refs map[int64]map[dataRef]bool,
) {
	type job struct {
		t      *reqTarget
		u      kvcm.DataURI
		reason string
	}
	var jobs []job
	byBackend := map[string][]int{} // job indexes by storage name
	var order []string
	for _, t := range cleared {
		t.res.StorageType = t.loc.Type.String()
		blockRefs, known := refs[t.res.Target.Key]
		for _, spec := range t.loc.Specs {
			u, be, reason := physicalTarget(storages, spec.URI)
			if t.res.Target.Reason == subjects.ReasonUnregisteredInstance {
				// The request carries no storage table: only the metadata goes.
				jobs = append(jobs, job{t: t, u: u, reason: PhysSkipSweep})
				continue
			}
			if reason == "" && (!t.loc.Type.Rule().PhysicalDelete || be.Type() != t.loc.Type) {
				// The type decides, never the URI: the location's type and its storage's
				// registered type must agree, and that type must have data to delete.
				reason = PhysSkipType
			}
			if t.stuck && reason == "" {
				// Only data whose name cannot have been reused goes (stuck DELETING).
				reason = stuckDataLeft(r.instance, t.res.Target.Key, spec, u, be)
			}
			if reason == "" && (!known || blockRefs == nil || blockRefs[dataRef{u.Host, u.Path}]) {
				reason = PhysSkipReferenced
			}
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
	// for the chunk), chunks of all storages spread over UnlinkWorkers goroutines, this one
	// among them. Contiguous chunks keep a target's directories together.
	type chunk struct {
		be  storage.Backend
		idx []int
	}
	var chunks []chunk
	workers := max(r.p.config.UnlinkWorkers, 1)
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
	work := func() error {
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
		return nil
	}
	var g errgroup.Group
	for range min(workers, len(chunks)) - 1 {
		g.Go(work)
	}
	_ = work()
	_ = g.Wait()
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

// cad is step 5: per cell, one CAD of the bytes last read to those bytes without every
// cleared location (legacy: a new __uri__, nil when none remains; location layout: the field
// removed). A conflict re-reads the cell and retries with what is still ours.
func (r *request) cad(ctx context.Context, cells []*reqCell) {
	for attempt := 1; ; attempt++ {
		var writes []meta.CondWrite
		var written []*reqCell
		for _, c := range cells {
			if next, ok := c.without(); ok {
				writes = append(writes, c.write(next))
				written = append(written, c)
			}
		}
		if len(writes) == 0 {
			return
		}
		res, err := r.store.CADMany(ctx, r.instance, writes)
		var retry []*reqCell
		for i, c := range written {
			var werr error
			keyDeleted := false
			if err != nil {
				werr = err
			} else {
				werr, keyDeleted = res[i].Err, res[i].KeyDeleted
			}
			switch {
			case werr == nil:
				c.each(stateCleared, (*reqTarget).deleted)
				if keyDeleted {
					c.targets[len(c.targets)-1].res.KeyDeleted = true
				}
			case errors.Is(werr, meta.ErrConflict) && attempt < r.p.config.CASRetries:
				retry = append(retry, c)
			case errors.Is(werr, meta.ErrDryRun):
				// A stuck DELETING has no CAS: in dry-run its CAD is the first write refused
				// (the storage refused its unlink too, DESIGN §8.8).
				c.each(
					stateCleared,
					func(t *reqTarget) { t.finish(subjects.OutcomeWouldDelete, "dry-run: CAD refused by the store") },
				)
			default:
				// A conflict storm, a changed layout or an outage: our DELETING stays, and
				// the redelivery (or the next round) resumes from it.
				c.each(stateCleared, func(t *reqTarget) { t.fail(fmt.Errorf("cad block %d: %w", c.key, werr)) })
			}
		}
		cells = nil
		for _, c := range r.read(ctx, retry, stateCleared) {
			c.each(stateCleared, func(t *reqTarget) {
				var l *kvcm.Location
				ok := false
				if c.state == cellDecoded {
					l, ok = c.val.find(t.res.Target.Location)
				}
				switch {
				case c.state == cellGone || (c.state == cellDecoded && !ok):
					// Someone else's CAD won the race (KVCM's own GC finishing our DELETING, or
					// another delivery of this request): the removal is theirs, a no-op here,
					// though the data may have gone through us too.
					t.finish(subjects.OutcomeNoopGone, "gone before our CAD: another delete removed it")
				case c.state != cellDecoded || !bytes.Equal(l.Raw, t.deleting):
					// Rewritten after the unlink (e.g. KVCM's unconditional FinishWrite): left as it is.
					t.finish(subjects.OutcomeNoopMismatch, "location changed after CAS")
				}
			})
			cells = append(cells, c)
		}
	}
}

// without returns the cell's last-read bytes without every cleared location, removed in
// request order (next is nil when no location remains, and always for a location field);
// ok is false when the cell has nothing to remove.
func (c *reqCell) without() (next []byte, ok bool) {
	val, next := c.val, c.cur
	c.each(stateCleared, func(t *reqTarget) {
		id := t.res.Target.Location
		if val == nil && next != nil {
			// What the targets before this one leave, decoded only when a target follows.
			if val = decodeCell(c, next); val == nil {
				t.fail(fmt.Errorf("re-encode without %s: the new value does not decode", id))
				return
			}
		}
		if val == nil {
			t.fail(fmt.Errorf("re-encode without %s: no location left", id))
			return
		}
		out, empty, err := val.without(id)
		if err != nil {
			t.fail(fmt.Errorf("re-encode without %s: %w", id, err))
			return
		}
		ok, next, val = true, out, nil
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

// cellValue is a cell's bytes decoded: the edits the protocol makes, one per layout.
type cellValue interface {
	// find returns location id.
	find(id string) (*kvcm.Location, bool)
	// withStatus returns the cell's bytes with location id's status token replaced.
	withStatus(id string, s kvcm.Status) ([]byte, error)
	// without returns the cell's bytes without location id; empty when none remains.
	without(id string) (next []byte, empty bool, err error)
}

// decodeCell decodes a cell's bytes; nil when they do not decode.
func decodeCell(c *reqCell, cur []byte) cellValue {
	if c.layout == kvcm.LayoutLocation {
		l, err := kvcm.DecodeLocation(c.location, cur)
		if err != nil {
			return nil
		}
		return &locationCell{l}
	}
	blk, err := kvcm.DecodeBlock(cur)
	if err != nil {
		return nil
	}
	return legacyCell{blk}
}

// legacyCell is a whole __uri__: every edit re-encodes the map, the other locations byte for
// byte.
type legacyCell struct{ *kvcm.Block }

func (b legacyCell) find(id string) (*kvcm.Location, bool) { return b.Find(id) }
func (b legacyCell) withStatus(id string, s kvcm.Status) ([]byte, error) {
	return b.WithStatus(id, s)
}
func (b legacyCell) without(id string) ([]byte, bool, error) { return b.Without(id) }

// locationCell is one location field: the status edit changes its status token, and removing
// it removes the field.
type locationCell struct{ l kvcm.Location }

func (c *locationCell) find(id string) (*kvcm.Location, bool) {
	if id != c.l.ID {
		return nil, false
	}
	return &c.l, true
}

func (c *locationCell) withStatus(id string, s kvcm.Status) ([]byte, error) {
	if id != c.l.ID {
		return nil, fmt.Errorf("set status of location %q: %w", id, kvcm.ErrNoLocation)
	}
	if c.l.Err != nil {
		return nil, fmt.Errorf("set status: %w", c.l.Err)
	}
	return kvcm.LocationWithStatus(c.l.Raw, s)
}

func (c *locationCell) without(id string) ([]byte, bool, error) {
	if id != c.l.ID {
		return nil, false, fmt.Errorf("remove location %q: %w", id, kvcm.ErrNoLocation)
	}
	return nil, true, nil
}

// Reasons a physical delete was not done (kvcm_gc_physical_delete_skips_total).
const (
	PhysSkipShared         = "shared"
	PhysSkipUnsupported    = "unsupported"
	PhysSkipDisabled       = "disabled"
	PhysSkipUnknownStorage = "unknown_storage"
	PhysSkipBadURI         = "bad_uri"
	PhysSkipFailed         = "failed"
	// PhysSkipReferenced: another location of the block, in any status, names the same data
	// at the moment of the unlink (or the block's other locations cannot all be read), so it
	// is left in place (invariant 11).
	PhysSkipReferenced = "referenced"
	// PhysSkipReusable and PhysSkipNotPerBlock: stuck DELETING data left in place (see
	// DataLeftReusable, DataLeftNotPerBlock).
	PhysSkipReusable    = DataLeftReusable
	PhysSkipNotPerBlock = DataLeftNotPerBlock
	// PhysSkipType: the location's storage type allows no physical delete (kvcm.TypeRule:
	// dummy, EventReport kinds, a type kvcm-gc does not know), or its spec URI names a storage
	// registered with another type. Only the metadata goes.
	PhysSkipType = "storage_type"
	// PhysSkipSweep: a location of an unregistered instance (collect_unregistered_instances)
	// loses its metadata only; its data is left for the sweep, which reclaims a per-block file
	// once no key names it.
	PhysSkipSweep = "left_for_sweep"
)

var physSkipReasons = []string{PhysSkipShared, PhysSkipUnsupported, PhysSkipDisabled, PhysSkipUnknownStorage,
	PhysSkipBadURI, PhysSkipFailed, PhysSkipReferenced, PhysSkipReusable, PhysSkipNotPerBlock, PhysSkipType, PhysSkipSweep}
