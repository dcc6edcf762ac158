package pipeline

import (
	"maps"
	"math"
	"slices"
)

// The audit of KVCM's counters (DESIGN §13.4): every round, the scanner recounts each
// instance's keys and usage from the blocks it walks, and reads the instance's persisted
// counters when the round starts and when it ends. KVCM goes on writing while the walk runs,
// so the recount is no snapshot of one moment: a block written after the walk passed its
// place is in KVCM's count and not in the recount, one deleted after it is in the recount and
// no longer in KVCM's count. The drift is therefore given as a range, persisted minus recount
// with the persisted value at the round's start and at its end:
//
//	[min(start, end) − recount, max(start, end) − recount]
//
// It contains the true drift at the round's end when what KVCM counted during the round moved
// one way only (it wrote, or it deleted, not both), and is exact when KVCM counted nothing
// (start = end). When KVCM both wrote and deleted during the round the range may miss by up
// to what it deleted; comparing two rounds (the alert waits for two) tells a lasting drift
// from a passing one. A recount with specs KVCM's sizes cannot be known for (Inexact) is
// marked so; the range is no bound on those.

// AuditCount is one instance's audit in a store's checkpoint: the round's running recount,
// or the last completed round's, with the persisted counters read at the round's start and
// end. Usage maps are by slot name (kvcm.StorageType's String: "file", "hf3fs", …).
type AuditCount struct {
	Instance string `json:"instance"`
	// QuotaBytes is the instance group's quota.capacity when the round started (0: none).
	QuotaBytes uint64 `json:"quota_bytes,omitempty"`
	// The recount (kvcm.Recount).
	Keys      int64             `json:"keys"`
	Locations int64             `json:"locations"`
	Usage     map[string]uint64 `json:"usage,omitempty"`
	// Inexact counts the specs and locations whose bytes in KVCM's count cannot be known
	// (sizes KVCM does not parse, read differently by its versions, locations decoded best
	// effort, values KVCM cannot read).
	Inexact int64 `json:"inexact,omitempty"`
	// Start and End are the persisted counters as read when the round started and ended
	// (nil: not read).
	Start *PersistedCounters `json:"start,omitempty"`
	End   *PersistedCounters `json:"end,omitempty"`
}

// PersistedCounters is an instance's metadata hash as the audit read it.
type PersistedCounters struct {
	AtUs int64 `json:"at_us"`
	// Keys is __key_count__ (nil: absent or unreadable).
	Keys *int64 `json:"keys,omitempty"`
	// Usage is __storage_usage_data__ by slot name, the members kvcm-gc knows (nil: absent or
	// unreadable).
	Usage map[string]uint64 `json:"usage,omitempty"`
	// Err says why a reading is missing: the read failed, or a field is unreadable.
	Err string `json:"err,omitempty"`
}

// DriftRange is persisted minus recounted, as a range (see above); Ok is false when either
// reading lacks the counter.
type DriftRange struct {
	Low, High int64
	Ok        bool
}

// Exact reports whether the range is one value.
func (d DriftRange) Exact() bool { return d.Ok && d.Low == d.High }

// KeyDrift is the range of the key count's drift.
func (a *AuditCount) KeyDrift() DriftRange {
	if a.Start == nil || a.End == nil || a.Start.Keys == nil || a.End.Keys == nil {
		return DriftRange{}
	}
	return driftRange(*a.Start.Keys, *a.End.Keys, a.Keys)
}

// UsageDrift is the range of slot's usage drift. A slot the hash has no member for is 0 in
// KVCM (its values are parsed into a zeroed buffer), so only an absent usage field, or an
// unreadable one, gives no range.
func (a *AuditCount) UsageDrift(slot string) DriftRange {
	if a.Start == nil || a.End == nil || a.Start.Usage == nil || a.End.Usage == nil {
		return DriftRange{}
	}
	return driftRange(clampInt(a.Start.Usage[slot]), clampInt(a.End.Usage[slot]), clampInt(a.Usage[slot]))
}

// Slots are the slot names the recount or either reading has, sorted.
func (a *AuditCount) Slots() []string {
	set := map[string]bool{}
	for _, m := range []map[string]uint64{a.Usage, usageOf(a.Start), usageOf(a.End)} {
		for s := range maps.Keys(m) {
			set[s] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func usageOf(p *PersistedCounters) map[string]uint64 {
	if p == nil {
		return nil
	}
	return p.Usage
}

func driftRange(start, end, recount int64) DriftRange {
	return DriftRange{Low: min(start, end) - recount, High: max(start, end) - recount, Ok: true}
}

// clampInt is v as an int64, clamped: a count above 2^63 is no real one.
func clampInt(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
