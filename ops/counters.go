package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// A repair of KVCM's persisted counters (DESIGN §13). KVCM's leader counts an instance's keys
// and bytes per storage type in memory, persists them to kvcache:instance_<id>:metadata and
// restores them at every promotion; it never recounts. Every location an outside process
// (kvcm-gc) deletes stays counted for good, and KVCM's reclaimer evicts live cache for bytes
// that no longer exist. The repair recounts the instance from its block keys, shows both side
// by side, and with Apply rewrites the values the hash already holds to the recount, while no
// KVCM leader runs: the write is a compare-and-set that WATCHes the hash and KVCM's leader
// lock keys from before it reads anything until it writes.

// CountersStore is what a repair needs of a metadata store: the scan to recount with, and
// the compare-and-set of the metadata hash.
type CountersStore interface {
	meta.Scanner
	meta.MetadataWriter
}

// CountersConfig configures a repair or an undo.
type CountersConfig struct {
	Cluster  string
	Instance string
	// LockKeys are KVCM's leader lock keys (kvcm.LeaderLockKeys), watched on the store.
	LockKeys []string
	// Apply writes the repair; without it nothing is written.
	Apply bool
	// AllowInexact applies a repair whose recount is not exact (specs KVCM's versions read
	// differently, locations decoded best effort).
	AllowInexact bool
	// Settle is how long the hash must stay unwritten, with no lock, before the write: a
	// stopping KVCM leader persists its counters once more after it deletes its lock, and
	// one that lost its lease persists when it notices.
	Settle time.Duration
	// ScanCount is the SCAN COUNT of the recount's walk (0: 1000).
	ScanCount int
}

