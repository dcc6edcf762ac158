package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// scenario is one fault. setup (optional) adds to the keyspace before the snapshot, with the
// expectations of what it added (e.base, e.present); run starts the stages, injects the fault
// and returns once the fault is over, with notes for the table and, when the fault changes
// what is expected (a writer), the expectation.
type scenario struct {
	name  string
	about string
	// cluster runs the scenario on a JetStream cluster of three nodes, at replicas 3.
	cluster bool
	// legacy: with -layout both, the scenario runs in the legacy layout too.
	legacy bool
	// sweepFiles seeds the orphan data files of the sweep (seed.Spec.SweepFiles).
	sweepFiles bool
	// noUpgraded seeds no upgraded (ambiguous) blocks (seed.Spec.NoUpgraded).
	noUpgraded bool
	// noKVCMGC: its stages run with kvcm_gc off, and the seed ages its WRITING locations for
	// that (seed.Spec.NoKVCMGC); else a location the seed keeps as inside kvcm_gc's deferral
	// is past the stages' grace, and its rightful delete reads as a violation.
	noKVCMGC bool
	// spreadYoung spreads the seeded young WRITING locations' ripening over the grace
	// (seed.Spec.SpreadYoung): a run of hours sees a few ripen each round, not all at once.
	spreadYoung bool
	setup       func(ctx context.Context, e *env) error
	run         func(ctx context.Context, e *env) (string, *Expect, error)
	// after, when set, checks more once everything converged, and returns notes for the table.
	after func(ctx context.Context, e *env) (string, error)
}

var scenarios = []scenario{
	{name: "kill-scanner", about: "kill -9 of the scanner at random moments, then a restart", run: killStage(stageScanner)},
	{name: "kill-prober", about: "kill -9 of the prober at random moments, then a restart", run: killStage(stageProber)},
	{name: "kill-deleter", about: "kill -9 of the deleter at random moments, mostly with deletes in flight, then a restart", legacy: true, run: killStage(stageDeleter)},
	{name: "kill-any", about: "kill -9 of a random stage at random moments, then a restart", run: killStage("")},
	{name: "redis-restart", about: "Redis restarted mid-round (SIGTERM, then SIGKILL), data kept by its append-only file", run: redisRestart},
	{name: "redis-outage", about: "Redis unreachable for a while mid-round, then back on the same port and data", run: redisOutage},
	{name: "nats-restart", about: "the NATS server restarted mid-round on its file store", run: natsRestart},
	{name: "scanner-failover", about: "several stores, two scanners dividing them; one killed mid-round; the other takes its stores over from their checkpoints", setup: storesSetup, run: scannerFailover},
	{name: "concurrent-writer", about: "a KVCM-like writer finishing writes and adding locations in the blocks being collected, right after probes too", legacy: true, run: concurrentWriter},
	{name: "clock-skew", about: "locations with create_time or __lru_time__ in the future are kept", legacy: true, setup: clockSkewSetup, run: plainRun},
	{name: "stuck-deleting", about: "collect_deleting: stuck DELETING collected under kill -9, data unlinked only for per-block names; KVCM flipping or finishing some meanwhile", legacy: true,
		setup: stuckSetup, run: stuckDeleting},
	{name: "cluster-leaders", about: "three JetStream nodes at replicas 3; the node leading the BATCHES stream, then the one leading the LEASE bucket, killed (SIGKILL) mid-round and restarted",
		cluster: true, run: clusterLeaders},
	{name: "beside-upstream", about: "KVCM's own GC (an emulator of its five-step delete protocol) collecting the same keyspace at the same time: each garbage location removed once, by one of the two",
		legacy: true, noUpgraded: true, run: besideUpstream, after: besideUpstreamAfter},
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
		notes, err := e.kills(ctx, stage)
		return notes, nil, err
	}
}

