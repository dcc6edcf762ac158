package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
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
	// LastEvents holds the newest event of each kind, in the order of EventKinds; kinds never
	// recorded are absent.
	LastEvents []LastEvent `json:"last_events"`
	// Problems lists what could not be read (a missing stream, a server error); the rest of
	// the report is still filled in.
	Problems []string `json:"problems,omitempty"`
}

// StreamStatus is one stream's state (`nats stream info`).
type StreamStatus struct {
	Name      string    `json:"name"`
	Subjects  []string  `json:"subjects"`
	Messages  uint64    `json:"messages"`
	Bytes     uint64    `json:"bytes"`
	FirstSeq  uint64    `json:"first_seq"`
	FirstTime time.Time `json:"first_time,omitzero"`
	LastSeq   uint64    `json:"last_seq"`
	LastTime  time.Time `json:"last_time,omitzero"`
	Consumers int       `json:"consumers"`
}

// ConsumerStatus is one stage's consumer (`nats consumer report`).
type ConsumerStatus struct {
	Stage         string    `json:"stage"`
	Stream        string    `json:"stream"`
	Name          string    `json:"name"`
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
	Paused      bool          `json:"paused"`
	PausedUntil time.Time     `json:"paused_until,omitzero"`
	Leader      *LeaderStatus `json:"leader,omitempty"` // nil: no replica holds the lease
	Round       *RoundStatus  `json:"round,omitempty"`  // nil: no round ever started
	// NextRound is when the next round may start (between rounds only).
	NextRound time.Time            `json:"next_round,omitzero"`
	LastRound *LastRound           `json:"last_round,omitempty"`
	Holder    string               `json:"checkpoint_holder,omitempty"` // the replica that saved the checkpoint
	SavedAt   time.Time            `json:"checkpoint_saved,omitzero"`
	Raw       *pipeline.Checkpoint `json:"checkpoint,omitempty"`
}

// LeaderStatus is the current lease holder.
type LeaderStatus struct {
	Holder         string    `json:"holder"`
	Since          time.Time `json:"since"`
	Renewed        time.Time `json:"renewed"`
	HeldSeconds    float64   `json:"held_seconds"`        // how long this holder has led
	RenewedAgoSecs float64   `json:"renewed_ago_seconds"` // age of the last renewal (lease age)
	Revision       uint64    `json:"revision"`            // the fencing token batches carry
}

// RoundStatus is the current (or last) round's progress.
type RoundStatus struct {
	ID         uint64    `json:"id"`
	InProgress bool      `json:"in_progress"`
	Store      int       `json:"store"`  // 1-based position of the metadata store being walked
	Stores     int       `json:"stores"` // metadata stores in the round's registry snapshot
	StoreName  string    `json:"store_name,omitempty"`
	Instances  int       `json:"instances"` // instances in the round's registry snapshot
	Cursor     uint64    `json:"cursor"`
	Keys       uint64    `json:"keys_scanned"`
	Started    time.Time `json:"started,omitzero"`
	// KeysPerSecond is the round's scan rate so far.
	KeysPerSecond float64 `json:"keys_per_second"`
	// ETA estimates when the round ends: from the previous round's key count at the current
	// rate when there is one, else from the share of instances done. Zero when unknown.
	ETA      time.Time `json:"eta,omitzero"`
	ETABasis string    `json:"eta_basis,omitempty"` // "keys" | "instances"
}

