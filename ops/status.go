package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/internal/natsperm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// StatusReport is what `status` shows: the same numbers as `nats stream info`, `nats consumer
// report` and `nats kv get` on kvcm-gc's objects, put together. Its JSON form is stable for
// scripts: times are RFC 3339, durations are seconds.
type StatusReport struct {
	Cluster   string           `json:"cluster"`
	Prefix    string           `json:"prefix"`
	At        time.Time        `json:"at"`
	Streams   []StreamStatus   `json:"streams"`
	Consumers []ConsumerStatus `json:"consumers"`
	Scanner   ScannerStatus    `json:"scanner"`
	Sweep     *SweepStatus     `json:"sweep,omitempty"` // the sweep of orphan data files
	// StuckDeleting counts the stuck DELETING handled recently (WithStuckDeleting only).
	StuckDeleting *StuckDeletingStatus `json:"stuck_deleting,omitempty"`
	// KVCMCounters is the audit of KVCM's counters by instance: persisted, recounted, the
	// drift, and kvcm-gc's own share of it (kvcmcounters.go).
	KVCMCounters []InstanceCounters `json:"kvcm_counters,omitempty"`
	// LastEvents holds the newest event of each kind, in the order of EventKinds; kinds never
	// recorded are absent.
	LastEvents []LastEvent `json:"last_events"`
	// DryRun says whether the deployment runs dry: as configured, and as the stages' newest
	// events show it.
	DryRun DryRunStatus `json:"dry_run"`
	// Problems lists what could not be read (a missing stream, a server error); the rest of
	// the report is still filled in.
	Problems []string `json:"problems,omitempty"`
	// Warnings are what was read and looks wrong, e.g. a round that walked no metadata store.
	Warnings []string `json:"warnings,omitempty"`
}

// StreamStatus is one stream's state (`nats stream info`). A stream whose info could not be
// read keeps its row, with Error set and the numbers zero.
type StreamStatus struct {
	Name     string   `json:"name"`
	Error    string   `json:"error,omitempty"`
	Subjects []string `json:"subjects"`
	Messages uint64   `json:"messages"`
	Bytes    uint64   `json:"bytes"`
	// MaxBytes is the stream's cap (-1: none); Discarding says it is within one message of
	// it, so every message stored discards the oldest (subjects.StreamFillOf).
	MaxBytes   int64     `json:"max_bytes"`
	Discarding bool      `json:"discarding,omitempty"`
	FirstSeq   uint64    `json:"first_seq"`
	FirstTime  time.Time `json:"first_time,omitzero"`
	LastSeq    uint64    `json:"last_seq"`
	LastTime   time.Time `json:"last_time,omitzero"`
	Consumers  int       `json:"consumers"`
}

// ConsumerStatus is one stage's consumer (`nats consumer report`). A consumer whose info could
// not be read keeps its row, with Error set and the numbers zero.
type ConsumerStatus struct {
	Stage  string `json:"stage"`
	Stream string `json:"stream"`
	Name   string `json:"name"`
	Error  string `json:"error,omitempty"`
	// ReadAt is when the server produced the numbers, AgeSeconds how long before the report.
	ReadAt        time.Time `json:"read_at,omitzero"`
	AgeSeconds    float64   `json:"age_seconds"`
	Pending       uint64    `json:"pending"`     // not yet delivered
	AckPending    int       `json:"ack_pending"` // delivered, not acknowledged (in flight)
	MaxAckPending int       `json:"max_ack_pending"`
	Redelivered   int       `json:"redelivered"`
	Waiting       int       `json:"waiting"` // pull requests waiting at the server
	DeliveredSeq  uint64    `json:"delivered_stream_seq"`
	AckFloorSeq   uint64    `json:"ack_floor_stream_seq"`
	Paused        bool      `json:"paused"`
	PausedUntil   time.Time `json:"paused_until,omitzero"`
}

