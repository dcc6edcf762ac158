package ops

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The audit of KVCM's counters as status and report show it (DESIGN §13.4): per instance, the
// counters KVCM persisted, the scanner's recount, their difference (the drift), and how much
// of it kvcm-gc's own deletes explain. The recount and the readings are the last audited round
// of the instance's store (its checkpoint's Audit); kvcm-gc's share is the deleter's exact
// count in the STATE bucket. KVCM writes while a round walks, so the drift is a range
// (pipeline.DriftRange: the first reading, with the rises and falls between the round's
// readings), shown as one value only when it is one.

// InstanceCounters is one instance's KVCM counters as the last audited round of its store
// left them.
type InstanceCounters struct {
	Store    string `json:"store"`
	Instance string `json:"instance"`
	// Audited is when the store's last audited round ended.
	Audited time.Time `json:"audited,omitzero"`
	// GroupQuotaBytes is quota.capacity of the instance's group as the round read it: KVCM
	// has no quota per instance, its reclaimer compares the group's summed usage with it
	// (0: none).
	GroupQuotaBytes uint64 `json:"group_quota_bytes,omitempty"`
	// Keys is the key count: persisted (__key_count__ at the round's end), recounted, drift.
	Keys KeyCounters `json:"keys"`
	// Usage is __storage_usage_data__ by storage type, sorted by type.
	Usage []UsageCounters `json:"usage"`
	// Locations are the locations recounted (in any status).
	Locations int64 `json:"recount_locations"`
	// Inexact counts specs and locations whose bytes in KVCM's count cannot be known: the
	// drift range does not bound them.
	Inexact int64 `json:"inexact,omitempty"`
	// KvcmGC is kvcm-gc's own share: what its deletes removed since the instance's first,
	// which KVCM's counters still count unless a repair rewrote them since (nil: none).
	KvcmGC *deleter.DeletedKeys `json:"kvcm_gc_deletes,omitempty"`
	// Readings is how many times the round read the persisted counters (0: an audit read at
	// the round's ends only, before kvcm-gc read them at every page).
	Readings int `json:"readings,omitempty"`
	// Problem says why a reading is missing (the hash absent or unreadable at a reading), or
	// that the last came too early to bound the drift.
	Problem string `json:"problem,omitempty"`
}

// KeyCounters is an instance's key count, persisted and recounted.
type KeyCounters struct {
	Persisted *int64 `json:"persisted,omitempty"` // nil: not read
	Recount   int64  `json:"recount"`
	Drift     *Drift `json:"drift,omitempty"` // nil: a reading lacks the counter
	// Other is the drift kvcm-gc's deleted keys do not explain (as UsageCounters.Other).
	Other *Drift `json:"other,omitempty"`
}

// UsageCounters is an instance's usage of one storage type, in bytes.
type UsageCounters struct {
	StorageType string  `json:"storage_type"`
	Persisted   *uint64 `json:"persisted,omitempty"` // nil: not read
	Recount     uint64  `json:"recount"`
	Drift       *Drift  `json:"drift,omitempty"` // nil: a reading lacks the usage
	// KvcmGC are the bytes kvcm-gc's deletes removed of this type (DeletedKeys.Bytes).
	KvcmGC uint64 `json:"kvcm_gc_bytes"`
	// Other is the drift kvcm-gc's deletes do not explain: Drift minus KvcmGC (lost persists
	// of a dying leader, deletes by other processes; negative after a repair that rewrote
	// what kvcm-gc had removed).
	Other *Drift `json:"other,omitempty"`
}

// Drift is persisted minus recounted, as a range: Low = High when it is exact.
type Drift struct {
	Low   int64 `json:"low"`
	High  int64 `json:"high"`
	Exact bool  `json:"exact"`
}

func driftOf(d pipeline.DriftRange) *Drift {
	if !d.Ok {
		return nil
	}
	return &Drift{Low: d.Low, High: d.High, Exact: d.Exact()}
}

// minus is d shifted down by n.
func (d *Drift) minus(n uint64) *Drift {
	if d == nil {
		return nil
	}
	s := clampU64(n)
	return &Drift{Low: d.Low - s, High: d.High - s, Exact: d.Exact}
}

