package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// CheckpointKey is the key of the scanner's checkpoint in the state bucket.
const CheckpointKey = "checkpoint"

// Checkpoint is the scanner's durable position, written by revision after every page so a
// new leader resumes the round instead of restarting it, and the round pause survives restarts.
type Checkpoint struct {
	Round   uint64 `json:"round"`
	InRound bool   `json:"in_round"`
	// Position in the round: the metadata store being walked (its 0-based position among the
	// round's stores, sorted by name, and its name; "" past the last one) and the SCAN cursor
	// to continue from.
	Index  int    `json:"index"`
	Stores int    `json:"stores"`
	Store  string `json:"store"`
	Cursor uint64 `json:"cursor"`
	// Instances in the round's registry snapshot, over all stores.
	Instances int `json:"instances"`
	// Progress of the current round.
	RoundStartedUs int64  `json:"round_started_us"`
	KeysScanned    uint64 `json:"keys_scanned"`
	// Between rounds: when the next round may start.
	NextRoundUs int64 `json:"next_round_us"`
	// The last completed round.
	LastRoundEndUs    int64  `json:"last_round_end_us,omitempty"`
	LastRoundKeys     uint64 `json:"last_round_keys,omitempty"`
	LastRoundDuration int64  `json:"last_round_duration_ms,omitempty"`
	Holder            string `json:"holder,omitempty"`
	SavedUs           int64  `json:"saved_us"`
}

// ScannerPauseKey is the key of an operator's scanner pause in the state bucket: a JSON
// object whose "until_us" (µs since the epoch) is when ticks may start again. The scanner has
// no consumer that JetStream could pause, so it reads this before every tick.
const ScannerPauseKey = "scanner_pause"

// pausedUntil returns the end of an active operator pause (zero when none). A read error
// fails closed: no tick while the pause cannot be read.
func (s *Scanner) pausedUntil(ctx context.Context, now time.Time) (time.Time, error) {
	e, err := s.State.Get(ctx, ScannerPauseKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read scanner pause: %w", err)
	}
	var p struct {
		UntilUs int64 `json:"until_us"`
	}
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return time.Time{}, fmt.Errorf("decode scanner pause: %w", err)
	}
	if until := time.UnixMicro(p.UntilUs); now.Before(until) {
		return until, nil
	}
	return time.Time{}, nil
}

// ReadCheckpoint returns the stored checkpoint (zero value and revision 0 when none).
func ReadCheckpoint(ctx context.Context, kv jetstream.KeyValue) (Checkpoint, uint64, error) {
	e, err := kv.Get(ctx, CheckpointKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Checkpoint{}, 0, nil
	}
	if err != nil {
		return Checkpoint{}, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	var c Checkpoint
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return Checkpoint{}, 0, fmt.Errorf("decode checkpoint: %w", err)
	}
	return c, e.Revision(), nil
}

// Backlog reports the downstream consumers' pending + unacknowledged messages.
type Backlog func(ctx context.Context) (prober, deleter uint64, err error)

// Publisher stores one message in a stream with a Nats-Msg-Id (synchronously: it returns once
// the server has stored or deduplicated it).
type Publisher interface {
	Publish(ctx context.Context, subject string, data []byte, msgID string) error
}

// AckWait waits for the server's answer to an asynchronous publish: nil once the message is
// stored (or deduplicated).
type AckWait func(ctx context.Context) error

// AsyncPublisher starts storing one message in a stream with a Nats-Msg-Id and returns at
// once; the AckWait tells whether it was stored.
type AsyncPublisher interface {
	PublishAsync(subject string, data []byte, msgID string) (AckWait, error)
}

// Scanner is the leader-elected scanner (DESIGN §4).
type Scanner struct {
	Config     ScannerConfig
	Names      subjects.Names
	Registry   meta.RegistryReader
	Stores     meta.StoreResolver
	Lease      *Lease
	State      jetstream.KeyValue
	Publisher  AsyncPublisher
	Events     *EventLog
	Backlog    Backlog
	MaxPayload int // the server's max payload; batches are split below it
	Metrics    *Metrics
	Logger     *slog.Logger
	Now        func() time.Time

	ckpt    Checkpoint
	ckptRev uint64
	loaded  bool
	// walks is the round's registry snapshot by metadata store (nil: not read yet).
	walks []storeWalk

	// The read position runs one page ahead of the checkpoint: a page's batches are stored
	// by JetStream while the next page is read from Redis, and the checkpoint moves past a
	// page only once all its batches are acknowledged (settle). pending is that page.
	readIndex  int
	readCursor uint64
	pending    *pendingPage
	// count is the SCAN COUNT of the current store's next page (see nextCount).
	count int
	// progressed: the last tick moved the round on (a page, a round's start or end).
	progressed bool

	// With a short scan_interval the pause and backlog reads would cost more round trips than
	// the page itself; their answers are reused for at most controlRefresh.
	pauseAt, backlogAt time.Time
	pauseUntil         time.Time
	backlogFull        bool
}

