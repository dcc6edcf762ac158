package pipeline

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The scanner's store checkpoint: the durable record of one metadata store's walk. The
// scanner writes it; the sweep reads it (the files of unregistered instances, collectable.go),
// and so do status and the harness.

// Why a walk is not moving (Checkpoint.Waiting, `status`, the state label of
// kvcm_gc_store_walk_state). "" (WaitNone) is a walk that reads pages.
const (
	WaitNone            = ""
	WaitPaused          = "paused"           // an operator's scanner pause
	WaitBackpressure    = "backpressure"     // the prober's or the deleter's backlog is above the high-water mark
	WaitRoundPause      = "round_pause"      // between rounds, until NextRoundUs
	WaitRegistryBackoff = "registry_backoff" // the registry could not be read; retried with backoff
	WaitError           = "error"            // a scan, publish, checkpoint, pause or backlog read failed; retried
	WaitNoLease         = "no_lease"         // no replica holds the store's lease (status only)
)

// Checkpoint is one metadata store's durable walk: written by revision, by the store's lease
// holder only, after every page whose batches are stored (so a new holder resumes the round
// instead of restarting it) and when the walk starts or stops waiting (so `status` can say
// why). Key: subjects.CheckpointKey(store).
//
// ReadCheckpoint folds every store's checkpoint into one Checkpoint of the same shape (see
// there); Index and Stores only mean something in that summary.
type Checkpoint struct {
	Store   string `json:"store"`
	Round   uint64 `json:"round"`
	InRound bool   `json:"in_round"`
	// Walked: the round's last page is recorded; only the round's end is left.
	Walked bool `json:"walked,omitempty"`
	// Cursor is the SCAN cursor to continue from.
	Cursor uint64 `json:"cursor"`
	// Instances of the store in the round's registry snapshot.
	Instances int `json:"instances"`
	// Progress of the current round: block keys read (of registered instances), keys SCAN
	// returned (KeysVisited, every kvcache:instance_* key), the store's DBSIZE read when the
	// round started (0: unknown), and a recent rate of KeysVisited per second.
	RoundStartedUs int64   `json:"round_started_us"`
	KeysScanned    uint64  `json:"keys_scanned"`
	KeysVisited    uint64  `json:"keys_visited,omitempty"`
	DBSize         int64   `json:"dbsize,omitempty"`
	Rate           float64 `json:"keys_per_second,omitempty"`
	// Layouts counts the round's block keys by the layout they were read in (Layout*).
	Layouts map[string]uint64 `json:"layouts,omitempty"`
	// Between rounds: when the next round may start.
	NextRoundUs int64 `json:"next_round_us"`
	// The last completed round.
	LastRoundEndUs    int64             `json:"last_round_end_us,omitempty"`
	LastRoundKeys     uint64            `json:"last_round_keys,omitempty"`
	LastRoundVisited  uint64            `json:"last_round_visited,omitempty"`
	LastRoundDuration int64             `json:"last_round_duration_ms,omitempty"`
	LastRoundLayouts  map[string]uint64 `json:"last_round_layouts,omitempty"`
	// FailedRound is the last round of the store when it ended failed (nil once a round
	// completes): its SCAN kept failing past scan_failure_budget, or the store could not be
	// opened. Nothing a round's end decides was decided by it (scanner/walk.go).
	FailedRound *RoundFailure `json:"failed_round,omitempty"`
	// Keys of instances the registry does not list (scanner/unregistered.go): the current round's
	// running count, and the last completed round's, with how many instances it left out.
	UnregisteredRound     []UnregisteredCount `json:"unregistered_round,omitempty"`
	Unregistered          []UnregisteredCount `json:"unregistered,omitempty"`
	UnregisteredTruncated int                 `json:"unregistered_truncated,omitempty"`
	// Seen are the instances a registry snapshot listed in the store, with the last time one
	// did (scanner/unregistered_collect.go); UnregisteredCollected the keys of unregistered instances
	// sent to the deleter this round.
	Seen                  map[string]SeenInstance `json:"seen_instances,omitempty"`
	UnregisteredCollected int64                   `json:"unregistered_collected,omitempty"`
	// The audit of KVCM's counters (audit.go), by instance: the current round's running
	// recount and the last completed round's, with how many instances it left out.
	AuditRound     []AuditCount `json:"audit_round,omitempty"`
	Audit          []AuditCount `json:"audit,omitempty"`
	AuditTruncated int          `json:"audit_truncated,omitempty"`
	// Waiting says why the walk is not moving (Wait*), since WaitingSinceUs.
	Waiting        string `json:"waiting,omitempty"`
	WaitingSinceUs int64  `json:"waiting_since_us,omitempty"`
	// Pace is a duty-paced walk's pace when its last page was read (nil: paced by
	// scan_interval and max_keys_per_second).
	Pace    *PaceRecord `json:"pace,omitempty"`
	Holder  string      `json:"holder,omitempty"`
	SavedUs int64       `json:"saved_us"`

	// Summary only (ReadCheckpoint): stores of the summary's round whose walk is done, and
	// the number of stores.
	Index  int `json:"index,omitempty"`
	Stores int `json:"stores,omitempty"`
}

