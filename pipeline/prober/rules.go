package prober

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Verdict is the prober's decision on one batch.
type Verdict struct {
	// Targets are the delete targets, de-duplicated by (block key, location id), in batch order,
	// at most Config.MaxTargets.
	Targets []subjects.Target
	// Hosts are the storage names the targets' spec URIs point at.
	Hosts map[string]bool
	// Judged counts the locations looked at.
	Judged int
	// Candidates counts targets by reason (before the cap).
	Candidates map[string]int
	// Skips counts what was kept because it could not be judged, by Skip* reason.
	Skips map[string]int
	// Ambiguous counts the blocks holding both layouts (judged by nothing).
	Ambiguous int
	// Notes are the notable skips (corrupt blocks, bad locations, probe failures) worth an
	// audit event; never one per ordinary kept location.
	Notes []Note
}

// Note is one notable skip.
type Note struct {
	Key      int64
	Location string // "" for a whole block
	Reason   string
	Detail   string
}

func (v *Verdict) skip(reason string, n int) { v.Skips[reason] += n }

func (v *Verdict) note(key int64, loc, reason, detail string) {
	v.skip(reason, 1)
	v.Notes = append(v.Notes, Note{Key: key, Location: loc, Reason: reason, Detail: detail})
}

// Rules are the prober's three rules (DESIGN §5) with what they consult.
type Rules struct {
	Config Config
	// Storages resolves registered storages (the registry's storage table plus overrides).
	Storages storage.Set
	// Guard is the migration copy-target guard.
	Guard guard.Guard
	// ObserveProbe, when set, receives the latency of each MightExist chunk.
	ObserveProbe func(t kvcm.StorageType, d time.Duration)
	// GroupDelay returns an instance group's delay_before_delete_ms (rule 3; ok false: the
	// group is not in the registry).
	GroupDelay func(group string) (time.Duration, bool)
	// Observer remembers the first sight of DELETING locations of the location layout (rule 3).
	Observer DeletingObserver
}

// rule is one of the prober's rules (DESIGN §5), a value of its own as Thanos's metadata
// filters are: Judge offers it every location of its status that the checks every rule
// shares (KVMeta, migration pins, a bad location) let through.
type rule interface {
	// Reason is the rule's label: the reason of its candidates (subjects.Reason*).
	Reason() string
	// Status is the status of the locations the rule judges.
	Status() kvcm.Status
	// Offer judges one location, counting what it keeps into j's verdict: true makes it a
	// candidate now. A rule that judges a batch's locations together holds them, and
	// decides in Decide.
	Offer(ctx context.Context, j *judging, at located) bool
	// Decide returns the held locations that are candidates, once the batch is through.
	Decide(ctx context.Context, j *judging) []located
}

// judging is one batch being judged: what the rules read of it, and the verdict they count
// into.
type judging struct {
	batch *subjects.Batch
	now   time.Time
	v     *Verdict
}

// located is one decoded location of a block of the batch, in layout.
type located struct {
	be     *subjects.BlockEntry
	loc    *kvcm.Location
	layout string
}

// rules are the rules of r.Config, in the order their candidates enter a request: rule 1,
// rule 2 (decided after the batch), rule 3 when collect_deleting is on.
func (r *Rules) rules() []rule {
	rs := []rule{
		orphanWriting{
			grace:         r.Config.OrphanWritingGrace,
			locationGrace: r.Config.WritingGrace(subjects.LayoutLocation),
			guard:         r.Guard,
		},
		&storageMissing{rules: r, excluded: r.Config.excluded()},
	}
	if r.Config.CollectDeleting {
		rs = append(rs, stuckDeleting{rules: r})
	}
	return rs
}

