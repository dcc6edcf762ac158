package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/seed"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// scenario is one fault. setup (optional) adds to the keyspace before the snapshot and
// returns the expectations of what it added; run starts the stages, injects the fault and
// returns once the fault is over, with notes for the table and, when the fault changes what
// is expected (a writer), the expectation.
type scenario struct {
	name  string
	about string
	// sweepFiles seeds the orphan data files of the sweep (seed.Spec.SweepFiles).
	sweepFiles bool
	setup      func(ctx context.Context, e *env) ([]Loc, []string, error)
	run        func(ctx context.Context, e *env) (string, *Expect, error)
}

var scenarios = []scenario{
	{name: "kill-scanner", about: "kill -9 of the scanner at random moments, then a restart", run: killStage(stageScanner)},
	{name: "kill-prober", about: "kill -9 of the prober at random moments, then a restart", run: killStage(stageProber)},
	{name: "kill-deleter", about: "kill -9 of the deleter at random moments, mostly with deletes in flight, then a restart", run: killStage(stageDeleter)},
	{name: "kill-any", about: "kill -9 of a random stage at random moments, then a restart", run: killStage("")},
	{name: "redis-restart", about: "Redis restarted mid-round (SIGTERM, then SIGKILL), data kept by its append-only file", run: redisRestart},
	{name: "redis-outage", about: "Redis unreachable for a while mid-round, then back on the same port and data", run: redisOutage},
	{name: "nats-restart", about: "the NATS server restarted mid-round on its file store", run: natsRestart},
	{name: "scanner-failover", about: "two scanners; the leader killed mid-round; the other takes over from the checkpoint", run: scannerFailover},
	{name: "concurrent-writer", about: "a KVCM-like writer finishing writes and adding locations in the blocks being collected, right after probes too", run: concurrentWriter},
	{name: "clock-skew", about: "locations with create_time or __lru_time__ in the future are kept", setup: clockSkewSetup, run: plainRun},
	{name: "sweep-kills", about: "kill -9 of the walker and of sweepers mid-batch while orphan data files are swept, then restarts", sweepFiles: true, run: sweepKills},
}

const (
	stageScanner = "scanner"
	stageProber  = "prober"
	stageDeleter = "deleter"
)

// between draws a duration in [lo, hi).
func (e *env) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(e.rng.Int64N(int64(hi-lo)))
}

// killStage kills a process of stage (a random stage when "") cfg.Kills times at random
// moments from the start of the first round, starting a new one after each kill.
func killStage(stage string) func(ctx context.Context, e *env) (string, *Expect, error) {
	return func(ctx context.Context, e *env) (string, *Expect, error) {
		if err := e.startAll(); err != nil {
			return "", nil, err
		}
		if err := e.roundStarted(ctx, 1); err != nil {
			return "", nil, err
		}
		var killed []string
		for range e.cfg.Kills {
			// Every draw happens whatever the outcome, so the seed fixes the whole schedule.
			st := stage
			pick := stageCommands[e.rng.IntN(len(stageCommands))]
			if st == "" {
				st = pick
			}
			wait := e.between(50*time.Millisecond, 800*time.Millisecond)
			aim := e.rng.Float64() < 0.75
			down := e.between(0, 300*time.Millisecond)
			if aim {
				// Aim at the interesting moments: a deleter or a prober holding messages, a
				// scanner leading a round (after a kill, its successor waits out the lease).
				_ = e.waitFor(withTimeout(ctx, 4*time.Second), "a busy moment", func() bool {
					switch st {
					case stageDeleter:
						return e.ackPending(ctx, e.names.DeletesStream(), e.names.DeleterConsumer()) > 0
					case stageProber:
						return e.ackPending(ctx, e.names.BatchesStream(), e.names.ProberConsumer()) > 0
					case stageScanner:
						ck, err := e.checkpoint(ctx)
						return err == nil && ck.InRound && e.leader(ck) != nil
					}
					return true
				})
			}
			if err := sleep(ctx, wait); err != nil {
				return "", nil, err
			}
			ps := e.running(st)
			if len(ps) == 0 {
				return "", nil, fmt.Errorf("no running %s to kill", st)
			}
			ck, _ := e.checkpoint(ctx)
			e.kill(st, ps[0])
			killed = append(killed, fmt.Sprintf("%s@r%d/%d", st, ck.Round, ck.KeysScanned))
			if err := sleep(ctx, down); err != nil {
				return "", nil, err
			}
			if _, err := e.startStage(st); err != nil {
				return "", nil, err
			}
		}
		return "killed " + strings.Join(killed, " "), nil, nil
	}
}

