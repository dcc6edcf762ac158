package duty

import (
	"context"
	"sync"
	"time"
)

// Trips gates a sequence of round trips to the server through a Gate, in the shape of a
// store's paced read (meta.Bursts): Begin before each round trip, with the keys it reads,
// Took once it is answered, with how long it held the server. A round trip that failed
// before its Took is ended at the next Begin, by its round trip.
type Trips struct {
	g *Gate
	// RoundTrip: Took's time is not trusted (a store that cannot time its commands on its own
	// clock), the gate times the round trip.
	RoundTrip bool

	mu   sync.Mutex
	op   *Op
	held time.Duration
	n    int
	// rt is the round trips ended by Took, from their start at the gate to Took.
	rt time.Duration
}

// NewTrips returns the round trips of g.
func NewTrips(g *Gate) *Trips { return &Trips{g: g} }

// Begin waits until a round trip reading keys keys may start, and starts it.
func (t *Trips) Begin(ctx context.Context, keys int) error {
	t.mu.Lock()
	if t.op != nil {
		t.op.Done(-1)
		t.op = nil
	}
	t.mu.Unlock()
	op, err := t.g.Begin(ctx, keys)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.op = op
	t.mu.Unlock()
	return nil
}

// Took ends the running round trip: it held the server for held.
func (t *Trips) Took(_ int, held time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.op == nil {
		return
	}
	t.held += held
	t.n++
	t.rt += time.Since(t.op.start)
	if t.RoundTrip {
		held = -1
	}
	t.op.Done(held)
	t.op = nil
}

// End ends a round trip still running (the read stopped between Begin and Took).
func (t *Trips) End() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.op != nil {
		t.op.Done(-1)
		t.op = nil
	}
}

// Held is the time the round trips ended by Took held the server, and how many they were.
func (t *Trips) Held() (time.Duration, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held, t.n
}

// RoundTrips is the time the round trips ended by Took took, from their start at the gate to
// Took: what the server's time (Held) is a part of.
func (t *Trips) RoundTrips() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rt
}

// Gate is the gate the round trips wait at.
func (t *Trips) Gate() *Gate { return t.g }