func clampU64(n uint64) int64 {
	return int64(min(n, uint64(1<<63-1)))
}

// KVCMCounters reads the audit of every store's last audited round, and kvcm-gc's own share
// of each instance's drift, from the STATE bucket; instance "" keeps every instance. It only
// reads.
func KVCMCounters(ctx context.Context, state jetstream.KeyValue, cks []scanner.StoreCheckpoint, instance string) ([]InstanceCounters, error) {
	out := []InstanceCounters{}
	for _, c := range cks {
		for i := range c.Audit {
			a := &c.Audit[i]
			if instance != "" && a.Instance != instance {
				continue
			}
			ic := countersOf(c.Store, a)
			if c.LastRoundEndUs > 0 {
				ic.Audited = time.UnixMicro(c.LastRoundEndUs).UTC()
			}
			key := deleter.DeletedKeysKey(a.Instance)
			var dk deleter.DeletedKeys
			rev, err := pipeline.ReadJSON(ctx, state, key, key, &dk)
			if err != nil {
				return out, fmt.Errorf("kvcm counters: %w", err)
			}
			if rev > 0 {
				ic.KvcmGC = &dk
			}
			ic.explain()
			out = append(out, ic)
		}
	}
	slices.SortFunc(out, func(a, b InstanceCounters) int {
		return cmp.Or(cmp.Compare(a.Instance, b.Instance), cmp.Compare(a.Store, b.Store))
	})
	return out, nil
}

// countersOf is an audit's counters, without kvcm-gc's share.
func countersOf(store string, a *pipeline.AuditCount) InstanceCounters {
	ic := InstanceCounters{Store: store, Instance: a.Instance, GroupQuotaBytes: a.QuotaBytes, Locations: a.Locations,
		Inexact: a.Inexact, Usage: []UsageCounters{}}
	ic.Keys = KeyCounters{Recount: a.Keys, Drift: driftOf(a.KeyDrift())}
	if a.End != nil {
		ic.Keys.Persisted = a.End.Keys
	}
	for _, p := range []*pipeline.PersistedCounters{a.Start, a.End} {
		if p == nil {
			ic.Problem = "the round's readings are missing"
		} else if p.Err != "" && ic.Problem == "" {
			ic.Problem = p.Err
		}
	}
	if a.Moves != nil {
		ic.Readings = a.Moves.Readings
	}
	if a.Early && ic.Problem == "" {
		ic.Problem = "the round's last reading came before scanner.kvcm_persist_gap had passed (the scanner stopped): no drift range"
	}
	for _, slot := range a.Slots() {
		u := UsageCounters{StorageType: slot, Recount: a.Usage[slot], Drift: driftOf(a.UsageDrift(slot))}
		if a.End != nil && a.End.Usage != nil {
			v := a.End.Usage[slot]
			u.Persisted = &v
		}
		ic.Usage = append(ic.Usage, u)
	}
	return ic
}

// explain fills in kvcm-gc's share of each type's drift, adding the types only it has.
func (ic *InstanceCounters) explain() {
	if ic.KvcmGC == nil {
		ic.Keys.Other = ic.Keys.Drift
		for i := range ic.Usage {
			ic.Usage[i].Other = ic.Usage[i].Drift
		}
		return
	}
	ic.Keys.Other = ic.Keys.Drift.minus(ic.KvcmGC.Keys)
	for _, slot := range slices.Sorted(maps.Keys(ic.KvcmGC.Bytes)) {
		if !slices.ContainsFunc(ic.Usage, func(u UsageCounters) bool { return u.StorageType == slot }) {
			ic.Usage = append(ic.Usage, UsageCounters{StorageType: slot})
		}
	}
	slices.SortFunc(ic.Usage, func(a, b UsageCounters) int { return cmp.Compare(a.StorageType, b.StorageType) })
	for i := range ic.Usage {
		u := &ic.Usage[i]
		u.KvcmGC = ic.KvcmGC.Bytes[u.StorageType]
		u.Other = u.Drift.minus(u.KvcmGC)
	}
}

