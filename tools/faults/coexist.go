package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// besideUpstream runs KVCM's own GC (UpstreamGC, the emulator of its five-step delete
// protocol) over the keyspace kvcm-gc collects, at the same time: the emulator and kvcm-gc's
// stages start together, the emulator scanning as fast as the scanner (one batch of 32 keys
// every 20 ms, round-robin over the instances) and waiting up to 200 ms between its CAS and
// its physical delete, as a busy executor does. They race over the same garbage until kvcm-gc's
// first round is over and the emulator has gone round once; then the emulator stops (its
// accepted requests finished, its counters persisted) and kvcm-gc's rounds collect what is
// left (after two of KVCM's rounds, so that what its first skipped for want of a free request
// slot is raced too).
//
// The emulator is faithful where it matters for safety (kvcm-upstream.md facts 10 to 10i):
// its status writes are a read, KVCM's re-serialization (unknown members dropped, members in
// KVCM's order) and a blind HSET up to 30 ms later, so a write of KVCM's can land after
// kvcm-gc's CAD and bring a location back (legacy: the whole map read), or re-create a key
// with one field; its CAD subtracts a location's bytes whatever its HDEL found; it keeps
// KVCM's counters as KVCM's leader does and persists them. Its storages are KVCM's: on
// nfs_01 and nfs_shared MightExist answers "exists" for every URI and Delete does nothing
// (KVCM's NFS backend), so in the location layout it collects orphan WRITING only. A KVCM of
// the legacy layout (f6aa2b2) has no GC at all; so that the legacy write path races kvcm-gc
// there too, the emulator plays today's rules over f6aa2b2's writes, with a backend for
// nfs_01 that stats and removes files (as KVCM's HF3FS backend does with
// touch_file_when_create): storage-missing SERVING only, since f6aa2b2 drops create_time.
//
// The keyspace has no upgraded keys (a KVCM of one version reads only one of their layouts)
// and no cached group among the emulator's instances (in a cached store KVCM scans its
// memory, not Redis).
func besideUpstream(ctx context.Context, e *env) (string, *Expect, error) {
	nfs := UpstreamStorage{Type: kvcm.TypeFile, Files: e.layout == kvcm.LayoutLegacy}
	u, err := NewUpstreamGC(UpstreamConfig{Store: e.redis.Client(), Layout: e.layout, Instances: e.manifest.Instances,
		Storages:     map[string]UpstreamStorage{seed.StorageNFS: nfs, seed.StorageShared: {Type: kvcm.TypeFile}},
		ScanInterval: 20 * time.Millisecond, ScanBatch: 32, MaxInflight: 4, RoundPause: e.cfg.RoundPause,
		// Its CAS, physical delete and CAD some way apart, as a busy executor does them, by a
		// delay drawn per request: both collectors then meet over DELETING marks (kvcm-gc
		// finishing KVCM's) and over locations gone (kvcm-gc losing to KVCM), not only over
		// judgements.
		DeleteDelay: 0, DeleteDelayMax: 200 * time.Millisecond,
		Writes: WritesKVCM, WriteWindow: 30 * time.Millisecond, Seed: e.rng.Uint64(),
		Counters: true, PersistInterval: time.Second})
	if err != nil {
		return "", nil, err
	}
	e.upstream = u
	// kvcm-gc's stages first, and KVCM's GC once kvcm-gc's first round has begun: started
	// together, the emulator (a goroutine) walks a small keyspace before the stages' processes
	// have read a page, and the two meet only over its last requests.
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	if err := e.waitFor(ctx, "kvcm-gc's first round to begin", func() bool {
		ck, err := e.checkpoint(ctx)
		return err == nil && ck.Round >= 1
	}); err != nil {
		return "", nil, err
	}
	uctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.Run(uctx)
	}()
	err = e.waitFor(ctx, "kvcm-gc's first round and two of KVCM's GC", func() bool {
		ck, err := e.checkpoint(ctx)
		return err == nil && (ck.Round > 1 || ck.Round == 1 && !ck.InRound) && u.Stats().Rounds >= 2
	})
	stop()
	<-done // its requests in flight end too, and its counters are persisted
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
	return fmt.Sprintf("KVCM's GC: %d rounds, %d candidates (%d orphan WRITING, %d storage-missing), %d removed, %d CAS and %d CAD lost as no-ops, "+
		"%d locations brought back and %d keys re-created by its blind writes, %d files unlinked, %d already gone, %d unlink errors, %d keys recycled",
		st.Rounds, st.Candidates[upstreamOrphanWriting]+st.Candidates[upstreamStorageMissing], st.Candidates[upstreamOrphanWriting],
		st.Candidates[upstreamStorageMissing], st.Removed, st.CASLost, st.CADLost, st.Resurrected, st.Recreated,
		st.Unlinked, st.UnlinkAbsent, st.UnlinkErrors, st.KeysRecycled), &x, nil
}

