package subjects

import "fmt"

// Message schemas. Field names and JSON tags are the wire contract; every field is documented.

// SchemaVersion is the "v" of every batch and delete request this build writes. A consumer
// terminates (does not retry) a message whose version it does not know.
const SchemaVersion = 1

// EventSchemaVersion is the "v" of the events this build writes. Version 3 records the
// candidates a prober judged in one batch in one event with every target (Event.Targets);
// version 2 records a delete request's outcome in one event with every target; version 1 had
// one delete event per target (Key, Location, Outcome), and versions 1 and 2 one candidate
// event per target. Readers take all three (Event.PerTarget).
const EventSchemaVersion = 3

// Reasons a location becomes a delete target (DESIGN §5).
const (
	ReasonOrphanWriting  = "orphan_writing"
	ReasonStorageMissing = "storage_missing"
	// ReasonStuckDeleting: a DELETING location left behind by a KVCM that crashed or was
	// demoted mid-delete, DELETING with the same bytes for at least deleting_grace (opt-in,
	// collect_deleting).
	ReasonStuckDeleting = "stuck_deleting"
	// ReasonUnregisteredInstance: a location of an instance KVCM's registry no longer lists,
	// absent from it for at least unregistered_grace after kvcm-gc saw it registered (opt-in,
	// collect_unregistered_instances). Sent by the scanner; its data files are left in place.
	ReasonUnregisteredInstance = "unregistered_instance"
)

// Batch is the blocks of one instance in one maintenance scan page of its metadata store (or
// one part of them, split so no message exceeds the server's max payload). A page of a store
// gives one batch per instance it holds blocks of, all with the page's Cursor and Next.
// Subject: BatchSubject(instance).
type Batch struct {
	V         int          `json:"v"`                  // SchemaVersion
	Cluster   string       `json:"cluster"`            // KVCM cluster name
	Instance  string       `json:"instance"`           // KVCM instance id, verbatim
	Group     string       `json:"group"`              // the instance's group
	Store     string       `json:"store"`              // name of the metadata store that was scanned (no credentials)
	Round     uint64       `json:"round"`              // scan round id, increasing
	LeaseRev  uint64       `json:"lease_rev"`          // revision of the store's lease its scanner held (fencing)
	Cursor    uint64       `json:"cursor"`             // SCAN cursor of the store this page started at
	Next      uint64       `json:"next"`               // cursor SCAN returned (0: the store's walk is done)
	Part      int          `json:"part"`               // 0-based part number of a split page
	Parts     int          `json:"parts"`              // number of parts of this page (>= 1)
	ScannedAt int64        `json:"scanned_at_us"`      // wall clock when the page was read, µs since the epoch
	BadKeys   int          `json:"bad_keys,omitempty"` // keys of this page skipped because they do not parse
	Blocks    []BlockEntry `json:"blocks"`
}

// BlockEntry is one block as the scanner read it, in either KVCM layout (DESIGN §2).
type BlockEntry struct {
	Key int64 `json:"key,string"` // block key (signed int64, as a decimal string)
	// Layout is the key's layout as its field names showed it: "legacy", "location" or
	// "ambiguous" (both kinds of field: judged by nothing). Absent means legacy (a batch of a
	// scanner that read __uri__ only).
	Layout  string     `json:"layout,omitempty"`
	URI     RawText    `json:"uri,omitempty"`    // legacy, ambiguous: the exact __uri__ bytes read
	LRUTime string     `json:"lru,omitempty"`    // legacy, ambiguous: the raw __lru_time__ field (µs), "" when absent
	Locs    []LocField `json:"locs,omitempty"`   // location, ambiguous: every L#<id> field, by id
	Fields  []string   `json:"fields,omitempty"` // names of the block's other fields (BP#prev_key, …), sorted
}

// LocField is one location field of the location layout: L#<ID> holding V, both exact
// (an empty V is KVCM's tombstone).
type LocField struct {
	ID RawText `json:"id"`
	V  RawText `json:"v"`
}

// Layouts of BlockEntry.Layout and Target.Layout.
const (
	LayoutLegacy    = "legacy"
	LayoutLocation  = "location"
	LayoutAmbiguous = "ambiguous"
)

