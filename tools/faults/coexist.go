package faults

import (
	"context"
	"fmt"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// besideUpstream runs KVCM's own GC (UpstreamGC, the emulator of its five-step delete
// protocol) over the keyspace kvcm-gc collects, at the same time: the emulator and kvcm-gc's
// stages start together, the emulator scanning as fast as the scanner (one batch of 32 keys
// every 20 ms, round-robin over the instances) and waiting 150 ms between its CAS and its
// physical delete, as a busy executor does. They race over
// the same garbage until kvcm-gc's first round is over and the emulator has gone round once;
// then the emulator stops (its accepted requests finished) and kvcm-gc's rounds collect what
// is left.
//
// The emulator plays a KVCM whose nfs_01 storage can stat and delete its files (as its HF3FS
// backend does), so both collectors judge storage-missing and delete data over the same files;
// nfs_shared is KVCM's NFS backend of today (never missing, a no-op delete). The keyspace has
// no upgraded keys (a KVCM of one version reads only one of their layouts) and no cached
// group among the emulator's instances (in a cached store KVCM scans its memory, not Redis).
func besideUpstream(ctx context.Context, e *env) (string, *Expect, error) {
	u, err := NewUpstreamGC(UpstreamConfig{Store: e.redis.Client(), Layout: e.layout, Instances: e.manifest.Instances,
		Storages: map[string]UpstreamStorage{
			seed.StorageNFS:    {Type: kvcm.TypeFile, Files: true},
			seed.StorageShared: {Type: kvcm.TypeFile},
		},
		ScanInterval: 20 * time.Millisecond, ScanBatch: 32, MaxInflight: 4, RoundPause: e.cfg.RoundPause,
		// Its CAS, physical delete and CAD some way apart, as a busy executor does them: both
		// collectors then meet over DELETING marks and files, not only over judgements.
		DeleteDelay: 150 * time.Millisecond})
	if err != nil {
		return "", nil, err
	}
	e.upstream = u
	uctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.Run(uctx)
	}()
	if err := e.startAll(); err != nil {
		stop()
		<-done
		return "", nil, err
	}
	err = e.waitFor(ctx, "kvcm-gc's first round and one of KVCM's GC", func() bool {
		ck, err := e.checkpoint(ctx)
		return err == nil && (ck.Round > 1 || ck.Round == 1 && !ck.InRound) && u.Stats().Rounds >= 1
	})
	stop()
	<-done // its requests in flight end too
	if err != nil {
		return "", nil, err
	}
	if err := u.Err(); err != nil {
		return "", nil, err
	}
	x, err := e.upstreamExpect(ctx, u)
	if err != nil {
		return "", nil, err
	}
	e.expected = x.Locs
	st := u.Stats()
	return fmt.Sprintf("KVCM's GC: %d rounds, %d candidates (%d orphan WRITING, %d storage-missing), %d removed, %d CAS and %d CAD lost as no-ops, %d files unlinked, %d already gone, %d unlink errors, %d keys recycled",
		st.Rounds, st.Candidates[upstreamOrphanWriting]+st.Candidates[upstreamStorageMissing], st.Candidates[upstreamOrphanWriting],
		st.Candidates[upstreamStorageMissing], st.Removed, st.CASLost, st.CADLost, st.Unlinked, st.UnlinkAbsent, st.UnlinkErrors, st.KeysRecycled), &x, nil
}

