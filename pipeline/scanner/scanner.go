package scanner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Backlog reports the downstream consumers' pending + unacknowledged messages.
type Backlog func(ctx context.Context) (prober, deleter uint64, err error)

// full is the scanner's reading of b: full when either backlog is above highWater (nil when b
// is: nothing holds the walks back).
func (b Backlog) full(highWater uint64) pipeline.BacklogFunc {
	if b == nil {
		return nil
	}
	return func(ctx context.Context) (bool, []any, error) {
		p, d, err := b(ctx)
		if err != nil {
			return false, nil, err
		}
		return p > highWater || d > highWater, []any{"prober_backlog", p, "deleter_backlog", d, "high_water", highWater}, nil
	}
}

// Scanner walks the metadata stores of a KVCM cluster (DESIGN §4): one walk per store whose
// lease it holds, each with its own round, checkpoint and pacing. Any number of replicas share
// the stores: each takes free store leases up to its share (fairShare: the registry's stores
// over the live replicas, at most Config.MaxStores), hands one back at a round boundary
// while it holds more, lets go of stores that left the registry, and takes a released lease
// at once (it watches the lease bucket). Its leases are renewed in the background, a failed
// renewal retried until the lease's TTL would pass.
type Scanner struct {
	cfg        Config
	names      subjects.Names
	registry   meta.RegistryReader
	stores     meta.StoreResolver
	js         jetstream.JetStream
	leases     jetstream.KeyValue
	leaseTTL   time.Duration
	state      jetstream.KeyValue
	publisher  pipeline.AsyncPublisher
	events     *pipeline.EventLog
	backlog    Backlog
	sizes      func(ctx context.Context, store string) (int64, error)
	backoff    func(attempt int) time.Duration
	maxPayload int
	metrics    *Metrics
	log        *slog.Logger
	now        func() time.Time

	ctl    *pipeline.Controls
	starts *roundStarts
	reg    *registryCache

	mu     sync.Mutex
	walks  map[string]*walkHandle
	rounds map[string]pipeline.Checkpoint // the last state of each walk, for the process-wide gauges
	freed  map[string]time.Time           // stores whose lease was released, since when
	ended  chan struct{}

	registered []string // the registry's stores at the last cycle (kvcm_gc_store_registered)
}

// MemberRecord is the value of a scanner replica's member key (subjects.MemberKey).
type MemberRecord struct {
	Holder    string `json:"holder"`
	MaxStores int    `json:"max_stores,omitempty"`
	SinceUs   int64  `json:"since_us"`
}

// Deps are what a scanner is wired to.
type Deps struct {
	Names    subjects.Names
	Registry meta.RegistryReader
	Stores   meta.StoreResolver
	// Leases is the LEASE bucket, whose bucket-wide TTL is LeaseTTL; State the STATE bucket.
	// JS is their JetStream context: the scanner lists the lease bucket's keys with STREAM.INFO
	// and watches it with a plain subscription, so it needs no consumer of its own (its NATS
	// user may not create one). JS is required, LeaseTTL must be positive.
	JS        jetstream.JetStream
	Leases    jetstream.KeyValue
	LeaseTTL  time.Duration
	State     jetstream.KeyValue
	Publisher pipeline.AsyncPublisher
	Events    *pipeline.EventLog
	Backlog   Backlog
	// Sizes reads a store's number of keys (DBSIZE) when its round starts, for the estimated
	// end of the walk. Nil: a store that is a StoreSizer is asked; otherwise no estimate.
	Sizes func(ctx context.Context, store string) (int64, error)
	// Backoff is the delay before the attempt-th retry (1-based) of a failed registry read
	// (nil: RegistryBackoff).
	Backoff    func(attempt int) time.Duration
	MaxPayload int // the server's max payload; batches are split below it
	Metrics    *Metrics
	Logger     *slog.Logger     // nil discards
	Now        func() time.Time // nil: time.Now
}

