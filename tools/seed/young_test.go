package seed

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// ripeAfter returns how long after Now the young WRITING location l, live at Now, is ripe:
// past the grace (with kvcm_gc on, a location of the location layout past it is KVCM's own
// GC's until KVCMGCAge).
func (s seeded) ripeAfter(t *testing.T, l Loc, sp Spec) time.Duration {
	t.Helper()
	loc := s.decoded(t, l)
	var age time.Duration
	var ok bool
	if l.FieldName() == kvcm.FieldURI {
		age, ok = kvcm.LegacyAge(&loc, s.before[kvcm.BlockKey(l.Instance, l.Key)][kvcm.FieldLRUTime], testNow)
	} else {
		age, ok = kvcm.LocationAge(&loc, testNow)
	}
	require.True(t, ok, "%d/%s", l.Key, l.Location)
	ripe := sp.Grace
	if l.FieldName() != kvcm.FieldURI && !sp.NoKVCMGC && age >= sp.Grace {
		ripe = KVCMGCAge
	}
	require.Less(t, age, ripe, "%d/%s is live at Now", l.Key, l.Location)
	return ripe - age
}

// TestSpreadYoungRipensFewPerRound: with SpreadYoung, the young WRITING locations ripen
// spread over the grace, a few in each minute (a round of a soak), none in the first
// youngMargin; without it they all ripen in the same minute, an hour after Now.
func TestSpreadYoungRipensFewPerRound(t *testing.T) {
	const round = time.Minute
	for _, c := range []struct {
		name   string
		layout kvcm.Layout
		noGC   bool
	}{{"legacy", kvcm.LayoutLegacy, true}, {"location", kvcm.LayoutLocation, true}, {"location kvcm_gc", kvcm.LayoutLocation, false}} {
		t.Run(c.name, func(t *testing.T) {
			for _, spread := range []bool{false, true} {
				sp := Spec{Layout: c.layout, Blocks: 5000, GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 7, NoFiles: true,
					NoKVCMGC: c.noGC, Grace: 24 * time.Hour, SpreadYoung: spread}
				s := generate(t, sp)
				perRound := map[time.Duration]int{}
				young := 0
				for _, l := range s.m.Locations {
					if l.Kind != KindYoungWriting && l.Kind != KindRecentBlockWriting {
						continue
					}
					young++
					after := s.ripeAfter(t, l, sp)
					if spread {
						require.GreaterOrEqual(t, after, youngMargin, "%d/%s", l.Key, l.Location)
					}
					perRound[after.Truncate(round)]++
				}
				require.Greater(t, young, 150, "enough young writings to tell")
				most := slices.Max(slices.Collect(maps.Values(perRound)))
				if !spread {
					// Today's form: each an hour short of its ripe age.
					require.Equal(t, young, most, "all in one round")
					continue
				}
				// About young/1400 a round on average; a round of 10 would be a burst.
				require.LessOrEqual(t, most, 10, "young %d, rounds %d", young, len(perRound))
				require.Greater(t, len(perRound), young/2, "spread over many rounds")
			}
		})
	}
}
