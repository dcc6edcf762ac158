package scanner

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestUnregisteredTally: a page's count joins the checkpoint that records it (a page scanned
// again replaces its count, never adds to it), the round's running count travels in the
// checkpoint, and the round's end keeps each instance's first sight.
func TestUnregisteredTally(t *testing.T) {
	now := time.UnixMicro(1_800_000_000_000_000)
	page := func(id string, keys int64) map[string]*pipeline.UnregisteredCount {
		return map[string]*pipeline.UnregisteredCount{id: {Instance: id, Keys: keys, Locations: 2 * keys, Bytes: uint64(100 * keys)}}
	}
	var u unregTally
	c := pipeline.Checkpoint{Round: 3, InRound: true, Unregistered: []pipeline.UnregisteredCount{{Instance: "old", Keys: 1, FirstSeenUs: 7}, {Instance: "gone", Keys: 9, FirstSeenUs: 5}}}
	c, ended := u.apply(c, saveRoundStart, now)
	require.False(t, ended)
	require.Empty(t, c.UnregisteredRound)

	u.add(0, 40, page("gone", 3), 0, nil)
	u.add(0, 40, page("gone", 4), 0, nil) // the same page scanned again: replaces
	u.add(40, 0, page("new", 2), 0, nil)
	c.Cursor = 40
	c, _ = u.apply(c, "", now)
	require.Equal(t, []pipeline.UnregisteredCount{{Instance: "gone", Keys: 4, Locations: 8, Bytes: 400}}, c.UnregisteredRound)
	c, _ = u.apply(c, "", now) // a waiting save of the same cursor adds nothing
	require.Equal(t, int64(4), c.UnregisteredRound[0].Keys)

	// A walk resumed elsewhere: a new tally, the checkpoint's running count goes on.
	var v unregTally
	v.add(40, 0, page("new", 2), 0, nil)
	v.add(40, 0, page("new", 2), 0, nil)
	c.Cursor, c.Walked = 0, true
	c, _ = v.apply(c, "", now)
	require.Len(t, c.UnregisteredRound, 2)

	c.InRound = false
	c, ended = v.apply(c, saveRoundEnd, now)
	require.True(t, ended)
	require.Empty(t, c.UnregisteredRound)
	require.Equal(t, []pipeline.UnregisteredCount{
		{Instance: "gone", Keys: 4, Locations: 8, Bytes: 400, FirstSeenUs: 5},
		{Instance: "new", Keys: 2, Locations: 4, Bytes: 200, FirstSeenUs: now.UnixMicro()},
	}, c.Unregistered, "largest first; a first sight kept; one no longer seen dropped")

	// At most maxUnregistered instances, the rest counted.
	var round []pipeline.UnregisteredCount
	for i := range maxUnregistered + 5 {
		round = append(round, pipeline.UnregisteredCount{Instance: fmt.Sprintf("i%04d", i), Keys: int64(i + 1)})
	}
	out, truncated := finishUnregistered(round, nil, now)
	require.Len(t, out, maxUnregistered)
	require.Equal(t, 5, truncated)
	require.Equal(t, int64(maxUnregistered+5), out[0].Keys)
	require.Equal(t, ^uint64(0), satAdd(^uint64(0)-1, 5))
}