func withTimeout(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	context.AfterFunc(c, cancel)
	return c
}

// midRound waits for the first round to be under way and then a random moment.
func midRound(ctx context.Context, e *env) error {
	if err := e.startAll(); err != nil {
		return err
	}
	if err := e.roundStarted(ctx, 1); err != nil {
		return err
	}
	return sleep(ctx, e.between(20*time.Millisecond, 400*time.Millisecond))
}

func redisRestart(ctx context.Context, e *env) (string, *Expect, error) {
	if err := midRound(ctx, e); err != nil {
		return "", nil, err
	}
	ck1, _ := e.checkpoint(ctx)
	if err := e.redis.RestartE(); err != nil {
		return "", nil, fmt.Errorf("restart redis: %w", err)
	}
	if err := sleep(ctx, e.between(100*time.Millisecond, 600*time.Millisecond)); err != nil {
		return "", nil, err
	}
	ck2, _ := e.checkpoint(ctx)
	e.redis.Kill()
	if err := e.redis.RestartE(); err != nil {
		return "", nil, fmt.Errorf("start redis after a kill: %w", err)
	}
	return fmt.Sprintf("restarted at round %d key %d, killed and started at round %d key %d",
		ck1.Round, ck1.KeysScanned, ck2.Round, ck2.KeysScanned), nil, nil
}

func redisOutage(ctx context.Context, e *env) (string, *Expect, error) {
	if err := midRound(ctx, e); err != nil {
		return "", nil, err
	}
	ck, _ := e.checkpoint(ctx)
	e.redis.Stop()
	if err := sleep(ctx, e.cfg.Outage); err != nil { // the outage itself
		return "", nil, err
	}
	if err := e.redis.RestartE(); err != nil {
		return "", nil, fmt.Errorf("bring redis back: %w", err)
	}
	return fmt.Sprintf("down %s from round %d key %d", e.cfg.Outage, ck.Round, ck.KeysScanned), nil, nil
}

func natsRestart(ctx context.Context, e *env) (string, *Expect, error) {
	if err := midRound(ctx, e); err != nil {
		return "", nil, err
	}
	var notes []string
	for range 2 {
		down := e.between(100*time.Millisecond, e.cfg.Outage/2)
		ck, _ := e.checkpoint(ctx)
		e.nats.Stop()
		if err := sleep(ctx, down); err != nil { // the downtime itself
			return "", nil, err
		}
		if err := e.nats.Start(); err != nil {
			return "", nil, fmt.Errorf("start nats again: %w", err)
		}
		notes = append(notes, fmt.Sprintf("down %s at round %d key %d", down.Round(time.Millisecond), ck.Round, ck.KeysScanned))
		if err := sleep(ctx, e.between(200*time.Millisecond, time.Second)); err != nil {
			return "", nil, err
		}
	}
	return strings.Join(notes, ", "), nil, nil
}

// scannerFailover kills the leader of two scanners mid-round; the other must take over and
// resume the round from the checkpoint (each key of the round counted once).
func scannerFailover(ctx context.Context, e *env) (string, *Expect, error) {
	// A slower scan, so the kill lands inside a round more surely.
	e.extra = []string{"--scan_interval", "100ms"}
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	if _, err := e.startStage(stageScanner); err != nil {
		return "", nil, err
	}
	at := uint64(float64(e.keys) * (0.2 + 0.4*e.rng.Float64()))
	var ck pipeline.Checkpoint
	if err := e.waitFor(ctx, "a round to pass the kill point", func() bool {
		var err error
		ck, err = e.checkpoint(ctx)
		return err == nil && ck.InRound && ck.KeysScanned >= at
	}); err != nil {
		return "", nil, err
	}
	round := ck.Round
	leader := e.leader(ck)
	if leader == nil {
		return "", nil, fmt.Errorf("no running scanner holds the checkpoint (holder %q)", ck.Holder)
	}
	e.kill(stageScanner, leader)
	if err := e.waitFor(ctx, fmt.Sprintf("the end of round %d", round), func() bool {
		c, err := e.checkpoint(ctx)
		if err == nil && c.Round == round && !c.InRound {
			ck = c
			return true
		}
		return false
	}); err != nil {
		return "", nil, err
	}
	if strings.HasSuffix(ck.Holder, "/"+strconv.Itoa(leader.Pid())) {
		return "", nil, fmt.Errorf("round %d ended by the killed leader %s", round, ck.Holder)
	}
	// In the first round every key exists from its start (a block is deleted only after this
	// round scanned it), so the count is exact: a restarted round would count more.
	if round == 1 && ck.LastRoundKeys != uint64(e.keys) {
		return "", nil, fmt.Errorf("%w: round 1 counted %d keys of %d: not resumed from the checkpoint", errViolation, ck.LastRoundKeys, e.keys)
	}
	if _, err := e.startStage(stageScanner); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("leader killed in round %d at key %d; %s finished the round with %d keys of %d", round, at, ck.Holder, ck.LastRoundKeys, e.keys), nil, nil
}

