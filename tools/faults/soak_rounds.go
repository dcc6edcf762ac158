package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// roundWatch follows the scanner's checkpoint: when each round was first seen under way and
// over, and what it scanned. Every garbage location made before a read of the checkpoint gets
// the round that read shows (if it has none yet): it existed before the next round started, so
// by that round's end it must be gone.
type roundWatch struct {
	e  *env
	sm *soakModel
	// onEnd, when set, is called (outside the watch's lock) when the watch sees rounds from
	// to r end, from the poll that saw it.
	onEnd func(from, r uint64, at time.Time)

	mu     sync.Mutex
	starts map[uint64]time.Time
	ends   map[uint64]time.Time
	nkeys  map[uint64]uint64
	durs   map[uint64]time.Duration
	// told is the last round whose end onEnd has been told of and has returned from.
	told uint64
}

func newRoundWatch(e *env, sm *soakModel) *roundWatch {
	return &roundWatch{e: e, sm: sm, starts: map[uint64]time.Time{}, ends: map[uint64]time.Time{},
		nkeys: map[uint64]uint64{}, durs: map[uint64]time.Duration{}}
}

// roundPoll is how often the checkpoint is read.
const roundPoll = 50 * time.Millisecond

// run polls the checkpoint every roundPoll until ctx ends.
func (w *roundWatch) run(ctx context.Context) { tick(ctx, roundPoll, func() { w.poll(ctx) }) }

// poll reads the checkpoint once and records what it tells.
func (w *roundWatch) poll(ctx context.Context) {
	// The garbage made so far existed before this read: whatever round the read shows, the
	// next had not started yet.
	undue := w.sm.takeUndue()
	// A short bound: a read lost while NATS restarts is asked again at the next poll rather
	// than waited for, so that no round's end goes unseen.
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	ck, err := w.e.checkpoint(rctx)
	cancel()
	if err != nil || ck.Round == 0 {
		w.sm.giveBack(undue)
		return
	}
	w.sm.assignDue(undue, ck.Round)
	w.record(ck, time.Now())
}

// record notes what checkpoint ck, read at now, tells. A round it shows over is over at once
// for ended and lastEnded, and recorded only once onEnd has returned, so that the round's row,
// which waits for recorded, reads what onEnd took at the round's end.
func (w *roundWatch) record(ck pipeline.Checkpoint, now time.Time) {
	w.mu.Lock()
	if _, ok := w.starts[ck.Round]; !ok && (ck.InRound || ck.LastRoundKeys > 0) {
		w.starts[ck.Round] = now
	}
	// A checkpoint in round n tells the last round's figures: n-1's (in round), n's (after).
	last := ck.Round
	if ck.InRound {
		last--
	}
	if _, ok := w.nkeys[last]; !ok && last > 0 && ck.LastRoundKeys > 0 {
		w.nkeys[last] = ck.LastRoundKeys
		w.durs[last] = time.Duration(ck.LastRoundDuration) * time.Millisecond
	}
	var from uint64
	for r := uint64(1); r <= last; r++ {
		if _, ok := w.ends[r]; !ok {
			w.ends[r] = now // over, whether or not this watch saw it
			if from == 0 {
				from = r
			}
		}
	}
	w.mu.Unlock()
	if from == 0 {
		return
	}
	if w.onEnd != nil {
		w.onEnd(from, last, now)
	}
	w.mu.Lock()
	w.told = max(w.told, last)
	w.mu.Unlock()
}

// recorded reports whether round r's end has been told to onEnd, which has returned.
func (w *roundWatch) recorded(r uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return r <= w.told
}

// seen reports whether round r (or a later one) has started.
func (w *roundWatch) seen(r uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.starts {
		if s >= r {
			return true
		}
	}
	return false
}

// lastEnded is the last round seen over.
func (w *roundWatch) lastEnded() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last uint64
	for r := range w.ends {
		last = max(last, r)
	}
	return last
}

// ended reports whether round r is over.
func (w *roundWatch) ended(r uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.ends[r]
	return ok
}

func (w *roundWatch) started(r uint64) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts[r]
}

