package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// ReplayQuery selects the input messages Replay reads back. Ranges combine (all must hold).
type ReplayQuery struct {
	// Stage is pipeline.StageProber (reads BATCHES) or pipeline.StageDeleter (reads DELETES).
	Stage string `json:"stage"`
	// SeqFrom and SeqTo bound the input stream sequences, inclusive (0: unbounded).
	SeqFrom uint64 `json:"seq_from,omitempty"`
	SeqTo   uint64 `json:"seq_to,omitempty"`
	// TimeFrom and TimeTo bound the time the server stored each message (zero: unbounded).
	TimeFrom time.Time `json:"time_from,omitzero"`
	TimeTo   time.Time `json:"time_to,omitzero"`
	// Instance keeps only one instance's messages ("": every instance). It is a subject
	// filter, so other instances' messages are not even sent by the server.
	Instance string `json:"instance,omitempty"`
	// BlockKey keeps only one block (nil: every block).
	BlockKey *int64 `json:"block_key,omitempty"`
	// Dump keeps each message's raw bytes and headers in the result.
	Dump bool `json:"dump,omitempty"`
	// File keeps only one data file of the sweeper's batches, by its data path ("": every file).
	File string `json:"file,omitempty"`
}

// Validate checks the stage and the ranges.
func (q ReplayQuery) Validate() error {
	switch q.Stage {
	case pipeline.StageProber, pipeline.StageDeleter, pipeline.StageSweeper:
	default:
		return fmt.Errorf("replay: stage %q: want %s, %s or %s (the scanner and the walker read no stream)", q.Stage,
			pipeline.StageProber, pipeline.StageDeleter, pipeline.StageSweeper)
	}
	if q.SeqTo > 0 && q.SeqFrom > q.SeqTo {
		return fmt.Errorf("replay: sequence range %d..%d is empty", q.SeqFrom, q.SeqTo)
	}
	if !q.TimeFrom.IsZero() && !q.TimeTo.IsZero() && q.TimeTo.Before(q.TimeFrom) {
		return fmt.Errorf("replay: time range %s..%s is empty", q.TimeFrom.Format(time.RFC3339),
			q.TimeTo.Format(time.RFC3339))
	}
	return nil
}

// Decisions a replay reports (Verdict.Decision).
const (
	// prober
	DecisionCandidate = "candidate" // judged garbage (Reason: orphan_writing | storage_missing)
	DecisionSkip      = "skip"      // not judged, kept (Reason: a prober.Skip* reason)
	DecisionKept      = "kept"      // judged and kept (Reason says why)
	// deleter, now
	DecisionGone = "gone" // the location (or its block) no longer exists
	// deleter, now: what its first step would find (the deleter's own outcome names)
	DecisionWouldDelete  = subjects.OutcomeWouldDelete // the CAS would succeed: bytes equal the judged bytes
	DecisionWouldResume  = "would_resume"              // DELETING by an earlier delivery: it would finish
	DecisionNoopMismatch = subjects.OutcomeNoopMismatch
	DecisionNoopGone     = subjects.OutcomeNoopGone
	// deleter, then: the recorded outcome (subjects.Outcome*)
	DecisionDelete = "delete"
	// both
	DecisionNoEvent = "no_event" // nothing recorded (the deleter has not handled it yet, events aged out …)
	DecisionError   = "error"    // the current metadata could not be read
)