// controlRefresh bounds how stale a reused pause or backlog answer may be.
const controlRefresh = 250 * time.Millisecond

// idleWait is the least time between two ticks that did not move the round on (no lease, a
// pause, between rounds, a full backlog, an error), whatever scan_interval: an unpaced scanner
// would otherwise spin on those checks (invariant 7).
const idleWait = 100 * time.Millisecond

// overlapBelow: only when the next tick is due sooner than this does a page stay unsettled
// while the next one is read; a slower scanner records every page at once.
const overlapBelow = 5 * time.Millisecond

// ackTimeout bounds the wait for the acknowledgement of a page's batches; a page not
// acknowledged by then is read and published again (the server drops the duplicates).
const ackTimeout = 30 * time.Second

// storeWalk is one metadata store of a round and the registered instances it holds. A round
// walks each store once with a store-wide SCAN and routes every key to its instance, instead
// of one MATCH walk per instance: with k instances in a store, that reads the keyspace once
// rather than k times (SCAN visits every key of the database whatever the MATCH).
type storeWalk struct {
	store     string
	instances map[string]meta.Instance // by id
}

func (w storeWalk) owns(id string) bool { _, ok := w.instances[id]; return ok }

// walksOf groups a registry snapshot by store, sorted by store name.
func walksOf(instances []meta.Instance) []storeWalk {
	byStore := map[string]storeWalk{}
	for _, in := range instances {
		w, ok := byStore[in.Store]
		if !ok {
			w = storeWalk{store: in.Store, instances: map[string]meta.Instance{}}
			byStore[in.Store] = w
		}
		if _, dup := w.instances[in.ID]; !dup { // the first by (group, id) wins
			w.instances[in.ID] = in
		}
	}
	walks := make([]storeWalk, 0, len(byStore))
	for _, w := range byStore {
		walks = append(walks, w)
	}
	sort.Slice(walks, func(i, j int) bool { return walks[i].store < walks[j].store })
	return walks
}

// pendingPage is a page whose batches were published but not yet recorded in the checkpoint.
type pendingPage struct {
	store  string
	cursor uint64 // where the page started
	next   uint64 // SCAN's next cursor after it
	keys   uint64
	acks   []AckWait

	// done is closed once record has run in the background (nil: not started).
	done chan struct{}
	// What record did: the checkpoint it wrote and its revision, or why it wrote none.
	ckpt    Checkpoint
	rev     uint64
	err     error
	failure string // "publish", "lease" or "checkpoint" when err is set
}

// nextCount is the SCAN COUNT for the next page of a store whose last page, scanned with
// count, returned got keys. SCAN's COUNT is a number of hash-table buckets to visit, not of
// keys to return: in a database that also holds other keys than KVCM's blocks, a MATCH page
// holds only their share of the keys visited, yet every page costs a publish, a checkpoint
// write and a backlog check. The count is scaled so that a page holds about want keys, between
// want and 16 × want, moving halfway towards the estimate each page. Redis does the same work
// per key visited whatever the COUNT.
func nextCount(count, got, want int) int {
	est := 2 * count
	if got > 0 {
		est = count * want / got
	}
	return min(max((count+est)/2, want), 16*want)
}

