package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// ErrUnknownStore reports a store no scanner knows: it is in no checkpoint and not in the
// stores index.
var ErrUnknownStore = errors.New("unknown store")

// RoundStartStore is what a request to start the next round now does to one store.
type RoundStartStore struct {
	Store string `json:"store"`
	// Starts: the store is between rounds and its next round starts at the scanner's next
	// look (within seconds); otherwise Note says why nothing changes for it.
	Starts bool `json:"starts"`
	// NextRound is when its next round would have started otherwise (between rounds).
	NextRound time.Time `json:"next_round,omitzero"`
	Round     uint64    `json:"round"`
	Note      string    `json:"note,omitempty"`
}

// RoundStartResult is what `round start` did.
type RoundStartResult struct {
	At     time.Time         `json:"at"`
	Stores []RoundStartStore `json:"stores"`
}

// RoundStart asks the scanners to start the next round of store (empty: of every store) now
// instead of at the end of its round pause: it writes the request in the state bucket
// (pipeline.RoundStartRecord under subjects.RoundStartKey), which the scanner holding a store's
// lease reads while the store waits out its round pause. A store in a round goes on with it;
// a paused scanner or a held-back walk starts the round once it may move. It changes nothing
// else: the round is an ordinary one, its deletes as safe as any (dry run included).
func RoundStart(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	store string,
	now time.Time,
) (RoundStartResult, error) {
	res := RoundStartResult{At: now.UTC()}
	state, err := js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		return res, fmt.Errorf("round start: open state bucket: %w", err)
	}
	cks, err := scanner.ReadCheckpoints(ctx, state)
	if err != nil {
		return res, fmt.Errorf("round start: %w", err)
	}
	known := map[string]scanner.StoreCheckpoint{}
	for _, c := range cks {
		known[c.Checkpoint.Store] = c
	}
	if store != "" {
		if _, ok := known[store]; !ok {
			return res, fmt.Errorf("round start --store %s: %w (the scanners know %s)", store, ErrUnknownStore,
				strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
	}
	// The request must come after the last round of each store it names ended, as the
	// scanners' clock wrote it: a clock of this process behind theirs would leave it spent.
	at := now.UnixMicro()
	for _, c := range cks {
		if store == "" || c.Checkpoint.Store == store {
			at = max(at, c.Checkpoint.LastRoundEnd()+1)
		}
	}
	// By revision: another operator's request meanwhile is kept, not overwritten.
	for attempt := 0; ; attempt++ {
		rec, rev, err := pipeline.ReadRoundStart(ctx, state)
		if err != nil {
			return res, fmt.Errorf("round start: %w", err)
		}
		if store == "" {
			rec.AllUs = at
		} else {
			if rec.Stores == nil {
				rec.Stores = map[string]int64{}
			}
			rec.Stores[store] = at
		}
		rec.By = whoami()
		val, err := json.Marshal(rec)
		if err != nil {
			return res, fmt.Errorf("round start: encode: %w", err)
		}
		if rev == 0 {
			_, err = state.Create(ctx, subjects.RoundStartKey, val)
		} else {
			_, err = state.Update(ctx, subjects.RoundStartKey, val, rev)
		}
		if err == nil {
			break
		}
		if !pipeline.IsConflict(err) || attempt >= 10 {
			return res, fmt.Errorf("round start: write %s: %w", subjects.RoundStartKey, err)
		}
	}
	req := pipeline.RoundStartRecord{AllUs: at}
	pause, err := pipeline.ReadPause(ctx, state, subjects.ScannerPauseKey)
	if err != nil {
		return res, fmt.Errorf("round start: %w", err)
	}
	for _, c := range cks {
		ck := c.Checkpoint
		if store != "" && ck.Store != store {
			continue
		}
		rs := RoundStartStore{Store: ck.Store, Round: ck.Round}
		switch {
		case !c.InRegistry:
			rs.Note = "not in the registry: no scanner walks it"
		case ck.InRound:
			rs.Note = fmt.Sprintf("in round %d since %s: it goes on; the request starts no other",
				ck.Round, usTime(ck.RoundStartedUs).Format(time.RFC3339))
		case ck.Round == 0:
			rs.Note = "no round yet: its first starts as soon as a scanner holds its lease"
		case req.Starts(ck.Store, ck):
			rs.Starts, rs.NextRound = true, usTime(ck.NextRoundUs)
			if pause != nil && pause.Active(now) {
				rs.Note = "the scanners are paused " + pauseEnd(pause.Until(), now) + ": it starts once they are resumed"
			}
		}
		res.Stores = append(res.Stores, rs)
	}
	return res, nil
}

// WriteTable prints, per store, whether its next round starts now.
func (r RoundStartResult) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	tw := newTable(ew)
	fmt.Fprintln(tw, "STORE\tROUND\tNEXT ROUND")
	starts := 0
	for _, s := range r.Stores {
		next := s.Note
		if s.Starts {
			starts++
			next = fmt.Sprintf("now (round %d; it would have started at %s)", s.Round+1, s.NextRound.Format(time.RFC3339))
			if s.Note != "" {
				next += "; " + s.Note
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", s.Store, s.Round, next)
	}
	_ = tw.Flush()
	fmt.Fprintf(ew, "\nstarting now: %d of %d %s; the scanner holding a store's lease starts its "+
		"round within %s (kvcm-gc status shows it).\n",
		starts, len(r.Stores), plural(len(r.Stores), "store", "stores"), scanner.RoundStartPoll)
	return ew.err
}
