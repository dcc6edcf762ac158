package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A walk is a long-running loop over pages (a metadata store's keys, a swept storage's
// files) under a Lease, its position in a checkpoint written by revision, its pace its own.
// Every walk is built the same way, as the scanner's walk of a store (package scanner) and
// the sweep's walk of a storage (package sweep) are:
//
//   - a state machine whose step takes the walk's state and one event (a tick with the
//     readings it needs — WalkTick —, a page read, a page published, a checkpoint written)
//     and returns the actions to perform (read a page, publish it, write the checkpoint,
//     wait). It does no I/O and reads no clock: every decision, every hold and every
//     failure path is a row of a table test. Its events and actions are sealed types, each
//     handled by a case of a type switch (internal/sealed checks that none is missing);
//   - a driver that performs the actions, feeds their results back as events and waits
//     (Loop): the only code between the state machine and the servers;
//   - the Lease, renewed in the background by a goroutine the driver joins before it
//     releases the lease, and Controls: an operator's pause and the backlog downstream,
//     read before a walk moves (fail closed: a reading that fails holds it).
//
// Every path that makes no progress waits at least IdleWait (DESIGN §8.7: nothing spins).

// WalkPhase is where a walk stands with its lease and checkpoint.
type WalkPhase int

const (
	PhaseLoad  WalkPhase = iota // the lease is held (or awaited), the checkpoint not read yet
	PhaseReady                  // the checkpoint is read: between rounds, or walking
	PhaseDone                   // the walk is over: lost, released or stopped
)

func (p WalkPhase) String() string {
	switch p {
	case PhaseLoad:
		return "load"
	case PhaseReady:
		return "ready"
	case PhaseDone:
		return "done"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// Stepper is a walk's state machine, stepped by a Loop.
type Stepper[E, A any] interface {
	// Step is the whole decision of one event: its effect on the state and the actions.
	Step(ev E) []A
	// Phase is the walk's phase; the loop ends at PhaseDone.
	Phase() WalkPhase
	// Idle is the wait of a chain of steps that asks for none: nothing spins by omission.
	Idle() time.Duration
}

// Loop drives a walk: it feeds each event to the walk's Step, performs the actions (each may
// produce the next event, stepped in turn), then waits for the time the last wait action
// asked (Wait), for Wake, or for ctx, and ticks again.
type Loop[E, A any] struct {
	Walk Stepper[E, A]
	// Tick returns the event of a tick (its readings: WalkTick, and the walk's own). Once ctx
	// is done the loop no longer waits: the walk is told by its tick and ends when it has
	// recorded what it had in flight.
	Tick func(ctx context.Context) E
	// Perform does one action; ok says whether it produced an event.
	Perform func(ctx context.Context, a A) (ev E, ok bool)
	// Observe, when set, runs after every chain of steps (gauges from the state).
	Observe func()
	// Wake, when set, ends a wait early.
	Wake <-chan struct{}

	wait time.Duration
}

// Wait sets the time until the next tick; the last call of a chain of steps wins. Perform
// calls it for a walk's wait action.
func (l *Loop[E, A]) Wait(d time.Duration) { l.wait = d }

// Run drives the walk until its phase is PhaseDone.
func (l *Loop[E, A]) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	queue := []E{l.Tick(ctx)}
	for {
		l.wait = l.Walk.Idle()
		for len(queue) > 0 {
			ev := queue[0]
			queue = queue[1:]
			for _, a := range l.Walk.Step(ev) {
				if e, ok := l.Perform(ctx, a); ok {
					queue = append(queue, e)
				}
			}
		}
		if l.Observe != nil {
			l.Observe()
		}
		if l.Walk.Phase() == PhaseDone {
			return
		}
		if ctx.Err() == nil {
			timer.Reset(l.wait)
			select {
			case <-ctx.Done():
			case <-timer.C:
			case <-l.Wake:
			}
			timer.Stop()
		}
		queue = append(queue, l.Tick(ctx))
	}
}

// WriteCheckpoint stores v, JSON-encoded, as key of kv by revision: created when rev is 0 (the
// first one), else updated only if rev is still the key's revision. It returns the new
// revision. A write that finds another revision is a conflict (IsConflict): someone else
// wrote the checkpoint, and the walk is no longer its owner.
func WriteCheckpoint(ctx context.Context, kv jetstream.KeyValue, key string, v any, rev uint64) (uint64, error) {
	val, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", key, err)
	}
	if rev == 0 {
		return kv.Create(ctx, key, val)
	}
	return kv.Update(ctx, key, val, rev)
}

// ReadJSON reads key of kv, JSON-encoded, into v and returns its revision: 0, with v as it
// was, when the key does not exist (nothing written yet). what names the value in errors. It
// reads what WriteCheckpoint writes.
func ReadJSON(ctx context.Context, kv jetstream.KeyValue, key, what string, v any) (uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", what, err)
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return 0, fmt.Errorf("decode %s: %w", what, err)
	}
	return e.Revision(), nil
}

// IsConflict reports whether a write by revision found another revision.
func IsConflict(err error) bool {
	return err != nil && (errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch))
}

// IdleWait is the least time between two ticks that did not move a walk on (a pause, a full
// backlog, an error): an unpaced walk would otherwise spin on those checks (invariant 7).
const IdleWait = 100 * time.Millisecond
