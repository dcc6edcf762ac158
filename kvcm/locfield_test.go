package kvcm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/tools/kvcmtest"
)

// TestLocationIDForms: the id is everything after the first L#, whatever bytes it holds.
func TestLocationIDForms(t *testing.T) {
	for _, id := range kvcmtest.LocationIDForms {
		f := LocationField(id)
		require.Equal(t, "L#"+id, f)
		got, ok := LocationID(f)
		require.True(t, ok, id)
		require.Equal(t, id, got, "the id is everything after the first L#")
		// Its value decodes under that id, naming it as KVCM writes it (JSON-escaped).
		loc, err := DecodeLocation(id, []byte(`{"id":`+string(appendKVCMString(nil, id))+`,"status":3,"type":7,"location_specs":[]}`))
		require.NoError(t, err)
		require.NoError(t, loc.Err, id)
		require.Equal(t, id, loc.ID)
		// A subject token holds it bijectively.
		tok := EncodeToken(id)
		require.NotContains(t, tok, ".")
		require.NotContains(t, tok, " ")
		back, err := DecodeToken(tok)
		require.NoError(t, err)
		require.Equal(t, id, back)
	}
	_, ok := LocationID("BP#prev_key")
	require.False(t, ok)
}

// TestLayoutOfFields: field names decide, never values; an interim field, or __uri__ beside an
// L# field (even empty ones), makes a key ambiguous.
func TestLayoutOfFields(t *testing.T) {
	for _, c := range []struct {
		fields map[string]string
		want   Layout
	}{
		{nil, LayoutNone},
		{map[string]string{FieldPrevKey: "", FieldLRUTime: "1"}, LayoutNone},
		{map[string]string{FieldURI: "{}", FieldLRUTime: "1"}, LayoutLegacy},
		{map[string]string{FieldURI: ""}, LayoutLegacy},
		{map[string]string{"L#a": "{}", "L#b": "", FieldPrevKey: "7"}, LayoutLocation},
		{map[string]string{"L#a": ""}, LayoutLocation},
		{map[string]string{FieldURI: "", "L#a": ""}, LayoutAmbiguous},
		{map[string]string{InterimLocationPrefix + "a": "{}"}, LayoutAmbiguous},
		{map[string]string{"L#a": "{}", InterimLocationPrefix + "a": "{}"}, LayoutAmbiguous},
	} {
		require.Equal(t, c.want, LayoutOfFields(c.fields), "%v", c.fields)
	}
}