// Run ticks until ctx is done, then releases the lease.
func (s *Scanner) Run(ctx context.Context) error {
	if err := s.Config.Validate(); err != nil {
		return err
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	renewEvery := s.Config.LeaseRenew
	if renewEvery <= 0 {
		renewEvery = time.Second
	}
	go s.keepLease(ctx, renewEvery)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		// The last page's batches: record them if they were stored, so a successor does
		// not read that page again.
		s.settle(rctx, s.Now())
		if err := s.Lease.Release(rctx); err != nil {
			s.Logger.Warn("release lease", "err", err)
		}
		s.Metrics.LeaseHeld.Set(0)
	}()

	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		wait := s.Tick(ctx)
		if !s.progressed {
			wait = max(wait, idleWait)
		}
		// No catch-up: the next tick starts at least scan_interval after this one ended.
		timer.Reset(max(wait, s.Config.ScanInterval))
	}
}

func (s *Scanner) keepLease(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	wasHeld := false
	for {
		held, err := s.Lease.Refresh(ctx)
		if err != nil && ctx.Err() == nil {
			s.Metrics.opError(StageScanner, "lease")
			if wasHeld {
				s.Logger.Warn("lease lost", "err", err)
			} else {
				s.Logger.Debug("acquire lease", "err", err)
			}
		}
		if held && !wasHeld {
			s.Logger.Info("lease acquired", "holder", s.Config.Holder)
		}
		wasHeld = held
		if held {
			s.Metrics.LeaseHeld.Set(1)
		} else {
			s.Metrics.LeaseHeld.Set(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick does at most one SCAN page. It returns the extra wait the keys-per-second cap asks for.
// Every error path returns and is retried on a later tick: nothing spins (invariant 7).
func (s *Scanner) Tick(ctx context.Context) time.Duration {
	s.progressed = false
	leaseRev, held := s.Lease.Held()
	if !held {
		s.loaded = false // a future leadership re-reads the checkpoint
		s.dropPending()  // not recorded: the next leader reads the page again
		return 0
	}
	if !s.loaded {
		c, rev, err := ReadCheckpoint(ctx, s.State)
		if err != nil {
			s.Metrics.opError(StageScanner, "checkpoint")
			s.warn(ctx, "read checkpoint", "err", err)
			return 0
		}
		s.dropPending()
		s.ckpt, s.ckptRev, s.loaded, s.walks = c, rev, true, nil
		s.count = 0
		s.rewind()
		s.pauseAt, s.backlogAt = time.Time{}, time.Time{}
		if c.LastRoundEndUs > 0 {
			// Alerts on "no round for too long" must survive a restart or a failover.
			s.Metrics.LastRoundEnd.Set(float64(c.LastRoundEndUs) / 1e6)
		}
		s.Logger.Info("leader", "round", c.Round, "in_round", c.InRound, "store", c.Store, "cursor", c.Cursor)
	}
	now := s.Now()
	if now.Sub(s.pauseAt) >= controlRefresh || now.Before(s.pauseAt) {
		until, err := s.pausedUntil(ctx, now)
		if err != nil {
			s.Metrics.opError(StageScanner, "pause")
			s.warn(ctx, "read scanner pause; tick skipped", "err", err)
			return 0
		}
		s.pauseUntil, s.pauseAt = until, now
	}
	until := s.pauseUntil
	if !until.IsZero() && !now.Before(until) {
		until = time.Time{}
	}
	if !until.IsZero() {
		s.Metrics.ScannerPaused.Set(1)
		s.settle(ctx, now)
		return 0
	}
	s.Metrics.ScannerPaused.Set(0)
	if !s.ckpt.InRound {
		if now.UnixMicro() < s.ckpt.NextRoundUs {
			return 0
		}
		return s.startRound(ctx, now)
	}
	if s.walks == nil && !s.resume(ctx) {
		return 0
	}
	if s.Backlog != nil {
		if now.Sub(s.backlogAt) >= controlRefresh || now.Before(s.backlogAt) || s.backlogFull {
			p, d, err := s.Backlog(ctx)
			if err != nil {
				s.Metrics.opError(StageScanner, "backlog")
				s.warn(ctx, "read consumer backlog", "err", err)
				return 0 // fail closed: no scanning without knowing the backlog
			}
			s.backlogFull, s.backlogAt = p > s.Config.HighWater || d > s.Config.HighWater, now
		}
		if s.backlogFull {
			s.Metrics.BackpressureSkips.Inc()
			s.settle(ctx, now)
			return 0
		}
	}
	if s.readIndex >= len(s.walks) {
		if !s.settle(ctx, now) {
			return 0
		}
		if s.ckpt.Index < len(s.walks) {
			s.rewind() // not reached: settle moves the checkpoint to the read position
			return 0
		}
		return s.endRound(ctx, now)
	}
	walk := s.walks[s.readIndex]
	store, err := s.Stores.Store(walk.store)
	if err != nil {
		// A store that cannot even be opened: skip its instances this round.
		if !s.settle(ctx, now) {
			return 0
		}
		s.Metrics.opError(StageScanner, "store")
		s.Logger.Warn("open metadata store; its instances skipped this round", "store", walk.store, "instances", len(walk.instances), "err", err)
		for _, id := range slices.Sorted(maps.Keys(walk.instances)) {
			s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Instance: id, Round: s.ckpt.Round, Reason: "store_unavailable", Detail: err.Error()})
		}
		s.advance(0, 0)
		s.rewind()
		s.progressed = s.save(ctx, now)
		return 0
	}
	cursor, count := s.readCursor, s.count
	if count <= 0 {
		count = s.Config.ScanBatchSize
	}
	page, err := store.ScanStore(ctx, cursor, count, walk.owns)
	if err != nil {
		s.Metrics.opError(StageScanner, "scan")
		s.warn(ctx, "scan page; cursor kept", "store", walk.store, "cursor", cursor, "err", err)
		s.settle(ctx, now)
		return 0
	}
	// The previous page's batches were stored meanwhile; only then may the checkpoint move
	// past it, and only then is this page published (batches stay in order).
	if !s.settle(ctx, now) {
		return 0
	}
	s.Metrics.ScanPages.Inc()
	s.Metrics.ScannedKeys.Add(float64(len(page.Entries)))
	s.Metrics.ScanBadKeys.Add(float64(len(page.BadKeys)))
	s.Metrics.ScanUnownedKeys.Add(float64(page.Unowned))
	batches := s.batches(ctx, walk, page, cursor, leaseRev, now)
	// Fencing: never publish after losing the lease.
	if _, held := s.Lease.Held(); !held {
		return 0
	}
	p := &pendingPage{store: walk.store, cursor: cursor, next: page.Next, keys: uint64(len(page.Entries))}
	for _, b := range batches {
		acks, err := s.publish(ctx, b)
		if err != nil {
			s.Metrics.opError(StageScanner, "publish")
			s.warn(ctx, "publish batch; cursor kept", "store", walk.store, "instance", b.Instance, "cursor", cursor, "err", err)
			// Batches already sent are stored again under the same ids: the server drops them.
			return 0
		}
		p.acks = append(p.acks, acks...)
	}
	s.pending = p
	s.readCursor = page.Next
	returned := len(page.Entries) + len(page.BadKeys) + page.Unowned
	if page.Next == 0 {
		s.readIndex++
		s.count = 0 // the next store may hold other keys
	} else {
		s.count = nextCount(count, returned, s.Config.ScanBatchSize)
	}
	s.progressed = true
	var wait time.Duration
	if s.Config.MaxKeysPerSecond > 0 && returned > 0 {
		wait = time.Duration(float64(returned) / s.Config.MaxKeysPerSecond * float64(time.Second))
	}
	if max(wait, s.Config.ScanInterval) >= overlapBelow {
		// The next tick is not due at once: nothing to overlap, so record the page now
		// rather than a scan_interval later (a successor then reads no page twice).
		if !s.settle(ctx, now) {
			return 0
		}
	} else {
		s.recordAsync(ctx, now)
	}
	return wait
}

// batches routes a store page's blocks to one batch per instance, in instance order, and
// reports the keys that do not parse, by instance.
func (s *Scanner) batches(ctx context.Context, walk storeWalk, page meta.Page, cursor, leaseRev uint64, now time.Time) []subjects.Batch {
	bad := map[string][]string{}
	for _, k := range page.BadKeys {
		id, _ := kvcm.OwnerOf(k, walk.owns)
		bad[id] = append(bad[id], k)
	}
	byInst := map[string]*subjects.Batch{}
	batch := func(id string) *subjects.Batch {
		b := byInst[id]
		if b == nil {
			in := walk.instances[id]
			b = &subjects.Batch{
				V: subjects.SchemaVersion, Cluster: s.Names.Cluster, Instance: id, Group: in.Group, Store: in.Store,
				Round: s.ckpt.Round, LeaseRev: leaseRev, Cursor: cursor, Next: page.Next,
				ScannedAt: now.UnixMicro(), BadKeys: len(bad[id]),
			}
			byInst[id] = b
		}
		return b
	}
	for i := range page.Entries {
		e := &page.Entries[i]
		be, ok := blockEntry(e)
		if !ok {
			continue // no location field: nothing to judge
		}
		b := batch(e.Instance)
		b.Blocks = append(b.Blocks, be)
	}
	for _, id := range slices.Sorted(maps.Keys(bad)) {
		keys := bad[id]
		s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Instance: id, Round: s.ckpt.Round, Reason: "bad_key",
			Detail: fmt.Sprintf("%d keys do not parse, e.g. %q", len(keys), keys[0])})
	}
	out := make([]subjects.Batch, 0, len(byInst))
	for _, id := range slices.Sorted(maps.Keys(byInst)) {
		out = append(out, *byInst[id])
	}
	return out
}

