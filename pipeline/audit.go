package pipeline

import (
	"maps"
	"math"
	"slices"
)

// The audit of KVCM's counters (DESIGN §13.4): every round, the scanner recounts each
// instance's keys and usage from the blocks it walks, and reads the instance's persisted
// counters when the round starts, at the walk's pages, and a last time at least one of KVCM's
// persist gaps after the walk's last page. KVCM goes on writing while the walk runs, so the
// recount is no snapshot of one moment, and the drift is given as a range:
//
//	[start − falls − recount, start + rises − recount]
//
// with start the first reading, and rises and falls the sums, apart, of the rises and of the
// falls between consecutive readings (CounterMoves).
//
// Why it holds. For one counter of one instance: M(t) is KVCM's count in memory, T(t) the
// keyspace's true count (each block counted as KVCM counts it), c_b(t) block b's part of it.
// A counted change (KVCM's own write or delete) changes a block and M by the same amount.
// The walk reads block b at w_b, so the recount is R = Σ_b c_b(w_b). Reading r_i returns
// M(τ_i), τ_i the time of KVCM's last persist before r_i. The first reading r_0 comes before
// the walk's first page; the last one, r_n, at least G (scanner.kvcm_persist_gap, the longest
// time between two of KVCM's persists) after its last page, so τ_n is after every w_b. The
// truth is the drift the last reading holds: D = M(τ_n) − T(τ_n), KVCM's count as it persisted
// it against the keyspace at that moment (the keyspace at r_n also holds changes KVCM has not
// persisted yet: a lag, not a drift). T(τ_n) = R + A, where A sums the changes made to each
// block after the walk read it, up to τ_n. With counted changes only, each lies in one
// (τ_{i−1}, τ_i]: A = Σ a_i, where a_i are those of the interval to blocks already walked, and
// m_i = M(τ_i) − M(τ_{i−1}) = a_i + u_i, u_i the interval's changes to blocks not walked yet.
// With rises = Σ max(m_i, 0) and falls = Σ max(−m_i, 0), D = start + rises − falls − R − A, so
// D lies in the range exactly when −falls ≤ A ≤ rises. That holds when in no interval a_i
// and u_i went opposite ways, since then a_i ≤ max(m_i, 0) and a_i ≥ −max(−m_i, 0). When they
// did (KVCM added to a walked block and removed from a block not walked yet between two of
// its persists), the range misses by at most Σ_i min(a_i⁺, u_i⁻) below it, Σ_i min(a_i⁻, u_i⁺)
// above it: at most, per interval, the smaller of what KVCM added and what it removed. The
// intervals that count are KVCM's persists (about a second apart, at most G): readings more
// often than that see nothing new, readings less often widen the intervals the error can hide
// in, which is why the audit reads at every page (at most every auditReadGap) and not only at
// the round's ends, where one interval spans the whole walk and the miss could be whatever
// KVCM both added and removed during it.
//
// What the range does not bound: changes KVCM does not count (kvcm-gc's own deletes, another
// process's DEL, the changes a dying leader did not persist) made to a block after the walk
// read it: they drift the counters, and show in the next round's audit; a KVCM request caught
// by a persist between its Redis write and its count, which counts as such a change for that
// moment; specs KVCM's sizes cannot be known for (Inexact), marked so; and keys SCAN returns
// twice while Redis rehashes, which raise the recount. When every reading agrees, the range is
// one value, exact unless KVCM's changes cancelled out within one of its persist intervals as
// above. A last reading that came too early (the scanner stopped while it waited) gives no
// range: a change made at the walk's end may not be in it.

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
	// (nil: not read). End is the last reading, at least the persist gap after the walk's
	// last page.
	Start *PersistedCounters `json:"start,omitempty"`
	End   *PersistedCounters `json:"end,omitempty"`
	// Moves are the rises and falls of the persisted counters between the round's
	// consecutive readings, and Last the latest value of each counter read (what the next
	// reading moves from). Both nil in an audit written before the walk read the counters at
	// its pages: its one move is Start to End.
	Moves *CounterMoves      `json:"moves,omitempty"`
	Last  *PersistedCounters `json:"last,omitempty"`
	// Early: the last reading came less than the persist gap after the walk's last page (the
	// scanner stopped while it waited), so a change KVCM made at the walk's end may be
	// missing from it; no range.
	Early bool `json:"early,omitempty"`
}

// CounterMoves sums, apart, the rises and the falls of an instance's persisted counters
// between consecutive readings (the range above).
type CounterMoves struct {
	// Readings is how many readings were folded in, the first included.
	Readings  int               `json:"readings"`
	KeysUp    int64             `json:"keys_up,omitempty"`
	KeysDown  int64             `json:"keys_down,omitempty"`
	UsageUp   map[string]uint64 `json:"usage_up,omitempty"`
	UsageDown map[string]uint64 `json:"usage_down,omitempty"`
}

