package kvcm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// testFields are L# fields as id, value, id, value, …; reads counts LocationFieldAt calls.
type testFields struct {
	kv    []string
	reads int
}

func fieldSeq(kv ...string) *testFields { return &testFields{kv: kv} }

func (f *testFields) LocationFieldCount() int { return len(f.kv) / 2 }
func (f *testFields) LocationFieldAt(i int) (string, []byte) {
	f.reads++
	return f.kv[2*i], []byte(f.kv[2*i+1])
}

// partSummary is what a test compares of a part: its kind, layout, id and exact bytes.
type partSummary struct {
	Kind   PartKind
	Layout Layout
	ID     string
	Raw    string
}

func summarize(ps Parts) (Layout, []partSummary) {
	var out []partSummary
	for p := range ps.All() {
		out = append(out, partSummary{p.Kind, p.Layout, p.ID, string(p.Raw)})
	}
	return ps.Layout(), out
}

func TestParts(t *testing.T) {
	const (
		a = `{"id":"a","status":2,"type":4,"location_specs":[{"name":"tp0","uri":"file://nfs/a"}]}`
		b = `{"id":"b","status":3,"type":4,"location_specs":[]}`
		// A location whose JSON decodes but cannot be judged: its inner id differs.
		bad = `{"id":"zz","status":2}`
	)
	legacy := `{"a":` + a + `,"b":` + b + `}`
	for _, tc := range []struct {
		name   string
		layout Layout
		uri    string
		fields []string
		want   Layout
		parts  []partSummary
	}{
		{name: "no location field", layout: LayoutNone, want: LayoutNone},
		{name: "empty __uri__ is an absent block", layout: LayoutLegacy, uri: "", want: LayoutNone},
		{name: "legacy", layout: LayoutLegacy, uri: legacy, want: LayoutLegacy, parts: []partSummary{
			{PartLocation, LayoutLegacy, "a", a}, {PartLocation, LayoutLegacy, "b", b}}},
		{name: "legacy corrupt", layout: LayoutLegacy, uri: `{"a":`, want: LayoutLegacy, parts: []partSummary{
			{PartCorrupt, LayoutLegacy, "", `{"a":`}}},
		{name: "location: a tombstone, a corrupt value, a bad and a good location", layout: LayoutLocation,
			fields: []string{"t", "", "c", "{", "a", bad, "b", b}, want: LayoutLocation, parts: []partSummary{
				{PartTombstone, LayoutLocation, "t", ""}, {PartCorrupt, LayoutLocation, "c", "{"},
				{PartLocation, LayoutLocation, "a", bad}, {PartLocation, LayoutLocation, "b", b}}},
		{name: "field L# with a corrupt value is a corrupt location, not a corrupt __uri__", layout: LayoutLocation,
			fields: []string{"", `{"migration_copy_guard":`}, want: LayoutLocation, parts: []partSummary{
				{PartCorrupt, LayoutLocation, "", `{"migration_copy_guard":`}}},
		{name: "ambiguous: legacy parts, then location parts", layout: LayoutAmbiguous, uri: legacy,
			fields: []string{"b", b}, want: LayoutAmbiguous, parts: []partSummary{
				{PartLocation, LayoutLegacy, "a", a}, {PartLocation, LayoutLegacy, "b", b}, {PartLocation, LayoutLocation, "b", b}}},
		{name: "ambiguous with an empty __uri__", layout: LayoutAmbiguous, fields: []string{"b", b}, want: LayoutAmbiguous,
			parts: []partSummary{{PartLocation, LayoutLocation, "b", b}}},
		{name: "a layout this version does not know is ambiguous", layout: Layout(9), uri: legacy, want: LayoutAmbiguous,
			parts: []partSummary{{PartLocation, LayoutLegacy, "a", a}, {PartLocation, LayoutLegacy, "b", b}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layout, parts := summarize(ReadParts(tc.layout, []byte(tc.uri), fieldSeq(tc.fields...)))
			require.Equal(t, tc.want, layout)
			require.Equal(t, tc.parts, parts)
		})
	}

	t.Run("decoded parts", func(t *testing.T) {
		ps := ReadParts(LayoutLocation, nil, fieldSeq("c", "{", "a", bad, "b", b))
		var got []Part
		for p := range ps.All() {
			got = append(got, p)
		}
		require.Len(t, got, 3)
		require.ErrorIs(t, got[0].Err, ErrCorruptLocation)
		require.ErrorIs(t, got[1].Loc.Err, ErrBadLocation)
		require.NoError(t, got[2].Loc.Err)
		require.Equal(t, StatusServing, got[2].Loc.Status)
		require.Equal(t, "b", got[2].Loc.ID)
	})

	t.Run("except passes over the ids given, never a corrupt __uri__", func(t *testing.T) {
		skip := map[string]bool{"a": true, "c": true, "": true}
		ps := ReadParts(LayoutAmbiguous, []byte(legacy), fieldSeq("c", "{", "b", b))
		_, got := summarize(*ps.Except(skip))
		require.Equal(t, []partSummary{{PartLocation, LayoutLegacy, "b", b}, {PartLocation, LayoutLocation, "b", b}}, got)
		ps = ReadParts(LayoutLegacy, []byte(`{"a":`), nil)
		_, got = summarize(*ps.Except(skip))
		require.Equal(t, []partSummary{{PartCorrupt, LayoutLegacy, "", `{"a":`}}, got)
	})

	t.Run("a loop that breaks reads nothing further", func(t *testing.T) {
		fields := fieldSeq("a", `{"id":"a"}`, "b", `{"id":"b"}`, "c", `{"id":"c"}`)
		ps := ReadParts(LayoutAmbiguous, []byte(legacy), fields)
		n := 0
		for range ps.All() {
			if n++; n == 3 {
				break
			}
		}
		require.Equal(t, 1, fields.reads, "two legacy parts, then one field")
		p, ok := ps.Next()
		require.True(t, ok, "Next goes on where the loop stopped")
		require.Equal(t, "b", p.ID)
	})
}

