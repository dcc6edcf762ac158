package scanner

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// RoundStartPoll is how often a walk between rounds looks for an operator's request to start
// its next round now (kvcm-gc round start, pipeline.RoundStartRecord): a request is seen
// within it, whatever round_pause.
const RoundStartPoll = 5 * time.Second

// roundStarts reads the operators' round start requests for every walk of the scanner: one
// reading serves them all for pipeline.ControlRefresh.
type roundStarts struct {
	state   jetstream.KeyValue
	opError func(op string)
	log     func(err error)

	mu  sync.Mutex
	at  time.Time
	rec pipeline.RoundStartRecord
}

// read returns the requests as read at most pipeline.ControlRefresh ago. A reading that fails
// is no request: a round that does not start early is what round_pause asks anyway.
func (r *roundStarts) read(ctx context.Context, now time.Time) pipeline.RoundStartRecord {
	if r == nil || r.state == nil {
		return pipeline.RoundStartRecord{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && now.Sub(r.at) < pipeline.ControlRefresh && !now.Before(r.at) {
		return r.rec
	}
	rec, _, err := pipeline.ReadRoundStart(ctx, r.state)
	r.at = now
	if err != nil {
		r.opError("pause")
		r.log(err)
		rec = pipeline.RoundStartRecord{}
	}
	r.rec = rec
	return rec
}