// Fold adds reading p to the audit: each counter p has moves from the latest value read
// before it (none for the first), which p then replaces. The maps are fresh: a checkpoint's
// audit is shared with the copies written before.
func (a *AuditCount) Fold(p *PersistedCounters) {
	if p == nil {
		return
	}
	mv := CounterMoves{Readings: 1}
	last := PersistedCounters{}
	if a.Moves != nil {
		mv = *a.Moves
		mv.Readings++
	}
	if a.Last != nil {
		last = *a.Last
	}
	if p.Keys != nil {
		if last.Keys != nil {
			d := satSub(*p.Keys, *last.Keys)
			mv.KeysUp, mv.KeysDown = satAdd(mv.KeysUp, max(d, 0)), satAdd(mv.KeysDown, max(satSub(0, d), 0))
		}
		k := *p.Keys
		last.Keys = &k
	}
	if p.Usage != nil {
		if last.Usage != nil {
			mv.UsageUp, mv.UsageDown = maps.Clone(mv.UsageUp), maps.Clone(mv.UsageDown)
			for _, s := range unionKeys(last.Usage, p.Usage) {
				// A member absent from one reading is 0 in KVCM (see UsageDrift).
				from, to := last.Usage[s], p.Usage[s]
				switch {
				case to > from:
					mv.UsageUp = addMove(mv.UsageUp, s, to-from)
				case to < from:
					mv.UsageDown = addMove(mv.UsageDown, s, from-to)
				}
			}
		}
		last.Usage = maps.Clone(p.Usage)
	}
	last.AtUs, last.Err = p.AtUs, ""
	a.Moves, a.Last = &mv, &last
}

func addMove(m map[string]uint64, slot string, n uint64) map[string]uint64 {
	if m == nil {
		m = map[string]uint64{}
	}
	if sum := m[slot] + n; sum >= n {
		m[slot] = sum
	} else {
		m[slot] = math.MaxUint64 // saturated: a sum past 2^64 is no real move
	}
	return m
}

func unionKeys(a, b map[string]uint64) []string {
	set := maps.Clone(a)
	if set == nil {
		set = map[string]uint64{}
	}
	maps.Copy(set, b)
	return slices.Sorted(maps.Keys(set))
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

// DriftRange is persisted minus recounted, as a range (see above); Ok is false when the first
// or the last reading lacks the counter, or the last came too early.
type DriftRange struct {
	Low, High int64
	Ok        bool
}

// Exact reports whether the range is one value.
func (d DriftRange) Exact() bool { return d.Ok && d.Low == d.High }

// KeyDrift is the range of the key count's drift.
func (a *AuditCount) KeyDrift() DriftRange {
	if a.Early || a.Start == nil || a.End == nil || a.Start.Keys == nil || a.End.Keys == nil {
		return DriftRange{}
	}
	start := *a.Start.Keys
	up, down := a.keyMoves(start, *a.End.Keys)
	return driftRange(start, up, down, a.Keys)
}

func (a *AuditCount) keyMoves(start, end int64) (up, down int64) {
	if a.Moves == nil { // an audit read at the round's ends only: one move
		d := satSub(end, start)
		return max(d, 0), max(satSub(0, d), 0)
	}
	return a.Moves.KeysUp, a.Moves.KeysDown
}

// UsageDrift is the range of slot's usage drift. A slot the hash has no member for is 0 in
// KVCM (its values are parsed into a zeroed buffer), so only an absent usage field, or an
// unreadable one, gives no range.
func (a *AuditCount) UsageDrift(slot string) DriftRange {
	if a.Early || a.Start == nil || a.End == nil || a.Start.Usage == nil || a.End.Usage == nil {
		return DriftRange{}
	}
	start := a.Start.Usage[slot]
	var up, down uint64
	switch end := a.End.Usage[slot]; {
	case a.Moves != nil:
		up, down = a.Moves.UsageUp[slot], a.Moves.UsageDown[slot]
	case end > start:
		up = end - start
	default:
		down = start - end
	}
	return driftRange(clampInt(start), clampInt(up), clampInt(down), clampInt(a.Usage[slot]))
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

// driftRange is [start − down − recount, start + up − recount], saturated at int64's ends.
func driftRange(start, up, down, recount int64) DriftRange {
	return DriftRange{Low: satSub(satSub(start, down), recount), High: satSub(satAdd(start, up), recount), Ok: true}
}

// clampInt is v as an int64, clamped: a count above 2^63 is no real one.
func clampInt(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		return satAdd(satAdd(a, math.MaxInt64), 1)
	}
	return satAdd(a, -b)
}