// ScannerStatus is the scanner's state from the lease and state buckets.
type ScannerStatus struct {
	Paused      bool      `json:"paused"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// HeldBack says why a round in progress is not moving, as far as status can tell from the
	// consumers and the configuration: an operator's pause, or a backlog above
	// backpressure_high_water (the scanner then skips its ticks). Empty otherwise.
	HeldBack string `json:"held_back,omitempty"`
	// Leader is the holder of the first store's lease (the only one with one store), under
	// its historic JSON name: replicas divide the stores, each store with a lease of its own
	// (Stores). nil: no replica holds it.
	Leader *LeaderStatus `json:"leader,omitempty"`
	Round  *RoundStatus  `json:"round,omitempty"` // nil: no round ever started
	// NextRound is when the next round may start (between rounds only).
	NextRound time.Time            `json:"next_round,omitzero"`
	LastRound *LastRound           `json:"last_round,omitempty"`
	Holder    string               `json:"checkpoint_holder,omitempty"` // the replica that saved the checkpoint
	SavedAt   time.Time            `json:"checkpoint_saved,omitzero"`
	Raw       *pipeline.Checkpoint `json:"checkpoint,omitempty"`
	// Stores is every metadata store: who walks it, where its round is, how fast, when it
	// should end, and why it is not moving. Leader, Round, NextRound and LastRound above
	// summarize them (with one store they are that store's).
	Stores []StoreStatus `json:"stores,omitempty"`
	// Replicas are the scanner replicas sharing the stores (their member keys).
	Replicas []string `json:"replicas,omitempty"`
	// NoStores: the registry, as the scanners last read it, names no metadata store on
	// Redis for the cluster (a misspelt cluster name looks like this).
	NoStores bool `json:"no_stores,omitempty"`
}

// StoreStatus is one metadata store's walk.
type StoreStatus struct {
	Store string `json:"store"`
	// InRegistry: the store is in the registry as the scanners last read it; a store that
	// is not keeps its last checkpoint here.
	InRegistry bool `json:"in_registry"`
	// Holder is the replica holding the store's lease ("" when none), Revision its fencing
	// token.
	Holder         string    `json:"holder,omitempty"`
	Revision       uint64    `json:"lease_revision,omitempty"`
	RenewedAgoSecs float64   `json:"lease_renewed_ago_seconds,omitempty"`
	Round          uint64    `json:"round"`
	InRound        bool      `json:"in_round"`
	Cursor         uint64    `json:"cursor"`
	Instances      int       `json:"instances"`
	Keys           uint64    `json:"keys_scanned"` // block keys read this round
	Visited        uint64    `json:"keys_visited"` // keys SCAN returned this round
	DBSize         int64     `json:"dbsize,omitempty"`
	Started        time.Time `json:"started,omitzero"`
	KeysPerSecond  float64   `json:"keys_per_second"`
	// Progress is the share of the store's keys visited (by ETABasis), ETA the estimated
	// end of the round (zero: unknown, or the walk is not moving).
	Progress float64   `json:"progress"`
	ETA      time.Time `json:"eta,omitzero"`
	ETABasis string    `json:"eta_basis,omitempty"` // "dbsize" | "last_round" | "walked"
	// State is "scanning" or why the walk is not moving: paused, backpressure, round_pause,
	// registry_backoff, error, no_lease, not_in_registry; since StateSince when known.
	State      string     `json:"state"`
	StateSince time.Time  `json:"state_since,omitzero"`
	NextRound  time.Time  `json:"next_round,omitzero"`
	LastRound  *LastRound `json:"last_round,omitempty"`
	// FailedRound is the store's last round when it ended failed (its SCAN kept failing for
	// scan_failure_budget, or the store could not be opened); nil once a round completes.
	FailedRound *pipeline.RoundFailure `json:"failed_round,omitempty"`
	Layouts     map[string]uint64      `json:"layouts,omitempty"`
	// Unregistered are the store's keys of instances the registry does not list, as its last
	// round counted them (the largest first; UnregisteredMore left out).
	Unregistered     []pipeline.UnregisteredCount `json:"unregistered_instances,omitempty"`
	UnregisteredMore int                          `json:"unregistered_instances_more,omitempty"`
	SavedAt          time.Time                    `json:"checkpoint_saved,omitzero"`
	// Pace is a duty-paced walk's pace and why it is at it, as its last page was read (nil:
	// paced by scan_interval and max_keys_per_second, or between rounds).
	Pace *pipeline.PaceRecord `json:"pace,omitempty"`
}

// LeaderStatus is the holder of one lease: a store's (scanner) or a swept storage's (walker).
type LeaderStatus struct {
	Holder         string    `json:"holder"`
	Since          time.Time `json:"since"`
	Renewed        time.Time `json:"renewed"`
	HeldSeconds    float64   `json:"held_seconds"`        // how long this holder has held the lease
	RenewedAgoSecs float64   `json:"renewed_ago_seconds"` // age of the last renewal (lease age)
	Revision       uint64    `json:"revision"`            // the fencing token batches carry
}

// RoundStatus is the current (or last) round's progress.
type RoundStatus struct {
	ID         uint64    `json:"id"`
	InProgress bool      `json:"in_progress"`
	Store      int       `json:"store"`       // 1-based position of the metadata store being walked
	Stores     int       `json:"stores"`      // metadata stores in the round's registry snapshot
	StoresDone int       `json:"stores_done"` // stores whose walk of this round has ended
	StoreName  string    `json:"store_name,omitempty"`
	Instances  int       `json:"instances"` // instances in the round's registry snapshot
	Cursor     uint64    `json:"cursor"`
	Keys       uint64    `json:"keys_scanned"`
	Started    time.Time `json:"started,omitzero"`
	// KeysPerSecond is the round's scan rate so far.
	KeysPerSecond float64 `json:"keys_per_second"`
	// ETA estimates when the round ends: from the previous round's key count at the current
	// rate when there is one, else the latest of the walking stores' own estimates, else from
	// the share of stores done. Zero when unknown.
	ETA      time.Time `json:"eta,omitzero"`
	ETABasis string    `json:"eta_basis,omitempty"` // "keys" | "store_estimates" | "stores"
}

// LastRound is the last completed round.
type LastRound struct {
	Ended           time.Time `json:"ended"`
	Keys            uint64    `json:"keys"`
	DurationSeconds float64   `json:"duration_seconds"`
}

// DryRunStatus is whether the deployment runs dry (DESIGN §8.8: the stages record what they
// would do and write nothing).
type DryRunStatus struct {
	// Configured is dry_run of the configuration status ran with (WithDryRun): the chart's
	// admin.yaml carries the release's dryRun.
	Configured bool `json:"configured"`
	// Stages, by stage, whether its newest event among LastEvents is one of a dry run: what
	// the stage itself runs with, whatever status's configuration says.
	Stages []StageDryRun `json:"stages,omitempty"`
}

// StageDryRun is what a stage's newest event says of its dry run.
type StageDryRun struct {
	Stage  string    `json:"stage"`
	DryRun bool      `json:"dry_run"`
	Kind   string    `json:"kind"` // the event's kind
	Time   time.Time `json:"time"`
}

// Any reports whether the configuration or any stage's newest event is a dry run's.
func (d DryRunStatus) Any() bool {
	if d.Configured {
		return true
	}
	for _, s := range d.Stages {
		if s.DryRun {
			return true
		}
	}
	return false
}

// dryRunOf reads, from the newest event of each kind, the newest of each stage.
func dryRunOf(configured bool, last []LastEvent) DryRunStatus {
	d := DryRunStatus{Configured: configured}
	at := map[string]int{}
	for _, e := range last {
		st := e.Event.Stage
		if st == "" {
			continue
		}
		obs := StageDryRun{Stage: st, DryRun: e.Event.DryRun, Kind: e.Kind, Time: e.Time}
		i, ok := at[st]
		switch {
		case !ok:
			at[st] = len(d.Stages)
			d.Stages = append(d.Stages, obs)
		case e.Time.After(d.Stages[i].Time):
			d.Stages[i] = obs
		}
	}
	order := map[string]int{}
	for i, s := range pipeline.Stages() {
		order[s] = i
	}
	slices.SortFunc(d.Stages, func(a, b StageDryRun) int { return order[a.Stage] - order[b.Stage] })
	return d
}

// LastEvent is the newest event of one kind.
type LastEvent struct {
	Kind  string         `json:"kind"`
	Seq   uint64         `json:"seq"`
	Time  time.Time      `json:"time"`
	Event subjects.Event `json:"event"`
}

// EventKinds lists the event kinds in the order status shows them.
func EventKinds() []string {
	return []string{subjects.EventRound, subjects.EventCandidate, subjects.EventSkip, subjects.EventDelete,
		subjects.EventPoison, subjects.EventDeadLetter, subjects.EventSweep}
}

// DefaultStatusCallTimeout bounds each request of Status unless WithCallTimeout says otherwise.
const DefaultStatusCallTimeout = 2 * time.Second

// StatusOption tunes Status.
type StatusOption func(*statusOptions)

type statusOptions struct {
	dryRun      bool
	callTimeout time.Duration
	highWater   uint64
	stuckWindow time.Duration     // 0: stuck DELETING not read
	perm        *natsperm.Watcher // nil: refusals show as timeouts
}

// WithPermissions watches the connection of js for the server's refusals: a part of the
// report whose subject the identity may not use then says so at once, naming the subject
// and the identity, instead of waiting out its timeout; the other parts are read as usual.
func WithPermissions(w *natsperm.Watcher) StatusOption { return func(o *statusOptions) { o.perm = w } }

// WithCallTimeout bounds each request of Status: a stream or consumer whose leader is being
// elected does not answer, and its row then says so instead of the report waiting for it.
func WithCallTimeout(d time.Duration) StatusOption {
	return func(o *statusOptions) {
		if d > 0 {
			o.callTimeout = d
		}
	}
}

// WithDryRun is dry_run of the configuration status runs with, shown beside what the
// stages' events say (DryRunStatus).
func WithDryRun(on bool) StatusOption { return func(o *statusOptions) { o.dryRun = on } }

// WithHighWater is the scanner's backpressure_high_water, so Status can tell that a backlog
// holds the scanner back.
func WithHighWater(n uint64) StatusOption { return func(o *statusOptions) { o.highWater = n } }

// Status reads everything status shows. It only reads: stream and consumer info, the lease
// and checkpoint keys, and the last message of each event kind, all at once, each request
// bounded by its own timeout. Whatever cannot be read is listed in Problems (and a stream or
// consumer keeps its row, saying what failed): a refusal of the server for lack of permission
// (WithPermissions) as such, naming the subject and the identity. The rest is still reported.
// An error is returned only when ctx ends.
func Status(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	opts ...StatusOption,
) (StatusReport, error) {
	o := statusOptions{callTimeout: DefaultStatusCallTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	now := time.Now()
	r := StatusReport{Cluster: names.Cluster, Prefix: names.Prefix, At: now.UTC()}
	var mu sync.Mutex
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
	call := func(ctx context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, o.callTimeout)
	}

	streams := []string{names.BatchesStream(), names.DeletesStream(), names.EventsStream()}
	consumerStages := []string{pipeline.StageProber, pipeline.StageDeleter}
	r.Streams = make([]StreamStatus, len(streams))
	r.Consumers = make([]ConsumerStatus, len(consumerStages))
	rows := statusRows{js: js, now: now, call: call, problem: problem, perm: o.perm}
	// Each part is guarded for the JetStream API subjects of what it reads.
	events := apiOn(names.EventsStream())
	var wg sync.WaitGroup
	for i, name := range streams {
		wg.Go(func() { r.Streams[i] = rows.stream(ctx, name) })
	}
	for i, stage := range consumerStages {
		wg.Go(func() {
			stream, name, _ := pipeline.StageConsumer(names, stage)
			r.Consumers[i] = rows.consumer(ctx, stage, stream, name)
		})
	}
	wg.Go(func() { r.Scanner = scannerStatus(ctx, rows, names, o.callTimeout) })
	wg.Go(func() { r.Sweep = sweepStatus(ctx, rows, names) })
	wg.Go(func() { r.KVCMCounters = countersStatus(ctx, rows, names) })
	wg.Go(func() {
		ctx, rows, done := rows.part(ctx, events...)
		defer done()
		r.LastEvents = lastEvents(ctx, js, names, o.callTimeout, rows.problem)
	})
	if o.stuckWindow > 0 {
		wg.Go(func() {
			ctx, rows, done := rows.part(ctx, events...)
			defer done()
			r.StuckDeleting = stuckDeletingStatus(ctx, js, names, now, o.stuckWindow, rows.problem)
		})
	}
	wg.Wait()
	slices.Sort(r.Problems)
	r.DryRun = dryRunOf(o.dryRun, r.LastEvents)
	r.Scanner.HeldBack = heldBack(r, o.highWater, now)
	if r.Scanner.NoStores {
		// Nothing to walk: the registry names no Redis metadata store for the cluster.
		r.Warnings = append(r.Warnings, fmt.Sprintf("no metadata store to walk: the registry of cluster %q names no "+
			"instance group on a Redis store (a misspelt cluster name looks like this)", names.Cluster))
	}
	return r, ctx.Err()
}

// statusRows reads the rows of streams and consumers, each request bounded by call; what
// cannot be read goes to problem and its row says what failed.
type statusRows struct {
	js      jetstream.JetStream
	now     time.Time
	call    func(context.Context) (context.Context, context.CancelFunc)
	problem func(string, ...any)
	perm    *natsperm.Watcher
}

// apiOn are the JetStream API subjects of requests about stream (or a bucket's stream): its
// info, and direct gets, message gets and consumers of it.
func apiOn(stream string) []string {
	return []string{jetstream.DefaultAPIPrefix + "*.*." + stream, jetstream.DefaultAPIPrefix + "*.*." + stream + ".>"}
}

// kvAPI are the JetStream API subjects of reading the keys of bucket that match the filters:
// its stream's info, their direct gets, and a consumer listing them (the key, or the filter,
// ends the API subject of each). Parts reading other keys of the same bucket stay apart.
func kvAPI(bucket string, filters ...string) []string {
	stream, keys := subjects.KVStream(bucket), subjects.KVSubjectPrefix(bucket)
	out := []string{jetstream.DefaultAPIPrefix + "STREAM.INFO." + stream}
	for _, f := range filters {
		out = append(out, jetstream.DefaultAPIPrefix+"DIRECT.GET."+stream+"."+keys+f,
			jetstream.DefaultAPIPrefix+"CONSUMER.CREATE."+stream+".*."+keys+f)
	}
	return out
}

// part guards ctx for the subjects one part of the report reads: a refusal of one ends that
// part alone, and its problems name what was refused rather than the timeout it caused.
func (s statusRows) part(ctx context.Context, patterns ...string) (context.Context, statusRows, context.CancelFunc) {
	ctx, done := s.perm.Guard(ctx, patterns...)
	p := s
	p.problem = func(format string, args ...any) {
		for i, a := range args {
			if err, ok := a.(error); ok {
				args[i] = natsperm.Cause(ctx, err)
			}
		}
		s.problem(format, args...)
	}
	return ctx, p, done
}

func (s statusRows) stream(ctx context.Context, name string) StreamStatus {
	ctx, s, done := s.part(ctx, jetstream.DefaultAPIPrefix+"STREAM.INFO."+name)
	defer done()
	cctx, cancel := s.call(ctx)
	defer cancel()
	st, err := s.js.Stream(cctx, name)
	if err != nil {
		err = natsperm.Cause(ctx, err)
		s.problem("stream %s: %v", name, err)
		return StreamStatus{Name: name, Error: err.Error()}
	}
	info := st.CachedInfo()
	fill := subjects.StreamFillOf(info.Config, info.State, nil)
	return StreamStatus{Name: name, Subjects: info.Config.Subjects,
		Messages: info.State.Msgs, Bytes: info.State.Bytes, MaxBytes: fill.MaxBytes, Discarding: fill.Discarding,
		FirstSeq: info.State.FirstSeq, FirstTime: nonZeroUTC(info.State.FirstTime),
		LastSeq: info.State.LastSeq, LastTime: nonZeroUTC(info.State.LastTime), Consumers: info.State.Consumers}
}

func (s statusRows) consumer(ctx context.Context, stage, stream, name string) ConsumerStatus {
	ctx, s, done := s.part(ctx, jetstream.DefaultAPIPrefix+"CONSUMER.INFO."+stream+"."+name)
	defer done()
	cctx, cancel := s.call(ctx)
	defer cancel()
	c, err := s.js.Consumer(cctx, stream, name)
	if err != nil {
		err = natsperm.Cause(ctx, err)
		s.problem("consumer %s/%s: %v", stream, name, err)
		return ConsumerStatus{Stage: stage, Stream: stream, Name: name, Error: err.Error()}
	}
	info := c.CachedInfo()
	p := pipeline.ConsumerPause(stage, info)
	row := ConsumerStatus{Stage: stage, Stream: stream, Name: name,
		Pending: info.NumPending, AckPending: info.NumAckPending, MaxAckPending: info.Config.MaxAckPending,
		Redelivered: info.NumRedelivered, Waiting: info.NumWaiting,
		DeliveredSeq: info.Delivered.Stream, AckFloorSeq: info.AckFloor.Stream,
		Paused: p.Paused, PausedUntil: nonZeroUTC(p.Until)}
	row.ReadAt, row.AgeSeconds = readAt(info.TimeStamp, s.now)
	return row
}

// readAt is the time the server produced consumer info (its clock; ours when it sent none)
// and its age at now, never negative.
func readAt(ts, now time.Time) (time.Time, float64) {
	if ts.IsZero() || ts.Unix() <= 0 {
		return now.UTC(), 0
	}
	return ts.UTC(), max(now.Sub(ts).Seconds(), 0)
}

// heldBack explains a round in progress that the scanner cannot move: its pause, or a
// downstream backlog above the high-water mark.
func heldBack(r StatusReport, highWater uint64, now time.Time) string {
	sc := r.Scanner
	if sc.Round == nil || !sc.Round.InProgress {
		return ""
	}
	if sc.Paused {
		return "paused by an operator " + pauseEnd(sc.PausedUntil, now)
	}
	if highWater == 0 {
		return ""
	}
	var full []string
	for _, c := range r.Consumers {
		if c.Error == "" && c.Pending+uint64(c.AckPending) > highWater {
			full = append(full, fmt.Sprintf("%s backlog %d", c.Stage, c.Pending+uint64(c.AckPending)))
		}
	}
	if len(full) == 0 {
		return ""
	}
	return fmt.Sprintf("backpressure: %s above backpressure_high_water %d; ticks are skipped until it drains",
		strings.Join(full, ", "), highWater)
}

func scannerStatus(ctx context.Context, rows statusRows, names subjects.Names, timeout time.Duration) ScannerStatus {
	js, now := rows.js, rows.now
	// The scanner's few reads follow one another; together they get a few call timeouts.
	ctx, cancel := context.WithTimeout(ctx, 4*timeout)
	defer cancel()
	var st ScannerStatus
	var leases []pipeline.StoreLease
	// Each bucket's reads are a part of their own: an identity refused one reads the other.
	lctx, lrows, ldone := rows.part(
		ctx,
		kvAPI(names.LeaseBucket(), subjects.StoreLeaseFilter(), subjects.MemberFilter())...)
	defer ldone()
	if lease, err := js.KeyValue(lctx, names.LeaseBucket()); err != nil {
		lrows.problem("lease bucket %s: %v", names.LeaseBucket(), err)
	} else if leases, err = pipeline.ReadLeases(lctx, lease); err != nil {
		lrows.problem("leases: %v", err)
	} else {
		if len(leases) > 0 {
			// The summary's leader: the first store's holder (the only one with one store).
			rec, rev := leases[0].Record, leases[0].Revision
			since, renewed := time.UnixMicro(rec.SinceUs), time.UnixMicro(rec.RenewedUs)
			st.Leader = &LeaderStatus{Holder: rec.Holder, Since: since.UTC(), Renewed: renewed.UTC(),
				HeldSeconds: now.Sub(since).Seconds(), RenewedAgoSecs: now.Sub(renewed).Seconds(), Revision: rev}
		}
		if st.Replicas, err = scanner.ReadMembers(lctx, lease); err != nil {
			lrows.problem("scanner replicas: %v", err)
		}
	}
	ctx, rows, done := rows.part(
		ctx,
		kvAPI(names.StateBucket(), subjects.ScannerPauseKey, subjects.StoresKey, subjects.CheckpointFilter())...)
	defer done()
	problem := rows.problem
	state, err := js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		problem("state bucket %s: %v", names.StateBucket(), err)
		return st
	}
	if p, err := pipeline.ReadPause(ctx, state, subjects.ScannerPauseKey); err != nil {
		problem("%v", err)
	} else if p != nil && p.Active(now) {
		st.Paused, st.PausedUntil = true, p.Until().UTC()
	}
	if idx, err := scanner.ReadStoreIndex(ctx, state); err != nil {
		problem("%v", err)
	} else if idx != nil && len(idx.Stores) == 0 {
		st.NoStores = true
	}
	cks, err := scanner.ReadCheckpoints(ctx, state)
	if err != nil {
		problem("%v", err)
		return st
	}
	st.Stores = storeStatuses(cks, leases, st.Paused, now)
	var inRegistry []scanner.StoreCheckpoint
	for _, c := range cks {
		if c.InRegistry {
			inRegistry = append(inRegistry, c)
		}
	}
	ck, rev := scanner.Summarize(inRegistry)
	if rev == 0 {
		return st
	}
	st.Raw = &ck
	st.Holder, st.SavedAt = ck.Holder, usTime(ck.SavedUs)
	if ck.LastRoundEndUs > 0 {
		st.LastRound = &LastRound{Ended: usTime(ck.LastRoundEndUs), Keys: ck.LastRoundKeys,
			DurationSeconds: float64(ck.LastRoundDuration) / 1e3}
	}
	if !ck.InRound {
		st.NextRound = usTime(ck.NextRoundUs)
	}
	if ck.Round == 0 {
		return st
	}
	rs := &RoundStatus{
		ID:         ck.Round,
		InProgress: ck.InRound,
		Store:      min(ck.Index+1, ck.Stores),
		Stores:     ck.Stores,
		StoresDone: ck.Index,
		StoreName:  ck.Store,
		Instances:  ck.Instances,
		Cursor:     ck.Cursor,
		Keys:       ck.KeysScanned,
		Started:    usTime(ck.RoundStartedUs),
	}
	if !ck.InRound && ck.LastRoundEndUs > 0 {
		// The last round is over: report its final numbers, not a rate diluted by the pause.
		rs.Store = ck.Stores
		rs.Keys = ck.LastRoundKeys
		if ck.LastRoundDuration > 0 {
			rs.KeysPerSecond = float64(ck.LastRoundKeys) / (float64(ck.LastRoundDuration) / 1e3)
		}
	} else if ck.InRound {
		rs.KeysPerSecond, rs.ETA, rs.ETABasis = estimate(ck, now)
	}
	st.Round = rs
	if rs.InProgress && (rs.ETA.IsZero() || rs.ETABasis == "stores") {
		// The stores' own estimates beat scaling by the share of stores done.
		if eta := storesETA(st.Stores); !eta.IsZero() {
			rs.ETA, rs.ETABasis = eta, "store_estimates"
		}
	}
	return st
}

// storesETA is the round's end from its stores' own estimates: the latest of them, when every
// store of the registry still walking this round has one (each from its own DBSIZE or last
// round). A store without one (not held, held back, no basis yet) leaves the round unknown.
func storesETA(stores []StoreStatus) time.Time {
	var eta time.Time // stays zero when no store is walking
	for _, s := range stores {
		if !s.InRegistry || !s.InRound {
			continue
		}
		if s.ETA.IsZero() {
			return time.Time{}
		}
		if s.ETA.After(eta) {
			eta = s.ETA
		}
	}
	return eta
}

// estimate returns the round's rate so far and when it should end. With a previous round the
// remaining keys are its key count minus the keys scanned so far (keyspaces change slowly
// between rounds); without one, the elapsed time is scaled by the share of stores done,
// which is rougher since stores differ in size. A round that has already passed the
// previous key count gets no estimate rather than a time in the past.
func estimate(ck pipeline.Checkpoint, now time.Time) (rate float64, eta time.Time, basis string) {
	if ck.RoundStartedUs <= 0 {
		return 0, time.Time{}, ""
	}
	elapsed := now.Sub(time.UnixMicro(ck.RoundStartedUs))
	if elapsed <= 0 {
		return 0, time.Time{}, ""
	}
	rate = float64(ck.KeysScanned) / elapsed.Seconds()
	switch {
	case ck.LastRoundKeys > 0 && rate > 0 && ck.KeysScanned < ck.LastRoundKeys:
		left := float64(ck.LastRoundKeys-ck.KeysScanned) / rate
		return rate, now.Add(time.Duration(left * float64(time.Second))).UTC(), "keys"
	case ck.LastRoundKeys == 0 && ck.Stores > 0 && ck.Index > 0 && ck.Index < ck.Stores:
		total := time.Duration(float64(elapsed) * float64(ck.Stores) / float64(ck.Index))
		return rate, time.UnixMicro(ck.RoundStartedUs).Add(total).UTC(), "stores"
	}
	return rate, time.Time{}, ""
}

// storeStatuses describes every store's walk from its checkpoint and its lease.
func storeStatuses(
	cks []scanner.StoreCheckpoint,
	leases []pipeline.StoreLease,
	paused bool,
	now time.Time,
) []StoreStatus {
	byStore := map[string]pipeline.StoreLease{}
	for _, l := range leases {
		byStore[l.Store] = l
	}
	out := make([]StoreStatus, 0, len(cks))
	for _, c := range cks {
		ck := c.Checkpoint
		ss := StoreStatus{Store: ck.Store, InRegistry: c.InRegistry, Round: ck.Round, InRound: ck.InRound,
			Cursor: ck.Cursor, Instances: ck.Instances, Keys: ck.KeysScanned, Visited: ck.KeysVisited,
			DBSize: ck.DBSize, Started: usTime(ck.RoundStartedUs), Layouts: ck.Layouts, SavedAt: usTime(ck.SavedUs),
			Unregistered: ck.Unregistered, UnregisteredMore: ck.UnregisteredTruncated, FailedRound: ck.FailedRound}
		if l, ok := byStore[ck.Store]; ok {
			ss.Holder, ss.Revision = l.Record.Holder, l.Revision
			ss.RenewedAgoSecs = now.Sub(time.UnixMicro(l.Record.RenewedUs)).Seconds()
		}
		if ck.LastRoundEndUs > 0 {
			ss.LastRound = &LastRound{Ended: usTime(ck.LastRoundEndUs), Keys: ck.LastRoundKeys,
				DurationSeconds: float64(ck.LastRoundDuration) / 1e3}
		}
		if !ck.InRound {
			ss.NextRound = usTime(ck.NextRoundUs)
			if ck.LastRoundEndUs > 0 {
				// Between rounds: the last round's numbers, not a rate diluted by the pause.
				ss.Keys, ss.Visited, ss.Layouts = ck.LastRoundKeys, ck.LastRoundVisited, ck.LastRoundLayouts
				if ck.LastRoundDuration > 0 {
					ss.KeysPerSecond = float64(ck.LastRoundVisited) / (float64(ck.LastRoundDuration) / 1e3)
				}
			}
		} else {
			ss.KeysPerSecond, ss.Pace = ck.Rate, ck.Pace
			if ss.KeysPerSecond == 0 && ck.SavedUs > ck.RoundStartedUs && ck.RoundStartedUs > 0 {
				ss.KeysPerSecond = float64(ck.KeysVisited) / (float64(ck.SavedUs-ck.RoundStartedUs) / 1e6)
			}
			ss.ETA, ss.Progress, ss.ETABasis = scanner.EstimateEnd(ck, now)
			ss.ETA = nonZeroUTC(ss.ETA)
		}
		ss.State, ss.StateSince = "scanning", usTime(ck.WaitingSinceUs)
		switch {
		case !c.InRegistry:
			ss.State = "not_in_registry"
		case ss.Holder == "":
			ss.State, ss.StateSince = pipeline.WaitNoLease, time.Time{}
		case paused && ck.Waiting != pipeline.WaitPaused:
			// Paused since a moment ago: the walk writes it on its next tick.
			ss.State, ss.StateSince = pipeline.WaitPaused, time.Time{}
		case ck.Waiting != pipeline.WaitNone:
			ss.State = ck.Waiting
		case !ck.InRound && ck.Round > 0:
			ss.State = pipeline.WaitRoundPause
		}
		if ss.State != "scanning" {
			ss.ETA = time.Time{}
		}
		out = append(out, ss)
	}
	return out
}

// lastEvents reads the newest message of each event kind with a direct "last by subject"
// get on the kind's wildcard subject: one request per kind, however long the stream.
func lastEvents(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	timeout time.Duration,
	problem func(string, ...any),
) []LastEvent {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	s, err := js.Stream(sctx, names.EventsStream())
	cancel()
	if err != nil {
		return nil // already reported with the streams
	}
	kinds := EventKinds()
	found := make([]*LastEvent, len(kinds))
	var wg sync.WaitGroup
	for i, kind := range kinds {
		wg.Go(func() {
			kctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			m, err := s.GetLastMsgForSubject(kctx, names.EventKindFilter(kind))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return
			}
			if err != nil {
				problem("last %s event: %v", kind, err)
				return
			}
			ev, err := subjects.DecodeEvent(m.Data)
			if err != nil {
				problem("last %s event (seq %d): %v", kind, m.Sequence, err)
				return
			}
			if per := ev.PerTarget(); len(per) > 0 {
				ev = per[len(per)-1] // a request's delete event: its last target
			}
			found[i] = &LastEvent{Kind: kind, Seq: m.Sequence, Time: m.Time.UTC(), Event: ev}
		})
	}
	wg.Wait()
	var out []LastEvent
	for _, e := range found {
		if e != nil {
			out = append(out, *e)
		}
	}
	return out
}

func usTime(us int64) time.Time {
	if us <= 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

func nonZeroUTC(t time.Time) time.Time {
	if t.IsZero() || t.Unix() <= 0 {
		return time.Time{}
	}
	return t.UTC()
}
