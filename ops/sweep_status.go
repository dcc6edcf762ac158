package ops

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// SweepStatus is the sweep of orphan data files in `status`: the SWEEP stream and the
// sweeper consumer, and per swept storage its walker, its walk and its quarantine.
type SweepStatus struct {
	Stream   *StreamStatus   `json:"stream,omitempty"`
	Consumer *ConsumerStatus `json:"consumer,omitempty"`
	// WalkerPaused: an operator paused the walkers (the sweeper's pause is its consumer's).
	WalkerPaused      bool                 `json:"walker_paused"`
	WalkerPausedUntil time.Time            `json:"walker_paused_until,omitzero"`
	Storages          []SweepStorageStatus `json:"storages"`
}

// SweepStorageStatus is one swept storage (any storage with a walk checkpoint).
type SweepStorageStatus struct {
	Storage string        `json:"storage"`
	Leader  *LeaderStatus `json:"leader,omitempty"` // nil: no walker holds the storage's lease
	Round   uint64        `json:"round"`
	InRound bool          `json:"in_round"`
	// This round so far (InRound), else the last one.
	Walked     uint64            `json:"walked"`
	Candidates uint64            `json:"candidates"`
	Kept       map[string]uint64 `json:"kept,omitempty"`
	Started    time.Time         `json:"started,omitzero"`
	LastEnded  time.Time         `json:"last_round_ended,omitzero"`
	LastSecs   float64           `json:"last_round_seconds,omitempty"`
	NextRound  time.Time         `json:"next_round,omitzero"`
	// The last complete look into the quarantine: files waiting there, their bytes, conflict
	// copies kept for an operator, entries that are not kvcm-gc's, the oldest.
	Quarantine QuarantineStatus  `json:"quarantine"`
	Raw        *sweep.Checkpoint `json:"checkpoint,omitempty"`
}

// QuarantineStatus is what the last look into a storage's quarantine found.
type QuarantineStatus struct {
	Files     uint64    `json:"files"`
	Bytes     uint64    `json:"bytes"`
	Conflicts uint64    `json:"conflicts"`
	Foreign   uint64    `json:"foreign"`
	Oldest    time.Time `json:"oldest,omitzero"`
	LookedAt  time.Time `json:"looked_at,omitzero"`
}

// sweepStatus reads the sweep's part of the status; what cannot be read goes to the problems.
func sweepStatus(ctx context.Context, rows statusRows, names subjects.Names) *SweepStatus {
	js, now := rows.js, rows.now
	stream, consumer := rows.stream(
		ctx,
		names.SweepStream(),
	), rows.consumer(
		ctx,
		pipeline.StageSweeper,
		names.SweepStream(),
		names.SweeperConsumer(),
	)
	st := &SweepStatus{Stream: &stream, Consumer: &consumer}
	cctx, cancel := rows.call(ctx)
	defer cancel()
	// The state bucket's reads and the lease bucket's are parts of their own (statusRows.part).
	lctx, lrows, ldone := rows.part(cctx, kvAPI(names.LeaseBucket(), subjects.SweepKeyFilter())...)
	defer ldone()
	ctx, rows, done := rows.part(cctx, kvAPI(names.StateBucket(), subjects.WalkerPauseKey, subjects.SweepKeyFilter())...)
	defer done()
	problem := rows.problem
	state, err := js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		return st // reported with the scanner
	}
	if p, err := pipeline.ReadPause(ctx, state, subjects.WalkerPauseKey); err != nil {
		problem("%v", err)
	} else if p != nil && p.Active(now) {
		st.WalkerPaused, st.WalkerPausedUntil = true, p.Until().UTC()
	}
	lister, err := state.ListKeysFiltered(ctx, subjects.SweepKeyFilter())
	if err != nil {
		problem("sweep checkpoints: %v", err)
		return st
	}
	var storages []string
	for k := range lister.Keys() {
		if s, err := subjects.SweepStorageOf(k); err == nil {
			storages = append(storages, s)
		}
	}
	_ = lister.Stop() // the keys were read to the end, which stops the lister already
	slices.Sort(storages)
	leases, lerr := js.KeyValue(lctx, names.LeaseBucket())
	if lerr != nil && len(storages) > 0 {
		lrows.problem("lease bucket %s: %v", names.LeaseBucket(), lerr)
	}
	for _, name := range storages {
		ck, _, err := sweep.ReadCheckpoint(ctx, state, name)
		if err != nil {
			problem("%v", err)
			continue
		}
		ss := SweepStorageStatus{Storage: name, Round: ck.Round, InRound: ck.InRound, Raw: &ck,
			Quarantine: QuarantineStatus{Files: ck.QLast.Files, Bytes: ck.QLast.Bytes, Conflicts: ck.QLast.Conflicts,
				Foreign: ck.QLast.Foreign, Oldest: usTime(ck.QLast.OldestUs), LookedAt: usTime(ck.QLast.EndedUs)}}
		if ck.InRound {
			ss.Walked, ss.Candidates, ss.Kept, ss.Started = ck.Walked, ck.Candidates, maps.Clone(
				ck.Kept,
			), usTime(
				ck.RoundStartedUs,
			)
		} else {
			ss.Walked, ss.Candidates, ss.Kept = ck.LastWalked, ck.LastCandidates, maps.Clone(ck.LastKept)
			ss.NextRound = usTime(ck.NextRoundUs)
		}
		ss.LastEnded, ss.LastSecs = usTime(ck.LastRoundEndUs), float64(ck.LastRoundMs)/1e3
		if lerr == nil {
			if rec, rev, err := sweep.ReadLease(lctx, leases, name); err != nil {
				lrows.problem("%v", err)
			} else if rec != nil {
				since, renewed := time.UnixMicro(rec.SinceUs), time.UnixMicro(rec.RenewedUs)
				ss.Leader = &LeaderStatus{Holder: rec.Holder, Since: since.UTC(), Renewed: renewed.UTC(),
					HeldSeconds: now.Sub(since).Seconds(), RenewedAgoSecs: now.Sub(renewed).Seconds(), Revision: rev}
			}
		}
		st.Storages = append(st.Storages, ss)
	}
	return st
}