// Verdict is one decision about a location, with why.
type Verdict struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// Outcome is, for a prober candidate decided then, the deleter's recorded outcome for it in
	// the same round ("" when none was recorded); for a deleter decision then, the outcome.
	Outcome string `json:"outcome,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// EventSeq is the EVENTS sequence the decision then was read from.
	EventSeq uint64 `json:"event_seq,omitempty"`
}

// String is the verdict as a table cell ("candidate orphan_writing → deleted").
func (v Verdict) String() string {
	s := v.Decision
	if v.Reason != "" {
		s += " " + v.Reason
	}
	if v.Outcome != "" && v.Decision != DecisionDelete {
		s += " → " + v.Outcome
	} else if v.Outcome != "" {
		s = v.Outcome
	}
	return s
}

// LocationReplay is one location of a replayed message: what was decided then (from the
// recorded events), what the stage's rules say on the recorded bytes today (prober only), and
// what would be decided now against the current metadata.
type LocationReplay struct {
	Key      int64  `json:"key,string"`
	Location string `json:"location"` // "" for a whole block that could not be decoded
	Status   string `json:"status"`   // the recorded status (CLS_WRITING, …)
	// Reason is a deleter target's recorded reason.
	Reason string  `json:"reason,omitempty"`
	Then   Verdict `json:"then"`
	// Rerun is the prober's rules applied again to the recorded bytes at the time of the scan
	// (probes and the guard are asked now): a difference from Then means the storage, the
	// guard or the configuration changed, not the metadata.
	Rerun *Verdict `json:"rerun,omitempty"`
	Now   Verdict  `json:"now"`
	// Changed is true when the location's current bytes differ from the recorded ones.
	Changed bool `json:"changed,omitempty"`
}

// ReplayMessage is one input message read back.
type ReplayMessage struct {
	Stream   string    `json:"stream"`
	Seq      uint64    `json:"seq"`
	Subject  string    `json:"subject"`
	Time     time.Time `json:"time"`
	MsgID    string    `json:"msg_id,omitempty"`
	Instance string    `json:"instance,omitempty"`
	Round    uint64    `json:"round,omitempty"`
	// Poison is set when the message does not decode: the stage terminated it (see dlq).
	Poison    string           `json:"poison,omitempty"`
	Locations []LocationReplay `json:"locations"`
	// Files are the files of a sweeper's batch (sweeper replay).
	Files []FileReplay `json:"files,omitempty"`
	// Raw and Headers are set with ReplayQuery.Dump.
	Raw     json.RawMessage     `json:"raw,omitempty"`
	RawText string              `json:"raw_text,omitempty"` // when the payload is not JSON
	Headers map[string][]string `json:"headers,omitempty"`
}

// ReplaySummary counts what a replay saw.
type ReplaySummary struct {
	Messages  int            `json:"messages"`
	Locations int            `json:"locations"`
	Poison    int            `json:"poison"`
	Then      map[string]int `json:"then"`
	Now       map[string]int `json:"now"`
	// Differ counts locations whose decision now differs from then.
	Differ int `json:"differ"`
}

// BlockReader reads a block's current fields for replay. Implementations only read.
type BlockReader interface {
	// ReadBlock reads the block whole, as the pipeline does; exists is false when the key is
	// absent.
	ReadBlock(ctx context.Context, store, instance string, key int64) (e meta.Entry, exists bool, err error)
}

// ReplayDeps is what a replay consults. Everything is used read-only: the prober's rules
// probe storages (stat) and ask the guard, and the blocks are read with HMGET/HGET.
type ReplayDeps struct {
	// Blocks reads the current metadata.
	Blocks BlockReader
	// Rules are the prober's rules (storage set, guard, configuration); required for the
	// prober stage.
	Rules *prober.Rules
	// Now is the clock of the decisions "now" (default time.Now).
	Now func() time.Time
	// Progress receives a progress bar for long replays (stderr); nil draws nothing.
	Progress io.Writer
	// Sweeper is the sweeper, in dry-run, whose decisions a sweeper replay re-runs.
	Sweeper *sweep.Sweeper
	// Close releases what OpenReplayDeps opened; nil when nothing.
	Close func() error
}

// Replay reads a stage's input back from its stream and explains, per location, the decision
// then and now, calling emit for each message in stream order. It never disturbs the
// pipeline: the input and the EVENTS stream are read with ordered ephemeral consumers (the
// durable consumers' positions and pending counts do not move), and the re-run decisions go
// through the stage's decision code with nothing that writes (DESIGN §8.8).
func Replay(ctx context.Context, js jetstream.JetStream, names subjects.Names, q ReplayQuery, deps ReplayDeps,
	emit func(ReplayMessage) error) (ReplaySummary, error) {
	sum := ReplaySummary{Then: map[string]int{}, Now: map[string]int{}}
	if err := q.Validate(); err != nil {
		return sum, err
	}
	if deps.Blocks == nil {
		return sum, errors.New("replay: no metadata reader")
	}
	if q.Stage == pipeline.StageProber && deps.Rules == nil {
		return sum, errors.New("replay prober: no prober rules")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if q.Stage == pipeline.StageSweeper {
		return replaySweep(ctx, js, names, q, deps, emit)
	}
	stream, filter := names.BatchesStream(), names.BatchFilter()
	if q.Stage == pipeline.StageDeleter {
		stream, filter = names.DeletesStream(), names.DeleteFilter()
	}
	if q.Instance != "" {
		filter = names.BatchSubject(q.Instance)
		if q.Stage == pipeline.StageDeleter {
			filter = names.DeleteSubject(q.Instance)
		}
	}
	rng := readRange{Filters: []string{filter}, StartSeq: q.SeqFrom, StartTime: q.TimeFrom}

	// The events that explain the decisions then come after the first message replayed:
	// index them from its time on, before reading the input.
	first, err := firstMessage(ctx, js, stream, rng)
	if err != nil {
		return sum, err
	}
	if first == nil {
		return sum, nil
	}
	// A minute early: in a cluster the EVENTS stream's leader may run on another server, whose
	// clock stamps the events.
	idx, err := indexEvents(ctx, js, names, q, first.Time.Add(-time.Minute), deps.Progress)
	if err != nil {
		return sum, err
	}

	r := &replayer{names: names, q: q, deps: deps, idx: idx, sum: &sum}
	var bar *progress
	err = readStream(ctx, js, stream, rng, func(total uint64) {
		bar = newProgress(deps.Progress, "replay "+q.Stage, total)
	}, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
		bar.Add(1)
		if q.SeqTo > 0 && md.Sequence.Stream > q.SeqTo {
			return errStop
		}
		if !q.TimeTo.IsZero() && md.Timestamp.After(q.TimeTo) {
			return errStop
		}
		if !q.TimeFrom.IsZero() && md.Timestamp.Before(q.TimeFrom) {
			return nil
		}
		rm := r.message(ctx, m, md)
		if rm == nil {
			return nil
		}
		sum.Messages++
		return emit(*rm)
	})
	bar.Done()
	if err != nil {
		return sum, fmt.Errorf("replay %s: %w", q.Stage, err)
	}
	return sum, nil
}

// firstMessage returns the first message of the range, or nil when it is empty.
func firstMessage(
	ctx context.Context,
	js jetstream.JetStream,
	stream string,
	rng readRange,
) (*jetstream.RawStreamMsg, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.State.Msgs == 0 {
		return nil, nil
	}
	start := max(rng.StartSeq, info.State.FirstSeq, 1)
	if rng.StartSeq == 0 && !rng.StartTime.IsZero() {
		// The server finds the first message at or after a time for a consumer; a direct
		// get cannot, so let a one-message read answer.
		var got *jetstream.RawStreamMsg
		err := readStream(ctx, js, stream, rng, nil, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			got = &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Time: md.Timestamp}
			return errStop
		})
		return got, err
	}
	m, err := s.GetMsg(ctx, start, jetstream.WithGetMsgSubject(rng.Filters[0]))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read first message of %s from %d: %w", stream, start, err)
	}
	return m, nil
}

// eventKey identifies the decision about one location.
type eventKey struct {
	instance string
	key      int64
	location string
}

// eventIndex holds the recorded decisions a replay explains with.
type eventIndex struct {
	// bySource: candidate and skip events of the prober, and delete events of the deleter,
	// by the input message they were about.
	bySource map[subjects.Source]map[eventKey][]indexedEvent
	// deletes: the deleter's outcomes by location, for a prober candidate.
	deletes map[eventKey][]indexedEvent
}

type indexedEvent struct {
	seq uint64
	ev  subjects.Event
}

// indexEvents reads the events that can explain the replayed messages: for the prober its
// candidates and skips plus the deleter's outcomes, for the deleter its outcomes; restricted
// to the instance (subject filter) and block key of the query.
func indexEvents(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	q ReplayQuery,
	from time.Time,
	w io.Writer,
) (*eventIndex, error) {
	kinds := []string{subjects.EventDelete}
	if q.Stage == pipeline.StageProber {
		kinds = append(kinds, subjects.EventCandidate, subjects.EventSkip)
	}
	var filters []string
	for _, k := range kinds {
		if q.Instance != "" {
			filters = append(filters, names.EventSubject(k, q.Instance))
		} else {
			filters = append(filters, names.EventKindFilter(k))
		}
	}
	idx := &eventIndex{bySource: map[subjects.Source]map[eventKey][]indexedEvent{}, deletes: map[eventKey][]indexedEvent{}}
	var bar *progress
	err := readStream(ctx, js, names.EventsStream(), readRange{Filters: filters, StartTime: from},
		func(total uint64) { bar = newProgress(w, "read events", total) },
		func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			bar.Add(1)
			all, err := subjects.DecodeEvent(m.Data())
			if err != nil {
				return nil
			}
			for _, ev := range all.PerTarget() {
				if ev.Key == nil || ev.Source == nil {
					continue // not about one location of one input message
				}
				if q.BlockKey != nil && *ev.Key != *q.BlockKey {
					continue
				}
				k := eventKey{ev.Instance, *ev.Key, ev.Location}
				ie := indexedEvent{seq: md.Sequence.Stream, ev: ev}
				src := subjects.Source{Stream: ev.Source.Stream, Seq: ev.Source.Seq}
				if idx.bySource[src] == nil {
					idx.bySource[src] = map[eventKey][]indexedEvent{}
				}
				idx.bySource[src][k] = append(idx.bySource[src][k], ie)
				if ev.Kind == subjects.EventDelete {
					idx.deletes[k] = append(idx.deletes[k], ie)
				}
			}
			return nil
		})
	bar.Done()
	if err != nil {
		return nil, fmt.Errorf("index events: %w", err)
	}
	return idx, nil
}

// replayer explains messages one by one.
type replayer struct {
	names subjects.Names
	q     ReplayQuery
	deps  ReplayDeps
	idx   *eventIndex
	sum   *ReplaySummary
}

// replayMessage is the replay's record of m before its body is read: where it stands, its
// id and the instance its subject names.
func replayMessage(names subjects.Names, m jetstream.Msg, md *jetstream.MsgMetadata) ReplayMessage {
	rm := ReplayMessage{Stream: md.Stream, Seq: md.Sequence.Stream, Subject: m.Subject(), Time: md.Timestamp.UTC(),
		MsgID: m.Headers().Get(jetstream.MsgIDHeader), Locations: []LocationReplay{}}
	if inst, err := names.InstanceOf(m.Subject()); err == nil {
		rm.Instance = inst
	}
	return rm
}

func (r *replayer) message(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata) *ReplayMessage {
	rec := replayMessage(r.names, m, md)
	rm := &rec
	if r.q.Dump {
		if b, err := subjects.DecodeBatch(m.Data()); err == nil && subjects.IsBinaryBatch(m.Data()) {
			rm.Raw = json.RawMessage(subjects.BatchJSON(b)) // a binary batch, shown as its JSON form
		} else if j, err := subjects.Unseal(m.Data()); err == nil && subjects.IsSealed(m.Data()) && json.Valid(j) {
			rm.Raw = json.RawMessage(j) // a compressed delete request, shown as its JSON
		} else if json.Valid(m.Data()) {
			rm.Raw = json.RawMessage(bytes.Clone(m.Data()))
		} else {
			rm.RawText = string(m.Data())
		}
		if len(m.Headers()) > 0 {
			rm.Headers = map[string][]string(m.Headers())
		}
	}
	src := subjects.Source{Stream: md.Stream, Seq: md.Sequence.Stream}
	if r.q.Stage == pipeline.StageProber {
		b, err := subjects.DecodeBatch(m.Data())
		if err != nil {
			return r.poison(rm, err)
		}
		rm.Round = b.Round
		r.batch(ctx, rm, src, b)
	} else {
		req, err := subjects.DecodeDeleteRequest(m.Data())
		if err != nil {
			return r.poison(rm, err)
		}
		rm.Round = req.Round
		r.request(ctx, rm, src, req)
	}
	if r.q.BlockKey != nil && len(rm.Locations) == 0 && rm.Poison == "" {
		return nil // the block is not in this message
	}
	for _, l := range rm.Locations {
		r.sum.Locations++
		r.sum.Then[l.Then.String()]++
		r.sum.Now[l.Now.String()]++
		if differs(l.Then, l.Now) {
			r.sum.Differ++
		}
	}
	return rm
}

// poison records that a message does not decode, as the stage would term it.
func (r *replayer) poison(rm *ReplayMessage, err error) *ReplayMessage {
	rm.Poison = err.Error()
	r.sum.Poison++
	return rm
}

// differs reports whether the decision now contradicts the one then. A location deleted then
// and gone now is the expected result, not a difference.
func differs(then, now Verdict) bool {
	t, n := decisionClass(then), decisionClass(now)
	if t == "delete" && (now.Decision == DecisionGone || now.Decision == DecisionNoopGone) {
		return false
	}
	return t != n
}

// decisionClass reduces a verdict to "delete", "keep" or "gone" for comparing then and now.
func decisionClass(v Verdict) string {
	switch {
	case v.Decision == DecisionCandidate, v.Decision == DecisionWouldDelete, v.Decision == DecisionWouldResume:
		return "delete"
	case v.Decision == DecisionDelete && (v.Outcome == subjects.OutcomeDeleted || v.Outcome == subjects.OutcomePartial ||
		v.Outcome == subjects.OutcomeWouldDelete):
		return "delete"
	case v.Decision == DecisionNoEvent, v.Decision == DecisionError:
		return v.Decision
	case v.Decision == DecisionGone, v.Decision == DecisionNoopGone:
		return "gone"
	}
	return "keep"
}

// batch explains every location of a batch (the prober's input), in the layout it was read in.
func (r *replayer) batch(ctx context.Context, rm *ReplayMessage, src subjects.Source, b subjects.Batch) {
	events := r.idx.bySource[src]
	now := r.deps.Now()
	at := time.UnixMicro(b.ScannedAt)
	for bi := range b.Blocks {
		be := &b.Blocks[bi]
		if r.q.BlockKey != nil && be.Key != *r.q.BlockKey {
			continue
		}
		cur, exists, readErr := r.deps.Blocks.ReadBlock(ctx, b.Store, b.Instance, be.Key)
		ps := be.Parts()
		layout := ps.Layout()
		switch layout {
		case kvcm.LayoutAmbiguous:
			lr := LocationReplay{Key: be.Key, Status: "-"}
			lr.Then = r.thenProber(events, b, be.Key, "")
			lr.Rerun = r.judgeBlock(ctx, b, *be, at)
			lr.Now = r.nowLayout(&cur, exists, readErr, kvcm.LayoutAmbiguous)
			rm.Locations = append(rm.Locations, lr)
			continue
		case kvcm.LayoutNone:
			lr := LocationReplay{Key: be.Key, Status: "-"}
			lr.Then = r.thenProber(events, b, be.Key, "")
			lr.Rerun = &Verdict{Decision: DecisionKept, Detail: "no location: an empty __uri__ is an absent block to KVCM"}
			lr.Now = r.nowLayout(&cur, exists, readErr, kvcm.LayoutLegacy)
			rm.Locations = append(rm.Locations, lr)
			continue
		}
		c := r.current(&cur, exists, readErr, layout)
		pins := pipeline.MigrationPinsOf(be)
		for p := range ps.All() {
			rm.Locations = append(rm.Locations, r.part(ctx, events, b, be, p, pins, at, now, c))
		}
	}
}

// current is a block as it is now, read again for a replay of the layout it was scanned in:
// its parts by location id (tombstones left out), or why they cannot be compared.
type current struct {
	whole    Verdict // the decision now about the whole block (nowLayout)
	then     Verdict // when not readable: the decision now about each of its locations
	parts    map[string]kvcm.Part
	pins     pipeline.MigrationPins
	lru      string
	readable bool
}

func (r *replayer) current(cur *meta.Entry, exists bool, readErr error, layout kvcm.Layout) current {
	c := current{lru: cur.LRUTime, whole: r.nowLayout(cur, exists, readErr, layout)}
	if readErr != nil || !exists || cur.Layout != layout {
		c.then = c.whole
		return c
	}
	ps := cur.Parts()
	c.parts = map[string]kvcm.Part{}
	for p := range ps.All() {
		if p.Kind == kvcm.PartCorrupt && p.Layout == kvcm.LayoutLegacy {
			c.then = Verdict{Decision: DecisionSkip, Reason: prober.SkipCorruptURI, Detail: "current __uri__ does not decode"}
			return c
		}
		if p.Kind != kvcm.PartTombstone {
			c.parts[p.ID] = p
		}
	}
	c.pins, c.readable = pipeline.MigrationPinsOfEntry(cur), true
	return c
}

// part explains one part of a batch's block: what the prober decided then, what the rules
// decide on it now from the batch, and what they decide on the block as it is now.
func (r *replayer) part(
	ctx context.Context,
	events map[eventKey][]indexedEvent,
	b subjects.Batch,
	be *subjects.BlockEntry,
	p kvcm.Part,
	pins pipeline.MigrationPins,
	at, now time.Time,
	cur current,
) LocationReplay {
	lr := LocationReplay{Key: be.Key, Location: p.ID, Status: "-"}
	if p.Kind == kvcm.PartLocation {
		lr.Status = p.Loc.Status.String()
	}
	lr.Then = r.thenProber(events, b, be.Key, p.ID)
	switch {
	case p.Kind == kvcm.PartTombstone:
		lr.Rerun = &Verdict{Decision: DecisionSkip, Reason: prober.SkipTombstone}
	case p.Kind == kvcm.PartCorrupt && p.Layout == kvcm.LayoutLegacy:
		lr.Rerun = &Verdict{Decision: DecisionSkip, Reason: prober.SkipCorruptURI, Detail: p.Err.Error()}
		lr.Now = cur.whole
		return lr
	default:
		rerun := r.judgeIn(ctx, b, onePart(be.Key, p, be.LRUTime), &p.Loc, pins, at)
		lr.Rerun = &rerun
	}
	if !cur.readable {
		lr.Now = cur.then
		return lr
	}
	cp, ok := cur.parts[p.ID]
	if !ok {
		lr.Now = Verdict{Decision: DecisionGone, Detail: "location no longer in the block"}
		return lr
	}
	lr.Changed = !bytes.Equal(cp.Raw, p.Raw)
	lr.Now = r.judgeIn(ctx, b, onePart(be.Key, cp, cur.lru), &cp.Loc, cur.pins, now)
	if lr.Changed && cp.Kind == kvcm.PartLocation {
		lr.Now.Detail = subjects.JoinDetail("bytes changed since the scan (status now "+cp.Loc.Status.String()+")",
			lr.Now.Detail)
	}
	return lr
}

// onePart is a block entry of block key holding only part p, in p's layout (lru: the
// legacy block's __lru_time__).
func onePart(key int64, p kvcm.Part, lru string) subjects.BlockEntry {
	if p.Layout == kvcm.LayoutLocation {
		return subjects.BlockEntry{Key: key, Layout: subjects.LayoutLocation,
			Locs: []subjects.LocField{{ID: subjects.RawText(p.ID), V: subjects.RawText(p.Raw)}}}
	}
	return subjects.BlockEntry{Key: key, URI: subjects.RawText(oneLocation(p.ID, p.Raw)), LRUTime: lru}
}

// nowLayout is the decision now about a block that cannot be read, is gone, or is no longer
// (or never was) in one layout the rules judge.
func (r *replayer) nowLayout(cur *meta.Entry, exists bool, readErr error, was kvcm.Layout) Verdict {
	switch {
	case readErr != nil:
		return Verdict{Decision: DecisionError, Detail: readErr.Error()}
	case !exists || cur.Layout == kvcm.LayoutNone:
		return Verdict{Decision: DecisionGone, Detail: "block no longer holds a location"}
	case cur.Layout == kvcm.LayoutAmbiguous:
		return Verdict{
			Decision: DecisionSkip,
			Reason:   prober.SkipAmbiguousLayout,
			Detail:   "the block holds both __uri__ and L# fields",
		}
	case cur.Layout != was:
		return Verdict{
			Decision: DecisionSkip,
			Reason:   "layout_changed",
			Detail:   fmt.Sprintf("the block is in the %s layout now", cur.Layout),
		}
	case was == kvcm.LayoutLegacy:
		if _, err := kvcm.DecodeBlock(cur.URI); err != nil {
			return Verdict{Decision: DecisionSkip, Reason: prober.SkipCorruptURI, Detail: err.Error()}
		}
	}
	return Verdict{Decision: DecisionKept, Detail: "block decodes now; replay it from a newer batch"}
}

// thenProber reads the prober's recorded decision about one location of a batch: a candidate
// event (with the deleter's outcome for it in the same round), a skip event about the location
// or its whole block, or nothing — the prober records nothing for a location it keeps.
func (r *replayer) thenProber(events map[eventKey][]indexedEvent, b subjects.Batch, key int64, loc string) Verdict {
	k := eventKey{b.Instance, key, loc}
	for _, ie := range events[k] {
		switch ie.ev.Kind {
		case subjects.EventCandidate:
			v := Verdict{Decision: DecisionCandidate, Reason: ie.ev.Reason, EventSeq: ie.seq}
			if d := lastDelete(r.idx.deletes[k], b.Round); d != nil {
				v.Outcome, v.Detail = d.ev.Outcome, fmt.Sprintf("deleter event #%d", d.seq)
				if d.ev.DryRun {
					v.Detail += " (dry-run)"
				}
			}
			return v
		case subjects.EventSkip:
			return Verdict{Decision: DecisionSkip, Reason: ie.ev.Reason, Detail: ie.ev.Detail, EventSeq: ie.seq}
		}
	}
	if loc != "" {
		for _, ie := range events[eventKey{b.Instance, key, ""}] {
			if ie.ev.Kind == subjects.EventSkip {
				return Verdict{
					Decision: DecisionSkip,
					Reason:   ie.ev.Reason,
					Detail:   "whole block: " + ie.ev.Detail,
					EventSeq: ie.seq,
				}
			}
		}
	}
	return Verdict{Decision: DecisionKept, Detail: "no candidate or skip event"}
}

// lastDelete returns the deleter's last recorded outcome of a round, or nil.
func lastDelete(evs []indexedEvent, round uint64) *indexedEvent {
	var last *indexedEvent
	for i := range evs {
		if evs[i].ev.Round == round {
			last = &evs[i]
		}
	}
	return last
}

// judgeOne runs the prober's rules on one location alone, as a one-location block entry in
// its layout, so the verdict's single candidate or skip is this location's. Locations are
// judged independently by both rules, so judging one alone decides it as the prober did
// within the whole batch (only the per-batch target cap is left out).
func (r *replayer) judgeOne(
	ctx context.Context,
	b subjects.Batch,
	one subjects.BlockEntry,
	loc *kvcm.Location,
	at time.Time,
) Verdict {
	v := r.judge(ctx, b, one, at)
	if v.Decision == DecisionKept && v.Reason == "" {
		layout := subjects.LayoutLegacy
		if one.Layout == subjects.LayoutLocation {
			layout = subjects.LayoutLocation
		}
		v.Reason = keptReason(loc, one.LRUTime, layout, at, r.deps.Rules.Config)
	}
	return v
}

// judgeIn is judgeOne for a location of a block whose copy guards are pins: a location alone
// cannot tell whether a guard of its block pins it, so the prober's migration check runs
// with the whole block first (pipeline.MigrationPins.Kept, the rules' own check).
func (r *replayer) judgeIn(ctx context.Context, b subjects.Batch, one subjects.BlockEntry, loc *kvcm.Location,
	pins pipeline.MigrationPins, at time.Time) Verdict {
	if reason, detail := pins.Kept(loc); reason != "" {
		return Verdict{Decision: DecisionSkip, Reason: reason, Detail: detail}
	}
	return r.judgeOne(ctx, b, one, loc, at)
}

// judgeBlock runs the rules on a whole block entry (one that judges as a whole, such as an
// ambiguous one).
func (r *replayer) judgeBlock(ctx context.Context, b subjects.Batch, be subjects.BlockEntry, at time.Time) *Verdict {
	v := r.judge(ctx, b, be, at)
	return &v
}

func (r *replayer) judge(ctx context.Context, b subjects.Batch, be subjects.BlockEntry, at time.Time) Verdict {
	one := b
	one.Blocks = []subjects.BlockEntry{be}
	rules := *r.deps.Rules
	rules.ObserveProbe = nil
	rules.Config.MaxTargets = max(rules.Config.MaxTargets, 1)
	v := rules.Judge(ctx, one, at)
	if len(v.Targets) > 0 {
		return Verdict{Decision: DecisionCandidate, Reason: v.Targets[0].Reason}
	}
	for _, n := range v.Notes {
		return Verdict{Decision: DecisionSkip, Reason: n.Reason, Detail: n.Detail}
	}
	for reason := range v.Skips {
		if v.Skips[reason] > 0 {
			return Verdict{Decision: DecisionSkip, Reason: reason}
		}
	}
	return Verdict{Decision: DecisionKept}
}

// oneLocation builds the __uri__ of a block holding only the location id with value raw.
func oneLocation(id string, raw []byte) []byte {
	key, _ := subjects.Encode(id) // a string always encodes
	out := make([]byte, 0, len(key)+len(raw)+3)
	out = append(out, '{')
	out = append(out, key...)
	out = append(out, ':')
	out = append(out, raw...)
	return append(out, '}')
}

// keptReason says why a location of layout that no rule skipped was not a candidate: the
// rules' own reason (prober.KeptReason), with a young WRITING's age against the grace.
func keptReason(loc *kvcm.Location, lru, layout string, at time.Time, cfg prober.Config) string {
	reason, age, aged := prober.KeptReason(loc, layout, lru, at)
	if aged {
		return fmt.Sprintf("%s (age %s < %s)", reason, humanDuration(age), cfg.OrphanWritingGrace)
	}
	return reason
}

// request explains every target of a delete request (the deleter's input): the recorded
// outcome, and what the deleter's first step would find now — the same comparison the
// protocol makes before its CAS (DESIGN §6 step 1), without the CAS.
func (r *replayer) request(ctx context.Context, rm *ReplayMessage, src subjects.Source, req subjects.DeleteRequest) {
	events := r.idx.bySource[src]
	for _, t := range req.Targets {
		if r.q.BlockKey != nil && t.Key != *r.q.BlockKey {
			continue
		}
		lr := LocationReplay{Key: t.Key, Location: t.Location, Reason: t.Reason, Status: "-"}
		if l, err := kvcm.DecodeLocation(t.Location, t.Expected); err == nil {
			lr.Status = l.Status.String()
		}
		lr.Then = Verdict{Decision: DecisionNoEvent, Detail: "no delete event for this request"}
		if evs := events[eventKey{req.Instance, t.Key, t.Location}]; len(evs) > 0 {
			last := evs[len(evs)-1]
			lr.Then = Verdict{Decision: DecisionDelete, Outcome: last.ev.Outcome, Reason: last.ev.Reason,
				Detail: strings.TrimSpace(last.ev.Detail), EventSeq: last.seq}
			if len(evs) > 1 {
				lr.Then.Detail = subjects.JoinDetail(fmt.Sprintf("%d deliveries recorded", len(evs)), lr.Then.Detail)
			}
			if last.ev.DryRun {
				lr.Then.Detail = subjects.JoinDetail("dry-run", lr.Then.Detail)
			}
		}
		lr.Now, lr.Changed = r.nowDeleter(ctx, req, t)
		rm.Locations = append(rm.Locations, lr)
	}
}

// nowDeleter is the deleter's own step 1 (deleter.CheckTarget) against the block now.
func (r *replayer) nowDeleter(ctx context.Context, req subjects.DeleteRequest, t subjects.Target) (Verdict, bool) {
	cur, exists, err := r.deps.Blocks.ReadBlock(ctx, req.Store, req.Instance, t.Key)
	if err != nil {
		return Verdict{Decision: DecisionError, Detail: err.Error()}, false
	}
	if !exists {
		cur = meta.Entry{Instance: req.Instance, BlockKey: t.Key}
	}
	outcome, detail := deleter.CheckTarget(&cur, t)
	switch outcome {
	case deleter.CheckWouldDelete:
		return Verdict{Decision: DecisionWouldDelete, Detail: detail}, false
	case deleter.CheckWouldResume:
		return Verdict{Decision: DecisionWouldResume, Detail: detail}, true
	}
	return Verdict{Decision: outcome, Detail: detail}, true
}