// DeleteRequest is the prober's verdict on one batch: the locations to delete, each with the
// exact bytes it judged. Subject: DeleteSubject(instance).
type DeleteRequest struct {
	V        int    `json:"v"`        // SchemaVersion
	Cluster  string `json:"cluster"`  // KVCM cluster name (of the source batch)
	Instance string `json:"instance"` // KVCM instance id, verbatim; every target is a block of it
	Group    string `json:"group"`    // the instance's group (of the source batch)
	Store    string `json:"store"`    // metadata store the targets live in (of the source batch)
	Round    uint64 `json:"round"`    // scan round of the source batch
	Source   Source `json:"source"`   // the batch this request was derived from (the first, when it gathers several)
	// Sources are the further batches whose targets the prober gathered into this request
	// (batches of the instance judged at the same time); none for a request of one batch.
	Sources  []Source `json:"sources,omitempty"`
	JudgedAt int64    `json:"judged_at_us"` // when the prober decided, µs since the epoch
	Targets  []Target `json:"targets"`
	// Storages describes every storage named by the targets' spec URIs (by global unique name).
	Storages map[string]StorageInfo `json:"storages,omitempty"`
}

// Target is one location to delete.
type Target struct {
	Key      int64  `json:"key,string"` // block key
	Location string `json:"location"`   // location id (the __uri__ map key, or the suffix of its L#<id> field)
	// Layout is the layout the location was judged in: "location" (its own field L#<id>),
	// or "legacy" (one member of __uri__), also when absent. The deleter's writes refuse a
	// key that is no longer in it (DESIGN §8.9).
	Layout   string  `json:"layout,omitempty"`
	Reason   string  `json:"reason"`   // ReasonOrphanWriting | ReasonStorageMissing | ReasonStuckDeleting | ReasonUnregisteredInstance
	Expected RawText `json:"expected"` // the location's exact JSON value bytes as scanned
}

// Source identifies the stream message a message was derived from.
type Source struct {
	Stream string `json:"stream"`           // stream name ("" when the producer read no stream)
	Seq    uint64 `json:"seq"`              // stream sequence of the message (0 when unknown)
	MsgID  string `json:"msg_id,omitempty"` // its Nats-Msg-Id, when it had one
}

// Event is one entry of the audit trail. Subject: EventSubject(kind, instance).
type Event struct {
	V        int              `json:"v"`                    // EventSchemaVersion (1 to 3)
	Kind     string           `json:"kind"`                 // one of the Event* kinds
	Stage    string           `json:"stage"`                // scanner | prober | deleter
	Cluster  string           `json:"cluster"`              // KVCM cluster name
	Instance string           `json:"instance,omitempty"`   // KVCM instance id; "" when about no instance
	Store    string           `json:"store,omitempty"`      // the metadata store, when the event is about one (the scanner's)
	Round    uint64           `json:"round,omitempty"`      // scan round, when known
	Key      *int64           `json:"key,omitempty,string"` // block key when the event is about one location
	Location string           `json:"location,omitempty"`   // location id when the event is about one location
	File     RawText          `json:"file,omitempty"`       // sweep: the data path of the file the event is about, exact bytes
	Reason   string           `json:"reason,omitempty"`     // why (candidate reason, skip reason, poison reason)
	Outcome  string           `json:"outcome,omitempty"`    // deleter outcome or decision
	Detail   string           `json:"detail,omitempty"`     // free text (an error message, redacted)
	DryRun   bool             `json:"dry_run,omitempty"`
	Source   *Source          `json:"source,omitempty"` // the input message
	Counts   map[string]int64 `json:"counts,omitempty"` // summaries (round end, batch verdict, a request's outcomes)
	// Targets is every target of a delete request with its outcome (EventDelete, version 2);
	// Outcome is then theirs when they share one, else OutcomeMixed. Of a candidate event
	// (version 3) they are the candidates of one batch, each with its reason; Reason is then
	// theirs when they share one, else OutcomeMixed, and Counts counts them by reason.
	Targets []EventTarget `json:"targets,omitempty"`
	// Metadata is what a counters event wrote, or was about to write, to an instance's KVCM
	// metadata hash: each field's exact bytes before and after, so that the write can be
	// told and undone.
	Metadata []MetadataField `json:"metadata,omitempty"`
	At       int64           `json:"at_us"` // µs since the epoch
}