// Judge applies the rules to a batch at time now. It never fails on data it cannot judge:
// that is kept and counted.
func (r Rules) Judge(ctx context.Context, b subjects.Batch, now time.Time) Verdict {
	cfg := r.Config
	v := Verdict{Candidates: map[string]int{}, Skips: map[string]int{}, Hosts: map[string]bool{}}
	j := &judging{batch: &b, now: now, v: &v}
	rules := r.rules()

	type cand struct {
		key    int64
		loc    *kvcm.Location
		layout string
		reason string
	}
	var cands []cand
	// KVMeta's objects (open upstream PR #341) are KVMeta's: CLS_NEW and CLS_DELETING are its
	// own states there, and its create_time no µs.
	kvmetaInstance := kvcm.IsKVMetaInstanceID(b.Instance)

	// judge applies the rules to one decoded location of block be, whose guards are pins.
	judge := func(be *subjects.BlockEntry, loc *kvcm.Location, layout string, pins pipeline.MigrationPins) {
		kvmeta := kvmetaInstance || kvcm.IsKVMetaLocationID(loc.ID)
		v.Judged++
		if kvmeta {
			// The registry reader skips KVMeta's instances; this keeps a batch of one anyway.
			v.skip(SkipKVMeta, 1)
			return
		}
		if reason, detail := pins.Kept(loc); reason != "" {
			// Kept by every rule, before anything else is looked at.
			if loc.Guard != nil && !loc.Guard.Valid {
				v.note(be.Key, loc.ID, reason, detail)
			} else {
				v.skip(reason, 1)
			}
			return
		}
		if loc.Err != nil {
			v.note(be.Key, loc.ID, SkipBadLocation, loc.Err.Error())
			return
		}
		if !utf8.ValidString(loc.ID) {
			// A delete request carries the id as a JSON string, which cannot hold it exactly.
			v.note(be.Key, loc.ID, SkipBadLocation, "location id is not valid UTF-8")
			return
		}
		// The one rule that judges the location's status, if any.
		for _, rl := range rules {
			if rl.Status() == loc.Status {
				if rl.Offer(ctx, j, located{be: be, loc: loc, layout: layout}) {
					cands = append(cands, cand{be.Key, loc, layout, rl.Reason()})
				}
				break
			}
		}
	}

	slab := make([]kvcm.Location, 0, 2*len(b.Blocks))
	for i := range b.Blocks {
		be := &b.Blocks[i]
		ps := be.Parts()
		layout := ps.Layout()
		switch layout {
		case kvcm.LayoutNone:
			continue // an empty __uri__: absent, as in KVCM
		case kvcm.LayoutAmbiguous:
			// Both layouts in one key (a block touched before and after an upgrade): which
			// locations KVCM reads depends on its version. Judged by nothing (invariant 9).
			v.Ambiguous++
			v.note(
				be.Key,
				"",
				SkipAmbiguousLayout,
				fmt.Sprintf("layout %q: both __uri__ and L# fields; nothing judged", be.Layout),
			)
			continue
		}
		// Every location is decoded first: a guard pins its source, another location. The
		// candidates keep pointers into locs, a window of the batch's slab: an append that
		// moves the slab leaves the old array, and the pointers into it, as they were.
		start := len(slab)
		hidden := false
		for p := range ps.All() {
			switch {
			case p.Kind == kvcm.PartTombstone:
				// KVCM's tombstone: never judged, never touched.
				v.skip(SkipTombstone, 1)
			case p.Kind == kvcm.PartCorrupt && p.Layout == kvcm.LayoutLegacy:
				v.note(be.Key, "", SkipCorruptURI, p.Err.Error())
			case p.Kind == kvcm.PartCorrupt:
				v.Judged++
				v.note(be.Key, p.ID, SkipCorruptLocation, p.Err.Error())
				hidden = hidden || pipeline.MentionsCopyGuard(p.Raw)
			default:
				slab = append(slab, p.Loc)
			}
		}
		locs := slab[start:len(slab):len(slab)]
		pins := pipeline.MigrationPinsOfLocations(locs, hidden)
		for j := range locs {
			judge(be, &locs[j], layout.String(), pins)
		}
	}

	// The rules that judge a batch's locations together (rule 2's probes) decide last.
	for _, rl := range rules {
		for _, at := range rl.Decide(ctx, j) {
			cands = append(cands, cand{at.be.Key, at.loc, at.layout, rl.Reason()})
		}
	}

	// Keep batch order (blocks, then locations) so a replay gives the same request.
	type locKey struct {
		key int64
		id  string
	}
	seen := make(map[locKey]bool, len(cands))
	for _, c := range cands {
		id := locKey{c.key, c.loc.ID}
		if seen[id] {
			continue
		}
		seen[id] = true
		v.Candidates[c.reason]++
		if len(v.Targets) >= cfg.MaxTargets {
			// Left in Redis: the next round finds it again (seed §3.3).
			v.skip(SkipOverCap, 1)
			continue
		}
		t := subjects.Target{Key: c.key, Location: c.loc.ID, Reason: c.reason, Expected: subjects.RawText(c.loc.Raw)}
		if c.layout == subjects.LayoutLocation {
			t.Layout = subjects.LayoutLocation
		}
		v.Targets = append(v.Targets, t)
		for _, spec := range c.loc.Specs {
			if u, err := kvcm.ParseDataURI(spec.URI); err == nil {
				v.Hosts[u.Host] = true
			}
		}
	}
	return v
}