// New returns the scanner of cfg, wired to deps, with deps' defaults applied.
func New(cfg Config, deps Deps) (*Scanner, error) {
	refused := pipeline.Refusals{cfg.Validate()}
	refused.Need(deps.LeaseTTL > 0, "lease TTL must be > 0")
	refused.Need(deps.JS != nil, "no JetStream context")
	if err := refused.Err("scanner"); err != nil {
		return nil, err
	}
	s := &Scanner{cfg: cfg, names: deps.Names, registry: deps.Registry, stores: deps.Stores, js: deps.JS,
		leases: deps.Leases, leaseTTL: deps.LeaseTTL, state: deps.State, publisher: deps.Publisher, events: deps.Events,
		backlog: deps.Backlog, sizes: deps.Sizes, backoff: deps.Backoff, maxPayload: deps.MaxPayload,
		metrics: orUnregistered(deps.Metrics), log: pipeline.OrDiscard(deps.Logger), now: deps.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if s.backoff == nil {
		s.backoff = RegistryBackoff
	}
	return s, nil
}

func (s *Scanner) renewEvery() time.Duration {
	return pipeline.DefaultLeaseRenew(s.cfg.LeaseRenew, s.leaseTTL)
}

// Run walks the stores it can hold until ctx is done; then every walk records its last page,
// the renewals stop, and the leases are released so other replicas take over at once.
func (s *Scanner) Run(ctx context.Context) error {
	s.ctl = pipeline.NewControls(
		pipeline.ControlsConfig{
			Stage:    pipeline.StageScanner,
			PauseKey: subjects.ScannerPauseKey,
			Refresh:  pipeline.ControlRefresh,
		},
		pipeline.ControlsDeps{State: s.state, Backlog: s.backlog.full(s.cfg.HighWater),
			OpError: func(op string) { s.metrics.opError(op) },
			Paused:  s.metrics.ScannerPaused, Backpressure: s.metrics.Backpressure, Logger: s.log},
	)
	s.starts = &roundStarts{state: s.state, opError: s.metrics.opError,
		log: func(err error) { pipeline.Warn(ctx, s.log, "read round start requests", "err", err) }}
	s.mu.Lock() // LeaseState (readiness) may already be reading s.reg
	s.reg = newRegistryCache(s.registry, s.backoff, s.metrics, s.log)
	s.walks, s.rounds, s.freed = map[string]*walkHandle{}, map[string]pipeline.Checkpoint{}, map[string]time.Time{}
	s.ended = make(chan struct{}, 1)
	s.mu.Unlock()
	every := s.renewEvery()
	since := s.now()

	// The keeper renews the leases and the member key. It is stopped and joined before the
	// leases are released, so a renewal never runs after (or instead of) a release.
	kctx, stopKeeper := context.WithCancel(context.WithoutCancel(ctx))
	keeperDone := make(chan struct{})
	go func() { defer close(keeperDone); s.keep(kctx, every, since) }()
	changes, watchDone := s.watch(kctx)

	var walks sync.WaitGroup
	// Replicas started together see each other before taking stores.
	timer := time.NewTimer(min(every, time.Second))
	defer timer.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue
		case <-timer.C:
		case <-changes:
		case <-s.ended:
		}
		s.cycle(ctx, &walks)
		timer.Reset(every)
	}
	walks.Wait() // every walk has recorded its last page
	stopKeeper()
	<-keeperDone
	<-watchDone
	s.leave()
	s.metrics.registeredStores(s.registered, nil)
	return nil
}

