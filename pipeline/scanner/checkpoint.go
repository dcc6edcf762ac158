package scanner

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// walkStates is the closed set of the state label (WaitNone is "scanning").
var walkStates = []string{
	"scanning",
	pipeline.WaitPaused,
	pipeline.WaitBackpressure,
	pipeline.WaitRoundPause,
	pipeline.WaitRegistryBackoff,
	pipeline.WaitError,
}

func stateLabel(waiting string) string {
	if waiting == pipeline.WaitNone {
		return "scanning"
	}
	return waiting
}

// StoreCheckpoint is one store's checkpoint with its revision (0: none written yet).
type StoreCheckpoint struct {
	pipeline.Checkpoint
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
	rev, err := pipeline.ReadJSON(ctx, kv, subjects.StoresKey, "stores index", &x)
	if err != nil || rev == 0 {
		return nil, err
	}
	return &x, nil
}

// ReadCheckpoints returns the checkpoint of every store of the stores index, and of every other
// store that has one (InRegistry false), sorted by store. Stores of the index without a
// checkpoint yet are listed with revision 0.
func ReadCheckpoints(ctx context.Context, kv jetstream.KeyValue) ([]StoreCheckpoint, error) {
	idx, err := ReadStoreIndex(ctx, kv)
	if err != nil {
		return nil, err
	}
	keys, err := pipeline.ListKeys(ctx, kv, subjects.CheckpointFilter())
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
		c, rev, err := pipeline.ReadStoreCheckpoint(ctx, kv, s)
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
func ReadCheckpoint(ctx context.Context, kv jetstream.KeyValue) (pipeline.Checkpoint, uint64, error) {
	cks, err := ReadCheckpoints(ctx, kv)
	if err != nil {
		return pipeline.Checkpoint{}, 0, err
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
func Summarize(cks []StoreCheckpoint) (pipeline.Checkpoint, uint64) {
	var sum pipeline.Checkpoint
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
func EstimateEnd(c pipeline.Checkpoint, now time.Time) (eta time.Time, progress float64, basis string) {
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
	if c.Waiting != pipeline.WaitNone || c.Rate <= 0 {
		return time.Time{}, progress, basis
	}
	left := time.Duration(float64(total-c.KeysVisited) / c.Rate * float64(time.Second))
	return now.Add(left), progress, basis
}