// CountersDeps are a repair's clients.
type CountersDeps struct {
	Store CountersStore
	// OtherLocks check KVCM's leader lock where it may live besides the store (the
	// registry's Redis, the coordination URI's): nil when absent, a *meta.LeaderLockError
	// when held. They are checked before the recount and again just before the write; no
	// transaction can guard them.
	OtherLocks []func(ctx context.Context) error
	// Publish records a counters event; required with Apply (the event is what an operator
	// undoes the write from).
	Publish func(ctx context.Context, e subjects.Event) error
	Logger  *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Sentinel errors of a repair.
var (
	// ErrCountersInexact: the recount is not exact and AllowInexact was not given.
	ErrCountersInexact = errors.New("recount not exact")
	// ErrCountersUnreadable: the persisted hash holds a value KVCM itself cannot read back;
	// a repair writes nothing over what it does not understand.
	ErrCountersUnreadable = errors.New("persisted counters unreadable")
	// ErrCountersChanged: an undo found the hash no longer as the repair left it.
	ErrCountersChanged = errors.New("persisted counters changed since")
)

// CounterRow is one persisted counter beside its recount.
type CounterRow struct {
	// Counter is "keys" (__key_count__) or the name of a member of __storage_usage_data__.
	Counter string `json:"counter"`
	// Persisted is the stored value (nil: absent); Recounted the recount (nil: not counted).
	Persisted *uint64 `json:"persisted,omitempty"`
	Recounted *uint64 `json:"recounted,omitempty"`
	// Drift is Persisted − Recounted: positive when KVCM counts more than Redis holds
	// (phantom bytes or keys), clamped to int64; nil when either is absent.
	Drift *int64 `json:"drift,omitempty"`
	// Write: an applied repair sets it to Recounted.
	Write bool   `json:"write,omitempty"`
	Note  string `json:"note,omitempty"`
}

// RecountSummary is how the recount went.
type RecountSummary struct {
	Keys, Locations  int64
	Unparsed         int64 `json:"unparsed_specs"`
	VersionDependent int64 `json:"version_dependent_specs"`
	Bad              int64 `json:"bad_locations"`
	Corrupt          int64 `json:"corrupt_locations"`
	Uncounted        int64 `json:"uncounted_locations"`
	Legacy           int64 `json:"legacy_locations"`
	BadKeys          int64 `json:"bad_keys"`
	WrongDB          int64 `json:"wrong_db_keys"`
}

// CountersReport is what a repair (or an undo) found and did.
type CountersReport struct {
	Instance string `json:"instance"`
	Key      string `json:"key"`
	// Exists: the instance has a metadata hash.
	Exists  bool           `json:"exists"`
	Rows    []CounterRow   `json:"rows"`
	Recount RecountSummary `json:"recount"`
	// Inexact lists why the recount may not be KVCM's; Problems why a repair may not be
	// written; Warnings the rest.
	Inexact  []string `json:"inexact,omitempty"`
	Problems []string `json:"problems,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Applied: the write was made; Written is what it changed.
	Applied bool                     `json:"applied"`
	Written []subjects.MetadataField `json:"written,omitempty"`
}

// CountersPlan is what a repair would write: the rows and the fields.
type CountersPlan struct {
	Rows     []CounterRow
	Inexact  []string
	Problems []string
	Warnings []string
	// Write is the fields to set (nil: nothing differs, or nothing may be written).
	Write map[string]string
}

// PlanCounters compares the persisted hash (fields) with the recount and says what a repair
// writes: only values of what the hash holds, never a member or a field it lacks (a KVCM
// that does not know a member fails its recovery, and which members a KVCM knows depends
// on its version).
func PlanCounters(fields map[string]string, rec *kvcm.Recount) CountersPlan {
	var p CountersPlan
	write := map[string]string{}
	if len(fields) == 0 {
		p.Warnings = append(p.Warnings, "the instance has no metadata hash: KVCM starts from 0 "+
			"and writes one within a second of leading")
	}

	// Keys.
	keys := CounterRow{Counter: "keys", Recounted: u64(uint64(rec.Keys))}
	switch raw, ok := fields[kvcm.FieldKeyCount]; {
	case !ok && len(fields) > 0:
		p.Problems = append(
			p.Problems,
			kvcm.FieldKeyCount+" is absent: KVCM's recovery fails on such a hash (MetaIndexer::Init)",
		)
	case !ok:
	default:
		v, err := kvcm.ParseKeyCount(raw)
		switch {
		case err != nil:
			p.Problems = append(p.Problems, err.Error())
			keys.Note = "unreadable: " + strconv.Quote(raw)
		case v < 0:
			p.Problems = append(p.Problems, fmt.Sprintf("%s is negative (%d): KVCM reads it as a "+
				"huge count and refuses every new key", kvcm.FieldKeyCount, v))
			keys.Note = "negative: " + raw
		default:
			keys.Persisted = u64(uint64(v))
			keys.Drift = drift(uint64(v), uint64(rec.Keys))
			if *keys.Drift != 0 {
				keys.Write = true
				write[kvcm.FieldKeyCount] = strconv.FormatInt(rec.Keys, 10)
			}
		}
	}
	p.Rows = append(p.Rows, keys)

	// Usage.
	covered := map[kvcm.StorageType]bool{}
	raw, hasUsage := fields[kvcm.FieldStorageUsage]
	var usage *kvcm.StorageUsage
	if hasUsage {
		var err error
		if usage, err = kvcm.DecodeStorageUsage([]byte(raw)); err != nil {
			p.Problems = append(p.Problems, err.Error())
		}
	} else if len(fields) > 0 {
		p.Warnings = append(p.Warnings, kvcm.FieldStorageUsage+" is absent: KVCM starts its "+
			"usage at 0 (a legacy KVCM, or one that never wrote it); a repair adds none")
	}
	values := map[string]uint64{}
	if usage != nil {
		for _, m := range usage.Members {
			row := CounterRow{Counter: m.Name, Persisted: u64(m.Value)}
			if !m.Known {
				row.Note = "a storage type kvcm-gc does not know: left as it is"
				p.Warnings = append(p.Warnings, fmt.Sprintf("member %q is no storage type "+
					"kvcm-gc knows: a KVCM that does not know it either fails its recovery", m.Name))
				p.Rows = append(p.Rows, row)
				continue
			}
			covered[m.Slot] = true
			// vcns_hf3fs is counted in hf3fs (ToBaseType): its own slot stays 0.
			want := rec.Usage[m.Slot]
			if m.Slot == kvcm.TypeVCNSHF3FS {
				want = 0
			}
			row.Recounted, row.Drift = u64(want), drift(m.Value, want)
			if *row.Drift != 0 {
				row.Write = true
				values[m.Name] = want
			}
			p.Rows = append(p.Rows, row)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(rec.Usage)) {
		if covered[s] || rec.Usage[s] == 0 {
			continue
		}
		p.Rows = append(p.Rows, CounterRow{Counter: s.String(), Recounted: u64(rec.Usage[s]),
			Note: "no member in the hash: KVCM counts 0 there; a repair adds none"})
	}
	if len(values) > 0 {
		out, err := usage.WithValues(values)
		if err != nil {
			p.Problems = append(p.Problems, err.Error())
		} else {
			write[kvcm.FieldStorageUsage] = string(out)
		}
	}

	// How far the recount is KVCM's own.
	if rec.VersionDependent > 0 {
		p.Inexact = append(p.Inexact, fmt.Sprintf("%d spec URIs KVCM's two URI parsers read "+
			"differently (counted as the newer reads them)", rec.VersionDependent))
	}
	if rec.Bad > 0 {
		p.Inexact = append(p.Inexact, fmt.Sprintf("%d locations decoded best effort (KVCM may read them otherwise)", rec.Bad))
	}
	var unparsed int64
	for _, n := range rec.Unparsed {
		unparsed += n
	}
	if unparsed > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d spec URIs without a size KVCM can read: "+
			"KVCM added an unknowable number for each when it wrote it, "+
			"and subtracts 0 when it deletes it; the recount counts 0, so the repaired value "+
			"stays right as KVCM deletes them", unparsed))
	}
	if rec.Corrupt > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d location values KVCM cannot read "+
			"(counted 0: KVCM's own deletes cannot subtract them)", rec.Corrupt))
	}
	if rec.Legacy > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d legacy-layout locations: never in a "+
			"KVCM's persisted usage, counted 0", rec.Legacy))
	}
	if len(p.Problems) == 0 && len(write) > 0 {
		p.Write = write
	}
	return p
}

func u64(v uint64) *uint64 { return &v }

// drift is a − b as an int64, clamped.
func drift(a, b uint64) *int64 {
	var d int64
	switch {
	case a >= b && a-b > math.MaxInt64:
		d = math.MaxInt64
	case a >= b:
		d = int64(a - b)
	case b-a > math.MaxInt64:
		d = math.MinInt64
	default:
		d = -int64(b - a)
	}
	return &d
}

// RecountInstance recounts instance from every block key of the store (one full SCAN of
// kvcache:instance_*, reading the instance's keys whole).
func RecountInstance(
	ctx context.Context,
	sc meta.Scanner,
	instance string,
	count int,
) (*kvcm.Recount, RecountSummary, error) {
	if count <= 0 {
		count = 1000
	}
	rec := kvcm.NewRecount()
	var sum RecountSummary
	owns := func(id string) bool { return id == instance }
	for cursor := uint64(0); ; {
		page, err := sc.ScanStore(ctx, cursor, count, owns)
		if err != nil {
			return nil, sum, fmt.Errorf("recount %s: %w", instance, err)
		}
		for i := range page.Entries {
			e := &page.Entries[i]
			rec.AddBlock(e.Layout, e.URI, e, e.Others)
		}
		sum.BadKeys += int64(len(page.BadKeys))
		sum.WrongDB += int64(page.WrongDB)
		if cursor = page.Next; cursor == 0 {
			break
		}
	}
	sum.Keys, sum.Locations, sum.VersionDependent, sum.Bad = rec.Keys, rec.Locations, rec.VersionDependent, rec.Bad
	sum.Corrupt, sum.Uncounted, sum.Legacy = rec.Corrupt, rec.Uncounted, rec.Legacy
	for _, n := range rec.Unparsed {
		sum.Unparsed += n
	}
	return rec, sum, nil
}

// RepairCounters recounts cfg.Instance and shows its persisted counters beside the recount;
// with cfg.Apply it writes the recount over the values the hash holds, as described above.
// Nothing is written when: a leader lock exists, or appears before the write (the error is
// meta.ErrLeaderLock, or meta.ErrConflict when it appeared on the store mid-run); the hash
// changed since it was read (meta.ErrConflict); it holds a value KVCM cannot read back
// (ErrCountersUnreadable); the recount is inexact without AllowInexact (ErrCountersInexact);
// the intent event cannot be recorded. The report is returned with every error after the
// recount.
func RepairCounters(ctx context.Context, cfg CountersConfig, deps CountersDeps) (*CountersReport, error) {
	if cfg.Apply && deps.Publish == nil {
		return nil, errors.New("repair counters: applying needs an event publisher")
	}
	recount := func(ctx context.Context, tx meta.MetadataTx, rep *CountersReport) (map[string]string, error) {
		rec, sum, err := RecountInstance(ctx, deps.Store, cfg.Instance, cfg.ScanCount)
		if err != nil {
			return nil, err
		}
		rep.Recount = sum
		plan := PlanCounters(tx.Fields, rec)
		rep.Rows, rep.Inexact, rep.Problems, rep.Warnings = plan.Rows, plan.Inexact, plan.Problems, plan.Warnings
		switch {
		case !cfg.Apply || plan.Write == nil && len(plan.Problems) == 0:
			return nil, nil
		case len(plan.Problems) > 0:
			return nil, fmt.Errorf("repair counters of %s: %w: %s", cfg.Instance,
				ErrCountersUnreadable, strings.Join(plan.Problems, "; "))
		case len(plan.Inexact) > 0 && !cfg.AllowInexact:
			return nil, fmt.Errorf("repair counters of %s: %w: %s (give --allow-inexact to write it anyway)",
				cfg.Instance, ErrCountersInexact, strings.Join(plan.Inexact, "; "))
		}
		return plan.Write, nil
	}
	return writeCounters(ctx, cfg, deps, "repair counters", "", recount)
}

// writeCounters is the write both a repair and an undo make, once the leader locks checked
// clear: within one watched transaction of cfg.Instance's metadata hash, plan reads the
// hash into rep and returns the fields to write (nil: none); the locks are checked again
// after cfg.Settle, the intent event is recorded, and only then is the write made.
// finishCounters records how it ended. op names the operation in errors, reason the
// events' reason.
func writeCounters(
	ctx context.Context,
	cfg CountersConfig,
	deps CountersDeps,
	op, reason string,
	plan func(ctx context.Context, tx meta.MetadataTx, rep *CountersReport) (map[string]string, error),
) (*CountersReport, error) {
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := otherLocks(ctx, deps.OtherLocks); err != nil {
		return nil, err
	}
	rep := &CountersReport{Instance: cfg.Instance, Key: kvcm.MetadataKey(cfg.Instance)}
	var intent *subjects.Event
	write := func(ctx context.Context, tx meta.MetadataTx) (map[string]string, error) {
		rep.Exists = len(tx.Fields) > 0
		set, err := plan(ctx, tx, rep)
		if err != nil || set == nil {
			return nil, err
		}
		if err := settle(ctx, cfg.Settle, tx, deps.OtherLocks); err != nil {
			return nil, err
		}
		ev := countersEvent(cfg, tx.Key, tx.Fields, set, subjects.OutcomeCountersIntent, now())
		ev.Reason = reason
		if err := deps.Publish(ctx, ev); err != nil {
			return nil, fmt.Errorf("%s of %s: record the intent before writing: %w", op, cfg.Instance, err)
		}
		intent = &ev
		return set, nil
	}
	written, err := deps.Store.WatchMetadata(ctx, cfg.Instance, cfg.LockKeys, write)
	return finishCounters(ctx, rep, intent, written, err, deps.Publish, now, log)
}

// finishCounters records how a write that was about to be made ended.
func finishCounters(
	ctx context.Context,
	rep *CountersReport,
	intent *subjects.Event,
	written map[string]string,
	err error,
	publish func(context.Context, subjects.Event) error,
	now func() time.Time,
	log *slog.Logger,
) (*CountersReport, error) {
	if intent != nil {
		ev := *intent
		ev.At = now().UnixMicro()
		ev.Outcome = subjects.OutcomeCountersApplied
		if err != nil || written == nil {
			ev.Outcome, ev.Detail = subjects.OutcomeCountersAborted, errString(err)
		}
		// The outcome is recorded even when the caller's context is ending: the write it
		// tells about was made or not already.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if perr := publish(pctx, ev); perr != nil {
			log.Warn("counters event not recorded", "instance", ev.Instance, "outcome", ev.Outcome, "err", perr)
			err = errors.Join(err, fmt.Errorf("record the %s counters event: %w", ev.Outcome, perr))
		}
		if ev.Outcome == subjects.OutcomeCountersApplied {
			rep.Applied, rep.Written = true, intent.Metadata
		}
	}
	if err != nil {
		return rep, err
	}
	return rep, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// otherLocks runs the lock checks kept outside the store.
func otherLocks(ctx context.Context, checks []func(context.Context) error) error {
	for _, check := range checks {
		if err := check(ctx); err != nil {
			return err
		}
	}
	return nil
}

// settle waits d, checking the locks every second, then checks the locks outside the store
// once more. The store's own watch catches a lock or a write meanwhile at the write.
func settle(ctx context.Context, d time.Duration, tx meta.MetadataTx, others []func(context.Context) error) error {
	deadline := time.Now().Add(d)
	for {
		if err := tx.Locked(ctx); err != nil {
			return err
		}
		if err := otherLocks(ctx, others); err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(min(left, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// countersEvent is the event of a write of set over fields.
func countersEvent(
	cfg CountersConfig,
	key string,
	fields, set map[string]string,
	outcome string,
	at time.Time,
) subjects.Event {
	ev := subjects.Event{
		V:        subjects.EventSchemaVersion,
		Kind:     subjects.EventCounters,
		Stage:    CountersStage,
		Cluster:  cfg.Cluster,
		Instance: cfg.Instance,
		Outcome:  outcome,
		At:       at.UnixMicro(),
	}
	for _, f := range slices.Sorted(maps.Keys(set)) {
		ev.Metadata = append(
			ev.Metadata,
			subjects.MetadataField{Key: key, Field: f, Old: subjects.RawText(fields[f]), New: subjects.RawText(set[f])},
		)
	}
	return ev
}

// CountersStage is the stage of counters events: the operator's identity.
const CountersStage = "admin"

// UndoCounters writes back what an applied counters event changed: each field's old bytes,
// only where the hash still holds the event's new bytes (else ErrCountersChanged and nothing
// is written), under the same lock checks, settle and events as a repair.
func UndoCounters(
	ctx context.Context,
	cfg CountersConfig,
	deps CountersDeps,
	applied subjects.Event,
) (*CountersReport, error) {
	switch {
	case applied.Kind != subjects.EventCounters || applied.Outcome != subjects.OutcomeCountersApplied:
		return nil, fmt.Errorf("undo counters: the event is %s %s, not an applied counters repair",
			applied.Kind, applied.Outcome)
	case applied.Instance != cfg.Instance || applied.Cluster != cfg.Cluster:
		return nil, fmt.Errorf("undo counters: the event is about instance %q of cluster %q",
			applied.Instance, applied.Cluster)
	case len(applied.Metadata) == 0:
		return nil, errors.New("undo counters: the event changed no field")
	case deps.Publish == nil:
		return nil, errors.New("undo counters: needs an event publisher")
	}
	undo := func(_ context.Context, tx meta.MetadataTx, _ *CountersReport) (map[string]string, error) {
		set := map[string]string{}
		for _, f := range applied.Metadata {
			if f.Key != tx.Key {
				return nil, fmt.Errorf("undo counters: the event names key %q, not %q", f.Key, tx.Key)
			}
			if cur, ok := tx.Fields[f.Field]; !ok || cur != string(f.New) {
				return nil, fmt.Errorf("undo counters of %s: %w: %s holds %q, the repair wrote %q",
					cfg.Instance, ErrCountersChanged, f.Field, cur, string(f.New))
			}
			set[f.Field] = string(f.Old)
		}
		if !cfg.Apply {
			return nil, nil
		}
		return set, nil
	}
	return writeCounters(ctx, cfg, deps, "undo counters", "undo", undo)
}

// WriteTable prints the report: the counters side by side, then what it found and did.
func (r *CountersReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "instance %s, %s", r.Instance, r.Key)
	if !r.Exists {
		fmt.Fprint(tw, " (absent)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "COUNTER\tPERSISTED\tRECOUNTED\tDRIFT\tREPAIR\tNOTE")
	num := func(v *uint64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatUint(*v, 10)
	}
	for _, row := range r.Rows {
		d, fix := "-", ""
		if row.Drift != nil {
			d = strconv.FormatInt(*row.Drift, 10)
			if *row.Drift > 0 {
				d = "+" + d
			}
		}
		if row.Write {
			fix = "→ " + num(row.Recounted)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", row.Counter, num(row.Persisted), num(row.Recounted), d, fix, row.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := r.Recount
	fmt.Fprintf(w, "recount: %d keys, %d locations; %d specs without a readable size, %d read "+
		"differently by KVCM's versions, "+
		"%d locations decoded best effort, %d unreadable, %d of types no KVCM counts, %d legacy; "+
		"%d bad keys, %d keys in the wrong database\n",
		s.Keys, s.Locations, s.Unparsed, s.VersionDependent, s.Bad, s.Corrupt, s.Uncounted, s.Legacy, s.BadKeys, s.WrongDB)
	for _, l := range r.Inexact {
		fmt.Fprintf(w, "inexact: %s\n", l)
	}
	for _, l := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", l)
	}
	for _, l := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", l)
	}
	for _, f := range r.Written {
		fmt.Fprintf(w, "wrote %s %s: %s → %s\n", f.Key, f.Field, strconv.Quote(string(f.Old)), strconv.Quote(string(f.New)))
	}
	_, err := fmt.Fprintln(w, r.verdict())
	return err
}

func (r *CountersReport) verdict() string {
	changes := 0
	for _, row := range r.Rows {
		if row.Write {
			changes++
		}
	}
	switch {
	case r.Applied:
		return fmt.Sprintf("applied: %d counters set to the recount", changes)
	case changes == 0:
		return "nothing to repair: the persisted counters equal the recount"
	}
	return fmt.Sprintf("not applied: %d counters differ (give --apply, with every KVCM replica stopped)", changes)
}

// CountersPublisher records counters events in the EVENTS stream, each under its message id,
// waiting for the server's acknowledgement.
func CountersPublisher(js jetstream.JetStream, names subjects.Names) func(ctx context.Context, e subjects.Event) error {
	return func(ctx context.Context, e subjects.Event) error {
		data, err := subjects.Encode(e)
		if err != nil {
			return fmt.Errorf("encode counters event: %w", err)
		}
		subject, id := names.EventSubject(e.Kind, e.Instance), jetstream.WithMsgID(subjects.EventMsgID(e))
		if _, err := js.Publish(ctx, subject, data, id); err != nil {
			return fmt.Errorf("publish counters event: %w", err)
		}
		return nil
	}
}

// CountersEntry is one counters event as the EVENTS stream holds it.
type CountersEntry struct {
	Seq   uint64         `json:"seq"`
	Time  time.Time      `json:"time"`
	Event subjects.Event `json:"event"`
}

// CountersLog lists the counters events the EVENTS stream holds, oldest first, from since
// (zero: all), of instance ("" for every instance).
func CountersLog(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	instance string,
	since time.Time,
) ([]CountersEntry, error) {
	filter := names.EventKindFilter(subjects.EventCounters)
	if instance != "" {
		filter = names.EventSubject(subjects.EventCounters, instance)
	}
	var out []CountersEntry
	err := readStream(ctx, js, names.EventsStream(), readRange{Filters: []string{filter}, StartTime: since}, nil,
		func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			ev, err := subjects.DecodeEvent(m.Data())
			if err != nil {
				return fmt.Errorf("counters event %d: %w", md.Sequence.Stream, err)
			}
			out = append(out, CountersEntry{Seq: md.Sequence.Stream, Time: md.Timestamp.UTC(), Event: ev})
			return nil
		})
	return out, err
}

// CountersEventAt reads the counters event at sequence seq of the EVENTS stream.
func CountersEventAt(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	seq uint64,
) (subjects.Event, error) {
	s, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		return subjects.Event{}, fmt.Errorf("open stream %s: %w", names.EventsStream(), err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return subjects.Event{}, fmt.Errorf("read event %d: %w", seq, err)
	}
	ev, err := subjects.DecodeEvent(m.Data)
	if err != nil {
		return subjects.Event{}, fmt.Errorf("event %d: %w", seq, err)
	}
	if ev.Kind != subjects.EventCounters {
		return subjects.Event{}, fmt.Errorf("event %d is a %s event, not a counters one", seq, ev.Kind)
	}
	return ev, nil
}

// WriteCountersLog prints counters events, one line per field changed.
func WriteCountersLog(w io.Writer, es []CountersEntry) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tINSTANCE\tOUTCOME\tFIELD\tOLD\tNEW")
	for _, e := range es {
		outcome := e.Event.Outcome
		if e.Event.Reason != "" {
			outcome += " (" + e.Event.Reason + ")"
		}
		for _, f := range e.Event.Metadata {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Time.Format(time.RFC3339),
				e.Event.Instance, outcome, f.Field, strconv.Quote(string(f.Old)),
				strconv.Quote(string(f.New)))
		}
	}
	return tw.Flush()
}
