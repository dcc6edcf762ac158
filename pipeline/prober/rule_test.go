package prober

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestRuleLabels: each rule is one label, one status, and rule 3 is there only with
// collect_deleting.
func TestRuleLabels(t *testing.T) {
	for _, tc := range []struct {
		collectDeleting bool
		want            []string
	}{
		{false, []string{subjects.ReasonOrphanWriting + "/CLS_WRITING", subjects.ReasonStorageMissing + "/CLS_SERVING"}},
		{true, []string{subjects.ReasonOrphanWriting + "/CLS_WRITING", subjects.ReasonStorageMissing + "/CLS_SERVING",
			subjects.ReasonStuckDeleting + "/CLS_DELETING"}},
	} {
		cfg := DefaultConfig()
		cfg.CollectDeleting = tc.collectDeleting
		var got []string
		for _, rl := range (&Rules{Config: cfg}).rules() {
			got = append(got, rl.Reason()+"/"+rl.Status().String())
		}
		require.Equal(t, tc.want, got)
	}
}

// writingAt is a WRITING location of the location layout created age before judgeNow (no
// create time: age 0).
func writingAt(id string, age time.Duration) *kvcm.Location {
	l := &kvcm.Location{ID: id, Status: kvcm.StatusWriting, Type: kvcm.TypeFile}
	if age > 0 {
		l.CreateTimeUs, l.HasCreateTime = judgeNow.Add(-age).UnixMicro(), true
	}
	return l
}

// TestOrphanWritingRule: rule 1 alone, location by location (invariant 2).
func TestOrphanWritingRule(t *testing.T) {
	grace := 24 * time.Hour
	for _, tc := range []struct {
		name  string
		loc   *kvcm.Location
		guard fakeGuard
		cand  bool
		skip  string
	}{
		{name: "older than the grace", loc: writingAt("l1", grace+time.Second), cand: true},
		{name: "exactly the grace", loc: writingAt("l1", grace), cand: true},
		{name: "within the grace", loc: writingAt("l1", grace-time.Second)},
		{name: "age unknown", loc: writingAt("l1", 0), skip: SkipAgeUnknown},
		{name: "created in the future", loc: writingAt("l1", -time.Hour), skip: SkipAgeUnknown},
		{name: "no id", loc: writingAt("", 2*grace), skip: SkipBadLocation},
		{name: "a copy target", loc: writingAt("l1", 2*grace), guard: fakeGuard{targets: map[string]bool{"inst1/7/l1": true}},
			skip: SkipCopyTarget},
		{name: "the guard fails", loc: writingAt("l1", 2*grace), guard: fakeGuard{err: errors.New("redis down")},
			skip: SkipGuardError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Verdict{Skips: map[string]int{}}
			j := &judging{batch: &subjects.Batch{Instance: "inst1"}, now: judgeNow, v: &v}
			rl := orphanWriting{grace: grace, guard: tc.guard}
			at := located{be: &subjects.BlockEntry{Key: 7}, loc: tc.loc, layout: subjects.LayoutLocation}
			require.Equal(t, tc.cand, rl.Offer(context.Background(), j, at))
			require.Empty(t, rl.Decide(context.Background(), j))
			want := map[string]int{}
			if tc.skip != "" {
				want[tc.skip] = 1
			}
			require.Equal(t, want, v.Skips)
		})
	}
}

// TestStorageMissingRule: rule 2 alone holds what it may probe and decides after the batch:
// a location is a candidate only when a probe says one of its specs is missing (invariant 3).
func TestStorageMissingRule(t *testing.T) {
	serving := func(id string, typ kvcm.StorageType, paths ...string) *kvcm.Location {
		l := &kvcm.Location{ID: id, Status: kvcm.StatusServing, Type: typ}
		for _, p := range paths {
			l.Specs = append(l.Specs, kvcm.Spec{URI: "file://nfs_01" + p})
		}
		return l
	}
	for _, tc := range []struct {
		name     string
		loc      *kvcm.Location
		excluded []string
		cand     bool
		skip     string
	}{
		{name: "data missing", loc: serving("l1", kvcm.TypeFile, "/gone"), cand: true},
		{name: "one spec of two missing", loc: serving("l1", kvcm.TypeFile, "/here", "/gone"), cand: true},
		{name: "data present", loc: serving("l1", kvcm.TypeFile, "/here")},
		{name: "data unknown", loc: serving("l1", kvcm.TypeFile, "/unsure")},
		{name: "no spec", loc: serving("l1", kvcm.TypeFile), skip: SkipNoSpec},
		{name: "a type never probed", loc: serving("l1", kvcm.TypeDummy, "/gone"), skip: SkipExcludedType},
		{name: "an excluded type", loc: serving("l1", kvcm.TypeFile, "/gone"), excluded: []string{"file"}, skip: SkipExcludedType},
		{name: "a storage of another type", loc: serving("l1", kvcm.TypeHF3FS, "/gone"), skip: SkipStorageTypeMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ExcludedTypes = tc.excluded
			nfs := &fakeBackend{name: "nfs_01", typ: kvcm.TypeFile, missing: map[string]bool{"/gone": true},
				unknown: map[string]bool{"/unsure": true}}
			r := &Rules{Config: cfg, Storages: fakeSet{"nfs_01": nfs}}
			rl := &storageMissing{rules: r, excluded: cfg.excluded()}
			v := Verdict{Skips: map[string]int{}}
			j := &judging{batch: &subjects.Batch{Instance: "inst1"}, now: judgeNow, v: &v}
			at := located{be: &subjects.BlockEntry{Key: 7}, loc: tc.loc, layout: subjects.LayoutLocation}
			require.False(t, rl.Offer(context.Background(), j, at), "rule 2 decides after the batch")
			got := rl.Decide(context.Background(), j)
			if tc.cand {
				require.Equal(t, []located{at}, got)
			} else {
				require.Empty(t, got)
			}
			want := map[string]int{}
			if tc.skip != "" {
				want[tc.skip] = 1
			}
			require.Equal(t, want, v.Skips)
		})
	}
}