// cycle reaps ended walks, reads the registry and the replicas, hands back what is over the
// share and takes what is under it.
func (s *Scanner) cycle(ctx context.Context, walks *sync.WaitGroup) {
	now := s.now()
	s.reap()
	snap, _, err := s.reg.get(ctx, now)
	if err != nil {
		return // fail closed: keep what is held, take nothing new (the cache logged it)
	}
	stores := storesOf(snap)
	s.metrics.registeredStores(s.registered, stores)
	s.registered = stores
	s.writeIndex(ctx, stores, now)
	caps, err := s.members(ctx)
	if err != nil {
		pipeline.Warn(ctx, s.log, "count scanner replicas; no store taken this time", "err", err)
		s.metrics.opError("lease")
		return
	}
	s.metrics.ScannerMembers.Set(float64(len(caps)))
	limit := len(stores)
	if s.cfg.MaxStores > 0 {
		limit = min(limit, s.cfg.MaxStores)
	}
	share := min(fairShare(len(stores), caps, s.cfg.MaxStores), limit)

	inRegistry := map[string]bool{}
	for _, st := range stores {
		inRegistry[st] = true
	}
	s.mu.Lock()
	var active []*walkHandle
	for st, h := range s.walks {
		if !inRegistry[st] {
			if !h.gone.Swap(true) {
				s.log.Info("store left the registry; releasing it", "store", st)
			}
			h.poke()
			continue
		}
		active = append(active, h)
	}
	s.mu.Unlock()
	s.balance(active, share)

	held := len(active)
	for _, st := range s.preferred(stores) {
		if held >= limit || ctx.Err() != nil {
			break
		}
		if s.holding(st) || (held >= share && !s.orphaned(st, now)) {
			continue
		}
		lease := pipeline.NewStoreLease(s.leases, st, s.cfg.Holder, s.leaseTTL)
		ok, err := lease.Acquire(ctx)
		if err != nil {
			s.metrics.opError("lease")
			pipeline.Warn(ctx, s.log, "acquire store lease", "store", st, "err", err)
			continue
		}
		if !ok {
			continue // someone else's
		}
		s.start(ctx, walks, st, lease)
		held++
	}
	s.mu.Lock()
	s.metrics.LeaseHeld.Set(float64(len(s.walks)))
	s.mu.Unlock()
}

// balance asks one walk to hand its store back at its next round boundary while more are
// held than the share (one at a time: the share is counted again after each), and takes the
// request back once the share has grown again.
func (s *Scanner) balance(active []*walkHandle, share int) {
	marked := 0
	for _, h := range active {
		if h.release.Load() {
			marked++
		}
	}
	switch {
	case len(active) <= share:
		for _, h := range active {
			h.release.Store(false)
		}
	case marked == 0:
		// The one between rounds if any, else the one this replica prefers least.
		slices.SortFunc(active, func(a, b *walkHandle) int {
			if a.between.Load() != b.between.Load() {
				if a.between.Load() {
					return -1
				}
				return 1
			}
			return cmp.Compare(s.rank(b.store), s.rank(a.store))
		})
		h := active[0]
		h.release.Store(true)
		h.poke()
		s.log.Info("over its share of the stores; handing one back at its round boundary", "store", h.store,
			"held", len(active), "share", share)
	}
}

// rank orders the stores differently for each holder, so that replicas taking free stores at
// the same moment mostly try different ones first.
func (s *Scanner) rank(store string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s.cfg.Holder))
	h.Write([]byte{0})
	h.Write([]byte(store))
	return h.Sum64()
}

func (s *Scanner) preferred(stores []string) []string {
	out := slices.Clone(stores)
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(s.rank(a), s.rank(b)) })
	return out
}

func (s *Scanner) holding(store string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.walks[store]
	return ok
}

// orphaned: the store's lease was released a whole lease TTL ago and nobody took it (every
// other replica is at its share or its max_stores): anyone with room takes it.
func (s *Scanner) orphaned(store string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.freed[store]
	return ok && now.Sub(at) >= s.leaseTTL
}

