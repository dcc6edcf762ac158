package ops

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// ReportQuery selects the rounds Report sums up.
type ReportQuery struct {
	// Round is the round of every store to report (0: each store's current round, as its
	// checkpoint says: the one being walked, or the last one walked between rounds).
	Round uint64 `json:"round,omitempty"`
	// Instance keeps only one KVCM instance ("": every instance). It is a subject filter.
	Instance string `json:"instance,omitempty"`
	// Progress receives progress bars for the reads (stderr); nil draws nothing.
	Progress io.Writer `json:"-"`
}

// DeleteReport is what the deletes of a round free, or in a dry run would free: the locations
// whose delete the deleter recorded as deleted or partial (metadata removed), or as
// would_delete, with their data objects (spec URIs) and bytes (their size= parameters, as
// KVCM accounts them), by instance, storage and reason. The bytes come from the location
// bytes the prober judged (the delete requests in DELETES), the outcomes from the delete
// events in EVENTS; deleter.TargetReclaim reads the bytes as the deleter's
// kvcm_gc_reclaimed_bytes_total does.
type DeleteReport struct {
	Cluster string    `json:"cluster"`
	At      time.Time `json:"at"`
	// Rounds are the stores' rounds summed up.
	Rounds []ReportRound `json:"rounds"`
	// Rows are by instance, storage, reason and whether it was a dry run; sorted.
	Rows []ReportRow `json:"rows"`
	// Totals are the rows summed over the instances: by storage, reason and dry run.
	Totals []ReportRow `json:"totals"`
	// Targets counts the delete targets of the rounds' requests by the deleter's outcome;
	// ReportPending counts those without one yet (the deleter has not reached them, or is
	// paused).
	Targets map[string]int `json:"targets"`
	// Requests is the number of the rounds' delete requests read from DELETES.
	Requests int `json:"requests"`
	// Undecoded counts freed targets whose judged bytes are not a location (none are
	// expected: the prober judges only locations it decoded).
	Undecoded int `json:"undecoded,omitempty"`
	// Counters is the audit of KVCM's counters by instance, as each store's last audited
	// round left it (kvcmcounters.go): what the deletes leave counted in KVCM.
	Counters []InstanceCounters `json:"kvcm_counters"`
}

// ReportRound is one store's round in the report.
type ReportRound struct {
	Store string `json:"store"`
	Round uint64 `json:"round"`
	// InProgress: the store is still walking this round (the numbers are the part so far).
	InProgress bool `json:"in_progress"`
}

// ReportRow is what the deletes free for one instance (none in Totals), storage and reason;
// a DryRun row is what a dry run's deletes would free. A location with data on two storages
// counts in the row of each.
type ReportRow struct {
	Instance  string `json:"instance,omitempty"`
	Storage   string `json:"storage"`
	Reason    string `json:"reason"`
	DryRun    bool   `json:"dry_run"`
	Locations int    `json:"locations"`
	Files     int    `json:"files"`
	Bytes     uint64 `json:"bytes"`
}

// ReportPending is the DeleteReport.Targets entry of targets without a recorded outcome.
const ReportPending = "pending"

// reportTarget is one delete target of a reported request.
type reportTarget struct {
	key      int64
	location string
	reason   string
	reclaim  []deleter.Reclaim
	ok       bool   // its bytes decoded
	outcome  string // a freeing outcome recorded, else the last one; "" for none
}

type reportRequest struct {
	instance string
	targets  []reportTarget
}