// kills kills a process of stage (a random stage when "") cfg.Kills times at random moments,
// starting a new one after each kill, and returns what it killed when.
func (e *env) kills(ctx context.Context, stage string) (string, error) {
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
			return "", err
		}
		ps := e.running(st)
		if len(ps) == 0 {
			return "", fmt.Errorf("no running %s to kill", st)
		}
		ck, _ := e.checkpoint(ctx)
		e.kill(st, ps[0])
		killed = append(killed, fmt.Sprintf("%s@r%d/%d", st, ck.Round, ck.KeysScanned))
		if err := sleep(ctx, down); err != nil {
			return "", err
		}
		if _, err := e.startStage(st); err != nil {
			return "", err
		}
	}
	return "killed " + strings.Join(killed, " "), nil
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
	if err := e.redis.Restart(); err != nil {
		return "", nil, fmt.Errorf("restart redis: %w", err)
	}
	if err := sleep(ctx, e.between(100*time.Millisecond, 600*time.Millisecond)); err != nil {
		return "", nil, err
	}
	ck2, _ := e.checkpoint(ctx)
	e.redis.Kill()
	if err := e.redis.Restart(); err != nil {
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
	if err := e.redis.Restart(); err != nil {
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
		e.nats.Shutdown()
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

// scannerFailover: the instances spread over several metadata stores (a redis-server each),
// two scanners dividing them; the scanner that recorded progress last is killed mid-round.
// The other must take its stores over and resume each from its checkpoint: its first write of
// such a store is in the same round, from the dead one's count (a restarted walk would start
// from zero), and the dead one never writes again.
func scannerFailover(ctx context.Context, e *env) (string, *Expect, error) {
	// A slower scan, so the kill lands inside a round more surely.
	e.extra = []string{"--scan_interval", "100ms"}
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	if _, err := e.startStage(stageScanner); err != nil {
		return "", nil, err
	}
	state, err := e.js.KeyValue(ctx, e.names.StateBucket())
	if err != nil {
		return "", nil, fmt.Errorf("open state bucket: %w", err)
	}
	writes, stopWatch, err := watchCheckpoints(ctx, state)
	if err != nil {
		return "", nil, err
	}
	defer stopWatch()
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
	holder := ck.Holder
	e.kill(stageScanner, leader)
	if err := e.waitFor(ctx, fmt.Sprintf("the end of round %d on every store", round), func() bool {
		c, err := e.checkpoint(ctx)
		return err == nil && (c.Round > round || c.Round == round && !c.InRound)
	}); err != nil {
		return "", nil, err
	}
	// The watch may lag the bucket: the takeover can be in the bucket and not yet delivered.
	if err := e.waitFor(ctx, "the checkpoint watch to deliver every store's last write", func() bool {
		for store, seen := range writes.revisions() {
			_, rev, err := pipeline.ReadStoreCheckpoint(ctx, state, store)
			if err != nil || rev > seen {
				return false
			}
		}
		return true
	}); err != nil {
		return "", nil, err
	}
	// The dead holder's last write of each store it walked, and the first write after it.
	var notes []string
	all := writes.all()
	lastAt := map[string]int{}
	for i, c := range all {
		if c.Holder == holder {
			lastAt[c.Store] = i
		}
	}
	last, next := map[string]pipeline.Checkpoint{}, map[string]pipeline.Checkpoint{}
	for store, i := range lastAt {
		last[store] = all[i]
		for _, c := range all[i+1:] {
			if c.Store == store && c.Holder != holder {
				next[store] = c
				break
			}
		}
	}
	for store, l := range last {
		if !l.InRound {
			continue // between rounds when killed
		}
		n, ok := next[store]
		if !ok {
			return "", nil, fmt.Errorf("%w: nobody took over store %s", errViolation, store)
		}
		if n.Round != l.Round || n.KeysScanned < l.KeysScanned {
			return "", nil, fmt.Errorf("%w: store %s: the dead holder was in round %d at %d keys, the next wrote round %d at %d keys: not resumed from the checkpoint",
				errViolation, store, l.Round, l.KeysScanned, n.Round, n.KeysScanned)
		}
		notes = append(notes, fmt.Sprintf("%s resumed at %d keys by %s", store, l.KeysScanned, n.Holder))
	}
	if _, err := e.startStage(stageScanner); err != nil {
		return "", nil, err
	}
	slices.Sort(notes)
	return fmt.Sprintf("%d stores; %s killed in round %d at key %d of %d; %s", len(e.stores)+1, holder, round, at, e.keys,
		strings.Join(notes, ", ")), nil, nil
}

// checkpointWrites are the checkpoints written, in order, as a watch saw them.
type checkpointWrites struct {
	mu   sync.Mutex
	cs   []pipeline.Checkpoint
	revs map[string]uint64 // by store, the revision of its last write delivered
}

// revisions is, for each store written since the watch began, the revision of its last write
// the watch delivered.
func (w *checkpointWrites) revisions() map[string]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.revs)
}

func (w *checkpointWrites) all() []pipeline.Checkpoint {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.cs)
}

// watchCheckpoints records every store checkpoint written from now on, until stop.
func watchCheckpoints(ctx context.Context, state jetstream.KeyValue) (*checkpointWrites, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	kw, err := state.Watch(wctx, subjects.CheckpointFilter(), jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("watch checkpoints: %w", err)
	}
	out := &checkpointWrites{revs: map[string]uint64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-wctx.Done():
				return
			case en, ok := <-kw.Updates():
				if !ok {
					return
				}
				if en == nil || en.Operation() != jetstream.KeyValuePut {
					continue
				}
				var c pipeline.Checkpoint
				if json.Unmarshal(en.Value(), &c) == nil {
					out.mu.Lock()
					out.cs = append(out.cs, c)
					out.revs[c.Store] = en.Revision()
					out.mu.Unlock()
				}
			}
		}
	}()
	return out, func() { cancel(); _ = kw.Stop(); <-done }, nil
}