// settle waits for the pending page's batches to be stored and for the checkpoint to move past
// it (record, started in the background by recordAsync or run here). It reports whether the
// scanner may go on: on a failed publish, a lost lease or a failed checkpoint write the page
// is forgotten and the read position goes back to the checkpoint, so the page is read and
// published again (the server drops batches it already has).
func (s *Scanner) settle(ctx context.Context, now time.Time) bool {
	p := s.pending
	if p == nil {
		return true
	}
	s.pending = nil
	if p.done == nil {
		s.record(ctx, p, s.ckpt, s.ckptRev, now)
	} else {
		<-p.done // record ends within ackTimeout plus one checkpoint write
	}
	if p.err != nil {
		s.rewind()
		switch p.failure {
		case "publish":
			s.Metrics.opError(StageScanner, "publish")
			s.warn(ctx, "publish batch; cursor kept", "store", p.store, "cursor", p.cursor, "err", p.err)
		case "checkpoint":
			s.saveFailed(ctx, p.err)
		}
		return false
	}
	s.Metrics.PublishedBatches.Add(float64(len(p.acks)))
	s.ckpt, s.ckptRev = p.ckpt, p.rev
	s.setPosition()
	return true
}

// dropPending forgets the pending page, after its background recording (if any) has ended:
// a checkpoint is never written behind the scanner's back.
func (s *Scanner) dropPending() {
	if p := s.pending; p != nil && p.done != nil {
		<-p.done
	}
	s.pending = nil
}