// TestUnregDecision: an unregistered instance's keys go only when kvcm-gc saw it registered,
// it has been absent for the grace, the last round counted it, and the registry read for the
// page is whole and still lists its group and another instance of the store, under the cap.
// Each condition alone refuses.
func TestUnregDecision(t *testing.T) {
	now := time.UnixMicro(1_800_000_000_000_000)
	cfg := Config{CollectUnregistered: true, UnregisteredGrace: 7 * 24 * time.Hour, UnregisteredMaxKeys: 100}
	const store = "10.0.0.1:6379"
	ck := func() pipeline.Checkpoint {
		return pipeline.Checkpoint{Round: 9,
			Seen:         map[string]pipeline.SeenInstance{"gone": {Group: "g1", LastRegisteredUs: now.Add(-8 * 24 * time.Hour).UnixMicro()}},
			Unregistered: []pipeline.UnregisteredCount{{Instance: "gone", Keys: 5, FirstSeenUs: now.Add(-7 * 24 * time.Hour).UnixMicro()}}}
	}
	view := func() pipeline.RegView {
		return pipeline.RegView{At: now, Known: map[string]bool{"live": true}, Groups: map[string]bool{"g1": true},
			Instance: map[string]meta.Instance{"live": {ID: "live", Group: "g1", Store: store}}}
	}
	require.Empty(t, unregDecision("gone", store, ck(), view(), cfg, now), "every condition holds")

	for _, tc := range []struct {
		name  string
		want  string
		edit  func(c *pipeline.Checkpoint, v *pipeline.RegView)
		clock time.Duration
	}{
		{"first sight: never listed", pipeline.UnregNeverRegistered, func(c *pipeline.Checkpoint, _ *pipeline.RegView) { c.Seen = nil }, 0},
		{"listed a moment ago", pipeline.UnregWithinGrace, func(c *pipeline.Checkpoint, _ *pipeline.RegView) {
			c.Seen["gone"] = pipeline.SeenInstance{Group: "g1", LastRegisteredUs: now.Add(-time.Hour).UnixMicro()}
		}, 0},
		{"just under the grace", pipeline.UnregWithinGrace, nil, -24*time.Hour - time.Microsecond},
		{"no completed round counted it", pipeline.UnregNotCounted, func(c *pipeline.Checkpoint, _ *pipeline.RegView) { c.Unregistered = nil }, 0},
		{"registry read failed", pipeline.UnregRegistryUnread, func(_ *pipeline.Checkpoint, v *pipeline.RegView) {
			*v = pipeline.RegView{Err: pipeline.ErrRegistryBackoff}
		}, 0},
		{"registry read partial", pipeline.UnregRegistryPartial, func(_ *pipeline.Checkpoint, v *pipeline.RegView) { v.Partial = true }, 0},
		{"registered again", pipeline.UnregRegistered, func(_ *pipeline.Checkpoint, v *pipeline.RegView) { v.Known["gone"] = true }, 0},
		{"its group is gone", pipeline.UnregGroupAbsent, func(_ *pipeline.Checkpoint, v *pipeline.RegView) { v.Groups = map[string]bool{"g2": true} }, 0},
		{"no instance of the store listed", pipeline.UnregStoreEmpty, func(_ *pipeline.Checkpoint, v *pipeline.RegView) {
			v.Instance = map[string]meta.Instance{"other": {ID: "other", Group: "g1", Store: "10.0.0.2:6379"}}
		}, 0},
		{"the round's cap reached", pipeline.UnregCap, func(c *pipeline.Checkpoint, _ *pipeline.RegView) { c.UnregisteredCollected = 100 }, 0},
	} {
		c, v := ck(), view()
		if tc.edit != nil {
			tc.edit(&c, &v)
		}
		require.Equal(t, tc.want, unregDecision("gone", store, c, v, cfg, now.Add(tc.clock)), tc.name)
	}
}

// TestUnregTargets: every location of an unregistered instance's blocks becomes a target with
// its exact bytes, in either layout; an ambiguous key, a tombstone, a block that does not
// decode and an absent key give none; the cap keeps whole blocks.
func TestUnregTargets(t *testing.T) {
	loc := func(id string) []byte {
		return []byte(`{"id":"` + id + `","status":3,"type":4,"spec_size":1,"create_time":1,"location_specs":[{"name":"tp0","uri":"file://nfs_01/r/` + id + `?size=10"}]}`)
	}
	reads := []meta.BlockRead{
		{Exists: true, Entry: meta.Entry{BlockKey: 1, Layout: kvcm.LayoutLocation,
			Locations: []meta.Field{{ID: "kvs#event_report_l1p5#hbm#10.0.0.8:9000", Value: loc("a")}, {ID: "t", Value: nil}}}},
		{Exists: true, Entry: meta.Entry{BlockKey: 2, Layout: kvcm.LayoutLegacy,
			URI: []byte(`{"x":` + string(loc("x")) + `,"y":` + string(loc("y")) + `}`)}},
		{Exists: true, Entry: meta.Entry{BlockKey: 3, Layout: kvcm.LayoutAmbiguous, URI: []byte(`{}`),
			Locations: []meta.Field{{ID: "b", Value: loc("b")}}}},
		{Exists: true, Entry: meta.Entry{BlockKey: 4, Layout: kvcm.LayoutLegacy, URI: []byte(`{not json`)}},
		{Exists: true, Entry: meta.Entry{BlockKey: 5, Layout: kvcm.LayoutLocation, Locations: []meta.Field{{ID: "c", Value: []byte("{bad")}}}},
		{Exists: false, Entry: meta.Entry{BlockKey: 6}},
	}
	ts, keys := unregTargets(reads)
	require.Equal(t, 2, keys)
	require.Len(t, ts, 3)
	require.Equal(t, subjects.Target{Key: 1, Location: "kvs#event_report_l1p5#hbm#10.0.0.8:9000", Layout: subjects.LayoutLocation,
		Reason: subjects.ReasonUnregisteredInstance, Expected: subjects.RawText(loc("a"))}, ts[0])
	require.Equal(t, int64(2), ts[1].Key)
	require.Equal(t, subjects.LayoutLegacy, ts[1].Layout)
	require.Equal(t, string(loc("x")), string(ts[1].Expected))
	capped, n := capTargets(ts, 1)
	require.Equal(t, 1, n)
	require.Len(t, capped, 1)
	capped, n = capTargets(ts, 2)
	require.Equal(t, 2, n)
	require.Len(t, capped, 3)
}