// start runs a walk on a store whose lease was just acquired.
func (s *Scanner) start(ctx context.Context, walks *sync.WaitGroup, store string, lease *pipeline.Lease) {
	h := &walkHandle{store: store, lease: lease, wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.mu.Lock()
	s.walks[h.store] = h
	delete(s.freed, h.store)
	s.mu.Unlock()
	d := s.newDriver(h)
	walks.Add(1)
	go func() {
		defer walks.Done()
		defer func() {
			close(h.done)
			select {
			case s.ended <- struct{}{}:
			default:
			}
		}()
		d.run(ctx)
	}()
}

// reap forgets the walks that ended; a lease a walk neither released nor lost is released.
func (s *Scanner) reap() {
	s.mu.Lock()
	var ended []*walkHandle
	for st, h := range s.walks {
		select {
		case <-h.done:
			ended = append(ended, h)
			delete(s.walks, st)
			delete(s.rounds, st)
		default:
		}
	}
	s.mu.Unlock()
	for _, h := range ended {
		if _, held := h.lease.Held(); held && !h.released.Load() {
			s.releaseLease(h)
		}
	}
	if len(ended) > 0 {
		s.updateRoundGauges()
	}
}

func (s *Scanner) releaseLease(h *walkHandle) {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := h.lease.Release(ctx); err != nil {
		s.log.Warn("release store lease", "store", h.store, "err", err)
	}
}

// leave ends the scanner's presence: the member key first, so that the others count one
// replica less when they see the released leases, then every lease still held.
func (s *Scanner) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := s.leases.Delete(ctx, subjects.MemberKey(s.cfg.Holder)); err != nil &&
		!errors.Is(err, jetstream.ErrKeyNotFound) {
		s.log.Warn("remove scanner member key", "err", err)
	}
	s.mu.Lock()
	hs := make([]*walkHandle, 0, len(s.walks))
	for _, h := range s.walks {
		hs = append(hs, h)
	}
	s.walks = map[string]*walkHandle{}
	s.rounds = map[string]pipeline.Checkpoint{}
	s.mu.Unlock()
	for _, h := range hs {
		if !h.released.Load() {
			s.releaseLease(h)
		}
	}
	s.metrics.LeaseHeld.Set(0)
	s.updateRoundGauges()
}

// writeIndex records the registry's stores in the state bucket when they changed.
func (s *Scanner) writeIndex(ctx context.Context, stores []string, now time.Time) {
	idx, err := ReadStoreIndex(ctx, s.state)
	if err == nil && idx != nil && slices.Equal(idx.Stores, stores) {
		return
	}
	if err == nil {
		err = writeStoreIndex(ctx, s.state, stores, s.cfg.Holder, now)
	}
	if err != nil {
		s.metrics.opError("checkpoint")
		pipeline.Warn(ctx, s.log, "write stores index", "err", err)
	}
}

// members returns the max_stores of every live scanner replica (0: no cap), this one first.
func (s *Scanner) members(ctx context.Context) ([]int, error) {
	keys, err := bucketKeys(ctx, s.js, s.leases.Bucket(), subjects.MemberFilter())
	if err != nil {
		return nil, fmt.Errorf("list scanner members: %w", err)
	}
	self := subjects.MemberKey(s.cfg.Holder)
	caps := []int{s.cfg.MaxStores}
	for _, k := range keys {
		if k == self {
			continue
		}
		// A replica that left keeps a delete marker until it ages out: read each key.
		e, err := s.leases.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read member %s: %w", k, err)
		}
		var r MemberRecord
		if json.Unmarshal(e.Value(), &r) != nil {
			r = MemberRecord{} // unreadable: counted, with no cap
		}
		caps = append(caps, max(r.MaxStores, 0))
	}
	return caps, nil
}

// fairShare is how many of stores a replica with cap myCap (0: none) should walk when the
// live replicas have caps: the lowest level L such that every replica walking min(its cap, L)
// covers every store, then min(myCap, L). Without caps it is the stores over the replicas,
// rounded up; a capped replica leaves its part to the others.
func fairShare(stores int, caps []int, myCap int) int {
	capped := func(c, level int) int {
		if c > 0 {
			return min(c, level)
		}
		return level
	}
	level := 0
	for ; level < stores; level++ {
		total := 0
		for _, c := range caps {
			total += capped(c, level)
		}
		if total >= stores {
			break
		}
	}
	return capped(myCap, level)
}