// recordAsync starts recording the pending page in the background, so that the next page is
// read from Redis while JetStream stores this one's batches and the checkpoint is written.
// Only the goroutine touches p until settle has waited for it; it works on a copy of the
// checkpoint.
func (s *Scanner) recordAsync(ctx context.Context, now time.Time) {
	p := s.pending
	p.done = make(chan struct{})
	base, rev := s.ckpt, s.ckptRev
	// Not cancelled with the scanner: a page whose batches are stored is recorded on the way
	// out as well (bounded by ackTimeout and the server's answer).
	bctx := context.WithoutCancel(ctx)
	go func() {
		defer close(p.done)
		s.record(bctx, p, base, rev, now)
	}()
}

// record waits for p's batches to be stored, then writes base moved past p as the checkpoint
// (by revision rev). It sets p's result and changes nothing else of the scanner.
func (s *Scanner) record(ctx context.Context, p *pendingPage, base Checkpoint, rev uint64, now time.Time) {
	actx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	for _, ack := range p.acks {
		if err := ack(actx); err != nil {
			p.err, p.failure = err, "publish"
			return
		}
	}
	// Fencing: never record progress after losing the lease.
	if _, held := s.Lease.Held(); !held {
		p.err, p.failure = errors.New("lease lost"), "lease"
		return
	}
	c := base
	c.Holder, c.SavedUs = s.Config.Holder, now.UnixMicro()
	c.KeysScanned += p.keys
	c.Cursor = p.next
	if p.next == 0 {
		c.Index++
	}
	s.position(&c)
	newRev, err := s.write(ctx, c, rev, now)
	if err != nil {
		p.err, p.failure = err, "checkpoint"
		return
	}
	p.ckpt, p.rev = c, newRev
}

// rewind puts the read position back on the checkpoint.
func (s *Scanner) rewind() {
	if s.readIndex != s.ckpt.Index || s.readCursor != s.ckpt.Cursor {
		s.count = 0
	}
	s.readIndex, s.readCursor = s.ckpt.Index, s.ckpt.Cursor
}

