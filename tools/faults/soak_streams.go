package faults

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Discards. Every stream keeps its messages by limits (discard old, DESIGN §3.2): a stream
// that reaches max_bytes drops its oldest messages, acknowledged or not, and nothing refuses
// the new one. Its size is therefore always within its limit, and saying so checks nothing.
// What must hold is that nothing leaves a stream before its consumer took it: a message
// below the stream's first sequence must be at or below the consumer's ack floor.
//
// streamWatch reads each stream's state, then its consumer's, every streamPoll. A message
// the stream holds no more had left it by the time of the stream read; the consumer's ack
// floor read before that (at the previous poll) only grows, so if every message below the
// stream's first sequence was acknowledged when it left, that earlier floor may still be
// lower only by messages acknowledged between the two polls. The check is thus: the first
// sequence may pass the floor of the previous poll by nothing. A poll that misses a discard
// cannot hide it either: the floor the stream passed is the last one read before, however
// long ago. (It may report a loss when the consumer acknowledged a message and the stream
// discarded it within one poll: a stream that discards what was acknowledged a moment ago is
// a moment from discarding what was not.)
type streamWatch struct {
	e       *env
	streams []consumerOf

	mu    sync.Mutex
	state map[string]*streamState // by stream
}

// streamState is what the watch knows of one stream.
type streamState struct {
	// floor is the consumer's ack floor at the last poll; first, last and bytes the stream's.
	floor, first, last, bytes uint64
	limit                     int64
	// left counts the messages that left the stream (acknowledged before), lost those that left
	// it unacknowledged, since the start.
	left, lost uint64
	losses     []string // what was lost, for the report
	polls      int
}

// streamPoll is how often the streams are read.
const streamPoll = 250 * time.Millisecond

func newStreamWatch(e *env) *streamWatch {
	w := &streamWatch{e: e, streams: e.inputs(), state: map[string]*streamState{}}
	for _, c := range w.streams {
		w.state[c.stream] = &streamState{first: 1}
	}
	return w
}

// run polls until ctx ends.
func (w *streamWatch) run(ctx context.Context) { tick(ctx, streamPoll, func() { w.poll(ctx) }) }

func (w *streamWatch) poll(ctx context.Context) {
	for _, c := range w.streams {
		st, err := w.e.streamState(ctx, c.stream)
		if err != nil {
			continue
		}
		// Read after the stream: its floor is the next poll's.
		info, cerr := w.e.consumerState(ctx, c)
		w.mu.Lock()
		s := w.state[c.stream]
		if st.State.FirstSeq > s.first {
			if from := max(s.first, s.floor+1); st.State.FirstSeq > from {
				n := st.State.FirstSeq - from
				s.lost += n
				if len(s.losses) < 5 {
					s.losses = append(s.losses, fmt.Sprintf("%s discarded #%d-#%d before %s acknowledged them (its ack floor was #%d)",
						c.stream, from, st.State.FirstSeq-1, c.consumer, s.floor))
				}
			}
			s.left += st.State.FirstSeq - s.first
			s.first = st.State.FirstSeq
		}
		s.last, s.bytes, s.limit = st.State.LastSeq, st.State.Bytes, st.Config.MaxBytes
		if cerr == nil {
			s.floor = max(s.floor, info.AckFloor.Stream)
		}
		s.polls++
		w.mu.Unlock()
	}
}

// StreamFigures are one stream's figures at a moment.
type StreamFigures struct {
	Name  string
	Bytes uint64
	Limit int64 // max_bytes (-1: none)
	// Backlog: messages above the consumer's ack floor. Left: messages that left the stream
	// (its limits), Lost: of those, the ones its consumer had not acknowledged — since the
	// start of the run.
	Backlog, Left, Lost uint64
}

// figures returns every stream's figures now.
func (w *streamWatch) figures() []StreamFigures {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []StreamFigures
	for _, c := range w.streams {
		s := w.state[c.stream]
		out = append(out, StreamFigures{Name: c.stream, Bytes: s.bytes, Limit: s.limit, Backlog: s.last - min(s.floor, s.last),
			Left: s.left, Lost: s.lost})
	}
	return out
}

// takeLosses returns the losses found since the last call.
func (w *streamWatch) takeLosses() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, c := range w.streams {
		s := w.state[c.stream]
		out = append(out, s.losses...)
		s.losses = nil
	}
	return out
}

// streamState reads a stream's info, bounded by readTimeout.
func (e *env) streamState(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	st, err := e.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

// consumerState reads a consumer's info, bounded by readTimeout.
func (e *env) consumerState(ctx context.Context, c consumerOf) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	cons, err := e.js.Consumer(ctx, c.stream, c.consumer)
	if err != nil {
		return nil, err
	}
	return cons.Info(ctx)
}