// upstreamExpect is the expectation once the emulator has stopped: the state now, minus what
// is still garbage. Every location it removed must have been garbage, and every live one
// must still hold its original bytes. In the legacy layout a WRITING or DELETING garbage
// location of a block whose __lru_time__ it rewrote may go or stay: its age is the later of
// create_time and __lru_time__ (kvcm.LegacyAge), young now.
func (e *env) upstreamExpect(ctx context.Context, u *UpstreamGC) (Expect, error) {
	now, err := TakeSnapshot(ctx, e.redis.Client(), "*")
	if err != nil {
		return Expect{}, err
	}
	removed, touched := u.Removed(), u.Touched()
	locs := make([]Loc, 0, len(e.base))
	for _, base := range e.base {
		loc := base
		ref := UpstreamRef{Key: base.Key, ID: base.ID}
		orig, _ := locationIn(e.before[base.Key].Fields, base.Field, base.ID)
		cur, _ := locationIn(now[base.Key].Fields, base.Field, base.ID)
		switch {
		case removed[ref] > 0 && base.Fate != Go:
			return Expect{}, fmt.Errorf("%w: KVCM's GC removed %s/%s, which is not garbage", errViolation, base.Key, base.ID)
		case base.Fate == Keep && (cur == nil || orig == nil || string(cur.Raw) != string(orig.Raw)):
			return Expect{}, fmt.Errorf("%w: live location %s/%s deleted or changed while both collected", errViolation, base.Key, base.ID)
		case base.Fate == Go && e.layout == kvcm.LayoutLegacy && touched[base.Key] && cur != nil &&
			(cur.Status == kvcm.StatusWriting || cur.Status == kvcm.StatusDeleting):
			loc.Fate = Either
		}
		locs = append(locs, loc)
	}
	return Expect{Before: now, Orig: e.before, Locs: locs, Present: e.present}, nil
}

// besideUpstreamAfter checks, once everything converged, that every garbage location was
// removed exactly once (by kvcm-gc's CAD or KVCM's), that the races kvcm-gc lost are no-ops
// and not errors, and that no file was unlinked twice with an error.
func besideUpstreamAfter(ctx context.Context, e *env) (string, error) {
	u := e.upstream
	byUs := map[UpstreamRef]int{}
	outcomes := map[string]int{}
	failedUnlinks, resumed := 0, 0
	err := e.readWholeEvents(ctx, func(ev subjects.Event) {
		if ev.Kind != subjects.EventDelete {
			return
		}
		targets := ev.Targets
		if len(targets) == 0 && ev.Key != nil {
			targets = []subjects.EventTarget{{Key: *ev.Key, Location: ev.Location, Outcome: ev.Outcome}}
		}
		for _, t := range targets {
			outcomes[t.Outcome]++
			failedUnlinks += t.PhysicalSkips["failed"]
			if t.Resumed {
				resumed++
			}
			if t.Outcome == subjects.OutcomeDeleted || t.Outcome == subjects.OutcomePartial {
				byUs[UpstreamRef{Key: kvcm.BlockKey(ev.Instance, t.Key), ID: t.Location}]++
			}
		}
	})
	if err != nil {
		return "", err
	}
	byThem := u.Removed()
	garbage, ours, theirs := 0, 0, 0
	for _, l := range e.expected {
		ref := UpstreamRef{Key: l.Key, ID: l.ID}
		n := byUs[ref] + byThem[ref]
		switch {
		case l.Fate == Keep && n > 0:
			return "", fmt.Errorf("%w: live location %s/%s removed %d times", errViolation, l.Key, l.ID, n)
		case l.Fate == Go && n != 1, l.Fate == Either && n > 1:
			return "", fmt.Errorf("%w: garbage location %s/%s removed %d times (kvcm-gc %d, KVCM's GC %d), want exactly once",
				errViolation, l.Key, l.ID, n, byUs[ref], byThem[ref])
		}
		if l.Fate != Keep && n == 1 {
			garbage++
			ours += byUs[ref]
			theirs += byThem[ref]
		}
	}
	st := u.Stats()
	switch {
	case outcomes[subjects.OutcomeError] > 0:
		return "", fmt.Errorf("%w: %d delete targets ended in an error beside KVCM's GC; a lost race must be a no-op", errViolation, outcomes[subjects.OutcomeError])
	case failedUnlinks > 0 || st.UnlinkErrors > 0:
		return "", fmt.Errorf("%w: unlinks failed (kvcm-gc %d, KVCM's GC %d): a file deleted twice must find it gone, not fail", errViolation, failedUnlinks, st.UnlinkErrors)
	}
	return fmt.Sprintf("each of %d garbage locations removed once: %d by kvcm-gc, %d by KVCM's GC; kvcm-gc lost %d races as no-ops (%d noop_gone, %d noop_mismatch) and resumed %d of KVCM's DELETING marks; 0 errors, 0 failed unlinks",
		garbage, ours, theirs, outcomes[subjects.OutcomeNoopGone]+outcomes[subjects.OutcomeNoopMismatch],
		outcomes[subjects.OutcomeNoopGone], outcomes[subjects.OutcomeNoopMismatch], resumed), nil
}
