package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// CheckpointKey is the key of the scanner's checkpoint in the state bucket.
const CheckpointKey = "checkpoint"

// Checkpoint is the scanner's durable position, written by revision after every page so a
// new leader resumes the round instead of restarting it, and the round pause survives restarts.
type Checkpoint struct {
	Round   uint64 `json:"round"`
	InRound bool   `json:"in_round"`
	// Position in the round: the instance being scanned and the SCAN cursor to continue from.
	Index     int    `json:"index"`
	Instances int    `json:"instances"`
	Group     string `json:"group"`
	Instance  string `json:"instance"`
	Cursor    uint64 `json:"cursor"`
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

	ckpt     Checkpoint
	ckptRev  uint64
	loaded   bool
	snapshot []meta.Instance

	// The read position runs one page ahead of the checkpoint: a page's batches are stored
	// by JetStream while the next page is read from Redis, and the checkpoint moves past a
	// page only once all its batches are acknowledged (settle). pending is that page.
	readIndex  int
	readCursor uint64
	pending    *pendingPage
	// count is the SCAN COUNT of the current instance's next page (see nextCount).
	count int

	// With a short scan_interval the pause and backlog reads would cost more round trips than
	// the page itself; their answers are reused for at most controlRefresh.
	pauseAt, backlogAt time.Time
	pauseUntil         time.Time
	backlogFull        bool
}

// controlRefresh bounds how stale a reused pause or backlog answer may be.
const controlRefresh = 250 * time.Millisecond

// ackTimeout bounds the wait for the acknowledgement of a page's batches; a page not
// acknowledged by then is read and published again (the server drops the duplicates).
const ackTimeout = 30 * time.Second

// pendingPage is a page whose batches were published but not yet acknowledged.
type pendingPage struct {
	inst   meta.Instance
	cursor uint64 // where the page started
	next   uint64 // SCAN's next cursor after it
	keys   uint64
	acks   []AckWait
}

// nextCount is the SCAN COUNT for the next page of an instance whose last page, scanned with
// count, returned got keys. SCAN's COUNT is a number of hash-table buckets to visit, not of
// keys to return: with several instances in one database, a MATCH page holds only the
// instance's share of the keys visited (a quarter with four instances of equal size), yet
// every page costs a publish, a checkpoint write and a backlog check. The count is scaled so
// that a page holds about want keys, between want and 16 × want, moving halfway towards the
// estimate each page. Redis does the same work per key visited whatever the COUNT.
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
	leaseRev, held := s.Lease.Held()
	if !held {
		s.loaded = false // a future leadership re-reads the checkpoint
		s.pending = nil  // never recorded: the next leader reads the page again
		return 0
	}
	if !s.loaded {
		c, rev, err := ReadCheckpoint(ctx, s.State)
		if err != nil {
			s.Metrics.opError(StageScanner, "checkpoint")
			s.warn(ctx, "read checkpoint", "err", err)
			return 0
		}
		s.ckpt, s.ckptRev, s.loaded, s.snapshot = c, rev, true, nil
		s.pending, s.count = nil, 0
		s.rewind()
		s.pauseAt, s.backlogAt = time.Time{}, time.Time{}
		if c.LastRoundEndUs > 0 {
			// Alerts on "no round for too long" must survive a restart or a failover.
			s.Metrics.LastRoundEnd.Set(float64(c.LastRoundEndUs) / 1e6)
		}
		s.Logger.Info("leader", "round", c.Round, "in_round", c.InRound, "instance", c.Instance, "cursor", c.Cursor)
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
	if s.snapshot == nil && !s.resume(ctx) {
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
	if s.readIndex >= len(s.snapshot) {
		if !s.settle(ctx, now) {
			return 0
		}
		if s.ckpt.Index < len(s.snapshot) {
			s.rewind() // not reached: settle moves the checkpoint to the read position
			return 0
		}
		return s.endRound(ctx, now)
	}
	inst := s.snapshot[s.readIndex]
	store, err := s.Stores.Store(inst.Store)
	if err != nil {
		// A store that cannot even be opened: skip the instance this round.
		if !s.settle(ctx, now) {
			return 0
		}
		s.Metrics.opError(StageScanner, "store")
		s.Logger.Warn("open metadata store; instance skipped this round", "instance", inst.ID, "store", inst.Store, "err", err)
		s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Instance: inst.ID, Round: s.ckpt.Round, Reason: "store_unavailable", Detail: err.Error()})
		s.advance(inst, 0, 0)
		s.rewind()
		s.save(ctx, now)
		return 0
	}
	cursor, count := s.readCursor, s.count
	if count <= 0 {
		count = s.Config.ScanBatchSize
	}
	page, err := store.ScanPage(ctx, inst.ID, cursor, count)
	if err != nil {
		s.Metrics.opError(StageScanner, "scan")
		s.warn(ctx, "scan page; cursor kept", "instance", inst.ID, "cursor", cursor, "err", err)
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
	batch := subjects.Batch{
		V: subjects.SchemaVersion, Cluster: s.Names.Cluster, Instance: inst.ID, Group: inst.Group, Store: inst.Store,
		Round: s.ckpt.Round, LeaseRev: leaseRev, Cursor: cursor, Next: page.Next,
		ScannedAt: now.UnixMicro(), BadKeys: len(page.BadKeys),
	}
	for _, e := range page.Entries {
		if len(e.URI) == 0 {
			continue // absent block: nothing to judge
		}
		batch.Blocks = append(batch.Blocks, subjects.BlockEntry{Key: e.BlockKey, URI: subjects.RawText(e.URI), LRUTime: e.LRUTime})
	}
	if len(page.BadKeys) > 0 {
		s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Instance: inst.ID, Round: s.ckpt.Round, Reason: "bad_key",
			Detail: fmt.Sprintf("%d keys do not parse, e.g. %q", len(page.BadKeys), page.BadKeys[0])})
	}
	// Fencing: never publish after losing the lease.
	if _, held := s.Lease.Held(); !held {
		return 0
	}
	p := &pendingPage{inst: inst, cursor: cursor, next: page.Next, keys: uint64(len(page.Entries))}
	if len(batch.Blocks) > 0 {
		acks, err := s.publish(ctx, batch)
		if err != nil {
			s.Metrics.opError(StageScanner, "publish")
			s.warn(ctx, "publish batch; cursor kept", "instance", inst.ID, "cursor", cursor, "err", err)
			return 0
		}
		p.acks = acks
	}
	s.pending = p
	s.readCursor = page.Next
	if page.Next == 0 {
		s.readIndex++
		s.count = 0 // the next instance may hold another share of the database
	} else {
		s.count = nextCount(count, len(page.Entries)+len(page.BadKeys), s.Config.ScanBatchSize)
	}
	if s.Config.ScanInterval >= controlRefresh {
		// Paced: record the page now rather than a scan_interval later.
		if !s.settle(ctx, now) {
			return 0
		}
	}
	if s.Config.MaxKeysPerSecond > 0 && len(page.Entries) > 0 {
		return time.Duration(float64(len(page.Entries)) / s.Config.MaxKeysPerSecond * float64(time.Second))
	}
	return 0
}

