package deleter

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

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
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i", targets)
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
	res, err = NewProtocol(DefaultConfig()).DeleteAll(context.Background(), spy, f.set, "i", []subjects.Target{t11, t12})
	require.NoError(t, err)
	require.Equal(t, []string{subjects.OutcomeNoopGone, subjects.OutcomeNoopMismatch}, outcomes(res))
	require.FileExists(t, perBlock)
	require.Equal(t, map[string]string{"L#d": serving}, f.get(12))

	// A stuck target whose judged bytes are not DELETING is refused.
	bad := stuck(t, lloc("d", kvcm.StatusWriting, perBlock))
	bad.Key = 12
	res, err = NewProtocol(DefaultConfig()).DeleteAll(context.Background(), f.store, f.set, "i", []subjects.Target{bad})
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
	res, err := NewProtocol(DefaultConfig()).DeleteAll(context.Background(), f.store, f.set, "i", []subjects.Target{tg})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeWouldDelete, res[0].Outcome, res[0].Detail)
	require.FileExists(t, p)
	require.Equal(t, map[string]string{"L#d": d}, f.get(7))
}