// upstreamExpect is the expectation once the emulator has stopped: the state now, minus what
// is still garbage. Every location it removed must have been garbage, and every live one must
// still be there, meaning what it meant (KVCM f6aa2b2 re-encodes the whole map it writes, so
// a live location beside one it wrote keeps its meaning, not its bytes). A garbage location
// may go or stay where KVCM's writes made it so: in the legacy layout a WRITING or DELETING
// one of a block whose __lru_time__ it rewrote (its age, the later of create_time and
// __lru_time__, is young now), and in either layout one a blind write of KVCM's brought back
// and left DELETING, which only KVCM collects.
func (e *env) upstreamExpect(ctx context.Context, u *UpstreamGC) (Expect, error) {
	now, err := TakeSnapshot(ctx, e.redis.Client(), "*")
	if err != nil {
		return Expect{}, err
	}
	removed, touched, back := u.Removed(), u.Touched(), u.Resurrected()
	e.kvcmOwn = map[UpstreamRef]bool{}
	// A location KVCM's blind write brought back DELETING (its own mark, or kvcm-gc's, whose
	// data kvcm-gc had already deleted) is KVCM's to finish: its key is compared for strands
	// from the state the emulator left, and its files may be gone.
	orig := maps.Clone(e.before)
	locs := make([]Loc, 0, len(e.base))
	for _, base := range e.base {
		loc := base
		ref := UpstreamRef{Key: base.Key, ID: base.ID}
		was, _ := locationIn(e.before[base.Key].Fields, base.Field, base.ID)
		cur, _ := locationIn(now[base.Key].Fields, base.Field, base.ID)
		if base.Fate == Keep && was != nil && e.layout == kvcm.LayoutLocation && leftToKVCM(was, u.cfg) {
			// Garbage to KVCM's GC, left to it by kvcm-gc's kvcm_gc: either may find it
			// there, only KVCM may remove it (besideUpstreamAfter).
			e.kvcmOwn[ref] = true
			loc.Fate = Either
			if removed[ref] > 0 && !u.DeletesFiles() {
				loc.Files = nil // KVCM's NFS Delete does nothing: the sweep's to reclaim
			}
			locs = append(locs, loc)
			continue
		}
		switch {
		case removed[ref] > 0 && base.Fate != Go:
			return Expect{}, fmt.Errorf("%w: KVCM's GC removed %s/%s, which is not garbage", errViolation, base.Key, base.ID)
		case base.Fate == Keep && (cur == nil || was == nil || !sameMeaning(e.layout, touched[base.Key], was, cur)):
			return Expect{}, fmt.Errorf("%w: live location %s/%s deleted or changed while both collected", errViolation, base.Key, base.ID)
		case base.Fate == Go && cur != nil && back[ref] > 0 && cur.Status == kvcm.StatusDeleting:
			loc.Fate, loc.Files = Either, nil
			orig[base.Key] = now[base.Key]
		case base.Fate == Go && cur != nil && e.layout == kvcm.LayoutLegacy && touched[base.Key] &&
			(cur.Status == kvcm.StatusWriting || cur.Status == kvcm.StatusDeleting):
			loc.Fate = Either
		}
		if removed[ref] > 0 && !u.DeletesFiles() {
			// KVCM removed it through a backend whose Delete does nothing (its NFS): its files
			// stay, unless kvcm-gc finished KVCM's mark first and unlinked them.
			loc.Files = nil
		}
		locs = append(locs, loc)
	}
	return Expect{Before: now, Orig: orig, Locs: locs, Present: e.present}, nil
}

