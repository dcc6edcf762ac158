package kvcm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// guardLoc is a location field value of KVCM's CopyGA branch (#307): the guard follows
// location_specs, as its ToRapidWriter writes it.
func guardLoc(id string, status Status, guard string) string {
	return `{"id":"` + id + `","status":` + string(rune('0'+status)) + `,"type":9,"spec_size":1,"create_time":1767225600000000,` +
		`"location_specs":[{"name":"tp0","uri":"pace://ssd_01/4096?media_type=5&size=1024"}]` +
		`,"migration_copy_guard":` + guard + `}`
}

const validGuard = `{"schema_version":1,"state":2,"operation_id":"op-7","source_location_id":"src01","source_location_create_time":1767225000000000,` +
	`"source_storage_name":"pace_01","target_storage_name":"ssd_01","migration_retention":0,"mark_target":"","mark_deadline_ms":0,` +
	`"total_bytes":1024,"backend_task_ids":["t1"],"create_time_us":1767225600000000,"update_time_us":1767225600000000,"last_error":""}`

// TestCopyGuard: every guard is seen, whatever it holds; valid is KVCM's present(); the
// location itself stays judgeable (a guard never makes it bad, it makes it kept).
func TestCopyGuard(t *testing.T) {
	for _, c := range []struct {
		name     string
		guard    string
		valid    bool
		state    CopyGuardState
		source   string
		problem  string
		corrupts bool // a syntax error: the whole field is corrupt
	}{
		{name: "active", guard: validGuard, valid: true, state: CopyGuardActive, source: "src01"},
		{name: "submitting", guard: strings.Replace(validGuard, `"state":2`, `"state":1`, 1), valid: true, state: CopyGuardSubmitting, source: "src01"},
		{name: "cancelling", guard: strings.Replace(validGuard, `"state":2`, `"state":3`, 1), valid: true, state: CopyGuardCancelling, source: "src01"},
		{name: "unknown = quarantine", guard: strings.Replace(validGuard, `"state":2`, `"state":4`, 1), valid: true, state: CopyGuardUnknown, source: "src01"},
		{name: "state none", guard: strings.Replace(validGuard, `"state":2`, `"state":0`, 1), state: 0, source: "src01", problem: "state is not 1 to 4"},
		{name: "future state", guard: strings.Replace(validGuard, `"state":2`, `"state":5`, 1), state: 5, source: "src01", problem: "state is not 1 to 4"},
		{name: "future schema", guard: strings.Replace(validGuard, `"schema_version":1`, `"schema_version":2`, 1), state: CopyGuardActive, source: "src01", problem: "schema_version is not 1"},
		{name: "no schema", guard: `{"state":2,"operation_id":"op","source_location_id":"s"}`, state: CopyGuardActive, source: "s", problem: "schema_version is not 1"},
		{name: "no operation", guard: `{"schema_version":1,"state":2,"source_location_id":"s"}`, state: CopyGuardActive, source: "s", problem: "no operation_id"},
		{name: "no source", guard: `{"schema_version":1,"state":2,"operation_id":"op"}`, valid: true, state: CopyGuardActive},
		{name: "empty object", guard: `{}`, problem: "schema_version is not 1"},
		{name: "a string", guard: `"ACTIVE"`, problem: "not an object"},
		{name: "null", guard: `null`, problem: "not an object"},
		{name: "an array", guard: `[1,2]`, problem: "not an object"},
		{name: "state a string", guard: `{"schema_version":1,"state":"ACTIVE","operation_id":"op","source_location_id":"s"}`, source: "s", problem: "state is not an int"},
		{name: "source a number", guard: `{"schema_version":1,"state":2,"operation_id":"op","source_location_id":7}`, state: CopyGuardActive, problem: "source_location_id is not a string"},
		{name: "duplicate member", guard: `{"schema_version":1,"state":2,"operation_id":"op","state":3}`, state: 3, problem: "member state appears twice"},
		{name: "escaped names", guard: `{"schema_v\u0065rsion":1,"st\u0061te":2,"operation_id":"op","source_location_id":"s\u00e9"}`, valid: true, state: CopyGuardActive, source: "sé"},
		{name: "syntax error", guard: `{"schema_version":1,`, corrupts: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := guardLoc("dst01", StatusWriting, c.guard)
			loc, err := DecodeLocation("dst01", []byte(raw))
			if c.corrupts {
				require.ErrorIs(t, err, ErrCorruptLocation)
				return
			}
			require.NoError(t, err)
			require.NoError(t, loc.Err, "a guard never makes the location bad")
			require.NotNil(t, loc.Guard)
			g := loc.Guard
			require.Equal(t, c.valid, g.Valid, g.Problem)
			require.Equal(t, c.problem, g.Problem)
			require.Equal(t, c.state, g.State)
			require.Equal(t, c.source, g.SourceID)
			require.Equal(t, StatusWriting, loc.Status)
			require.Len(t, loc.Specs, 1, "members after the guard still decode")

			// The legacy layout decodes the same member the same way.
			b, err := DecodeBlock([]byte(`{"dst01":` + raw + `}`))
			require.NoError(t, err)
			require.Equal(t, *g, *b.Locations[0].Guard)
			// An edit keeps the guard byte for byte (only the status token changes).
			out, err := LocationWithStatus([]byte(raw), StatusDeleting)
			require.NoError(t, err)
			require.Equal(t, strings.Replace(raw, `"status":2`, `"status":4`, 1), string(out))
		})
	}

	loc, err := DecodeLocation("a", []byte(`{"id":"a","status":3,"type":4,"location_specs":[]}`))
	require.NoError(t, err)
	require.Nil(t, loc.Guard, "no member, no guard")
	loc, err = DecodeLocation("a", []byte(`{"id":"a","status":3,"migration_copy_guard":{},"migration_copy_guard":{}}`))
	require.NoError(t, err)
	require.NotNil(t, loc.Guard)
	require.ErrorIs(t, loc.Err, ErrBadLocation, "a repeated member is still a repeated member")
}