// storesSetup spreads the instances over several metadata stores.
func storesSetup(ctx context.Context, e *env) error {
	return spreadStores(ctx, e)
}

func concurrentWriter(ctx context.Context, e *env) (string, *Expect, error) {
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	w := newWriter(e, writeSessions, e.rng.Uint64())
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
// future: legacy, create_time or __lru_time__ ahead; location layout (no __lru_time__),
// create_time ahead, or 0 (data from before KVCM had create_time).
func clockSkewSetup(ctx context.Context, e *env) error {
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(d).UnixMicro() }
	root := filepath.Join(e.dir, "data", "nfs") + "/"
	missing := fmt.Sprintf(`{"name":"tp0","uri":"file://%s%sskew/missing?size=1024"}`, seed.StorageNFS, root)
	const unset = int64(-1)
	writing := func(id string, ct int64) locJSON {
		return locJSON{id: id, status: kvcm.StatusWriting, typ: kvcm.TypeFile, createTime: ct}
	}
	type block struct {
		lru  int64 // legacy only
		locs []locJSON
		fate []Fate
	}
	var blocks []block
	if e.layout == kvcm.LayoutLocation {
		blocks = []block{
			{locs: []locJSON{writing("skewct30", at(30*24*time.Hour))}, fate: []Fate{Keep}},
			{locs: []locJSON{writing("skewct01", at(time.Minute))}, fate: []Fate{Keep}},
			{locs: []locJSON{writing("skewcent", at(100*365*24*time.Hour))}, fate: []Fate{Keep}},
			{locs: []locJSON{writing("skewzero", 0), writing("skewnone", unset)}, fate: []Fate{Keep, Keep}},
			// Storage-missing needs no age; an old create_time is the age beside a future one.
			{locs: []locJSON{
				{id: "skewmiss", status: kvcm.StatusServing, typ: kvcm.TypeFile, createTime: at(time.Hour), specs: []string{missing}},
				writing("skewold1", at(-72*time.Hour)),
				writing("skewkeep", at(time.Hour)),
			}, fate: []Fate{Go, Go, Keep}},
		}
	} else {
		blocks = []block{
			{lru: at(-72 * time.Hour), locs: []locJSON{writing("skewct30", at(30*24*time.Hour))}, fate: []Fate{Keep}},
			{lru: at(time.Hour), locs: []locJSON{writing("skewlru1", unset)}, fate: []Fate{Keep}},
			{lru: at(100 * 365 * 24 * time.Hour), locs: []locJSON{writing("skewlru2", unset)}, fate: []Fate{Keep}},
			{lru: at(-72 * time.Hour), locs: []locJSON{writing("skewct01", at(time.Minute))}, fate: []Fate{Keep}},
			{lru: at(time.Hour), locs: []locJSON{writing("skewboth", at(time.Hour))}, fate: []Fate{Keep}},
			// Storage-missing needs no age; an old create_time is no age beside a future
			// __lru_time__ (the later of the two counts).
			{lru: at(time.Hour), locs: []locJSON{
				{id: "skewmiss", status: kvcm.StatusServing, typ: kvcm.TypeFile, createTime: unset, specs: []string{missing}},
				writing("skewold1", at(-72*time.Hour)),
				writing("skewkeep", unset),
			}, fate: []Fate{Go, Keep, Keep}},
		}
	}
	for i, b := range blocks {
		k := kvcm.BlockKey("inst0", int64(9_100_000_000+i))
		if err := e.writeBlock(ctx, k, b.lru, b.locs); err != nil {
			return err
		}
		e.keys++
		for j, l := range b.locs {
			e.base = append(e.base, Loc{Key: k, ID: l.id, Field: e.fieldOf(l.id), Fate: b.fate[j]})
		}
	}
	return nil
}

// locJSON is one location as KVCM of either layout writes it: the location layout with
// create_time before location_specs, the legacy layout (KVCM f6aa2b2 had none) with a newer
// KVCM's create_time after them when set.
type locJSON struct {
	id         string
	status     kvcm.Status
	typ        kvcm.StorageType
	createTime int64    // µs; -1: no create_time member
	specs      []string // {"name":…,"uri":…} objects
}

func (l locJSON) bytes(layout kvcm.Layout) string {
	head := fmt.Sprintf(`{"id":%q,"status":%d,"type":%d,"spec_size":%d`, l.id, l.status, l.typ, len(l.specs))
	specs := `"location_specs":[` + strings.Join(l.specs, ",") + "]"
	switch {
	case l.createTime < 0:
		return head + "," + specs + "}"
	case layout == kvcm.LayoutLocation:
		return head + fmt.Sprintf(`,"create_time":%d,`, l.createTime) + specs + "}"
	default:
		return head + "," + specs + fmt.Sprintf(`,"create_time":%d}`, l.createTime)
	}
}