// PaceRecord is a duty-paced walk's pace (scanner.duty) as the checkpoint keeps it.
type PaceRecord struct {
	// Duty is the share of Redis's time the walk may take; Share what it took over its last
	// window, by the pacer's measure (Redis's clock over each round trip; 0 before the first
	// window is over).
	Duty  float64 `json:"duty"`
	Share float64 `json:"share"`
	// WaitUs is the wait after the last round trip, Reason what set it (duty.Reasons: duty,
	// floor, cap, max_keys_per_second, redis_busy).
	WaitUs int64  `json:"wait_us"`
	Reason string `json:"reason"`
	// BurstKeys is the most keys one round trip reads; MaxRate the cap on keys per second.
	BurstKeys int     `json:"burst_keys"`
	MaxRate   float64 `json:"max_keys_per_second,omitempty"`
	// CPULimit is scanner.redis_cpu_ceiling (0: off); CPUShare Redis's main-thread busy share
	// at its last two readings of INFO cpu (−1: none); CPU the ceiling's state (off, ok,
	// busy, refused: the server will not tell, the duty alone paces; unread).
	CPULimit float64 `json:"redis_cpu_ceiling,omitempty"`
	CPUShare float64 `json:"redis_cpu_share"`
	CPU      string  `json:"redis_cpu"`
}

// ReadStoreCheckpoint returns a store's checkpoint (zero value and revision 0 when none).
func ReadStoreCheckpoint(ctx context.Context, kv jetstream.KeyValue, store string) (Checkpoint, uint64, error) {
	var c Checkpoint
	rev, err := ReadJSON(ctx, kv, subjects.CheckpointKey(store), "checkpoint of "+store, &c)
	if err != nil {
		return Checkpoint{}, 0, err
	}
	c.Store = store
	return c, rev, nil
}

// RoundFailure is a store's round that ended failed.
type RoundFailure struct {
	Round uint64 `json:"round"`
	// Reason is what failed (RoundFailedScan, RoundFailedUnavailable), Error the last error.
	Reason string `json:"reason"`
	Error  string `json:"error"`
	// AtUs is when the round ended failed, FailingSinceUs when its SCAN began failing without
	// a page read since, Attempts how many reads failed in that run.
	AtUs           int64 `json:"at_us"`
	FailingSinceUs int64 `json:"failing_since_us,omitempty"`
	Attempts       int   `json:"attempts,omitempty"`
	// Cursor and KeysScanned are where the walk stood: the next round starts over from the
	// keyspace's beginning all the same.
	Cursor      uint64 `json:"cursor"`
	KeysScanned uint64 `json:"keys_scanned"`
}

// Why a store's round ended failed (RoundFailure.Reason).
const (
	RoundFailedScan        = "scan"        // SCAN kept failing for scan_failure_budget
	RoundFailedUnavailable = "unavailable" // the store could not be opened at all
)

// LastRoundEnd is when the store's last round ended, completed or failed (µs; 0: none): a
// request to start a round made before it is spent.
func (c Checkpoint) LastRoundEnd() int64 {
	if c.FailedRound != nil {
		return max(c.LastRoundEndUs, c.FailedRound.AtUs)
	}
	return c.LastRoundEndUs
}

// UnregisteredCount is what one store holds of one instance the registry does not list.
type UnregisteredCount struct {
	Instance  string `json:"instance"`
	Keys      int64  `json:"keys"`
	Locations int64  `json:"locations"`
	// Bytes is the sum of the locations' spec URI size parameters (KVCM's accounting).
	Bytes uint64 `json:"bytes"`
	// Unreadable counts the keys whose locations could not be counted (a read error, a value
	// that does not decode).
	Unreadable int64 `json:"unreadable,omitempty"`
	// FirstSeenUs is when kvcm-gc first counted the instance unregistered in this store (the
	// end of that round); it stays while the instance stays unregistered there.
	FirstSeenUs int64 `json:"first_seen_us,omitempty"`
}

// SeenInstance is what a store's checkpoint remembers of an instance the registry listed in
// the store: its group, and the last time a snapshot listed it.
type SeenInstance struct {
	Group            string `json:"group"`
	LastRegisteredUs int64  `json:"last_registered_us"`
}