// writeSweep prints the sweep's part of the status.
func (s *SweepStatus) writeSweep(w io.Writer, now time.Time) {
	if s == nil {
		return
	}
	fmt.Fprintln(w, "\nSWEEP")
	tw := newTable(w)
	if c := s.Consumer; c != nil && c.Error != "" {
		fmt.Fprintf(tw, "sweeper\t%s/%s: unreadable: %s\n", c.Stream, c.Name, c.Error)
	} else if c != nil {
		fmt.Fprintf(tw, "sweeper\t%s/%s: %d pending, %d/%d in flight, %d redelivered, paused %s\n", c.Stream, c.Name,
			c.Pending, c.AckPending, c.MaxAckPending, c.Redelivered, pausedCell(c.Paused, c.PausedUntil, now))
	}
	fmt.Fprintf(tw, "walker	paused %s\n", pausedCell(s.WalkerPaused, s.WalkerPausedUntil, now))
	if len(s.Storages) == 0 {
		fmt.Fprintln(tw, "storages\tnone swept (storage.overrides.<name>.sweep)")
	}
	for _, ss := range s.Storages {
		leader := "no walker holds the lease"
		if l := ss.Leader; l != nil {
			leader = fmt.Sprintf("walker %s since %s, renewed %s ago", l.Holder, timeOnly(l.Since),
				humanDuration(secs(l.RenewedAgoSecs)))
		}
		fmt.Fprintf(tw, "%s\t%s\n", ss.Storage, leader)
		switch {
		case ss.Round == 0:
			fmt.Fprintln(tw, "\tno walk yet")
		case ss.InRound:
			fmt.Fprintf(tw, "\twalk %d in progress since %s: %d files, %d candidates\n", ss.Round,
				stamp(ss.Started, now), ss.Walked, ss.Candidates)
		default:
			fmt.Fprintf(tw, "\twalk %d done %s in %s: %d files, %d candidates; next %s\n", ss.Round, stamp(ss.LastEnded, now),
				humanDuration(secs(ss.LastSecs)), ss.Walked, ss.Candidates, stamp(ss.NextRound, now))
		}
		if len(ss.Kept) > 0 {
			fmt.Fprintf(tw, "\tkept by the walker: %s\n", keptCell(ss.Kept))
		}
		q := ss.Quarantine
		oldest := ""
		if !q.Oldest.IsZero() {
			oldest = ", oldest since " + stamp(q.Oldest, now)
		}
		fmt.Fprintf(tw, "\tquarantine: %d files (%s)%s, %d conflicts, %d foreign; looked %s\n", q.Files, humanBytes(q.Bytes),
			oldest, q.Conflicts, q.Foreign, stamp(q.LookedAt, now))
	}
	_ = tw.Flush()
}

func keptCell(m map[string]uint64) string {
	s := ""
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", k, m[k])
	}
	return s
}