// WritingAge is the age at now by which rule 1 judges a WRITING location of layout
// (subjects.LayoutLegacy or LayoutLocation): its create time in the location layout, its
// block's LRU time (lruTime) in the legacy one. ok is false when the age is unknown.
func WritingAge(loc *kvcm.Location, layout, lruTime string, now time.Time) (age time.Duration, ok bool) {
	if layout == subjects.LayoutLegacy {
		return kvcm.LegacyAge(loc, lruTime, now)
	}
	return kvcm.LocationAge(loc, now)
}

// Reasons the rules keep a location that no skip names and that is no candidate.
const (
	KeptWritingWithinGrace = "writing_within_grace"
	KeptSpecsPresent       = "specs_present_or_unknown"
)

// KeptReason says why the rules kept loc (of layout, in a block of LRU time lruTime) at now
// when no skip names it and it is no candidate: a WRITING one is within the grace (its age
// as rule 1 reads it, when known: aged), a SERVING one has its data, any other status is
// not one a rule collects ("status_<name>").
func KeptReason(
	loc *kvcm.Location,
	layout, lruTime string,
	now time.Time,
) (reason string, age time.Duration, aged bool) {
	switch loc.Status {
	case kvcm.StatusWriting:
		age, aged = WritingAge(loc, layout, lruTime, now)
		return KeptWritingWithinGrace, age, aged
	case kvcm.StatusServing:
		return KeptSpecsPresent, 0, false
	default:
		return "status_" + strings.TrimPrefix(strings.ToLower(loc.Status.String()), "cls_"), 0, false
	}
}

// orphanWriting is rule 1 (orphan WRITING, DESIGN §5): a WRITING location older than
// orphan_writing_grace, by the age its layout tells, that no migration copies to.
// Invariant 2: young, unknown-age or future WRITING is never a candidate; a guard error keeps
// the location.
type orphanWriting struct {
	grace time.Duration
	// locationGrace is the grace of the location layout: with kvcm_gc, KVCM's own GC's grace
	// and margin (Config.WritingGrace); 0 for grace alone.
	locationGrace time.Duration
	guard         guard.Guard
}

func (orphanWriting) Reason() string      { return subjects.ReasonOrphanWriting }
func (orphanWriting) Status() kvcm.Status { return kvcm.StatusWriting }

func (w orphanWriting) Offer(ctx context.Context, j *judging, at located) bool {
	key, loc, v := at.be.Key, at.loc, j.v
	if loc.ID == "" {
		v.skip(SkipBadLocation, 1)
		return false
	}
	age, known := WritingAge(loc, at.layout, at.be.LRUTime, j.now)
	if !known {
		v.skip(SkipAgeUnknown, 1)
		return false
	}
	if age < w.grace {
		return false
	}
	if at.layout == subjects.LayoutLocation && age < w.locationGrace {
		// KVCM's GC takes it once its own grace has passed, and its delete lowers KVCM's
		// counters; kvcm-gc's would leave the bytes counted for good (DESIGN §13.5).
		v.skip(SkipLeftToKVCMGC, 1)
		return false
	}
	target, err := w.guard.IsCopyTarget(ctx, j.batch.Instance, key, loc.ID)
	if err != nil {
		v.note(key, loc.ID, SkipGuardError, err.Error())
		return false
	}
	if target {
		v.skip(SkipCopyTarget, 1)
		return false
	}
	return true
}

func (orphanWriting) Decide(context.Context, *judging) []located { return nil }

// storageMissing is rule 2 (storage-missing SERVING, DESIGN §5): a SERVING location of a
// probed storage type some of whose data a probe finds missing. It holds the batch's
// locations and probes them together in Decide.
type storageMissing struct {
	rules    *Rules
	excluded func(kvcm.StorageType) bool
	held     []located
}

func (*storageMissing) Reason() string      { return subjects.ReasonStorageMissing }
func (*storageMissing) Status() kvcm.Status { return kvcm.StatusServing }

func (m *storageMissing) Offer(_ context.Context, j *judging, at located) bool {
	if !at.loc.Type.Probed() || m.excluded(at.loc.Type) {
		// Unknown, dummy and EventReport kinds never enter this rule (kvcm.TypeRule).
		j.v.skip(SkipExcludedType, 1)
		return false
	}
	if len(at.loc.Specs) == 0 {
		j.v.skip(SkipNoSpec, 1)
		return false
	}
	m.held = append(m.held, at)
	return false
}

func (m *storageMissing) Decide(ctx context.Context, j *judging) []located {
	return m.rules.probeServing(ctx, m.held, m.rules.Storages, j.v)
}