// settle waits for the pending page's batches to be stored and then moves the checkpoint past
// it. It reports whether the scanner may go on: on a failed publish, a lost lease or a failed
// checkpoint write the page is forgotten and the read position goes back to the checkpoint,
// so the page is read and published again (the server drops batches it already has).
func (s *Scanner) settle(ctx context.Context, now time.Time) bool {
	p := s.pending
	if p == nil {
		return true
	}
	s.pending = nil
	actx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	for _, ack := range p.acks {
		if err := ack(actx); err != nil {
			s.Metrics.opError(StageScanner, "publish")
			s.warn(ctx, "publish batch; cursor kept", "instance", p.inst.ID, "cursor", p.cursor, "err", err)
			s.rewind()
			return false
		}
	}
	s.Metrics.PublishedBatches.Add(float64(len(p.acks)))
	// Fencing: never record progress after losing the lease.
	if _, held := s.Lease.Held(); !held {
		s.rewind()
		return false
	}
	s.advance(p.inst, p.next, p.keys)
	if !s.save(ctx, now) {
		s.rewind()
		return false
	}
	return true
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
	parts, oversized, err := subjects.SplitBatch(b, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("split batch: %w", err)
	}
	for _, o := range oversized {
		s.Metrics.OversizedBlocks.Inc()
		key := o.Key
		s.event(ctx, subjects.Event{Kind: subjects.EventSkip, Instance: b.Instance, Round: b.Round, Key: &key,
			Reason: "oversized", Detail: fmt.Sprintf("__uri__ of %d bytes exceeds the max payload", len(o.URI))})
	}
	var acks []AckWait
	for _, p := range parts {
		if len(p.Blocks) == 0 {
			continue
		}
		data, err := subjects.Encode(p)
		if err != nil {
			return nil, fmt.Errorf("encode batch: %w", err)
		}
		ack, err := s.Publisher.PublishAsync(s.Names.BatchSubject(b.Instance), data, subjects.BatchMsgID(p))
		if err != nil {
			return nil, err
		}
		acks = append(acks, ack)
	}
	return acks, nil
}