// bucketKeys lists the keys of a bucket matching filter, deleted ones included, with one
// STREAM.INFO filtered by subject (kv.ListKeys would create a consumer).
func bucketKeys(ctx context.Context, js jetstream.JetStream, bucket, filter string) ([]string, error) {
	st, err := js.Stream(ctx, subjects.KVStream(bucket))
	if err != nil {
		return nil, err
	}
	prefix := subjects.KVSubjectPrefix(bucket)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+filter))
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if k, ok := strings.CutPrefix(subj, prefix); ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (s *Scanner) putMember(ctx context.Context, since time.Time) error {
	val, err := json.Marshal(MemberRecord{Holder: s.cfg.Holder, MaxStores: s.cfg.MaxStores, SinceUs: since.UnixMicro()})
	if err != nil {
		return fmt.Errorf("encode member record: %w", err)
	}
	if _, err := s.leases.Put(ctx, subjects.MemberKey(s.cfg.Holder), val); err != nil {
		return fmt.Errorf("write member key: %w", err)
	}
	return nil
}

// keep renews the member key and every held lease each period; a renewal that fails for a
// transient reason is retried every retry until it succeeds or the lease's TTL would pass.
// Renewals of several leases run at once, each bounded, so one slow answer cannot let the
// others expire.
func (s *Scanner) keep(ctx context.Context, every time.Duration, since time.Time) {
	retry := max(every/5, 20*time.Millisecond)
	type state struct {
		next    time.Time
		failing bool
	}
	states := map[*pipeline.Lease]*state{}
	var memberNext time.Time
	t := time.NewTicker(retry)
	defer t.Stop()
	for {
		now := s.now()
		if !now.Before(memberNext) {
			mctx, cancel := context.WithTimeout(ctx, every)
			if err := s.putMember(mctx, since); err != nil {
				pipeline.Warn(ctx, s.log, "renew scanner member key", "err", err)
				memberNext = now.Add(retry)
			} else {
				memberNext = now.Add(every)
			}
			cancel()
		}
		s.mu.Lock()
		var due []*walkHandle
		live := map[*pipeline.Lease]bool{}
		for _, h := range s.walks {
			live[h.lease] = true
			st := states[h.lease]
			if st == nil {
				st = &state{next: now.Add(every)}
				states[h.lease] = st
			}
			if !now.Before(st.next) {
				due = append(due, h)
			}
		}
		s.mu.Unlock()
		for l := range states {
			if !live[l] {
				delete(states, l)
			}
		}
		var wg sync.WaitGroup
		for _, h := range due {
			st := states[h.lease]
			wg.Add(1)
			go func() {
				defer wg.Done()
				timeout := every
				if until := h.lease.ValidUntil(); !until.IsZero() {
					timeout = min(timeout, max(until.Sub(now), retry))
				}
				rctx, cancel := context.WithTimeout(ctx, timeout)
				err := h.lease.Renew(rctx)
				cancel()
				switch {
				case err == nil:
					if st.failing {
						s.log.Info("store lease renewed again", "store", h.store)
					}
					st.next, st.failing = now.Add(every), false
				case errors.Is(err, pipeline.ErrNotHeld):
					// Released, or dropped by its walk: nothing to renew.
				case errors.Is(err, pipeline.ErrLeaseLost):
					if ctx.Err() == nil {
						s.metrics.opError("lease")
						s.log.Warn("store lease lost", "store", h.store, "err", err)
					}
					st.next = now.Add(every)
					h.poke()
				default:
					if !st.failing && ctx.Err() == nil {
						s.metrics.opError("lease")
						s.log.Warn("renew store lease; retrying until it would expire", "store", h.store,
							"valid_until", h.lease.ValidUntil().UTC().Format(time.RFC3339Nano), "err", err)
					}
					st.next, st.failing = now.Add(retry), true
				}
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watch follows the lease bucket: a released store lease, or a replica leaving, wakes the
// coordination at once (a standby takes a released store without waiting for a period). It
// also notes since when each store's lease is free. It is a plain subscription to the
// bucket's subjects, not a consumer: a missed message only delays a takeover to the next
// period. A subscription that cannot start leaves the periodic coordination alone.
func (s *Scanner) watch(ctx context.Context) (changes <-chan struct{}, done <-chan struct{}) {
	out, finished := make(chan struct{}, 1), make(chan struct{})
	prefix := subjects.KVSubjectPrefix(s.leases.Bucket())
	msgs := make(chan *nats.Msg, 64)
	sub, err := s.js.Conn().ChanSubscribe(prefix+">", msgs)
	if err != nil {
		pipeline.Warn(ctx, s.log, "watch the lease bucket; released stores are taken at the next period", "err", err)
		close(finished)
		return out, finished
	}
	go func() {
		defer close(finished)
		defer func() { _ = sub.Unsubscribe() }()
		for {
			var m *nats.Msg
			select {
			case <-ctx.Done():
				return
			case m = <-msgs:
			}
			op := m.Header.Get("KV-Operation")
			deleted := op == "DEL" || op == "PURGE"
			if st, err := subjects.StoreOfLeaseKey(strings.TrimPrefix(m.Subject, prefix)); err == nil {
				s.mu.Lock()
				if deleted {
					if _, ok := s.freed[st]; !ok {
						s.freed[st] = s.now()
					}
				} else {
					delete(s.freed, st)
				}
				s.mu.Unlock()
			}
			if deleted {
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, finished
}

// noteRound records a walk's state for the process-wide round gauges.
func (s *Scanner) noteRound(store string, c pipeline.Checkpoint) {
	s.mu.Lock()
	if s.rounds != nil {
		s.rounds[store] = c
	}
	s.mu.Unlock()
	s.updateRoundGauges()
}

// updateRoundGauges sets the process-wide round gauges from the walks: the highest round,
// the stores walked, those done with their round, their instances.
func (s *Scanner) updateRoundGauges() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var round uint64
	done, instances := 0, 0
	for _, c := range s.rounds {
		round = max(round, c.Round)
		if !c.InRound || c.Walked {
			done++
		}
		instances += c.Instances
	}
	s.metrics.RoundID.Set(float64(round))
	s.metrics.RoundStores.Set(float64(len(s.rounds)))
	s.metrics.RoundStore.Set(float64(done))
	s.metrics.RoundInstances.Set(float64(instances))
}

// LeaseState is the scanner's readiness: the stores whose leases it holds, or, holding none,
// that it waits while able to read who holds them. A lease bucket it cannot read means it
// could neither take nor keep a lease.
func (s *Scanner) LeaseState(ctx context.Context) (string, error) {
	s.mu.Lock()
	var held []string
	for st, h := range s.walks {
		if rev, ok := h.lease.Held(); ok {
			held = append(held, fmt.Sprintf("%s (revision %d)", st, rev))
		}
	}
	reg := s.reg
	s.mu.Unlock()
	if len(held) > 0 {
		slices.Sort(held)
		return "lease held: " + strings.Join(held, ", "), nil
	}
	var stores []string
	if reg != nil {
		stores = storesOf(reg.last())
	}
	holders := map[string]bool{}
	for _, st := range stores {
		e, err := s.leases.Get(ctx, subjects.StoreLeaseKey(st))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read lease of %s: %w", st, err)
		}
		var r pipeline.LeaseRecord
		if json.Unmarshal(e.Value(), &r) == nil {
			holders[r.Holder] = true
		}
	}
	if len(holders) == 0 {
		if _, err := s.leases.Status(ctx); err != nil {
			return "", fmt.Errorf("read lease bucket: %w", err)
		}
		return fmt.Sprintf("waiting for the lease (%d stores, none leased)", len(stores)), nil
	}
	return fmt.Sprintf(
		"waiting for the lease (%d stores, held by %s)",
		len(stores),
		strings.Join(slices.Sorted(maps.Keys(holders)), ", "),
	), nil
}

// ReadMembers lists the scanner replicas whose member key is live, sorted.
func ReadMembers(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	keys, err := pipeline.ListKeys(ctx, kv, subjects.MemberFilter())
	if err != nil {
		return nil, fmt.Errorf("list scanner members: %w", err)
	}
	var out []string
	for _, k := range keys {
		if h, err := subjects.HolderOfMemberKey(k); err == nil {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out, nil
}
