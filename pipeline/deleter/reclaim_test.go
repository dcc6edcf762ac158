package deleter

import (
	"testing"

	"github.com/stretchr/testify/require"

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