// duration is round r's duration as the scanner measured it (else as seen).
func (w *roundWatch) duration(r uint64) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.durs[r]; d > 0 {
		return d
	}
	start, ok := w.starts[r]
	if end, over := w.ends[r]; ok && over {
		return end.Sub(start)
	}
	return 0
}

func (w *roundWatch) keys(r uint64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nkeys[r]
}

// consumerOf is a stage's durable consumer.
type consumerOf struct{ stream, consumer string }

func (e *env) inputs() []consumerOf {
	return []consumerOf{{e.names.BatchesStream(), e.names.ProberConsumer()}, {e.names.DeletesStream(), e.names.DeleterConsumer()},
		{e.names.SweepStream(), e.names.SweeperConsumer()}}
}

// drain waits until everything published before the round's end is handled: the prober has
// acknowledged every batch up to the BATCHES stream's last sequence at the end, then the
// deleter every request up to DELETES' last sequence once the prober was through, and the
// sweeper likewise. The next round publishes meanwhile; what matters is that nothing of this
// one is left behind (a backlog that grows from round to round would be). Round 1's backlog
// is the seed's garbage, some 120,000 locations in `make soak`, which the deleter takes at its
// paced rate (2 requests in flight, delete_delay between two): it gets firstDrainFactor times
// DrainTimeout (drainTimeout).
func (s *soak) drain(ctx context.Context, r uint64) (time.Duration, error) {
	started := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.drainTimeout(r))
	defer cancel()
	for _, c := range s.e.inputs() {
		var last uint64
		if err := s.e.waitFor(ctx, "the last sequence of "+c.stream, func() bool {
			st, err := s.e.streamState(ctx, c.stream)
			if err != nil {
				return false
			}
			last = st.State.LastSeq
			return true
		}); err != nil {
			return 0, err
		}
		if err := s.e.waitFor(ctx, fmt.Sprintf("%s to handle %s up to #%d", c.consumer, c.stream, last), func() bool {
			info, err := s.e.consumerState(ctx, c)
			return err == nil && (info.AckFloor.Stream >= last || info.NumPending == 0 && info.NumAckPending == 0)
		}); err != nil {
			return 0, fmt.Errorf("backlog: %w", err)
		}
	}
	if s.seedDrained.IsZero() {
		s.seedDrained = time.Now()
	}
	return time.Since(started), nil
}

// drainTimeout bounds round r's drain: DrainTimeout, or firstDrainFactor times it for the
// seed's garbage. That is the first drain's backlog, and also that of every round that started
// before the first drain was over: its scan found the seed's garbage the deleter had not reached yet
// and published it again. On a small keyspace round 1 lasts seconds, its drain minutes, so a
// few rounds do (4×10,000 blocks on a three-node cluster at load 35: round 2's drain ran out
// of 5 minutes).
func (s *soak) drainTimeout(r uint64) time.Duration {
	start := s.rounds.started(r)
	if r == 1 || s.seedDrained.IsZero() || !start.IsZero() && start.Before(s.seedDrained) {
		return s.cfg.DrainTimeout * firstDrainFactor
	}
	return s.cfg.DrainTimeout
}

// firstDrainFactor is how many times DrainTimeout the seed's drain may take (drainTimeout).
const firstDrainFactor = 4

// eventTally is where the reading of the EVENTS stream is.
type eventTally struct {
	next uint64 // the next sequence to read
	lost uint64 // events the stream's limits discarded before they were read
}

// readEvents reads the events stored since the last call: kvcm-gc's delete outcomes (what it
// collected, the races it lost) and its dead letters.
func (s *soak) readEvents(ctx context.Context) error {
	var info *jetstream.StreamInfo
	if err := s.e.waitFor(ctx, "the events stream", func() bool {
		var err error
		info, err = s.e.streamState(ctx, s.e.names.EventsStream())
		return err == nil
	}); err != nil {
		return err
	}
	if s.events.next == 0 {
		s.events.next = 1
	}
	if info.State.FirstSeq > s.events.next {
		s.events.lost += info.State.FirstSeq - s.events.next
		s.events.next = info.State.FirstSeq
	}
	last := info.State.LastSeq
	if last < s.events.next {
		return nil
	}
	// Each attempt reads with an ordered consumer of its own from where the last one got to:
	// one lost to a node's loss or a leader's election is replaced, for up to two minutes.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var lastErr error
	for s.events.next <= last {
		if rctx.Err() != nil {
			return fmt.Errorf("read events: stalled at #%d of #%d: %w", s.events.next, last, lastErr)
		}
		if lastErr = s.readEventsOnce(rctx, last); lastErr != nil {
			_ = sleep(rctx, 200*time.Millisecond)
		}
	}
	return nil
}

