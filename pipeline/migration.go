package pipeline

import (
	"bytes"
	"fmt"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Skip reasons of KVCM's persistent migration guards (CopyGA, open upstream PR #307): a copy
// target carries migration_copy_guard while its copy's outcome is open, and the guard pins the
// source location it names. KVCM's own GC, reclaimer and deletes keep both; so does every rule
// here, whatever the guard's state or schema, and when it is malformed (KVCM then refuses to
// read the location at all).
const (
	// SkipMigrationGuard: the location carries migration_copy_guard.
	SkipMigrationGuard = "migration_guard"
	// SkipMigrationSource: a guard of the location's block names it as its copy's source, or
	// a guard of the block names no source kvcm-gc can read (then any location may be it).
	SkipMigrationSource = "migration_source"
)

// MigrationPins are the copy guards of one block: the sources they pin.
type MigrationPins struct {
	sources map[string]bool
	// unknown: a guard names no source that can be read (a malformed guard, or a location
	// that does not decode but holds a guard's member name).
	unknown bool
}

// MigrationPinsOfLocations reads the guards of a block's decoded locations; hidden says that
// a value of the block that did not decode mentions migration_copy_guard.
func MigrationPinsOfLocations(locs []kvcm.Location, hidden bool) MigrationPins {
	sources, unknown := kvcm.CopySources(locs)
	return MigrationPins{sources: sources, unknown: unknown || hidden}
}

// MentionsCopyGuard reports whether bytes that do not decode may hold a guard.
func MentionsCopyGuard(raw []byte) bool { return bytes.Contains(raw, []byte(kvcm.FieldCopyGuard)) }

// MigrationPinsOf reads the guards of a block entry as a batch carries it (either layout).
func MigrationPinsOf(be *subjects.BlockEntry) MigrationPins { return pinsOfParts(be.Parts()) }

// MigrationPinsOfEntry reads the guards of a block as the store returns it.
func MigrationPinsOfEntry(e *meta.Entry) MigrationPins { return pinsOfParts(e.Parts()) }

// pinsOfParts reads the guards of a block's parts: those of every location that decodes, and
// an unknown one when bytes that do not decode mention a guard. An ambiguous block pins
// nothing: nothing of it is judged.
func pinsOfParts(ps kvcm.Parts) MigrationPins {
	if l := ps.Layout(); l != kvcm.LayoutLegacy && l != kvcm.LayoutLocation {
		return MigrationPins{}
	}
	var locs []kvcm.Location
	hidden := false
	for p := range ps.All() {
		switch p.Kind {
		case kvcm.PartLocation:
			locs = append(locs, p.Loc)
		case kvcm.PartCorrupt:
			hidden = hidden || MentionsCopyGuard(p.Raw)
		}
	}
	return MigrationPinsOfLocations(locs, hidden)
}

// Kept says why loc, a location of the block p was read from, is kept for a migration: a
// SkipMigration* reason and a detail, or "" when no guard concerns it.
func (p MigrationPins) Kept(loc *kvcm.Location) (reason, detail string) {
	switch g := loc.Guard; {
	case g != nil && g.Valid:
		return SkipMigrationGuard, fmt.Sprintf("migration_copy_guard state %d, operation %q, source %q",
			g.State, g.OperationID, g.SourceID)
	case g != nil:
		return SkipMigrationGuard, fmt.Sprintf("invalid migration_copy_guard (%s): KVCM cannot read this location", g.Problem)
	case p.sources[loc.ID]:
		return SkipMigrationSource, "the source a migration_copy_guard of its block names"
	case p.unknown:
		return SkipMigrationSource, "a migration_copy_guard of its block names no source that can be read"
	}
	return "", ""
}