// TestCopySources: the sources a block's guards name, and whether a guard names none kvcm-gc
// can read (then every location of the block may be its source).
func TestCopySources(t *testing.T) {
	dec := func(id, v string) Location {
		l, err := DecodeLocation(id, []byte(v))
		require.NoError(t, err)
		return l
	}
	src := dec("src01", `{"id":"src01","status":3,"type":3,"create_time":1767225000000000,"location_specs":[]}`)
	dst := dec("dst01", guardLoc("dst01", StatusWriting, validGuard))
	other := dec("zz", `{"id":"zz","status":2,"type":3,"create_time":1,"location_specs":[]}`)
	s, unknown := CopySources([]Location{src, dst, other})
	require.Equal(t, map[string]bool{"src01": true}, s)
	require.False(t, unknown)

	s, unknown = CopySources([]Location{src, other})
	require.Nil(t, s)
	require.False(t, unknown)

	bad := dec("dst02", guardLoc("dst02", StatusServing, `"x"`))
	s, unknown = CopySources([]Location{src, bad})
	require.Nil(t, s)
	require.True(t, unknown, "a guard without a readable source keeps the whole block")
}

// TestChecksumKept: a location of KVCM's checksum branches (#212, #338, #349) carries checksum
// after location_specs; kvcm-gc's edit changes the status token and nothing else.
func TestChecksumKept(t *testing.T) {
	raw := `{"id":"a","status":3,"type":4,"spec_size":1,"create_time":1767225600000000,` +
		`"location_specs":[{"name":"tp0","uri":"file://nfs_01/r/a/tp0/1?size=1"}],"checksum":-4611686018427387904}`
	loc, err := DecodeLocation("a", []byte(raw))
	require.NoError(t, err)
	require.NoError(t, loc.Err)
	out, err := LocationWithStatus([]byte(raw), StatusDeleting)
	require.NoError(t, err)
	require.Equal(t, strings.Replace(raw, `"status":3`, `"status":4`, 1), string(out))
}