// advance moves the position after a page of inst that returned cursor next.
func (s *Scanner) advance(inst meta.Instance, next uint64, keys uint64) {
	s.ckpt.KeysScanned += keys
	s.ckpt.Cursor = next
	if next == 0 {
		s.ckpt.Index++
	}
	s.setPosition()
}

func (s *Scanner) setPosition() {
	if s.ckpt.Index < len(s.snapshot) {
		in := s.snapshot[s.ckpt.Index]
		s.ckpt.Group, s.ckpt.Instance = in.Group, in.ID
	} else {
		s.ckpt.Group, s.ckpt.Instance = "", ""
	}
	s.ckpt.Instances = len(s.snapshot)
	s.Metrics.RoundInstance.Set(float64(s.ckpt.Index))
	s.Metrics.RoundInstances.Set(float64(len(s.snapshot)))
	s.Metrics.RoundID.Set(float64(s.ckpt.Round))
}

func (s *Scanner) startRound(ctx context.Context, now time.Time) time.Duration {
	snap, err := s.readRegistry(ctx)
	if err != nil {
		return 0
	}
	prev := s.ckpt
	s.snapshot = snap
	s.ckpt.Round++
	s.ckpt.InRound, s.ckpt.Index, s.ckpt.Cursor, s.ckpt.KeysScanned = true, 0, 0, 0
	s.ckpt.RoundStartedUs = now.UnixMicro()
	s.setPosition()
	if !s.save(ctx, now) {
		s.ckpt, s.snapshot = prev, nil
		return 0
	}
	s.rewind()
	s.Logger.Info("round started", "round", s.ckpt.Round, "instances", len(snap))
	s.event(ctx, subjects.Event{Kind: subjects.EventRound, Round: s.ckpt.Round, Outcome: "start",
		Counts: map[string]int64{"instances": int64(len(snap))}})
	return 0
}

// resume rebuilds the round's snapshot after a restart or a failover: the instance list is
// read again and the checkpoint's instance located in it by (group, id); if it is gone, the
// round goes on with the next one in order.
func (s *Scanner) resume(ctx context.Context) bool {
	snap, err := s.readRegistry(ctx)
	if err != nil {
		return false
	}
	s.snapshot = snap
	c := &s.ckpt
	i := sort.Search(len(snap), func(i int) bool {
		return snap[i].Group > c.Group || (snap[i].Group == c.Group && snap[i].ID >= c.Instance)
	})
	if c.Instance == "" && c.Group == "" {
		i = len(snap) // the round had passed its last instance
	}
	if i >= len(snap) || snap[i].Group != c.Group || snap[i].ID != c.Instance {
		c.Cursor = 0 // a different instance: start it from the beginning
	}
	c.Index = i
	s.setPosition()
	s.rewind()
	s.Logger.Info("round resumed", "round", c.Round, "instance", c.Instance, "index", c.Index, "cursor", c.Cursor)
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
	s.snapshot = nil
	s.Metrics.ScanRounds.Inc()
	s.Metrics.RoundDuration.Set(now.Sub(started).Seconds())
	s.Metrics.LastRoundEnd.Set(float64(now.Unix()))
	s.Logger.Info("round finished", "round", c.Round, "keys", c.KeysScanned, "duration", now.Sub(started))
	s.event(ctx, subjects.Event{Kind: subjects.EventRound, Round: c.Round, Outcome: "end",
		Counts: map[string]int64{"keys": int64(c.KeysScanned), "duration_ms": c.LastRoundDuration, "instances": int64(c.Instances)}})
	return 0
}

// save writes the checkpoint by revision. A revision conflict means another scanner wrote it:
// this one is no longer the leader and stops at once.
func (s *Scanner) save(ctx context.Context, now time.Time) bool {
	s.ckpt.Holder = s.Config.Holder
	s.ckpt.SavedUs = now.UnixMicro()
	val, err := json.Marshal(s.ckpt)
	if err != nil {
		s.Logger.Error("encode checkpoint", "err", err)
		return false
	}
	var rev uint64
	if s.ckptRev == 0 {
		rev, err = s.State.Create(ctx, CheckpointKey, val)
	} else {
		rev, err = s.State.Update(ctx, CheckpointKey, val, s.ckptRev)
	}
	if err != nil {
		s.Metrics.opError(StageScanner, "checkpoint")
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			s.Logger.Warn("checkpoint written by another scanner; stepping down", "err", err)
			s.Lease.Drop()
		} else {
			s.warn(ctx, "save checkpoint", "err", err)
		}
		s.loaded = false // re-read before acting again
		return false
	}
	s.ckptRev = rev
	return true
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
