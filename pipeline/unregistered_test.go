package pipeline

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnregisteredTally: a page's count joins the checkpoint that records it (a page scanned
// again replaces its count, never adds to it), the round's running count travels in the
// checkpoint, and the round's end keeps each instance's first sight.
func TestUnregisteredTally(t *testing.T) {
	now := time.UnixMicro(1_800_000_000_000_000)
	page := func(id string, keys int64) map[string]*UnregisteredCount {
		return map[string]*UnregisteredCount{id: {Instance: id, Keys: keys, Locations: 2 * keys, Bytes: uint64(100 * keys)}}
	}
	var u unregTally
	c := Checkpoint{Round: 3, InRound: true, Unregistered: []UnregisteredCount{{Instance: "old", Keys: 1, FirstSeenUs: 7}, {Instance: "gone", Keys: 9, FirstSeenUs: 5}}}
	c, ended := u.apply(c, saveRoundStart, now)
	require.False(t, ended)
	require.Empty(t, c.UnregisteredRound)

	u.add(0, 40, page("gone", 3))
	u.add(0, 40, page("gone", 4)) // the same page scanned again: replaces
	u.add(40, 0, page("new", 2))
	c.Cursor = 40
	c, _ = u.apply(c, "", now)
	require.Equal(t, []UnregisteredCount{{Instance: "gone", Keys: 4, Locations: 8, Bytes: 400}}, c.UnregisteredRound)
	c, _ = u.apply(c, "", now) // a waiting save of the same cursor adds nothing
	require.Equal(t, int64(4), c.UnregisteredRound[0].Keys)

	// A walk resumed elsewhere: a new tally, the checkpoint's running count goes on.
	var v unregTally
	v.add(40, 0, page("new", 2))
	v.add(40, 0, page("new", 2))
	c.Cursor, c.Walked = 0, true
	c, _ = v.apply(c, "", now)
	require.Len(t, c.UnregisteredRound, 2)

	c.InRound = false
	c, ended = v.apply(c, saveRoundEnd, now)
	require.True(t, ended)
	require.Empty(t, c.UnregisteredRound)
	require.Equal(t, []UnregisteredCount{
		{Instance: "gone", Keys: 4, Locations: 8, Bytes: 400, FirstSeenUs: 5},
		{Instance: "new", Keys: 2, Locations: 4, Bytes: 200, FirstSeenUs: now.UnixMicro()},
	}, c.Unregistered, "largest first; a first sight kept; one no longer seen dropped")

	// At most maxUnregistered instances, the rest counted.
	var round []UnregisteredCount
	for i := range maxUnregistered + 5 {
		round = append(round, UnregisteredCount{Instance: fmt.Sprintf("i%04d", i), Keys: int64(i + 1)})
	}
	out, truncated := finishUnregistered(round, nil, now)
	require.Len(t, out, maxUnregistered)
	require.Equal(t, 5, truncated)
	require.Equal(t, int64(maxUnregistered+5), out[0].Keys)
	require.Equal(t, ^uint64(0), satAdd(^uint64(0)-1, 5))
}