// Report reads what the deletes of the selected rounds free. It only reads: the checkpoints,
// and DELETES and EVENTS through ordered ephemeral consumers (the stages' consumers are not
// touched). It holds the selected rounds' targets in memory, about a hundred bytes each, and
// sees only what DELETES still holds (jetstream.max_age).
func Report(ctx context.Context, js jetstream.JetStream, names subjects.Names, q ReportQuery) (DeleteReport, error) {
	r := DeleteReport{Cluster: names.Cluster, At: time.Now().UTC(), Rounds: []ReportRound{}, Rows: []ReportRow{},
		Totals: []ReportRow{}, Targets: map[string]int{}}
	state, err := js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		return r, fmt.Errorf("report: state bucket %s: %w", names.StateBucket(), err)
	}
	cks, err := scanner.ReadCheckpoints(ctx, state)
	if err != nil {
		return r, fmt.Errorf("report: %w", err)
	}
	if r.Counters, err = KVCMCounters(ctx, state, cks, q.Instance); err != nil {
		return r, fmt.Errorf("report: %w", err)
	}
	// The round of each store, and the earliest time their requests can have been stored:
	// a current round's start, a minute early (the stream leader's clock stamps messages);
	// for an older round, or a start not known, DELETES is read whole.
	rounds := map[string]uint64{}
	var from time.Time
	whole := q.Round > 0
	for _, c := range cks {
		round := cmp.Or(q.Round, c.Round)
		if round == 0 {
			continue // no round walked yet
		}
		rounds[c.Store] = round
		r.Rounds = append(r.Rounds, ReportRound{Store: c.Store, Round: round, InProgress: c.InRound && c.Round == round})
		t := time.UnixMicro(c.RoundStartedUs).Add(-time.Minute)
		switch {
		case c.RoundStartedUs <= 0:
			whole = true
		case from.IsZero() || t.Before(from):
			from = t
		}
	}
	if whole {
		from = time.Time{}
	}
	slices.SortFunc(r.Rounds, func(a, b ReportRound) int { return cmp.Compare(a.Store, b.Store) })
	if len(rounds) == 0 {
		return r, nil
	}

	filter := names.DeleteFilter()
	if q.Instance != "" {
		filter = names.DeleteSubject(q.Instance)
	}
	reqs := map[uint64]*reportRequest{}
	var first time.Time
	var bar *progress
	err = readStream(ctx, js, names.DeletesStream(), readRange{Filters: []string{filter}, StartTime: from},
		func(total uint64) { bar = newProgress(q.Progress, "read delete requests", total) },
		func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			bar.Add(1)
			req, err := subjects.DecodeDeleteRequest(m.Data())
			if err != nil {
				return nil // poison: the deleter terminated it and freed nothing (see dlq)
			}
			if want, ok := rounds[req.Store]; !ok || req.Round != want {
				return nil
			}
			rr := &reportRequest{instance: req.Instance, targets: make([]reportTarget, len(req.Targets))}
			for i, t := range req.Targets {
				rec, ok := deleter.TargetReclaim(t)
				rr.targets[i] = reportTarget{key: t.Key, location: t.Location, reason: t.Reason, reclaim: rec, ok: ok}
			}
			reqs[md.Sequence.Stream] = rr
			if first.IsZero() {
				first = md.Timestamp
			}
			return nil
		})
	bar.Done()
	if err != nil {
		return r, fmt.Errorf("report: %w", err)
	}
	r.Requests = len(reqs)
	if len(reqs) == 0 {
		return r, nil
	}

	// The outcomes: the delete events from the first request's time on, a minute early.
	evFilter := names.EventKindFilter(subjects.EventDelete)
	if q.Instance != "" {
		evFilter = names.EventSubject(subjects.EventDelete, q.Instance)
	}
	err = readStream(
		ctx,
		js,
		names.EventsStream(),
		readRange{Filters: []string{evFilter}, StartTime: first.Add(-time.Minute)},
		func(total uint64) { bar = newProgress(q.Progress, "read delete events", total) },
		func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			bar.Add(1)
			all, err := subjects.DecodeEvent(m.Data())
			if err != nil || all.Source == nil || all.Source.Stream != names.DeletesStream() {
				return nil
			}
			rr := reqs[all.Source.Seq]
			if rr == nil {
				return nil
			}
			outcomes := map[targetID]string{}
			for _, ev := range all.PerTarget() {
				if ev.Key != nil {
					outcomes[targetID{*ev.Key, ev.Location}] = ev.Outcome
				}
			}
			for i := range rr.targets {
				t := &rr.targets[i]
				// A redelivery records the outcome again (noop_gone after a delete): a
				// freeing outcome stays, and counts once.
				if o, ok := outcomes[targetID{t.key, t.location}]; ok && !deleter.Frees(t.outcome) {
					t.outcome = o
				}
			}
			return nil
		},
	)
	bar.Done()
	if err != nil {
		return r, fmt.Errorf("report: %w", err)
	}
	r.aggregate(reqs)
	return r, nil
}

// targetID is one location of a request.
type targetID struct {
	key      int64
	location string
}

// aggregate sums the freed targets into rows and totals.
func (r *DeleteReport) aggregate(reqs map[uint64]*reportRequest) {
	type rowKey struct {
		instance, storage, reason string
		dry                       bool
	}
	rows, totals := map[rowKey]*ReportRow{}, map[rowKey]*ReportRow{}
	add := func(m map[rowKey]*ReportRow, k rowKey, rec deleter.Reclaim) {
		row := m[k]
		if row == nil {
			row = &ReportRow{Instance: k.instance, Storage: k.storage, Reason: k.reason, DryRun: k.dry}
			m[k] = row
		}
		row.Locations++
		row.Files += rec.Files
		row.Bytes += rec.Bytes
	}
	for _, rr := range reqs {
		for _, t := range rr.targets {
			r.Targets[cmp.Or(t.outcome, ReportPending)]++
			if !deleter.Frees(t.outcome) {
				continue
			}
			if !t.ok {
				r.Undecoded++
				continue
			}
			dry := t.outcome == subjects.OutcomeWouldDelete
			for _, rec := range t.reclaim {
				add(rows, rowKey{rr.instance, rec.Storage, t.reason, dry}, rec)
				add(totals, rowKey{"", rec.Storage, t.reason, dry}, rec)
			}
		}
	}
	order := func(a, b ReportRow) int {
		return cmp.Or(cmp.Compare(boolInt(!a.DryRun), boolInt(!b.DryRun)), cmp.Compare(a.Instance, b.Instance),
			cmp.Compare(a.Storage, b.Storage), cmp.Compare(a.Reason, b.Reason))
	}
	for _, row := range rows {
		r.Rows = append(r.Rows, *row)
	}
	for _, row := range totals {
		r.Totals = append(r.Totals, *row)
	}
	slices.SortFunc(r.Rows, order)
	slices.SortFunc(r.Totals, order)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