// MetadataField is one field of a KVCM metadata hash (kvcache:instance_<id>:metadata) as a
// counters repair changed it.
type MetadataField struct {
	Key   string  `json:"key"`
	Field string  `json:"field"`
	Old   RawText `json:"old"`
	New   RawText `json:"new"`
}

// EventTarget is one delete target's outcome in a delete event.
type EventTarget struct {
	Key      int64  `json:"key,string"`
	Location string `json:"location"`
	Reason   string `json:"reason"`            // the target's reason (Reason*)
	Outcome  string `json:"outcome,omitempty"` // Outcome* ("" of a candidate)
	Detail   string `json:"detail,omitempty"`
	// PhysicalSkips counts the spec URIs whose data was not unlinked, by reason.
	PhysicalSkips map[string]int `json:"physical_skips,omitempty"`
	// Resumed: an earlier delivery had moved the location to DELETING.
	Resumed bool `json:"resumed,omitempty"`
	// KeyDeleted: the CAD deleted the block's key (empty_block: delete).
	KeyDeleted bool `json:"key_deleted,omitempty"`
}

// OutcomeMixed is the Outcome of a delete event whose targets ended differently, and the
// Reason of a candidate event whose targets are garbage for different reasons.
const OutcomeMixed = "mixed"

// PerTarget returns a delete or candidate event with targets as one event per target, each
// as a version-1 event says it (Key, Location, Reason, Outcome, Detail; physical skips and a
// resume in Detail; Counts the whole event's); any other event, or a version-1 one, is returned alone.
func (e Event) PerTarget() []Event {
	if e.Kind != EventDelete && e.Kind != EventCandidate || len(e.Targets) == 0 {
		return []Event{e}
	}
	out := make([]Event, len(e.Targets))
	for i, t := range e.Targets {
		one := e
		key := t.Key
		one.Key, one.Location, one.Reason, one.Outcome, one.Targets = &key, t.Location, t.Reason, t.Outcome, nil
		one.Detail = t.Detail
		if len(t.PhysicalSkips) > 0 {
			one.Detail = JoinDetail(one.Detail, fmt.Sprintf("physical skips %v", t.PhysicalSkips))
		}
		if t.Resumed {
			one.Detail = JoinDetail(one.Detail, "resumed from DELETING")
		}
		out[i] = one
	}
	return out
}

// JoinDetail joins two detail texts with "; ", leaving out an empty one.
func JoinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// Event kinds (the <kind> token of the event subject).
const (
	// EventCandidate, by the prober: a location judged garbage (Reason).
	EventCandidate = "candidate"
	// EventSkip, by the prober or the scanner: something not judged (corrupt __uri__, bad
	// key, bad location, probe unknown …).
	EventSkip = "skip"
	// EventDelete, by the deleter: the outcome of a delete request, every target's (Targets).
	EventDelete = "delete"
	// EventRound, by the scanner: round started / finished / failed (Outcome "start"|"end"|"failed", Counts).
	EventRound = "round"
	// EventPoison, by any stage: a message terminated as undecodable or invalid.
	EventPoison = "poison"
	// EventDeadLetter: a message that reached MaxDeliver.
	EventDeadLetter = "deadletter"
	// EventSweep, by the walker or the sweeper: a step of the sweep of one file (Outcome,
	// File), or a walk round's start or end.
	EventSweep = "sweep"
	// EventCounters, by admin: a repair of an instance's KVCM counters (Outcome, Metadata).
	EventCounters = "counters"
)

// Outcomes of a counters event: the write was about to be made, was made, or was not (the
// compare-and-set lost, KVCM's leader lock appeared, the write failed).
const (
	OutcomeCountersIntent  = "intent"
	OutcomeCountersApplied = "applied"
	OutcomeCountersAborted = "aborted"
)

// Delete outcomes (Event.Outcome for EventDelete).
const (
	OutcomeDeleted      = "deleted"       // CAS, physical delete, CAD all done
	OutcomePartial      = "partial"       // metadata removed; some physical delete failed or was skipped
	OutcomeNoopMismatch = "noop_mismatch" // the location's bytes changed since the probe
	OutcomeNoopGone     = "noop_gone"     // the location (or block) is gone already
	OutcomeError        = "error"         // a transient failure; the request will be redelivered
	OutcomeWouldDelete  = "would_delete"  // dry-run: every check passed, nothing written
)