func (s *Scanner) publish(ctx context.Context, b subjects.Batch) ([]AckWait, error) {
	maxPayload := int64(s.MaxPayload)
	if maxPayload <= 0 {
		maxPayload = 1 << 20 // the server's default
	}
	maxBytes := subjects.PayloadLimit(maxPayload) // headers travel too
	parts, oversized, err := subjects.EncodeBatchParts(b, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	for _, o := range oversized {
		s.Metrics.OversizedBlocks.Inc()
		key := o.Key
		s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Instance: b.Instance, Round: b.Round, Key: &key,
			Reason: "oversized", Detail: fmt.Sprintf("__uri__ of %d bytes exceeds the max payload", len(o.URI))})
	}
	var acks []AckWait
	for _, p := range parts {
		if len(p.Batch.Blocks) == 0 {
			continue
		}
		ack, err := s.Publisher.PublishAsync(s.Names.BatchSubject(b.Instance), p.Data, subjects.BatchMsgID(p.Batch))
		if err != nil {
			return nil, err
		}
		acks = append(acks, ack)
	}
	return acks, nil
}

// advance moves the checkpoint past a page that returned cursor next.
func (s *Scanner) advance(next uint64, keys uint64) {
	s.ckpt.KeysScanned += keys
	s.ckpt.Cursor = next
	if next == 0 {
		s.ckpt.Index++
	}
	s.setPosition()
}

// position fills c's store name and the round's sizes from the snapshot.
func (s *Scanner) position(c *Checkpoint) {
	if c.Index < len(s.walks) {
		c.Store = s.walks[c.Index].store
	} else {
		c.Store = ""
	}
	c.Stores = len(s.walks)
	instances := 0
	for _, w := range s.walks {
		instances += len(w.instances)
	}
	c.Instances = instances
}

func (s *Scanner) setPosition() {
	s.position(&s.ckpt)
	s.Metrics.RoundStore.Set(float64(s.ckpt.Index))
	s.Metrics.RoundStores.Set(float64(len(s.walks)))
	s.Metrics.RoundInstances.Set(float64(s.ckpt.Instances))
	s.Metrics.RoundID.Set(float64(s.ckpt.Round))
}

func (s *Scanner) startRound(ctx context.Context, now time.Time) time.Duration {
	snap, err := s.readRegistry(ctx)
	if err != nil {
		return 0
	}
	prev := s.ckpt
	s.walks = walksOf(snap)
	s.ckpt.Round++
	s.ckpt.InRound, s.ckpt.Index, s.ckpt.Cursor, s.ckpt.KeysScanned = true, 0, 0, 0
	s.ckpt.RoundStartedUs = now.UnixMicro()
	s.setPosition()
	if !s.save(ctx, now) {
		s.ckpt, s.walks = prev, nil
		return 0
	}
	s.rewind()
	s.progressed = true
	s.Logger.Info("round started", "round", s.ckpt.Round, "instances", s.ckpt.Instances, "stores", s.ckpt.Stores)
	s.event(ctx, subjects.Event{Kind: subjects.EventRound, Round: s.ckpt.Round, Outcome: "start",
		Counts: map[string]int64{"instances": int64(s.ckpt.Instances), "stores": int64(s.ckpt.Stores)}})
	return 0
}

// resume rebuilds the round's snapshot after a restart or a failover: the registry is read
// again and the checkpoint's store located in it by name; if it is gone, the round goes on
// with the next store in order, from the beginning. (Instances registered meanwhile in a store
// not yet walked are collected this round; in the store being walked, from the cursor on.)
func (s *Scanner) resume(ctx context.Context) bool {
	snap, err := s.readRegistry(ctx)
	if err != nil {
		return false
	}
	walks := walksOf(snap)
	s.walks = walks
	c := &s.ckpt
	i := sort.Search(len(walks), func(i int) bool { return walks[i].store >= c.Store })
	if c.Store == "" && c.Stores > 0 && c.Index >= c.Stores {
		i = len(walks) // the round had passed its last store
	}
	if i >= len(walks) || walks[i].store != c.Store {
		c.Cursor = 0 // a different store: start it from the beginning
	}
	c.Index = i
	s.setPosition()
	s.rewind()
	s.Logger.Info("round resumed", "round", c.Round, "store", c.Store, "index", c.Index, "cursor", c.Cursor)
	return true
}

