package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
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
	cfg := DefaultProberConfig()
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
	c := DefaultProberConfig()
	c.DeletingGrace = 59 * time.Minute
	require.ErrorContains(t, c.Validate(), "deleting_grace")
}

// TestObserverOnJetStream: the KV bucket observer keeps the first sight; a second sight gets
// it back; other bytes are another key.
func TestObserverOnJetStream(t *testing.T) {
	ctx := context.Background()
	js, n := topology(t, subjects.DefaultSettings())
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

// The deleter: a stuck DELETING needs no CAS; its data goes only for per-block file names,
// elsewhere only the metadata, and a DELETING that KVCM finishes or flips meanwhile is a no-op.
func TestDeleteStuckDeleting(t *testing.T) {
	f := newDeleterFixture(t, false)
	// KVCM's per-block name: <root><instance>/<spec>/<hex block key>.
	require.NoError(t, osMkdirAll(f.root+"i/tp0"))
	perBlock := f.root + "i/tp0/" + fmt.Sprintf("%x", uint64(7))
	require.NoError(t, osWrite(perBlock))
	other := f.file("odd-name")
	shared := f.file("shared-file")
	stuck := func(_ *testing.T, loc string) subjects.Target {
		tg := ltarget(0, "d", loc)
		tg.Reason = subjects.ReasonStuckDeleting
		return tg
	}
	dPer := lloc("d", kvcm.StatusDeleting, perBlock)
	dOdd := lloc("d", kvcm.StatusDeleting, other)
	dShared := fmt.Sprintf(`{"id":"d","status":4,"type":4,"spec_size":1,"create_time":1,"location_specs":[{"name":"tp0","uri":"file://nfs%s?blkid=2&size=1"}]}`, shared)
	dMoon := `{"id":"d","status":4,"type":2,"spec_size":1,"create_time":1,"location_specs":[{"name":"tp0","uri":"mooncake://mc/?key=i/tp0/7&size=1"}]}`
	f.hset(7, "L#d", dPer, "BP#prev_key", "")
	f.hset(8, "L#d", dOdd)
	f.hset(9, "L#d", dShared)
	f.hset(10, "L#d", dMoon)
	var targets []subjects.Target
	for k, l := range map[int64]string{7: dPer, 8: dOdd, 9: dShared, 10: dMoon} {
		tg := stuck(t, l)
		tg.Key = k
		targets = append(targets, tg)
	}
	spy := &spyStore{Store: f.store}
	res, err := NewProtocol(DefaultDeleterConfig()).DeleteAll(context.Background(), spy, f.set, "i", targets)
	require.NoError(t, err)
	byKey := map[int64]TargetResult{}
	for _, r := range res {
		byKey[r.Target.Key] = r
		require.Equal(t, subjects.OutcomeDeleted, r.Outcome, "%d: %s", r.Target.Key, r.Detail)
		require.False(t, r.Resumed)
	}
	require.NotContains(t, spy.calls, "cas:4", "no CAS: the bytes are DELETING already")
	require.NoFileExists(t, perBlock, "a per-block file name cannot have been reused")
	require.Empty(t, byKey[7].PhysicalSkips)
	require.FileExists(t, other)
	require.Equal(t, map[string]int{PhysSkipNotPerBlock: 1}, byKey[8].PhysicalSkips)
	require.FileExists(t, shared)
	require.Equal(t, map[string]int{PhysSkipShared: 1}, byKey[9].PhysicalSkips)
	require.Equal(t, map[string]int{PhysSkipReusable: 1}, byKey[10].PhysicalSkips)
	require.Equal(t, "mooncake", byKey[10].StorageType)
	require.Equal(t, map[string]string{"BP#prev_key": ""}, f.get(7))
	for _, k := range []int64{8, 9, 10} {
		require.Equal(t, map[string]string{"BP#prev_key": ""}, f.get(k), "metadata removed either way")
	}

	// KVCM's executor finishes meanwhile (the field is gone), or KVCM's FinishWrite flips it
	// to SERVING: no-ops, data untouched.
	require.NoError(t, osWrite(perBlock))
	f.hset(11, "L#d", dPer)
	f.hset(12, "L#d", dPer)
	serving := lloc("d", kvcm.StatusServing, perBlock)
	spy = &spyStore{Store: f.store, afterGet: func(n int) {
		if n == 1 {
			require.NoError(t, f.r.Client().HDel(context.Background(), kvcm.BlockKey("i", 11), "L#d").Err())
			f.hset(12, "L#d", serving)
		}
	}}
	t11, t12 := stuck(t, dPer), stuck(t, dPer)
	t11.Key, t12.Key = 11, 12
	// The first read sees both; the mark-free path goes straight to the re-read, which sees
	// the changes.
	res, err = NewProtocol(DefaultDeleterConfig()).DeleteAll(context.Background(), spy, f.set, "i", []subjects.Target{t11, t12})
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeNoopGone, subjects.OutcomeNoopMismatch}, outcomes(res))
	require.FileExists(t, perBlock)
	require.Equal(t, map[string]string{"L#d": serving}, f.get(12))

	// A stuck target whose judged bytes are not DELETING is refused.
	bad := stuck(t, lloc("d", kvcm.StatusWriting, perBlock))
	bad.Key = 12
	res, err = NewProtocol(DefaultDeleterConfig()).DeleteAll(context.Background(), f.store, f.set, "i", []subjects.Target{bad})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeNoopMismatch, res[0].Outcome)
}

// A dry-run stuck DELETING writes nothing and unlinks nothing.
func TestDeleteStuckDeletingDryRun(t *testing.T) {
	f := newDeleterFixture(t, true)
	require.NoError(t, osMkdirAll(f.root+"i/tp0"))
	p := f.root + "i/tp0/7"
	require.NoError(t, osWrite(p))
	d := lloc("d", kvcm.StatusDeleting, p)
	f.hset(7, "L#d", d)
	tg := ltarget(7, "d", d)
	tg.Reason = subjects.ReasonStuckDeleting
	res, err := NewProtocol(DefaultDeleterConfig()).DeleteAll(context.Background(), f.store, f.set, "i", []subjects.Target{tg})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeWouldDelete, res[0].Outcome, res[0].Detail)
	require.FileExists(t, p)
	require.Equal(t, map[string]string{"L#d": d}, f.get(7))
}