// leftToKVCM reports whether l is an orphan WRITING to KVCM's GC (past its grace, no
// migration guard) that kvcm-gc, with kvcm_gc on as by default, leaves to it: younger than
// kvcm_gc_grace + kvcm_gc_margin (the seed's young writings inside the deferral).
func leftToKVCM(l *kvcm.Location, cfg UpstreamConfig) bool {
	if l.Status != kvcm.StatusWriting || !l.HasCreateTime || l.CreateTimeUs <= 0 || l.Guard != nil {
		return false
	}
	age := cfg.Now().Sub(time.UnixMicro(l.CreateTimeUs))
	return age >= cfg.OrphanGrace && age < seed.KVCMGCAge
}

// sameMeaning reports whether a live location still says what it said: byte for byte, but
// for a legacy block KVCM rewrote, where f6aa2b2's re-encoding of the same location counts.
func sameMeaning(layout kvcm.Layout, rewritten bool, was, now *kvcm.Location) bool {
	if string(was.Raw) == string(now.Raw) {
		return true
	}
	return layout == kvcm.LayoutLegacy && rewritten &&
		string(kvcm.ReencodeLegacyBlock(&kvcm.Block{Locations: []kvcm.Location{*was}})) ==
			string(kvcm.ReencodeLegacyBlock(&kvcm.Block{Locations: []kvcm.Location{*now}}))
}

