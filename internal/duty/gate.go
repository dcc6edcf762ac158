package duty

import (
	"context"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
)

// Gate makes operations wait for their pace and the ceiling, one at a time: Begin waits,
// then starts an operation; the operation's Done ends it. Operations of several goroutines
// (a deleter's workers on one store) queue at the gate, so together they keep the duty.
type Gate struct {
	p       *Pacer
	ceiling *Ceiling
	// slot is held from an operation's start to its Done.
	slot chan struct{}

	mu      sync.Mutex
	holding bool // the last wait held for the ceiling
}

// NewGate returns a gate for p; ceiling may be nil (no ceiling).
func NewGate(p *Pacer, ceiling *Ceiling) *Gate {
	return &Gate{p: p, ceiling: ceiling, slot: make(chan struct{}, 1)}
}

// Op is a started operation.
type Op struct {
	g     *Gate
	start time.Time
	once  sync.Once
}

// Begin waits until an operation on keys keys may start, holding while the ceiling says the
// server is too busy, then starts it. The operation's Done must be called once it is
// answered, or failed: the next operation waits for it.
func (g *Gate) Begin(ctx context.Context, keys int) (*Op, error) {
	select {
	case g.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		now := time.Now()
		if c := g.ceiling; c != nil && c.Busy(ctx, now) {
			g.setHolding(true)
			if err := backoff.Sleep(ctx, c.Every()); err != nil {
				<-g.slot
				return nil, err
			}
			continue
		}
		g.mu.Lock()
		w := g.p.Wait(now)
		if w <= 0 {
			if g.holding {
				g.holding = false
				g.p.Idle() // the hold is no part of the operations' share
			}
			g.p.Start(now, keys)
			g.mu.Unlock()
			return &Op{g: g, start: now}, nil
		}
		g.mu.Unlock()
		if err := backoff.Sleep(ctx, w); err != nil {
			<-g.slot
			return nil, err
		}
	}
}

// Done ends the operation: it held the server for held (its time on the server's clock), or,
// when held is negative, for its round trip since it started. A second Done does nothing.
func (o *Op) Done(held time.Duration) {
	o.once.Do(func() {
		end := time.Now()
		if held < 0 {
			held = end.Sub(o.start)
		}
		o.g.mu.Lock()
		o.g.p.Done(end, held)
		o.g.mu.Unlock()
		<-o.g.slot
	})
}

func (g *Gate) setHolding(h bool) {
	g.mu.Lock()
	g.holding = h
	g.mu.Unlock()
}

// Pace is where the gate's pacer stands; its reason is ReasonBusy while it holds for the
// ceiling.
func (g *Gate) Pace() Pace {
	g.mu.Lock()
	defer g.mu.Unlock()
	pc := g.p.Pace()
	if g.holding {
		pc.Reason = ReasonBusy
	}
	return pc
}

// Totals are the gate's pacer's sums so far.
func (g *Gate) Totals() Totals {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.p.Totals()
}