// readEventsOnce reads events from s.events.next up to last with one ordered consumer.
func (s *soak) readEventsOnce(ctx context.Context, last uint64) error {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	st, err := s.e.js.Stream(ctx, s.e.names.EventsStream())
	if err != nil {
		return err
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: s.events.next})
	if err != nil {
		return err
	}
	for s.events.next <= last {
		// No more than are stored: a fetch of more waits out its whole MaxWait.
		b, err := c.Fetch(int(min(1000, last-s.events.next+1)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		got := 0
		for m := range b.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			s.events.next = md.Sequence.Stream + 1
			ev, err := subjects.DecodeEvent(m.Data())
			if err != nil {
				continue
			}
			s.tally(ev)
		}
		if got == 0 {
			if err := b.Error(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// roundOutcomes are kvcm-gc's delete outcomes of one round's requests, and its dead letters.
type roundOutcomes struct {
	Collected, LostRaces, Beaten, DeleteErrors, DeadLetters int
}

// tally counts an event in the round it is about (a dead letter without one: the last round
// over when it was read).
func (s *soak) tally(ev subjects.Event) {
	r := ev.Round
	if r == 0 {
		r = s.rounds.lastEnded()
	}
	var d roundOutcomes
	switch ev.Kind {
	case subjects.EventPoison, subjects.EventDeadLetter:
		d.DeadLetters++
		s.note("dead letter (%s, %s): %s", ev.Kind, ev.Stage, ev.Reason)
	case subjects.EventDelete:
		for _, t := range ev.PerTarget() {
			switch t.Outcome {
			case subjects.OutcomeDeleted, subjects.OutcomePartial:
				d.Collected++
				if t.Key != nil {
					if wrong := s.sm.noteCollected(kvcm.BlockKey(t.Instance, *t.Key), t.Location); wrong != "" {
						s.problem("round %d: %s", r, wrong)
					}
				}
			case subjects.OutcomeNoopMismatch:
				d.LostRaces++
			case subjects.OutcomeNoopGone:
				d.Beaten++
			case subjects.OutcomeError:
				d.DeleteErrors++
			}
		}
	default:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.byRound[r]
	if o == nil {
		o = &roundOutcomes{}
		s.byRound[r] = o
	}
	o.Collected += d.Collected
	o.LostRaces += d.LostRaces
	o.Beaten += d.Beaten
	o.DeleteErrors += d.DeleteErrors
	o.DeadLetters += d.DeadLetters
}

func (s *soak) note(format string, a ...any) { s.notesOut.add(format, a...) }

func (s *soak) notes() []string {
	out := s.notesOut.all()
	if s.sm != nil {
		s.sm.mu.Lock()
		if s.sm.upstreamDropped > 0 {
			out = append(out, fmt.Sprintf("upstream's GC deleted %d upgraded blocks whole (it took the last location of the layout it reads, then the key), with %d locations",
				s.sm.upstreamDropped, s.sm.upstreamDroppedLocs))
		}
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(s.sm.collectedKinds)) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, s.sm.collectedKinds[k]))
		}
		out = append(out, fmt.Sprintf("kvcm-gc's delete events name %d distinct locations it removed; by what made them and their fate "+
			"in the model (1 garbage, 2 either; forgotten: gone from the model before the event was read): %s",
			len(s.sm.collected), strings.Join(kinds, ", ")))
		if n := s.sm.afterRefresh; n > 0 {
			out = append(out, fmt.Sprintf("%d of them were WRITING garbage whose legacy block KVCM wrote again (its __lru_time__ made "+
				"them young) after kvcm-gc judged them: their bytes unchanged, the deleter's compare-and-swap took them", n))
		}
		s.sm.mu.Unlock()
	}
	if s.work != nil {
		if steps := s.work.steps.Load(); steps > 0 {
			out = append(out, fmt.Sprintf("KVCM's workload took %d steps; its writes waited %s in all for the model (the checks hold it for %d keys at a time)",
				steps, time.Duration(s.work.waited.Load()).Round(time.Millisecond), compareRun))
		}
		if n := s.work.failures.total(); n > 0 {
			out = append(out, fmt.Sprintf("%d of KVCM's writes failed with Redis errors: %s", n, &s.work.failures))
		}
		if n := s.work.lostRaces.Load(); n > 0 {
			out = append(out, fmt.Sprintf("%d locations stay DELETING for good in upgraded blocks: a collector marked them just before KVCM upgraded the block", n))
		}
	}
	if s.events.lost > 0 {
		out = append(out, fmt.Sprintf("%d events discarded by the EVENTS stream's limits before they were read", s.events.lost))
	}
	return out
}

// boundedLog keeps the first lines added to it, safe for concurrent use.
type boundedLog struct {
	mu    sync.Mutex
	lines []string
}

// boundedLines is how many lines a boundedLog keeps.
const boundedLines = 20

func (b *boundedLog) add(format string, a ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lines) < boundedLines {
		b.lines = append(b.lines, fmt.Sprintf(format, a...))
	}
}

