package deleter

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

func TestTargetReclaim(t *testing.T) {
	loc := func(specs string) subjects.RawText {
		return subjects.RawText(`{"id":"l1","status":2,"type":4,"spec_size":3,"create_time":1,"location_specs":[` + specs + `]}`)
	}
	for _, tc := range []struct {
		name     string
		location string
		expected subjects.RawText
		want     []Reclaim
		ok       bool
	}{
		{"two specs on one storage", "l1", loc(`{"name":"tp0","uri":"file://nfs_01/d/a?size=1024"},{"name":"tp1","uri":"file://nfs_01/d/b?blkid=0&size=2048"}`),
			[]Reclaim{{Storage: "nfs_01", Files: 2, Bytes: 3072}}, true},
		{"two storages, in the order of the specs", "l1",
			loc(`{"name":"tp0","uri":"hf3fs://h1/x?size=10"},{"name":"tp1","uri":"file://nfs_01/y?size=20"},{"name":"tp2","uri":"hf3fs://h1/z?size=30"}`),
			[]Reclaim{{Storage: "h1", Files: 2, Bytes: 40}, {Storage: "nfs_01", Files: 1, Bytes: 20}}, true},
		{"no size, a bad size: files of 0 bytes", "l1", loc(`{"name":"tp0","uri":"file://nfs_01/a"},{"name":"tp1","uri":"file://nfs_01/b?size=-1"}`),
			[]Reclaim{{Storage: "nfs_01", Files: 2, Bytes: 0}}, true},
		{"a spec URI that does not parse names no storage", "l1", loc(`{"name":"tp0","uri":"nonsense"},{"name":"tp1","uri":"file://nfs_01/b?size=5"}`),
			[]Reclaim{{Storage: "nfs_01", Files: 1, Bytes: 5}}, true},
		{"no specs", "l1", loc(``), nil, true},
		{"not a location", "l1", subjects.RawText(`[1,2]`), nil, false},
		{"empty", "l1", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := TargetReclaim(subjects.Target{Key: 1, Location: tc.location, Reason: subjects.ReasonOrphanWriting, Expected: tc.expected})
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestFrees(t *testing.T) {
	for outcome, want := range map[string]bool{
		subjects.OutcomeDeleted: true, subjects.OutcomePartial: true, subjects.OutcomeWouldDelete: true,
		subjects.OutcomeNoopGone: false, subjects.OutcomeNoopMismatch: false, subjects.OutcomeError: false,
	} {
		require.Equal(t, want, Frees(outcome), outcome)
	}
}

// TestPhantom: what KVCM's usage goes on counting of a removed location: its bytes as KVCM
// reads them, in its base slot; nothing for a legacy location or bytes that are no location.
func TestPhantom(t *testing.T) {
	loc := func(typ string, specs string) subjects.RawText {
		return subjects.RawText(`{"id":"l1","status":3,"type":` + typ + `,"spec_size":2,"create_time":1,"location_specs":[` + specs + `]}`)
	}
	for _, tc := range []struct {
		name   string
		target subjects.Target
		slot   kvcm.StorageType
		bytes  uint64
		ok     bool
	}{
		{"file, two specs", subjects.Target{Location: "l1", Layout: subjects.LayoutLocation,
			Expected: loc("4", `{"name":"a","uri":"file://nfs_01/a?size=01024"},{"name":"b","uri":"file://nfs_01/b?size=x"}`)}, kvcm.TypeFile, 1024, true},
		{"vcns_hf3fs counts in hf3fs", subjects.Target{Location: "l1", Layout: subjects.LayoutLocation,
			Expected: loc("5", `{"name":"a","uri":"vcns://h/a?size=7"}`)}, kvcm.TypeHF3FS, 7, true},
		{"a KVCM reading of a URI kvcm-gc would not delete by", subjects.Target{Location: "l1", Layout: subjects.LayoutLocation,
			Expected: loc("4", `{"name":"a","uri":"file:///tmp/x?size=3"}`)}, kvcm.TypeFile, 3, true},
		{"legacy: never in the persisted usage", subjects.Target{Location: "l1", Layout: subjects.LayoutLegacy,
			Expected: loc("4", `{"name":"a","uri":"file://nfs_01/a?size=1"}`)}, 0, 0, false},
		{"a slot no KVCM counts", subjects.Target{Location: "l1", Layout: subjects.LayoutLocation,
			Expected: loc("42", `{"name":"a","uri":"file://nfs_01/a?size=1"}`)}, 0, 0, false},
		{"not a location", subjects.Target{Location: "l1", Layout: subjects.LayoutLocation, Expected: subjects.RawText("{bad")}, 0, 0, false},
	} {
		slot, b, ok := Phantom(tc.target)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.slot, slot, tc.name)
		require.Equal(t, tc.bytes, b, tc.name)
	}
}