// fieldOf is the hash field of location id in the scenario's layout.
func (e *env) fieldOf(id string) string {
	if e.layout == kvcm.LayoutLocation {
		return kvcm.LocationField(id)
	}
	return kvcm.FieldURI
}

// writeBlock writes one block in the scenario's layout as KVCM creates it: legacy, __uri__
// and __lru_time__ (µs); location layout, BP#prev_key "" and one L# field per location.
func (e *env) writeBlock(ctx context.Context, key string, lru int64, locs []locJSON) error {
	var fields []any
	if e.layout == kvcm.LayoutLocation {
		fields = append(fields, kvcm.FieldPrevKey, "")
		for _, l := range locs {
			fields = append(fields, kvcm.LocationField(l.id), l.bytes(e.layout))
		}
	} else {
		uri := make([]string, len(locs))
		for i, l := range locs {
			uri[i] = strconv.Quote(l.id) + ":" + l.bytes(e.layout)
		}
		fields = append(fields, kvcm.FieldURI, "{"+strings.Join(uri, ",")+"}", kvcm.FieldLRUTime, strconv.FormatInt(lru, 10))
	}
	if err := e.redis.Client().HSet(ctx, key, fields...).Err(); err != nil {
		return fmt.Errorf("write block %s: %w", key, err)
	}
	return nil
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

// clusterLeaders kills (SIGKILL), mid-round, the cluster node leading the BATCHES stream (the
// scanner's publishes, the prober's fetches), then the node leading the LEASE bucket (the
// scanner's lease renewals); each is started again on its store once another node leads, and
// caught up before the next kill. The stages must ride through both leader elections.
func clusterLeaders(ctx context.Context, e *env) (string, *Expect, error) {
	// A slower scan, so the round is still under way at both kills.
	e.extra = []string{"--scan_interval", "100ms"}
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	if _, err := e.startStage(stageScanner); err != nil { // a second replica, as deployed
		return "", nil, err
	}
	var notes []string
	for _, target := range []struct{ what, stream string }{
		{"BATCHES stream", e.names.BatchesStream()},
		{"LEASE bucket", subjects.KVStream(e.names.LeaseBucket())},
	} {
		var ck pipeline.Checkpoint
		if err := e.waitFor(ctx, "a round in progress", func() bool {
			var err error
			ck, err = e.checkpoint(ctx)
			return err == nil && ck.InRound && ck.KeysScanned > 0
		}); err != nil {
			return "", nil, err
		}
		if err := sleep(ctx, e.between(0, 300*time.Millisecond)); err != nil {
			return "", nil, err
		}
		leader, err := e.leaderOf(ctx, target.stream)
		if err != nil {
			return "", nil, err
		}
		node := e.js3.Index(leader)
		if node < 0 {
			return "", nil, fmt.Errorf("the %s leader %q is no node of the cluster", target.what, leader)
		}
		ck, _ = e.checkpoint(ctx)
		killed := time.Now()
		e.js3.Kill(node)
		if err := e.waitFor(ctx, "a new leader of the "+target.what, func() bool {
			l, err := e.leaderOf(withTimeout(ctx, time.Second), target.stream)
			return err == nil && l != leader
		}); err != nil {
			return "", nil, err
		}
		took := time.Since(killed)
		if err := sleep(ctx, e.between(0, 500*time.Millisecond)); err != nil {
			return "", nil, err
		}
		if err := e.js3.Start(node); err != nil {
			return "", nil, err
		}
		// Caught up on every replicated stream before anything else is killed: a second kill
		// before that could take a stream's quorum.
		for _, s := range []string{e.names.BatchesStream(), e.names.DeletesStream(), e.names.EventsStream(),
			subjects.KVStream(e.names.StateBucket()), subjects.KVStream(e.names.LeaseBucket())} {
			if err := e.waitFor(ctx, "every replica of "+s+" current", func() bool {
				_, ok := streamCurrent(withTimeout(ctx, time.Second), e.js, s, clusterNodes)
				return ok
			}); err != nil {
				return "", nil, err
			}
		}
		notes = append(notes, fmt.Sprintf("%s leader %s killed at round %d key %d, another node led after %s",
			target.what, leader, ck.Round, ck.KeysScanned, took.Round(100*time.Millisecond)))
	}
	return strings.Join(notes, "; "), nil, nil
}

// leaderOf is the server name of the node leading stream.
func (e *env) leaderOf(ctx context.Context, stream string) (string, error) {
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", stream, err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", fmt.Errorf("stream %s has no leader", stream)
	}
	return info.Cluster.Leader, nil
}