// besideUpstreamAfter checks, once everything converged, that every garbage location was
// removed (by kvcm-gc's CAD or KVCM's) once, or once more for each time a blind write of
// KVCM's brought it back; that the races kvcm-gc lost are no-ops and not errors; that no file
// was unlinked twice with an error; that races happened in both directions (a DELETING mark
// of KVCM's finished by kvcm-gc, a delete of kvcm-gc's lost to KVCM); and that KVCM's
// counters, as the emulator kept them, differ from the recount of what Redis holds by exactly
// the bytes kvcm-gc's deletes left counted, less those KVCM's CADs subtracted for locations
// kvcm-gc had removed. It reports the phantom bytes each side left.
func besideUpstreamAfter(ctx context.Context, e *env) (string, error) {
	u := e.upstream
	byUs := map[UpstreamRef]int{}
	outcomes := map[string]int{}
	failedUnlinks, resumed := 0, 0
	// The races, each way, told by what the emulator did to the same location: a target
	// kvcm-gc resumed from a DELETING mark of KVCM's CAS (finished for KVCM), and a no-op of
	// kvcm-gc's on a location KVCM marked or removed and kvcm-gc never did (lost to KVCM).
	// Counted by location: a location's later rounds and redeliveries repeat its no-ops.
	marked := u.Marked()
	finishedRefs, lostRefs := map[UpstreamRef]bool{}, map[UpstreamRef]bool{}
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
			ref := UpstreamRef{Key: kvcm.BlockKey(ev.Instance, t.Key), ID: t.Location}
			if t.Resumed {
				resumed++
				if marked[ref] > 0 {
					finishedRefs[ref] = true
				}
			}
			if t.Outcome == subjects.OutcomeNoopGone || t.Outcome == subjects.OutcomeNoopMismatch {
				lostRefs[ref] = true
			}
			if t.Outcome == subjects.OutcomeDeleted || t.Outcome == subjects.OutcomePartial {
				byUs[UpstreamRef{Key: kvcm.BlockKey(ev.Instance, t.Key), ID: t.Location}]++
			}
		}
	})
	if err != nil {
		return "", err
	}
	byThem, back := u.Removed(), u.Resurrected()
	maps.DeleteFunc(lostRefs, func(r UpstreamRef, _ bool) bool { return byUs[r] > 0 || byThem[r] == 0 && marked[r] == 0 })
	garbage, ours, theirs := 0, 0, 0
	for _, l := range e.expected {
		ref := UpstreamRef{Key: l.Key, ID: l.ID}
		n, most := byUs[ref]+byThem[ref], 1+back[ref]
		switch {
		case l.Fate == Keep && n > 0:
			return "", fmt.Errorf("%w: live location %s/%s removed %d times", errViolation, l.Key, l.ID, n)
		case e.kvcmOwn[ref] && byUs[ref] > 0:
			return "", fmt.Errorf("%w: kvcm-gc removed %s/%s, an orphan WRITING kvcm_gc leaves to KVCM's GC", errViolation, l.Key, l.ID)
		case l.Fate == Go && (n < 1 || n > most), l.Fate == Either && n > most:
			return "", fmt.Errorf("%w: garbage location %s/%s removed %d times (kvcm-gc %d, KVCM's GC %d, brought back %d times), want once and once per return",
				errViolation, l.Key, l.ID, n, byUs[ref], byThem[ref], back[ref])
		}
		if l.Fate != Keep && n > 0 {
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
	// Whether the two raced each way depends on the timing of the run: besideUpstream makes
	// them meet over the same garbage, and a full-size run (make faults) races both ways by
	// tens to hundreds of locations, but a small keyspace (TestFaults) may miss one way in a
	// run (KVCM's GC marks only a few dozen locations there), so a run where they did not is
	// reported, not failed; TestBesideUpstreamRacesBothWays stages each race and asserts it.
	var unraced []string
	if len(finishedRefs) == 0 {
		unraced = append(unraced, "no DELETING mark of KVCM's was finished by kvcm-gc")
	}
	if len(lostRefs) == 0 {
		unraced = append(unraced, "kvcm-gc lost no race to KVCM's GC")
	}
	notRaced := ""
	if len(unraced) > 0 {
		notRaced = "; not raced this run: " + strings.Join(unraced, ", ")
	}
	phantom, err := e.upstreamAccounting(ctx, u, byUs, byThem)
	if err != nil {
		return "", err
	}
	taken := 0
	for ref := range e.kvcmOwn {
		if byThem[ref] > 0 {
			taken++
		}
	}
	return fmt.Sprintf("%d garbage locations removed: %d by kvcm-gc, %d by KVCM's GC (%d brought back by KVCM's blind writes); "+
		"races, by location: kvcm-gc lost %d to KVCM's GC as no-ops (its targets: %d noop_gone, %d noop_mismatch, some repeated by later rounds) "+
		"and finished %d of KVCM's DELETING marks (of %d targets resumed); %d orphan WRITING left to KVCM by kvcm_gc, %d taken by it; 0 errors, 0 failed unlinks; %s%s",
		garbage, ours, theirs, st.Resurrected, len(lostRefs), outcomes[subjects.OutcomeNoopGone], outcomes[subjects.OutcomeNoopMismatch],
		len(finishedRefs), resumed, len(e.kvcmOwn), taken, phantom, notRaced), nil
}

// upstreamAccounting compares KVCM's counters, as the emulator kept them, with the recount of
// what Redis holds, per instance: the drift must be exactly what each side explains. kvcm-gc's
// share is the bytes of the locations it removed that KVCM never removed and that are gone
// (KVCM still counts them: phantom bytes); KVCM's own is what its CADs subtracted for
// locations kvcm-gc had removed in their window (KVCM counts less than Redis holds by them).
// Keys: kvcm-gc keeps every emptied key (empty_block: keep), so only KVCM's own re-created keys
// (counted +0) and recycles that found the key gone (counted −1) may part them. The legacy
// layout's KVCM persists no usage: there its keys alone are compared.
func (e *env) upstreamAccounting(ctx context.Context, u *UpstreamGC, byUs, byThem map[UpstreamRef]int) (string, error) {
	now, err := TakeSnapshot(ctx, e.redis.Client(), "*")
	if err != nil {
		return "", err
	}
	counters := u.Counters()
	recounts := map[string]*kvcm.Recount{}
	for inst := range counters {
		recounts[inst] = kvcm.NewRecount()
	}
	for key, v := range now {
		if inst, _, ok := kvcm.KeyInstance(key); ok && v.Type == "hash" && recounts[inst] != nil {
			if _, err := kvcm.ParseBlockKey(inst, key); err == nil {
				recounts[inst].AddFields(v.Fields)
			}
		}
	}
	phantom := map[string]map[kvcm.StorageType]uint64{}
	ourLocs := 0
	var uncounted uint64 // legacy: bytes of kvcm-gc's deletes a KVCM keeping usage would still count
	for ref, n := range byUs {
		if n == 0 || byThem[ref] > 0 {
			continue
		}
		if _, there := now[ref.Key].Fields[kvcm.LocationField(ref.ID)]; there && e.layout == kvcm.LayoutLocation {
			continue // brought back, and still there: counted and held alike
		}
		orig, ok := locationIn(e.before[ref.Key].Fields, e.fieldOf(ref.ID), ref.ID)
		inst, _, _ := kvcm.KeyInstance(ref.Key)
		if !ok {
			continue
		}
		lu := kvcm.UsageOf(orig)
		if counters[inst].Usage == nil {
			uncounted += lu.Bytes
			ourLocs++
			continue
		}
		if phantom[inst] == nil {
			phantom[inst] = map[kvcm.StorageType]uint64{}
		}
		phantom[inst][lu.Slot] += lu.Bytes
		ourLocs++
	}
	var problems, report []string
	var ourBytes, theirBytes uint64
	for _, inst := range slices.Sorted(maps.Keys(counters)) {
		c, r := counters[inst], recounts[inst]
		if d, want := c.Keys-r.Keys, -(c.Recreated + c.RecycledGone); d != want {
			problems = append(problems, fmt.Sprintf("%s: KVCM counts %d keys, Redis holds %d (drift %d), its re-created keys and recycles of gone keys explain %d",
				inst, c.Keys, r.Keys, d, want))
		}
		var instOurs, instTheirs uint64
		if e.layout == kvcm.LayoutLocation {
			for _, s := range slices.Sorted(maps.Keys(unionSlots(c.Usage, r.Usage))) {
				drift := int64(c.Usage[s]) - int64(r.Usage[s])
				want := int64(phantom[inst][s]) - int64(c.OverSubtracted[s])
				if drift != want {
					problems = append(problems, fmt.Sprintf("%s %s: KVCM counts %d bytes, Redis holds %d (drift %d); kvcm-gc's deletes explain %d, KVCM's own CADs %d",
						inst, s, c.Usage[s], r.Usage[s], drift, phantom[inst][s], c.OverSubtracted[s]))
				}
				instOurs += phantom[inst][s]
				instTheirs += c.OverSubtracted[s]
			}
		}
		ourBytes, theirBytes = ourBytes+instOurs, theirBytes+instTheirs
		report = append(report, fmt.Sprintf("%s +%d/-%d", inst, instOurs, instTheirs))
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("%w: KVCM's counters drifted by what neither side explains: %s", errViolation, strings.Join(problems, "; "))
	}
	if e.layout == kvcm.LayoutLegacy {
		return fmt.Sprintf("phantom bytes: none either side, f6aa2b2 keeps no usage (kvcm-gc's deletes removed %d locations KVCM's GC never "+
			"removed, whose spec URIs' size parameters give %d bytes a KVCM keeping usage would still count); KVCM's key counts equal the keys "+
			"Redis holds, less its own re-created keys and recycles of gone keys", ourLocs, uncounted), nil
	}
	return fmt.Sprintf("phantom bytes: kvcm-gc's deletes left %d bytes of %d locations in KVCM's usage, KVCM's own CADs subtracted %d bytes of locations kvcm-gc had removed "+
		"(by instance, +kvcm-gc/-KVCM: %s); KVCM's counters minus the recount are exactly that", ourBytes, ourLocs, theirBytes, strings.Join(report, ", ")), nil
}

func unionSlots(a, b map[kvcm.StorageType]uint64) map[kvcm.StorageType]bool {
	out := map[kvcm.StorageType]bool{}
	for s := range a {
		out[s] = true
	}
	for s := range b {
		out[s] = true
	}
	return out
}
