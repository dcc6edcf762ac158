package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

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

// walkStates is the closed set of the state label (WaitNone is "scanning").
var walkStates = []string{"scanning", WaitPaused, WaitBackpressure, WaitRoundPause, WaitRegistryBackoff, WaitError}

func stateLabel(waiting string) string {
	if waiting == WaitNone {
		return "scanning"
	}
	return waiting
}

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
	// Keys of instances the registry does not list (unregistered.go): the current round's
	// running count, and the last completed round's, with how many instances it left out.
	UnregisteredRound     []UnregisteredCount `json:"unregistered_round,omitempty"`
	Unregistered          []UnregisteredCount `json:"unregistered,omitempty"`
	UnregisteredTruncated int                 `json:"unregistered_truncated,omitempty"`
	// Seen are the instances a registry snapshot listed in the store, with the last time one
	// did (unregistered_collect.go); UnregisteredCollected the keys of unregistered instances
	// sent to the deleter this round.
	Seen                  map[string]SeenInstance `json:"seen_instances,omitempty"`
	UnregisteredCollected int64                   `json:"unregistered_collected,omitempty"`
	// Waiting says why the walk is not moving (Wait*), since WaitingSinceUs.
	Waiting        string `json:"waiting,omitempty"`
	WaitingSinceUs int64  `json:"waiting_since_us,omitempty"`
	// Pace is an adaptive walk's pace when its last page was read (nil: paced by
	// scan_interval and max_keys_per_second).
	Pace    *PaceRecord `json:"pace,omitempty"`
	Holder  string      `json:"holder,omitempty"`
	SavedUs int64       `json:"saved_us"`

	// Summary only (ReadCheckpoint): stores of the summary's round whose walk is done, and
	// the number of stores.
	Index  int `json:"index,omitempty"`
	Stores int `json:"stores,omitempty"`
}

// PaceRecord is an adaptive walk's pace (Pace) as the checkpoint keeps it.
type PaceRecord struct {
	Rate   float64 `json:"keys_per_second"`
	Burst  int     `json:"burst"`
	Reason string  `json:"reason"` // Pace* (PaceReasons)
	Budget float64 `json:"budget"`
	// ProbeUs and IdleUs are the probe latencies the decision compared, in µs.
	ProbeUs int64 `json:"probe_us,omitempty"`
	IdleUs  int64 `json:"idle_us,omitempty"`
}

// StoreCheckpoint is one store's checkpoint with its revision (0: none written yet).
type StoreCheckpoint struct {
	Checkpoint
	Revision uint64 `json:"revision"`
	// InRegistry: the store is in the stores index (the registry as the scanners last read it).
	InRegistry bool `json:"in_registry"`
}

// StoreIndex is the value of subjects.StoresKey: the metadata stores of the registry as a
// scanner last read them. Any scanner writes it when the set changes (every writer writes the
// same set, so it needs no revision); it tells a store not walked yet from one that is gone.
type StoreIndex struct {
	Stores  []string `json:"stores"`
	Holder  string   `json:"holder,omitempty"`
	SavedUs int64    `json:"saved_us"`
}

