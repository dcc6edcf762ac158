package prober

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// memObserver is a DeletingObserver in memory.
type memObserver struct {
	m   map[string]Observation
	err error
}

func (o *memObserver) Observe(_ context.Context, inst string, key int64, id string, raw []byte, first Observation) (Observation, error) {
	if o.err != nil {
		return Observation{}, o.err
	}
	k := observationKey(inst, key, id, raw)
	if got, ok := o.m[k]; ok {
		return got, nil
	}
	o.m[k] = first
	return first, nil
}

func deletingRules(obs DeletingObserver, delays map[string]time.Duration) Rules {
	cfg := DefaultConfig()
	cfg.CollectDeleting = true
	return Rules{Config: cfg, Storages: fakeSet{}, Guard: guard.None{}, Observer: obs,
		GroupDelay: func(g string) (time.Duration, bool) { d, ok := delays[g]; return d, ok }}
}

func targetsOf(v Verdict) []string {
	var out []string
	for _, t := range v.Targets {
		out = append(out, fmt.Sprintf("%d/%s/%s", t.Key, t.Location, t.Reason))
	}
	return out
}

// Rule 3, legacy layout: __lru_time__ is a lower bound of the time DELETING.
func TestJudgeStuckDeletingLegacy(t *testing.T) {
	rules := deletingRules(nil, map[string]time.Duration{"g": time.Second, "slow": 23*time.Hour + time.Minute})
	old, young := us(judgeNow.Add(-25*time.Hour)), us(judgeNow.Add(-23*time.Hour))
	batch := func(group, lru string) subjects.Batch {
		return subjects.Batch{Instance: "i", Group: group, Round: 5, Blocks: []subjects.BlockEntry{{Key: 1, LRUTime: lru, URI: block(loc("d", 4, 4, ""))}}}
	}
	v := rules.Judge(context.Background(), batch("g", old), judgeNow)
	require.Equal(t, []string{"1/d/stuck_deleting"}, targetsOf(v))
	require.Equal(t, 1, v.Candidates[subjects.ReasonStuckDeleting])

	require.Empty(t, rules.Judge(context.Background(), batch("g", young), judgeNow).Targets, "young DELETING kept")
	v = rules.Judge(context.Background(), batch("g", "junk"), judgeNow)
	require.Empty(t, v.Targets)
	require.Equal(t, 1, v.Skips[SkipAgeUnknown])
	v = rules.Judge(context.Background(), batch("slow", old), judgeNow)
	require.Empty(t, v.Targets, "a group whose read lease + 1h exceeds the grace is skipped")
	require.Equal(t, 1, v.Skips[SkipDeletingLease])
	v = rules.Judge(context.Background(), batch("nosuch", old), judgeNow)
	require.Empty(t, v.Targets)
	require.Equal(t, 1, v.Skips[SkipDeletingGroup])

	off := rules
	off.Config.CollectDeleting = false
	require.Empty(t, off.Judge(context.Background(), batch("g", old), judgeNow).Targets, "off unless collect_deleting")
}

// Rule 3, location layout: nothing in Redis says when the status changed; the prober's own
// first sight does, and a first sight never nominates in the same round.
func TestJudgeStuckDeletingLocation(t *testing.T) {
	obs := &memObserver{m: map[string]Observation{}}
	rules := deletingRules(obs, map[string]time.Duration{"g": 0})
	d := lf("d", 4, 4, ct(-72*time.Hour)) // create_time is the write's start: not the DELETING time
	batch := func(round uint64, locs ...string) subjects.Batch {
		return subjects.Batch{Instance: "i", Group: "g", Round: round, Blocks: []subjects.BlockEntry{locBlock(1, locs...)}}
	}
	v := rules.Judge(context.Background(), batch(3, d), judgeNow)
	require.Empty(t, v.Targets, "never on first sight")
	require.Equal(t, 1, v.Skips[SkipDeletingFirstSeen])
	// The same round again (a redelivery, a second page), even much later: still the first round.
	require.Empty(t, rules.Judge(context.Background(), batch(3, d), judgeNow.Add(48*time.Hour)).Targets)
	// A later round within the grace: kept; past it: a candidate.
	require.Empty(t, rules.Judge(context.Background(), batch(4, d), judgeNow.Add(23*time.Hour)).Targets)
	v = rules.Judge(context.Background(), batch(4, d), judgeNow.Add(24*time.Hour))
	require.Equal(t, []string{"1/d/stuck_deleting"}, targetsOf(v))
	require.Equal(t, subjects.LayoutLocation, v.Targets[0].Layout)

	// Other bytes are another location for the clock: first sight again.
	d2 := lf("d", 4, 4, ct(-71*time.Hour))
	require.Empty(t, rules.Judge(context.Background(), batch(5, d2), judgeNow.Add(30*time.Hour)).Targets)

	// An observation that cannot be recorded keeps it, and says so.
	obs.err = errors.New("nats: timeout")
	v = rules.Judge(context.Background(), batch(9, d), judgeNow.Add(99*time.Hour))
	require.Empty(t, v.Targets)
	require.Len(t, v.Notes, 1)
	require.Equal(t, SkipDeletingUnobserved, v.Notes[0].Reason)
}

func TestDeletingGraceValidated(t *testing.T) {
	c := DefaultConfig()
	c.DeletingGrace = 59 * time.Minute
	require.ErrorContains(t, c.Validate(), "deleting_grace")
}

// TestObserverOnJetStream: the KV bucket observer keeps the first sight; a second sight gets
// it back; other bytes are another key.
func TestObserverOnJetStream(t *testing.T) {
	ctx := context.Background()
	js, n := testenv.Topology(t, subjects.DefaultSettings())
	kv, err := js.KeyValue(ctx, n.ObservedBucket())
	require.NoError(t, err)
	o := KVObserver{KV: kv, TTL: time.Hour}
	first := Observation{FirstUs: 100, Round: 2, Instance: "a.b c", Key: -5, Location: "x"}
	got, err := o.Observe(ctx, "a.b c", -5, "x", []byte("v1"), first)
	require.NoError(t, err)
	require.Equal(t, first, got)
	got, err = o.Observe(ctx, "a.b c", -5, "x", []byte("v1"), Observation{FirstUs: 999, Round: 7})
	require.NoError(t, err)
	require.Equal(t, first, got)
	got, err = o.Observe(ctx, "a.b c", -5, "x", []byte("v2"), Observation{FirstUs: 999, Round: 7})
	require.NoError(t, err)
	require.Equal(t, uint64(7), got.Round)

	// Backdate: a first sight before round 1, once only; the prober then keeps it.
	require.NoError(t, o.Backdate(ctx, "i", 3, "y", []byte("v1"), 50))
	got, err = o.Observe(ctx, "i", 3, "y", []byte("v1"), Observation{FirstUs: 999, Round: 1})
	require.NoError(t, err)
	require.Equal(t, Observation{FirstUs: 50, Instance: "i", Key: 3, Location: "y"}, got)
	require.ErrorContains(t, o.Backdate(ctx, "i", 3, "y", []byte("v1"), 60), "recorded already")
}
