package kvcm

// FieldCopyGuard is the location member of KVCM's persistent migration guard (CopyGA, open
// upstream PR #307): a migration's copy target carries it while the copy's outcome is open.
const FieldCopyGuard = "migration_copy_guard"

// CopyGuardState is the guard's state (MigrationCopyGuardState).
type CopyGuardState int64

// The guard states KVCM knows. A guard in any other state is invalid.
const (
	CopyGuardSubmitting CopyGuardState = 1
	CopyGuardActive     CopyGuardState = 2
	CopyGuardCancelling CopyGuardState = 3
	// CopyGuardUnknown is KVCM's quarantine: the copy's outcome could not be proven, so
	// neither the target nor its source may be reused until an operator releases them.
	CopyGuardUnknown CopyGuardState = 4
)

// copyGuardSchema is the only schema_version KVCM interprets (kCurrentSchemaVersion).
const copyGuardSchema = 1

// CopyGuard is a location's migration_copy_guard member as kvcm-gc reads it: only what names
// the guard and its source. Whatever it holds, a location carrying one is kept by every rule,
// and so is the source it names: KVCM protects both, and kvcm-gc never argues with a fence,
// not even one it finds malformed (KVCM then refuses to read the location at all).
type CopyGuard struct {
	// Valid is KVCM's MigrationCopyGuard::present(): schema_version 1, a known state and a
	// non-empty operation_id, every one of them of the right JSON type.
	Valid bool
	// Problem says why the guard is not valid ("" when it is).
	Problem string

	SchemaVersion uint64
	State         CopyGuardState
	OperationID   string
	// SourceID is source_location_id: the location of the same block the copy reads from.
	// "" when the guard names none (or names it with the wrong JSON type).
	SourceID string
	// SourceCreateTime is source_location_create_time (µs); KVCM pins the source by id alone
	// when it is ≤ 0, by id and create_time otherwise. kvcm-gc pins by id alone, always.
	SourceCreateTime int64
}

// CopySources returns the location ids the guards among locs name as their source, and
// whether some guard names none that kvcm-gc can read (a malformed guard: then no location of
// the block can be known not to be its source).
func CopySources(locs []Location) (sources map[string]bool, unknown bool) {
	for i := range locs {
		g := locs[i].Guard
		if g == nil {
			continue
		}
		if g.SourceID == "" {
			unknown = true
			continue
		}
		if sources == nil {
			sources = map[string]bool{}
		}
		sources[g.SourceID] = true
	}
	return sources, unknown
}

// copyGuard decodes the value of a migration_copy_guard member at s.pos. Its syntax must be
// valid JSON like any value (else the whole location is corrupt); its content never makes the
// location bad, only the guard invalid.
func (d *locationDecoder) copyGuard() (*CopyGuard, error) {
	s := &d.s
	g := &CopyGuard{}
	bad := func(format string) {
		if g.Problem == "" {
			g.Problem = format
		}
	}
	if s.peek() != '{' {
		g.Problem = "not an object"
		return g, s.skipValue()
	}
	var seen []string
	var hasSchema, hasState bool
	more, err := s.beginObject()
	for more && err == nil {
		var k span
		var esc bool
		if k, esc, err = s.key(); err != nil {
			return g, err
		}
		name := unquote(s.doc, k, esc)
		for _, n := range seen {
			if n == name {
				bad("member " + name + " appears twice")
			}
		}
		if len(seen) < 64 {
			seen = append(seen, name)
		}
		var tok string
		var isStr bool
		switch name {
		case "schema_version":
			if tok, err = d.numberToken(); err == nil {
				v, ok := uintToken(tok)
				if !ok {
					bad("schema_version is not a uint")
				}
				g.SchemaVersion, hasSchema = v, ok
			}
		case "state":
			if tok, err = d.numberToken(); err == nil {
				v, ok := intToken(tok)
				if !ok {
					bad("state is not an int")
				}
				g.State, hasState = CopyGuardState(v), ok
			}
		case "operation_id":
			if g.OperationID, isStr, err = d.stringValue(); err == nil && !isStr {
				bad("operation_id is not a string")
			}
		case "source_location_id":
			if g.SourceID, isStr, err = d.stringValue(); err == nil && !isStr {
				bad("source_location_id is not a string")
			}
		case "source_location_create_time":
			if tok, err = d.numberToken(); err == nil {
				v, ok := intToken(tok)
				if !ok {
					bad("source_location_create_time is not an int64")
				}
				g.SourceCreateTime = v
			}
		default:
			err = s.skipValue()
		}
		if err != nil {
			return g, err
		}
		more, err = s.nextMember()
	}
	switch {
	case !hasSchema || g.SchemaVersion != copyGuardSchema:
		bad("schema_version is not 1")
	case !hasState || g.State < CopyGuardSubmitting || g.State > CopyGuardUnknown:
		bad("state is not 1 to 4")
	case g.OperationID == "":
		bad("no operation_id")
	}
	g.Valid = g.Problem == ""
	return g, err
}