// FuzzParts: Parts gives, for any bytes, exactly what the two decoders give on their own: the
// legacy locations of DecodeBlock in order, and per field a tombstone, DecodeLocation's error,
// or its location, with the exact stored bytes.
func FuzzParts(f *testing.F) {
	f.Add(uint8(LayoutLegacy), []byte(`{"a":{"id":"a","status":2}}`), "a", []byte(`{"id":"a"}`))
	f.Add(uint8(LayoutLocation), []byte(nil), "", []byte(`{`))
	f.Add(uint8(LayoutAmbiguous), []byte(`{"a":{}}`), "x", []byte(nil))
	f.Add(uint8(LayoutNone), []byte(`{}`), "x", []byte(`{"id":"x"}`))
	f.Fuzz(func(t *testing.T, layout uint8, uri []byte, id string, v []byte) {
		ps := ReadParts(Layout(layout), uri, fieldSeq(id, string(v)))
		l := ps.Layout()
		var got []Part
		for p := range ps.All() {
			got = append(got, p)
		}
		wantLegacy := Layout(layout) == LayoutLegacy || Layout(layout) >= LayoutAmbiguous
		wantLocation := Layout(layout) == LayoutLocation || Layout(layout) >= LayoutAmbiguous
		switch {
		case Layout(layout) == LayoutNone, Layout(layout) == LayoutLegacy && len(uri) == 0:
			require.Equal(t, LayoutNone, l)
			require.Empty(t, got)
			return
		case Layout(layout) >= LayoutAmbiguous:
			require.Equal(t, LayoutAmbiguous, l)
		default:
			require.Equal(t, Layout(layout), l)
		}
		if wantLegacy && len(uri) > 0 {
			blk, err := DecodeBlock(uri)
			if err != nil {
				require.Equal(t, PartCorrupt, got[0].Kind)
				require.Equal(t, LayoutLegacy, got[0].Layout)
				require.Equal(t, string(uri), string(got[0].Raw))
				got = got[1:]
			} else {
				for _, loc := range blk.Locations {
					require.Equal(t, PartLocation, got[0].Kind)
					require.Equal(t, LayoutLegacy, got[0].Layout)
					require.Equal(t, loc.ID, got[0].ID)
					require.Equal(t, string(loc.Raw), string(got[0].Raw))
					require.Equal(t, loc.Status, got[0].Loc.Status)
					got = got[1:]
				}
			}
		}
		if wantLocation {
			require.Len(t, got, 1)
			p := got[0]
			require.Equal(t, LayoutLocation, p.Layout)
			require.Equal(t, id, p.ID)
			require.Equal(t, string(v), string(p.Raw))
			loc, err := DecodeLocation(id, v)
			switch {
			case len(v) == 0:
				require.Equal(t, PartTombstone, p.Kind)
			case err != nil:
				require.Equal(t, PartCorrupt, p.Kind)
				require.ErrorIs(t, p.Err, ErrCorruptLocation)
			default:
				require.Equal(t, PartLocation, p.Kind)
				require.Equal(t, loc.Status, p.Loc.Status)
				require.Equal(t, loc.Err == nil, p.Loc.Err == nil)
			}
			got = got[1:]
		}
		require.Empty(t, got)
	})
}