// LastRound is the last completed round.
type LastRound struct {
	Ended           time.Time `json:"ended"`
	Keys            uint64    `json:"keys"`
	DurationSeconds float64   `json:"duration_seconds"`
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

// Status reads everything status shows. It only reads: stream and consumer info, the lease
// and checkpoint keys, and the last message of each event kind. Whatever cannot be read is
// listed in Problems and the rest is still reported; an error is returned only when ctx ends.
func Status(ctx context.Context, js jetstream.JetStream, names subjects.Names) (StatusReport, error) {
	now := time.Now()
	r := StatusReport{Cluster: names.Cluster, Prefix: names.Prefix, At: now.UTC()}
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }

	for _, name := range []string{names.BatchesStream(), names.DeletesStream(), names.EventsStream()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			problem("stream %s: %v", name, err)
			continue
		}
		info := s.CachedInfo()
		r.Streams = append(r.Streams, StreamStatus{Name: name, Subjects: info.Config.Subjects,
			Messages: info.State.Msgs, Bytes: info.State.Bytes,
			FirstSeq: info.State.FirstSeq, FirstTime: nonZeroUTC(info.State.FirstTime),
			LastSeq: info.State.LastSeq, LastTime: nonZeroUTC(info.State.LastTime), Consumers: info.State.Consumers})
	}
	for _, stage := range []string{pipeline.StageProber, pipeline.StageDeleter} {
		stream, name, _ := stageConsumer(names, stage)
		c, err := js.Consumer(ctx, stream, name)
		if err != nil {
			problem("consumer %s/%s: %v", stream, name, err)
			continue
		}
		info := c.CachedInfo()
		p := ConsumerPause(stage, info)
		r.Consumers = append(r.Consumers, ConsumerStatus{Stage: stage, Stream: stream, Name: name,
			Pending: info.NumPending, AckPending: info.NumAckPending, MaxAckPending: info.Config.MaxAckPending,
			Redelivered: info.NumRedelivered, Waiting: info.NumWaiting,
			DeliveredSeq: info.Delivered.Stream, AckFloorSeq: info.AckFloor.Stream,
			Paused: p.Paused, PausedUntil: nonZeroUTC(p.Until)})
	}

	r.Scanner = scannerStatus(ctx, js, names, now, problem)
	r.Sweep = sweepStatus(ctx, js, names, now, problem)
	r.LastEvents = lastEvents(ctx, js, names, problem)
	return r, ctx.Err()
}

func scannerStatus(ctx context.Context, js jetstream.JetStream, names subjects.Names, now time.Time, problem func(string, ...any)) ScannerStatus {
	var st ScannerStatus
	if lease, err := js.KeyValue(ctx, names.LeaseBucket()); err != nil {
		problem("lease bucket %s: %v", names.LeaseBucket(), err)
	} else if rec, rev, err := pipeline.ReadLease(ctx, lease); err != nil {
		problem("lease: %v", err)
	} else if rec != nil {
		since, renewed := time.UnixMicro(rec.SinceUs), time.UnixMicro(rec.RenewedUs)
		st.Leader = &LeaderStatus{Holder: rec.Holder, Since: since.UTC(), Renewed: renewed.UTC(),
			HeldSeconds: now.Sub(since).Seconds(), RenewedAgoSecs: now.Sub(renewed).Seconds(), Revision: rev}
	}
	state, err := js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		problem("state bucket %s: %v", names.StateBucket(), err)
		return st
	}
	if p, err := ReadScannerPause(ctx, state); err != nil {
		problem("%v", err)
	} else if p != nil && p.Active(now) {
		st.Paused, st.PausedUntil = true, p.Until().UTC()
	}
	ck, rev, err := pipeline.ReadCheckpoint(ctx, state)
	if err != nil {
		problem("%v", err)
		return st
	}
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
	rs := &RoundStatus{ID: ck.Round, InProgress: ck.InRound, Store: min(ck.Index+1, ck.Stores), Stores: ck.Stores,
		StoreName: ck.Store, Instances: ck.Instances, Cursor: ck.Cursor,
		Keys: ck.KeysScanned, Started: usTime(ck.RoundStartedUs)}
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
	return st
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

// lastEvents reads the newest message of each event kind with a direct "last by subject"
// get on the kind's wildcard subject: one request per kind, however long the stream.
func lastEvents(ctx context.Context, js jetstream.JetStream, names subjects.Names, problem func(string, ...any)) []LastEvent {
	s, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		return nil // already reported with the streams
	}
	var out []LastEvent
	for _, kind := range EventKinds() {
		m, err := s.GetLastMsgForSubject(ctx, names.EventKindFilter(kind))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			problem("last %s event: %v", kind, err)
			continue
		}
		ev, err := subjects.DecodeEvent(m.Data)
		if err != nil {
			problem("last %s event (seq %d): %v", kind, m.Sequence, err)
			continue
		}
		out = append(out, LastEvent{Kind: kind, Seq: m.Sequence, Time: m.Time.UTC(), Event: ev})
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