func concurrentWriter(ctx context.Context, e *env) (string, *Expect, error) {
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	w := newWriter(e, e.rng.Uint64())
	wctx, stop := context.WithTimeout(ctx, e.cfg.WriterFor)
	defer stop()
	if err := w.run(wctx); err != nil {
		return "", nil, err
	}
	if ctx.Err() != nil {
		return "", nil, ctx.Err()
	}
	if err := w.err(); err != nil {
		return "", nil, err
	}
	x, err := w.expect(ctx)
	if err != nil {
		return w.summary(), nil, err
	}
	noops, err := e.deleteOutcomes(ctx, subjects.OutcomeNoopMismatch)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s; %d deletes found the location changed", w.summary(), noops), &x, nil
}

// deleteOutcomes counts the delete events with the outcome, so far.
func (e *env) deleteOutcomes(ctx context.Context, outcome string) (int, error) {
	n := 0
	err := e.readEvents(ctx, func(ev subjects.Event) {
		if ev.Kind == subjects.EventDelete && ev.Outcome == outcome {
			n++
		}
	})
	return n, err
}

func plainRun(ctx context.Context, e *env) (string, *Expect, error) {
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	return "", nil, e.roundStarted(ctx, 1)
}

// clockSkewSetup adds WRITING locations whose time is in the future, which must be kept,
// and garbage that does not depend on a time, which must go, in blocks whose time is in the
// future.
func clockSkewSetup(ctx context.Context, e *env) ([]Loc, []string, error) {
	now := time.Now()
	us := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMicro(), 10) }
	root := filepath.Join(e.dir, "data", "nfs") + "/"
	missing := fmt.Sprintf(`{"name":"tp0","uri":"file://%s%sskew/missing?size=1024"}`, seed.StorageNFS, root)
	writing := func(id, extra string) string {
		return fmt.Sprintf(`%q:{"id":%q,"status":2,"type":4,"spec_size":0,"location_specs":[]%s}`, id, id, extra)
	}
	ct := func(d time.Duration) string { return `,"create_time":` + us(d) }
	blocks := []struct {
		lru  string
		locs []string
		fate []Fate
	}{
		{us(-72 * time.Hour), []string{writing("skewct30", ct(30*24*time.Hour))}, []Fate{Keep}},
		{us(time.Hour), []string{writing("skewlru1", "")}, []Fate{Keep}},
		{us(100 * 365 * 24 * time.Hour), []string{writing("skewlru2", "")}, []Fate{Keep}},
		{us(-72 * time.Hour), []string{writing("skewct01", ct(time.Minute))}, []Fate{Keep}},
		{us(time.Hour), []string{writing("skewboth", ct(time.Hour))}, []Fate{Keep}},
		// Storage-missing needs no age; a legacy location's age is the later of its create_time
		// and its block's __lru_time__ (kvcm.LegacyAge), so an old create_time in a block
		// written in the future is of unknown age too: kept.
		{us(time.Hour), []string{
			fmt.Sprintf(`"skewmiss":{"id":"skewmiss","status":3,"type":4,"spec_size":1,"location_specs":[%s]}`, missing),
			writing("skewold1", ct(-72*time.Hour)),
			writing("skewkeep", ""),
		}, []Fate{Go, Keep, Keep}},
	}
	var out []Loc
	for i, b := range blocks {
		k := kvcm.BlockKey("inst0", int64(9_100_000_000+i))
		if err := e.redis.Client().HSet(ctx, k, "__uri__", "{"+strings.Join(b.locs, ",")+"}", "__lru_time__", b.lru).Err(); err != nil {
			return nil, nil, err
		}
		e.keys++
		for j, l := range b.locs {
			id := l[1 : strings.IndexByte(l[1:], '"')+1]
			out = append(out, Loc{Key: k, ID: id, Fate: b.fate[j]})
		}
	}
	return out, nil, nil
}

// leader returns the running scanner that saved ck, if any.
func (e *env) leader(ck pipeline.Checkpoint) *Proc {
	for _, p := range e.running(stageScanner) {
		if strings.HasSuffix(ck.Holder, "/"+strconv.Itoa(p.Pid())) {
			return p
		}
	}
	return nil
}