// writeCountersTable prints the counters of every instance, one row per counter.
func writeCountersTable(w io.Writer, cs []InstanceCounters) {
	fmt.Fprintln(w, "\nKVCM COUNTERS (drift = persisted - recount, as a range [low, high] when KVCM wrote during the round; kvcm-gc = what its deletes removed, which KVCM still counts until a repair)")
	if len(cs) == 0 {
		fmt.Fprintln(w, "no audited round yet")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "INSTANCE\tSTORE\tCOUNTER\tPERSISTED\tRECOUNT\tDRIFT\tKVCM-GC\tOTHER CAUSES\tGROUP QUOTA\tAUDITED")
	for _, c := range cs {
		quota := "-"
		if c.GroupQuotaBytes > 0 {
			quota = humanBytes(c.GroupQuotaBytes)
		}
		keysGC := "-"
		if c.KvcmGC != nil {
			keysGC = strconv.FormatUint(c.KvcmGC.Keys, 10)
		}
		persisted := "-"
		if c.Keys.Persisted != nil {
			persisted = strconv.FormatInt(*c.Keys.Persisted, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\tkeys\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", idCell(c.Instance), c.Store, persisted, c.Keys.Recount,
			driftCell(c.Keys.Drift, false), keysGC, driftCell(c.Keys.Other, false), quota, timeOnly(c.Audited))
		for _, u := range c.Usage {
			if u.zero() {
				continue // a type the instance does not use (the JSON form has every one)
			}
			persisted := "-"
			if u.Persisted != nil {
				persisted = exactBytes(*u.Persisted)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s bytes\t%s\t%s\t%s\t%s\t%s\t\t\n", idCell(c.Instance), c.Store, u.StorageType, persisted,
				exactBytes(u.Recount), driftCell(u.Drift, true), exactBytes(u.KvcmGC), driftCell(u.Other, true))
		}
		if c.Inexact > 0 {
			fmt.Fprintf(tw, "%s\t%s\t(%d specs or locations KVCM's count of which cannot be known: the range does not bound them)\n",
				idCell(c.Instance), c.Store, c.Inexact)
		}
		if c.Problem != "" {
			fmt.Fprintf(tw, "%s\t%s\t(%s)\n", idCell(c.Instance), c.Store, cell(c.Problem, 100))
		}
	}
	_ = tw.Flush()
}

// zero reports whether every number of the row is 0.
func (u UsageCounters) zero() bool {
	return u.Recount == 0 && u.KvcmGC == 0 && (u.Persisted == nil || *u.Persisted == 0) && (u.Drift == nil || *u.Drift == Drift{Exact: true})
}

// driftCell prints a drift: one value when exact, else its range.
func driftCell(d *Drift, bytes bool) string {
	if d == nil {
		return "-"
	}
	f := func(v int64) string { return strconv.FormatInt(v, 10) }
	if bytes {
		f = signedBytes
	}
	if d.Low == d.High {
		return f(d.Low)
	}
	return "[" + f(d.Low) + ", " + f(d.High) + "]"
}

// signedBytes prints a byte difference exactly: a rounded unit would pass a fuzzy figure for
// an exact one.
func signedBytes(v int64) string { return strconv.FormatInt(v, 10) + " B" }

// exactBytes prints a byte count exactly.
func exactBytes(v uint64) string { return strconv.FormatUint(v, 10) + " B" }

// countersStatus is status's part reading the audit: the checkpoints and kvcm-gc's shares.
func countersStatus(ctx context.Context, rows statusRows, names subjects.Names) []InstanceCounters {
	ctx, rows, done := rows.part(ctx, kvAPI(names.StateBucket(), subjects.CheckpointFilter(), subjects.DeletedKeysFilter())...)
	defer done()
	state, err := rows.js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		return nil // reported with the scanner's part
	}
	cks, err := scanner.ReadCheckpoints(ctx, state)
	if err != nil {
		return nil // reported with the scanner's part
	}
	cs, err := KVCMCounters(ctx, state, cks, "")
	if err != nil {
		rows.problem("%v", err)
	}
	return cs
}