func (s *Scanner) readRegistry(ctx context.Context) ([]meta.Instance, error) {
	reg, err := s.Registry.ReadRegistry(ctx)
	if err != nil {
		s.Metrics.opError(StageScanner, "registry")
		s.warn(ctx, "read registry", "err", err)
		return nil, err
	}
	snap := append([]meta.Instance(nil), reg.Instances...)
	sort.SliceStable(snap, func(i, j int) bool {
		if snap[i].Group != snap[j].Group {
			return snap[i].Group < snap[j].Group
		}
		return snap[i].ID < snap[j].ID
	})
	if len(reg.Skipped) > 0 {
		s.Logger.Info("registry entries not collected", "count", len(reg.Skipped), "first", reg.Skipped[0].Instance, "reason", reg.Skipped[0].Reason)
	}
	return snap, nil
}

func (s *Scanner) endRound(ctx context.Context, now time.Time) time.Duration {
	c := &s.ckpt
	prev := *c
	started := time.UnixMicro(c.RoundStartedUs)
	c.InRound = false
	c.NextRoundUs = now.Add(s.Config.RoundPause).UnixMicro()
	c.LastRoundEndUs = now.UnixMicro()
	c.LastRoundKeys = c.KeysScanned
	c.LastRoundDuration = now.Sub(started).Milliseconds()
	if !s.save(ctx, now) {
		*c = prev
		return 0
	}
	s.walks = nil
	s.progressed = true
	s.Metrics.ScanRounds.Inc()
	s.Metrics.RoundDuration.Set(now.Sub(started).Seconds())
	s.Metrics.LastRoundEnd.Set(float64(now.Unix()))
	s.Logger.Info("round finished", "round", c.Round, "keys", c.KeysScanned, "duration", now.Sub(started))
	s.event(ctx, subjects.Event{Kind: subjects.EventRound, Round: c.Round, Outcome: "end",
		Counts: map[string]int64{"keys": int64(c.KeysScanned), "duration_ms": c.LastRoundDuration, "instances": int64(c.Instances), "stores": int64(c.Stores)}})
	return 0
}

// save writes the checkpoint by revision. A revision conflict means another scanner wrote it:
// this one is no longer the leader and stops at once.
func (s *Scanner) save(ctx context.Context, now time.Time) bool {
	rev, err := s.write(ctx, s.ckpt, s.ckptRev, now)
	if err != nil {
		s.saveFailed(ctx, err)
		return false
	}
	s.ckpt.Holder, s.ckpt.SavedUs = s.Config.Holder, now.UnixMicro()
	s.ckptRev = rev
	return true
}

// write stores c, stamped with this holder and now, as the checkpoint with revision rev (0:
// the first one) and returns its new revision.
func (s *Scanner) write(ctx context.Context, c Checkpoint, rev uint64, now time.Time) (uint64, error) {
	c.Holder = s.Config.Holder
	c.SavedUs = now.UnixMicro()
	val, err := json.Marshal(c)
	if err != nil {
		return 0, fmt.Errorf("encode checkpoint: %w", err)
	}
	if rev == 0 {
		return s.State.Create(ctx, CheckpointKey, val)
	}
	return s.State.Update(ctx, CheckpointKey, val, rev)
}

// saveFailed handles a checkpoint that could not be written. A revision conflict means another
// scanner wrote it: this one is no longer the leader and stops at once.
func (s *Scanner) saveFailed(ctx context.Context, err error) {
	s.Metrics.opError(StageScanner, "checkpoint")
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		s.Logger.Warn("checkpoint written by another scanner; stepping down", "err", err)
		s.Lease.Drop()
	} else {
		s.warn(ctx, "save checkpoint", "err", err)
	}
	s.loaded = false // re-read before acting again
}

// warn logs a failed operation, except when it failed because the scanner is shutting down.
func (s *Scanner) warn(ctx context.Context, msg string, args ...any) {
	if ctx.Err() != nil {
		s.Logger.Debug(msg, args...)
		return
	}
	s.Logger.Warn(msg, args...)
}

func (s *Scanner) event(ctx context.Context, e subjects.Event) {
	if s.Events == nil {
		return
	}
	e.Stage = StageScanner
	s.Events.Emit(ctx, e)
}