// probeServing is rule 2 (storage-missing SERVING). A location is a candidate only when at
// least one of its specs is definitively Missing (invariant 3); unknown or present alone never
// is. URIs are grouped by (storage, type) and probed in chunks of at most cfg.ProbeChunkSize.
func (r Rules) probeServing(ctx context.Context, locs []located, storages storage.Set, v *Verdict) []located {
	cfg := r.Config
	// A group holds its URIs in the slice MightExist is given, chunk by chunk, so nothing is
	// copied per chunk; locs[j] is the index in locs of uris[j].
	type group struct {
		backend storage.Backend
		uris    []kvcm.DataURI
		locs    []int
	}
	type groupKey struct {
		host string
		typ  kvcm.StorageType
	}
	specs := 0
	for _, s := range locs {
		specs += len(s.loc.Specs)
	}
	groups := map[groupKey]*group{}
	var order []*group
	for i, s := range locs {
		for _, spec := range s.loc.Specs {
			u, err := kvcm.ParseDataURI(spec.URI)
			if err != nil {
				v.skip(SkipBadSpecURI, 1)
				continue
			}
			be, ok := storages.Lookup(u.Host)
			if !ok {
				v.skip(SkipStorageNotFound, 1)
				continue
			}
			if be.Type() != s.loc.Type {
				v.skip(SkipStorageTypeMismatch, 1)
				continue
			}
			gk := groupKey{u.Host, be.Type()}
			grp := groups[gk]
			if grp == nil {
				// Most batches name one storage: the first group gets room for every URI.
				grp = &group{backend: be}
				if len(order) == 0 {
					grp.uris, grp.locs = make([]kvcm.DataURI, 0, specs), make([]int, 0, specs)
				}
				groups[gk] = grp
				order = append(order, grp)
			}
			grp.uris = append(grp.uris, u)
			grp.locs = append(grp.locs, i)
		}
	}

	missing := make([]bool, len(locs))
	for _, grp := range order {
		for start := 0; start < len(grp.uris); start += cfg.ProbeChunkSize {
			end := min(start+cfg.ProbeChunkSize, len(grp.uris))
			uris, chunk := grp.uris[start:end:end], grp.locs[start:end]
			started := time.Now()
			res, err := grp.backend.MightExist(ctx, uris)
			if r.ObserveProbe != nil {
				r.ObserveProbe(grp.backend.Type(), time.Since(started))
			}
			if err != nil {
				// This chunk and the rest of this storage are unknown; other storages go on.
				v.note(locs[chunk[0]].be.Key, "", SkipProbeError, fmt.Sprintf("probe %s: %v", grp.backend.Name(), err))
				v.skip(SkipProbeError, len(grp.uris)-start-1)
				break
			}
			if len(res) != len(chunk) {
				v.note(locs[chunk[0]].be.Key, "", SkipProbeShape,
					fmt.Sprintf("probe %s: %d results for %d uris", grp.backend.Name(), len(res), len(chunk)))
				continue
			}
			for i, r := range res {
				if r == storage.Missing {
					missing[chunk[i]] = true
				}
			}
		}
	}
	var out []located
	for i, s := range locs {
		if missing[i] {
			out = append(out, s)
		}
	}
	return out
}

// Skip reasons of the prober (the "reason" label of kvcm_gc_prober_skips_total and Event.Reason).
const (
	SkipCorruptURI          = "corrupt_uri"
	SkipBadLocation         = "bad_location"
	SkipAgeUnknown          = "age_unknown"
	SkipGuardError          = "guard_error"
	SkipCopyTarget          = "copy_target"
	SkipBadSpecURI          = "bad_spec_uri"
	SkipStorageNotFound     = "storage_not_found"
	SkipStorageTypeMismatch = "storage_type_mismatch"
	SkipProbeShape          = "probe_shape"
	SkipProbeError          = "probe_error"
	SkipExcludedType        = "excluded_type"
	SkipNoSpec              = "no_spec"
	SkipOverCap             = "over_target_cap"
	// SkipCorruptLocation: a location field (location layout) that is not one JSON object.
	SkipCorruptLocation = "corrupt_location"
	// SkipTombstone: an empty location field, KVCM's tombstone.
	SkipTombstone = "tombstone"
	// SkipAmbiguousLayout: a block holding both __uri__ and L# fields (invariant 9).
	SkipAmbiguousLayout = "ambiguous_layout"
	// SkipLeftToKVCMGC: an orphan WRITING past orphan_writing_grace left to KVCM's own GC
	// until kvcm_gc_grace + kvcm_gc_margin (kvcm_gc).
	SkipLeftToKVCMGC = "left_to_kvcm_gc"
)

// SkipKVMeta: a location of KVCM's KVMeta side path (open upstream PR #341): its instance id
// lies in the reserved __kv_meta_v1__ namespace or its id starts with kvmeta:v1:.
const SkipKVMeta = "kvmeta"