// take returns the lines and empties the log.
func (b *boundedLog) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.lines
	b.lines = nil
	return out
}

// all returns the lines.
func (b *boundedLog) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines)
}

// writeFailures counts the workload's writes that Redis failed, by error, each dated from the
// end of the Redis fault before it: what a restarted Redis does in its first moments shows
// there, apart from what it does at any time.
type writeFailures struct {
	mu      sync.Mutex
	lastEnd time.Time // the end of the last Redis fault (zero: none yet)
	n       int64
	kinds   []failureKind // in order of first sight, at most failureKinds
}

// failureKind is one error's failures: before counts those that came before any Redis fault
// had ended, minAfter and maxAfter bound how long after one the others came.
type failureKind struct {
	text               string
	n, before          int64
	minAfter, maxAfter time.Duration
}

// failureKinds bounds the errors kept apart; the failures of any other go under "other".
const failureKinds = 8

func (f *writeFailures) faultEnded(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastEnd = at
}

func (f *writeFailures) add(err error, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	text := err.Error()
	i := slices.IndexFunc(f.kinds, func(k failureKind) bool { return k.text == text })
	if i < 0 && len(f.kinds) >= failureKinds {
		text = "other"
		i = slices.IndexFunc(f.kinds, func(k failureKind) bool { return k.text == text })
	}
	if i < 0 {
		f.kinds = append(f.kinds, failureKind{text: text})
		i = len(f.kinds) - 1
	}
	k := &f.kinds[i]
	k.n++
	if f.lastEnd.IsZero() {
		k.before++
		return
	}
	after := at.Sub(f.lastEnd)
	if k.n-k.before == 1 || after < k.minAfter {
		k.minAfter = after
	}
	k.maxAfter = max(k.maxAfter, after)
}

// total is the number of failed writes.
func (f *writeFailures) total() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// String says, for each error, how many writes failed with it and when.
func (f *writeFailures) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := make([]string, 0, len(f.kinds))
	for _, k := range f.kinds {
		var when []string
		if k.before > 0 {
			when = append(when, fmt.Sprintf("%d before any Redis fault", k.before))
		}
		if after := k.n - k.before; after > 0 {
			when = append(when, fmt.Sprintf("%d from %s to %s after a Redis fault ended", after,
				k.minAfter.Round(time.Millisecond), k.maxAfter.Round(time.Millisecond)))
		}
		parts = append(parts, fmt.Sprintf("%d × %q (%s)", k.n, k.text, strings.Join(when, ", ")))
	}
	return strings.Join(parts, "; ")
}