// ReadStoreIndex returns the stores index (nil when none was written).
func ReadStoreIndex(ctx context.Context, kv jetstream.KeyValue) (*StoreIndex, error) {
	var x StoreIndex
	rev, err := ReadJSON(ctx, kv, subjects.StoresKey, "stores index", &x)
	if err != nil || rev == 0 {
		return nil, err
	}
	return &x, nil
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

// ReadCheckpoints returns the checkpoint of every store of the stores index, and of every other
// store that has one (InRegistry false), sorted by store. Stores of the index without a
// checkpoint yet are listed with revision 0.
func ReadCheckpoints(ctx context.Context, kv jetstream.KeyValue) ([]StoreCheckpoint, error) {
	idx, err := ReadStoreIndex(ctx, kv)
	if err != nil {
		return nil, err
	}
	keys, err := listKeys(ctx, kv, subjects.CheckpointFilter())
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	stores := map[string]bool{}
	if idx != nil {
		for _, s := range idx.Stores {
			stores[s] = true
		}
	}
	for _, k := range keys {
		if s, err := subjects.StoreOfCheckpointKey(k); err == nil && !stores[s] {
			stores[s] = idx == nil // no index yet: every checkpoint counts
		}
	}
	var out []StoreCheckpoint
	for _, s := range slices.Sorted(maps.Keys(stores)) {
		c, rev, err := ReadStoreCheckpoint(ctx, kv, s)
		if err != nil {
			return nil, err
		}
		out = append(out, StoreCheckpoint{Checkpoint: c, Revision: rev, InRegistry: stores[s]})
	}
	return out, nil
}

// ReadCheckpoint returns the scanners' progress over every store of the registry, folded into
// one Checkpoint (revision 0 when no store has a checkpoint yet):
//
//   - Round is the lowest round of the stores (a store without a checkpoint is at round 0),
//     and InRound tells whether a store of that round is still in it: "round n is done" is
//     Round > n or (Round == n and !InRound), for every store;
//   - Index counts the stores of that round whose walk is done, Stores the stores; Store and
//     Cursor are the first store still walking it;
//   - KeysScanned, KeysVisited, Instances, LastRoundKeys and Layouts are sums over the stores;
//   - RoundStartedUs is the earliest start, LastRoundEndUs the latest end, NextRoundUs the
//     earliest next start of the stores between rounds, Holder and SavedUs of the latest write.
//
// With one store it is that store's checkpoint.
func ReadCheckpoint(ctx context.Context, kv jetstream.KeyValue) (Checkpoint, uint64, error) {
	cks, err := ReadCheckpoints(ctx, kv)
	if err != nil {
		return Checkpoint{}, 0, err
	}
	var in []StoreCheckpoint
	for _, c := range cks {
		if c.InRegistry {
			in = append(in, c)
		}
	}
	sum, rev := Summarize(in)
	return sum, rev, nil
}

// Summarize folds store checkpoints into one, as ReadCheckpoint describes.
func Summarize(cks []StoreCheckpoint) (Checkpoint, uint64) {
	var sum Checkpoint
	var rev uint64
	if len(cks) == 0 {
		return sum, 0
	}
	sum.Round = cks[0].Round
	for _, c := range cks {
		sum.Round = min(sum.Round, c.Round)
		rev = max(rev, c.Revision)
	}
	sum.Stores = len(cks)
	for _, c := range cks {
		ck := c.Checkpoint
		sum.KeysScanned += ck.KeysScanned
		sum.KeysVisited += ck.KeysVisited
		sum.Instances += ck.Instances
		sum.LastRoundKeys += ck.LastRoundKeys
		sum.LastRoundVisited += ck.LastRoundVisited
		sum.LastRoundDuration = max(sum.LastRoundDuration, ck.LastRoundDuration)
		sum.LastRoundEndUs = max(sum.LastRoundEndUs, ck.LastRoundEndUs)
		sum.DBSize += ck.DBSize
		sum.Rate += ck.Rate
		for l, n := range ck.Layouts {
			if sum.Layouts == nil {
				sum.Layouts = map[string]uint64{}
			}
			sum.Layouts[l] += n
		}
		if ck.SavedUs >= sum.SavedUs {
			sum.SavedUs, sum.Holder = ck.SavedUs, ck.Holder
		}
		if ck.RoundStartedUs > 0 && (sum.RoundStartedUs == 0 || ck.RoundStartedUs < sum.RoundStartedUs) {
			sum.RoundStartedUs = ck.RoundStartedUs
		}
		if !ck.InRound && ck.NextRoundUs > 0 && (sum.NextRoundUs == 0 || ck.NextRoundUs < sum.NextRoundUs) {
			sum.NextRoundUs = ck.NextRoundUs
		}
		switch {
		case ck.Round > sum.Round || (ck.Round == sum.Round && (!ck.InRound || ck.Walked)):
			if ck.Round > 0 {
				sum.Index++
			}
		case ck.InRound && sum.Store == "":
			sum.Store, sum.Cursor = ck.Store, ck.Cursor
		}
		if ck.Round == sum.Round && ck.InRound {
			sum.InRound = true
		}
	}
	return sum, rev
}

// writeStoreIndex stores the index of stores.
func writeStoreIndex(ctx context.Context, kv jetstream.KeyValue, stores []string, holder string, now time.Time) error {
	val, err := json.Marshal(StoreIndex{Stores: stores, Holder: holder, SavedUs: now.UnixMicro()})
	if err != nil {
		return fmt.Errorf("encode stores index: %w", err)
	}
	if _, err := kv.Put(ctx, subjects.StoresKey, val); err != nil {
		return fmt.Errorf("write stores index: %w", err)
	}
	return nil
}

// EstimateEnd estimates when a store's round ends, from its checkpoint: the keys left (the
// store's DBSIZE read when the round started, else the keys of its previous round) at the
// walk's recent rate. progress is the share of the keys visited (0..1). A walk that is not
// moving (Waiting), has no rate yet or has passed its estimate gets no end (zero).
func EstimateEnd(c Checkpoint, now time.Time) (eta time.Time, progress float64, basis string) {
	if !c.InRound {
		return time.Time{}, 0, ""
	}
	if c.Walked {
		return now, 1, "walked"
	}
	var total uint64
	switch {
	case c.DBSize > 0:
		total, basis = uint64(c.DBSize), "dbsize"
	case c.LastRoundVisited > 0:
		total, basis = c.LastRoundVisited, "last_round"
	default:
		return time.Time{}, 0, ""
	}
	if c.KeysVisited >= total {
		return time.Time{}, 0.99, basis
	}
	progress = float64(c.KeysVisited) / float64(total)
	if c.Waiting != WaitNone || c.Rate <= 0 {
		return time.Time{}, progress, basis
	}
	left := time.Duration(float64(total-c.KeysVisited) / c.Rate * float64(time.Second))
	return now.Add(left), progress, basis
}
