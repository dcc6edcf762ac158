package sweep

import (
	"context"
	"maps"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Checkpoint is the durable position of one storage's walk, written by revision after
// every page (STATE bucket, key subjects.SweepKey(storage)), so a new walker resumes the
// round, the pause between rounds survives restarts, and `status` reads the progress.
//
// A walk interleaves two things: rounds over the storage's data, page by page in the walk's
// fixed order (Cursor is the last path handled), and looks into the quarantine, which
// publish every quarantined file for a sweeper to finish (unlink after sweep_quarantine) or
// undo (restore). A look starts when a walker takes the lease, at the start of every round,
// and every half sweep_quarantine.
type Checkpoint struct {
	Storage string `json:"storage"`

	Round   uint64 `json:"round"`
	InRound bool   `json:"in_round"`
	// Cursor is the last path walked this round, relative to the storage's local directory,
	// exact bytes; empty at the round's start.
	Cursor         subjects.RawText  `json:"cursor,omitempty"`
	Page           uint64            `json:"page"` // pages of the round published so far
	RoundStartedUs int64             `json:"round_started_us,omitempty"`
	Walked         uint64            `json:"walked"`              // files walked this round
	Candidates     uint64            `json:"candidates"`          // of them published
	Kept           map[string]uint64 `json:"kept,omitempty"`      // of them kept by the walker, by reason
	NextRoundUs    int64             `json:"next_round_us"`       // between rounds: when the next may start
	LastRoundEndUs int64             `json:"last_round_end_us"`   // the last completed round
	LastRoundMs    int64             `json:"last_round_ms"`       // its duration
	LastWalked     uint64            `json:"last_walked"`         // its files
	LastCandidates uint64            `json:"last_candidates"`     // its candidates
	LastKept       map[string]uint64 `json:"last_kept,omitempty"` // its kept files by reason

	QPass   uint64           `json:"q_pass"`    // looks into the quarantine started
	QInPass bool             `json:"q_in_pass"` // a look is under way
	QCursor subjects.RawText `json:"q_cursor,omitempty"`
	QPage   uint64           `json:"q_page"`
	QNextUs int64            `json:"q_next_us"` // when the next look is due
	// This look so far, and the last complete one: files (not counting conflict copies),
	// their bytes, conflict copies, entries that are no quarantined file of kvcm-gc's, and
	// when the oldest file went in.
	QSeen QuarantineCount `json:"q_seen"`
	QLast QuarantineCount `json:"q_last"`

	Holder  string `json:"holder,omitempty"`
	SavedUs int64  `json:"saved_us"`
}

// QuarantineCount is what a look into a quarantine found.
type QuarantineCount struct {
	Files     uint64 `json:"files"`
	Bytes     uint64 `json:"bytes"`
	Conflicts uint64 `json:"conflicts"`
	Foreign   uint64 `json:"foreign"`
	OldestUs  int64  `json:"oldest_us,omitempty"`
	EndedUs   int64  `json:"ended_us,omitempty"`
}

func (q *QuarantineCount) add(size int64, atUs int64) {
	q.Files++
	q.Bytes += uint64(max(size, 0))
	if q.OldestUs == 0 || atUs < q.OldestUs {
		q.OldestUs = atUs
	}
}

// merge adds the count of one page of a look.
func (q *QuarantineCount) merge(p QuarantineCount) {
	q.Files += p.Files
	q.Bytes += p.Bytes
	q.Conflicts += p.Conflicts
	q.Foreign += p.Foreign
	if p.OldestUs != 0 && (q.OldestUs == 0 || p.OldestUs < q.OldestUs) {
		q.OldestUs = p.OldestUs
	}
}

func (c Checkpoint) clone() Checkpoint {
	c.Kept, c.LastKept = maps.Clone(c.Kept), maps.Clone(c.LastKept)
	return c
}

// ReadCheckpoint returns a storage's checkpoint (zero value and revision 0 when none).
func ReadCheckpoint(ctx context.Context, kv jetstream.KeyValue, storage string) (Checkpoint, uint64, error) {
	var c Checkpoint
	rev, err := pipeline.ReadJSON(ctx, kv, subjects.SweepKey(storage), "sweep checkpoint of "+storage, &c)
	switch {
	case err != nil:
		return Checkpoint{}, 0, err
	case rev == 0:
		return Checkpoint{Storage: storage}, 0, nil
	}
	return c, rev, nil
}

// writeCheckpoint stores c by revision rev (0: the first) and returns the new revision.
func writeCheckpoint(ctx context.Context, kv jetstream.KeyValue, c Checkpoint, rev uint64) (uint64, error) {
	return pipeline.WriteCheckpoint(ctx, kv, subjects.SweepKey(c.Storage), c, rev)
}
