package faults

import (
	"context"
	"fmt"
	"time"
)

// Faults of the soak, in turn: a kill -9 of a stage (any of the five, drawn), a Redis restart
// (graceful, or after a kill -9), and the NATS fault of the run's topology: the server
// restarted on its store, or one node of the cluster killed with SIGKILL and started again
// once another leads.
var soakFaults = []string{"kill", "redis", "nats"}

// fault injects the next fault at a random moment of round r and returns what it did.
func (s *soak) fault(ctx context.Context, r uint64) (string, error) {
	kind := soakFaults[(int(r)/s.cfg.FaultEvery-1)%len(soakFaults)]
	// Draw everything first, so the seed fixes the schedule whatever happens.
	stage := soakStages[s.rng.IntN(len(soakStages))]
	hard := s.rng.IntN(2) == 0
	node := s.rng.IntN(clusterNodes)
	frac := 0.1 + 0.6*s.rng.Float64()
	down := time.Duration(100+s.rng.IntN(900)) * time.Millisecond
	// A moment inside the round: a share of the last round's duration.
	if d := s.rounds.duration(r - 1); d > 0 {
		if err := sleep(ctx, time.Duration(frac*float64(d))); err != nil {
			return kind, err
		}
	}
	e := s.e
	switch kind {
	case "kill":
		ps := e.running(stage)
		if len(ps) == 0 {
			return kind, fmt.Errorf("no running %s to kill", stage)
		}
		e.kill(stage, ps[0])
		if err := sleep(ctx, down); err != nil {
			return kind, err
		}
		if _, err := e.startStage(stage); err != nil {
			return kind, err
		}
		return "kill -9 " + stage, nil
	case "redis":
		// KVCM's writes wait while Redis is away (they would fail, and KVCM retries them).
		s.work.pause()
		defer s.work.resume()
		if s.up != nil {
			// Upstream's GC persists nothing: its requests finish, and a new one starts after.
			s.up.halt()
			defer func() {
				if err := s.up.start(ctx); err != nil {
					s.problem("restart upstream's GC: %v", err)
				}
			}()
		}
		if hard {
			e.redis.Kill()
		}
		if err := e.redis.Restart(); err != nil {
			return kind, fmt.Errorf("restart redis: %w", err)
		}
		if hard {
			return "redis kill -9, restart", nil
		}
		return "redis restart", nil
	default:
		if e.js3 == nil {
			e.nats.Shutdown()
			if err := sleep(ctx, down); err != nil {
				return kind, err
			}
			if err := e.nats.Start(); err != nil {
				return kind, fmt.Errorf("start nats again: %w", err)
			}
			return "nats restart", nil
		}
		e.js3.Kill(node)
		if err := sleep(ctx, down+time.Second); err != nil {
			return kind, err
		}
		if err := e.js3.Start(node); err != nil {
			return kind, err
		}
		// Caught up before anything else fails: a second loss before that could take a
		// stream's quorum.
		for _, st := range []string{e.names.BatchesStream(), e.names.DeletesStream(), e.names.EventsStream(), e.names.SweepStream(),
			"KV_" + e.names.StateBucket(), "KV_" + e.names.LeaseBucket()} {
			if err := e.waitFor(ctx, "every replica of "+st+" current", func() bool {
				_, ok := streamCurrent(withTimeout(ctx, time.Second), e.js, st, clusterNodes)
				return ok
			}); err != nil {
				return kind, err
			}
		}
		return fmt.Sprintf("nats node n%d kill -9, restart", node), nil
	}
}
