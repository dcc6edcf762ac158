package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// RoundStartRecord is the value of subjects.RoundStartKey: an operator's requests that the
// next round of stores start now rather than at the end of their round pause (kvcm-gc round
// start). A request is a time: a store whose last round ended before it starts its next round
// at once; one in a round, or whose round ended after it, is not affected. So a request never
// needs deleting: it is spent by the round it started.
type RoundStartRecord struct {
	// AllUs is the time of the last request for every store (µs since the epoch).
	AllUs int64 `json:"all_us,omitempty"`
	// Stores holds, by store name (as the registry names it), the time of the last request
	// for that store alone.
	Stores map[string]int64 `json:"stores,omitempty"`
	// By names the operator's process that wrote it last.
	By string `json:"by,omitempty"`
}

// For returns the time of the last request that covers store (zero: none).
func (r RoundStartRecord) For(store string) time.Time {
	us := max(r.AllUs, r.Stores[store])
	if us <= 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

// Starts reports whether the request covering a store starts the next round of the store,
// whose checkpoint is ck, now: the store is between rounds, and the request came after its
// last round ended, completed or failed (a store that never ran a round starts at once anyway).
func (r RoundStartRecord) Starts(store string, ck Checkpoint) bool {
	req := r.For(store)
	return !ck.InRound && ck.Round > 0 && !req.IsZero() && req.UnixMicro() > ck.LastRoundEnd()
}

// DecodeRoundStart decodes a RoundStartRecord; empty data (a deleted key) is none.
func DecodeRoundStart(data []byte) (RoundStartRecord, error) {
	var r RoundStartRecord
	if len(data) == 0 {
		return r, nil
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return RoundStartRecord{}, fmt.Errorf("decode %s %q: %w", subjects.RoundStartKey, data, err)
	}
	return r, nil
}

// ReadRoundStart reads the requests and their revision (zero record and revision 0: none).
func ReadRoundStart(ctx context.Context, state jetstream.KeyValue) (RoundStartRecord, uint64, error) {
	var r RoundStartRecord
	rev, err := ReadJSON(ctx, state, subjects.RoundStartKey, subjects.RoundStartKey, &r)
	if err != nil {
		return RoundStartRecord{}, 0, err
	}
	return r, rev, nil
}
