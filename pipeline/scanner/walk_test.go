package scanner

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/sealed"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/steptest"
)

// Table tests of a store walk's state machine: no server, no clock. Each case builds a walk
// in some state, feeds it one event and checks the next state and the actions. The rows of
// the seed's §6 table that concern the scanner are marked "§6".

var (
	t0      = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	errBoom = errors.New("boom")
	insts   = map[string]meta.Instance{"i1": {ID: "i1", Group: "g", Store: "s1"}, "i2": {ID: "i2", Group: "g", Store: "s1"}}
)

func testCfg() walkConfig {
	return walkConfig{scanInterval: time.Millisecond, roundPause: time.Hour, batchSize: 10,
		failBudget: time.Minute, failedPause: 10 * time.Minute, backoff: testBackoff}
}

// testBackoff is a backoff without jitter: 1s, 2s, 4s, … up to 16s.
func testBackoff(attempt int) time.Duration { return min(time.Second<<(attempt-1), 16*time.Second) }

// failingWalk is walking() whose SCAN has failed at t0 and every backoff after it up to at
// (exclusive), at cursor 100; it returns the walk and the last failure's actions.
func failingWalk(at time.Time) (*walk, []action) {
	w := walking()
	now := t0
	var acts []action
	for now.Before(at) {
		acts = w.step(evPage{now: now, err: errBoom})
		now = now.Add(w.retryWait())
	}
	return w, acts
}

// loaded is a walk whose lease (revision 7) is held and whose checkpoint c (revision 3) is read.
func loaded(c pipeline.Checkpoint) *walk {
	w := newWalk(testCfg(), "s1")
	w.step(evTick{now: t0, leaseRev: 7})
	w.step(evCheckpoint{ckpt: c, rev: 3})
	return w
}

// walking is a walk in round 4 at cursor 100, its instances read, nothing pending.
func walking() *walk {
	w := loaded(pipeline.Checkpoint{Round: 4, InRound: true, Cursor: 100, KeysScanned: 50, RoundStartedUs: t0.Add(-time.Minute).UnixMicro()})
	w.step(evSnapshot{now: t0, instances: insts})
	return w
}

func page(next uint64, keys ...int64) meta.Page {
	p := meta.Page{Next: next}
	for _, k := range keys {
		p.Entries = append(p.Entries, meta.Entry{Key: fmt.Sprint(k), Instance: "i1", BlockKey: k, Layout: kvcm.LayoutLegacy, URI: []byte(`{}`)})
	}
	return p
}

// pendingWalk has published the page at 100 (next 200) with the record still running.
func pendingWalk() *walk {
	w := walking()
	w.step(evPage{now: t0, page: page(200, 1, 2, 3)})
	return w
}

// cappedWalk walks at max_keys_per_second 100: it has published a page of 5 keys read at t0
// (the round's first, so it waits its whole period, 50ms), and the page is recorded.
func cappedWalk() *walk {
	w := walking()
	w.cfg.maxKeysPerSecond = 100
	acts := w.step(evPage{now: t0, page: page(200, 1, 2, 3, 4, 5)})
	for _, a := range acts {
		if p, ok := a.(actPublish); ok {
			w.step(evRecorded{ckpt: p.next, rev: 12})
		}
	}
	return w
}

// lastWait is the wait a step asks for (the last one wins).
func lastWait(t *testing.T, acts []action) time.Duration {
	t.Helper()
	return steptest.Last[actWait](t, acts).d
}

// noSpin: an error or a hold waits at least IdleWait (invariant 7; §6: every error path
// passes scan_interval or the cooldown).
func noSpin(t *testing.T, acts []action) {
	t.Helper()
	require.GreaterOrEqual(t, lastWait(t, acts), pipeline.IdleWait)
}

func TestWalkStep(t *testing.T) {
	tests := []struct {
		name  string
		walk  func() *walk
		ev    event
		check func(t *testing.T, w *walk, acts []action)
	}{
		{"lease taken: read the checkpoint", func() *walk { return newWalk(testCfg(), "s1") }, evTick{now: t0, leaseRev: 7},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actReadCheckpoint{}}, acts)
				require.Equal(t, pipeline.PhaseLoad, w.phase)
			}},
		{"checkpoint unreadable: retried after a wait", func() *walk {
			w := newWalk(testCfg(), "s1")
			w.step(evTick{now: t0, leaseRev: 7})
			return w
		}, evCheckpoint{err: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, pipeline.PhaseLoad, w.phase)
				require.Equal(t, "checkpoint", steptest.Only[actOpError](t, acts).op)
				noSpin(t, acts)
			}},
		{"checkpoint read: the read position is the checkpoint's", func() *walk {
			w := newWalk(testCfg(), "s1")
			w.step(evTick{now: t0, leaseRev: 7})
			return w
		}, evCheckpoint{ckpt: pipeline.Checkpoint{Round: 2, InRound: true, Cursor: 40}, rev: 9},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, pipeline.PhaseReady, w.phase)
				require.Equal(t, uint64(40), w.cursor)
				require.Equal(t, uint64(9), w.rev)
				require.Nil(t, w.instances, "the registry is read again before walking on")
			}},
		{"resumed round: the registry is read first (no cursor reset)", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, InRound: true, Cursor: 40})
		}, evTick{now: t0, leaseRev: 7},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actSnapshot{start: false}}, acts)
			}},
		{"resumed round, registry read: walk on from the cursor", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, InRound: true, Cursor: 40})
		}, evSnapshot{now: t0, instances: insts},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, insts, w.instances)
				require.Equal(t, uint64(40), w.cursor)
				steptest.None[actSave](t, acts)
				acts = w.step(evTick{now: t0, leaseRev: 7})
				require.Equal(t, actScan{cursor: 40, count: 10, instances: insts}, steptest.Only[actScan](t, acts))
			}},
		{"§6 registry snapshot fails at a round's start: no round, retried after the backoff", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, NextRoundUs: t0.Add(-time.Second).UnixMicro()})
		}, evSnapshot{now: t0, start: true, err: errBoom, retryAt: t0.Add(3 * time.Second)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, uint64(2), w.ckpt.Round, "no round started")
				require.False(t, w.ckpt.InRound)
				require.Equal(t, 3*time.Second, lastWait(t, acts))
				require.Equal(t, pipeline.WaitRegistryBackoff, w.waiting)
				require.Equal(t, pipeline.WaitRegistryBackoff, steptest.Only[actSave](t, acts).ckpt.Waiting, "status shows it")
			}},
		{"§6 registry snapshot fails mid-round: cursor kept", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, InRound: true, Cursor: 40})
		}, evSnapshot{now: t0, err: errBoom, retryAt: t0.Add(time.Millisecond)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, uint64(40), w.cursor)
				require.Nil(t, w.instances)
				noSpin(t, acts)
			}},
		{"§6 instance gone from the registry: a store without instances is handed back", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, InRound: true, Cursor: 40})
		}, evSnapshot{now: t0, instances: map[string]meta.Instance{}},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actRelease](t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
			}},
		{"between rounds, pause not over: wait for it", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, NextRoundUs: t0.Add(time.Minute).UnixMicro(), Waiting: pipeline.WaitRoundPause})
		}, evTick{now: t0, leaseRev: 7},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actWait{RoundStartPoll}}, acts, "nothing written: the checkpoint says it already; "+
					"woken within RoundStartPoll to look for a request to start now")
			}},
		{"between rounds, pause ending sooner than the poll: wait for its end", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, NextRoundUs: t0.Add(time.Second).UnixMicro(), Waiting: pipeline.WaitRoundPause})
		}, evTick{now: t0, leaseRev: 7},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actWait{time.Second}}, acts)
			}},
		{"round start requested after the last round ended: the next round starts now", func() *walk {
			return loaded(pipeline.Checkpoint{Store: "s1", Round: 2, LastRoundEndUs: t0.Add(-time.Hour).UnixMicro(),
				NextRoundUs: t0.Add(23 * time.Hour).UnixMicro(), Waiting: pipeline.WaitRoundPause})
		}, evTick{now: t0, leaseRev: 7, roundStart: pipeline.RoundStartRecord{Stores: map[string]int64{"s1": t0.Add(-time.Minute).UnixMicro()}}},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actSnapshot{start: true}}, acts)
			}},
		{"round start requested for every store: this one too", func() *walk {
			return loaded(pipeline.Checkpoint{Store: "s1", Round: 2, LastRoundEndUs: t0.Add(-time.Hour).UnixMicro(),
				NextRoundUs: t0.Add(23 * time.Hour).UnixMicro(), Waiting: pipeline.WaitRoundPause})
		}, evTick{now: t0, leaseRev: 7, roundStart: pipeline.RoundStartRecord{AllUs: t0.Add(-time.Minute).UnixMicro()}},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actSnapshot{start: true}}, acts)
			}},
		{"round start requested before the last round ended: spent, the pause holds", func() *walk {
			return loaded(pipeline.Checkpoint{Store: "s1", Round: 3, LastRoundEndUs: t0.Add(-time.Minute).UnixMicro(),
				NextRoundUs: t0.Add(23 * time.Hour).UnixMicro(), Waiting: pipeline.WaitRoundPause})
		}, evTick{now: t0, leaseRev: 7, roundStart: pipeline.RoundStartRecord{AllUs: t0.Add(-time.Hour).UnixMicro(),
			Stores: map[string]int64{"s1": t0.Add(-2 * time.Hour).UnixMicro()}}},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actWait{RoundStartPoll}}, acts)
			}},
		{"round start requested for another store: the pause holds", func() *walk {
			return loaded(pipeline.Checkpoint{Store: "s1", Round: 2, LastRoundEndUs: t0.Add(-time.Hour).UnixMicro(),
				NextRoundUs: t0.Add(23 * time.Hour).UnixMicro(), Waiting: pipeline.WaitRoundPause})
		}, evTick{now: t0, leaseRev: 7, roundStart: pipeline.RoundStartRecord{Stores: map[string]int64{"s2": t0.UnixMicro()}}},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actWait{RoundStartPoll}}, acts)
			}},
		{"round start requested while paused: the pause wins", func() *walk {
			return loaded(pipeline.Checkpoint{Store: "s1", Round: 2, LastRoundEndUs: t0.Add(-time.Hour).UnixMicro(),
				NextRoundUs: t0.Add(23 * time.Hour).UnixMicro(), Waiting: pipeline.WaitRoundPause})
		}, evTick{now: t0, leaseRev: 7, pausedUntil: t0.Add(time.Hour), roundStart: pipeline.RoundStartRecord{AllUs: t0.UnixMicro()}},
			func(t *testing.T, w *walk, acts []action) {
				require.NotContains(t, acts, action(actSnapshot{start: true}))
			}},
		{"round pause over: a round starts with a registry snapshot", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, NextRoundUs: t0.UnixMicro()})
		}, evTick{now: t0, leaseRev: 7},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actSnapshot{start: true}}, acts)
			}},
		{"round start: round+1 from cursor 0, DBSIZE kept", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, KeysScanned: 99, Layouts: map[string]uint64{LayoutLegacy: 99}})
		}, evSnapshot{now: t0, start: true, instances: insts, size: 5000},
			func(t *testing.T, w *walk, acts []action) {
				s := steptest.Only[actSave](t, acts)
				require.Equal(t, saveRoundStart, s.why)
				require.Equal(t, uint64(3), s.ckpt.Round)
				require.True(t, s.ckpt.InRound)
				require.Zero(t, s.ckpt.Cursor)
				require.Zero(t, s.ckpt.KeysScanned)
				require.Nil(t, s.ckpt.Layouts)
				require.Equal(t, int64(5000), s.ckpt.DBSize)
				require.Equal(t, 2, s.ckpt.Instances)
				require.Equal(t, uint64(3), s.rev, "by the revision read")
				require.Equal(t, uint64(2), w.ckpt.Round, "not before it is written")
			}},
		{"round start written: the walk begins, a round event names its checkpoint", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2})
		}, evSaved{now: t0, why: saveRoundStart, ckpt: pipeline.Checkpoint{Round: 3, InRound: true}, rev: 11, instances: insts},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, uint64(3), w.ckpt.Round)
				require.Equal(t, uint64(11), w.rev)
				require.Equal(t, insts, w.instances)
				ev := steptest.Only[actEvent](t, acts)
				require.Equal(t, "start", ev.ev.Outcome)
				require.Equal(t, uint64(11), ev.ckptRev)
			}},
		{"walking: one SCAN page at the cursor", walking, evTick{now: t0, leaseRev: 7},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actScan{cursor: 100, count: 10, instances: insts}}, acts)
			}},
		{"page read: published with the lease revision, the checkpoint moved past it", walking,
			evPage{now: t0, page: page(200, 1, 2, 3)},
			func(t *testing.T, w *walk, acts []action) {
				p := steptest.Only[actPublish](t, acts)
				require.Equal(t, uint64(100), p.cursor)
				require.Equal(t, uint64(7), p.leaseRev)
				require.Equal(t, uint64(4), p.round)
				require.Equal(t, uint64(200), p.next.Cursor)
				require.Equal(t, uint64(53), p.next.KeysScanned)
				require.Equal(t, uint64(3), p.next.Layouts[LayoutLegacy])
				require.Equal(t, uint64(3), p.rev)
				require.True(t, p.async, "scan_interval below 5ms: recorded while the next page is read")
				require.Equal(t, time.Millisecond, lastWait(t, acts))
				require.Equal(t, uint64(200), w.cursor, "the read position runs ahead")
				require.Equal(t, uint64(100), w.ckpt.Cursor, "the checkpoint does not, yet")
				require.NotNil(t, w.pending)
			}},
		{"slow pace: each page recorded at once", func() *walk {
			w := walking()
			w.cfg.scanInterval = 50 * time.Millisecond
			return w
		}, evPage{now: t0, page: page(200, 1)},
			func(t *testing.T, w *walk, acts []action) {
				require.False(t, steptest.Only[actPublish](t, acts).async)
			}},
		{"max_keys_per_second paces the next page by the keys returned", func() *walk {
			w := walking()
			w.cfg.maxKeysPerSecond = 100
			return w
		}, evPage{now: t0, page: page(200, 1, 2, 3, 4, 5)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, 50*time.Millisecond, lastWait(t, acts), "the first page: nothing to take out")
			}},
		{"max_keys_per_second: the first page of a round waits its whole period", func() *walk {
			w := cappedWalk()
			w.step(evSaved{now: t0.Add(time.Second), why: saveRoundStart, ckpt: pipeline.Checkpoint{Round: 5, InRound: true}, rev: 12, instances: insts})
			return w
		}, evPage{now: t0.Add(2 * time.Second), page: page(300, 1, 2, 3, 4, 5)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, 50*time.Millisecond, lastWait(t, acts), "the last round's page is not this one's")
			}},
		{"max_keys_per_second: a read shorter than the period is taken out of the wait", cappedWalk,
			evPage{now: t0.Add(50*time.Millisecond + 10*time.Millisecond), page: page(300, 1, 2, 3, 4, 5)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, 40*time.Millisecond, lastWait(t, acts), "pages 50ms apart: 5 keys at 100 keys/s")
			}},
		{"max_keys_per_second: a read longer than the period leaves scan_interval's wait", cappedWalk,
			evPage{now: t0.Add(50*time.Millisecond + 80*time.Millisecond), page: page(300, 1, 2, 3, 4, 5)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, time.Millisecond, lastWait(t, acts), "no debt: 80ms late is not caught up")
				w.step(evRecorded{ckpt: steptest.Only[actPublish](t, acts).next, rev: 13})
				acts = w.step(evPage{now: t0.Add(131*time.Millisecond + 10*time.Millisecond), page: page(400, 1, 2, 3, 4, 5)})
				require.Equal(t, 40*time.Millisecond, lastWait(t, acts), "the next page's period is whole again")
			}},
		{"max_keys_per_second: the wait is never below scan_interval", func() *walk {
			w := cappedWalk()
			w.cfg.scanInterval = 20 * time.Millisecond
			return w
		}, evPage{now: t0.Add(50*time.Millisecond + 40*time.Millisecond), page: page(300, 1, 2, 3, 4, 5)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, 20*time.Millisecond, lastWait(t, acts), "50ms less 40ms read, raised to scan_interval")
			}},
		{"next page read while the last is recorded: held until it is", pendingWalk,
			evPage{now: t0, page: page(300, 4)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actAwait{}}, acts, "never publish past an unrecorded page")
				require.NotNil(t, w.held)
			}},
		{"recorded: the held page is published from the new checkpoint", func() *walk {
			w := pendingWalk()
			w.step(evPage{now: t0, page: page(300, 4)})
			return w
		}, evRecorded{ckpt: pipeline.Checkpoint{Round: 4, InRound: true, Cursor: 200, KeysScanned: 53}, rev: 12},
			func(t *testing.T, w *walk, acts []action) {
				p := steptest.Only[actPublish](t, acts)
				require.Equal(t, uint64(200), p.cursor)
				require.Equal(t, uint64(300), p.next.Cursor)
				require.Equal(t, uint64(54), p.next.KeysScanned)
				require.Equal(t, uint64(12), p.rev)
				require.Nil(t, w.held)
			}},
		{"§6 scan fails: no cursor advance, retried after a wait", walking, evPage{now: t0, err: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, uint64(100), w.cursor)
				require.Equal(t, "scan", steptest.Only[actOpError](t, acts).op)
				steptest.None[actPublish](t, acts)
				noSpin(t, acts)
				require.Equal(t, pipeline.WaitError, w.waiting)
			}},
		{"§6 scan fails with a page pending: it is recorded, the cursor stays after it", pendingWalk, evPage{now: t0, err: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actAwait](t, acts)
				noSpin(t, acts)
				require.Equal(t, uint64(200), w.cursor)
			}},
		{"§6 store cannot be opened: its instances skipped, the round ends failed", walking,
			evPage{now: t0, err: errBoom, unavailable: true},
			func(t *testing.T, w *walk, acts []action) {
				evs := steptest.OfType[actEvent](acts)
				require.Len(t, evs, 2)
				for _, e := range evs {
					require.Equal(t, "store_unavailable", e.ev.Reason)
				}
				sv := steptest.Only[actSave](t, acts)
				require.Equal(t, saveFailed, sv.why, "a round that read nothing is no completed round")
				require.Equal(t, pipeline.RoundFailedUnavailable, sv.ckpt.FailedRound.Reason)
				require.Zero(t, sv.ckpt.LastRoundEndUs)
			}},
		{"scan keeps failing: retried with the backoff until the budget is spent", func() *walk {
			w, _ := failingWalk(t0.Add(30 * time.Second))
			return w
		}, evPage{now: t0.Add(31 * time.Second), err: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				// 0, 1, 3, 7, 15 and 31 s: the sixth failure, 31 s into a 1 min budget.
				require.Equal(t, 6, w.failures)
				require.Equal(t, 16*time.Second, lastWait(t, acts), "the backoff, not scan_interval")
				for _, sv := range steptest.OfType[actSave](acts) {
					require.Equal(t, saveWaiting, sv.why, "the round goes on")
				}
				require.True(t, w.ckpt.InRound)
				require.Equal(t, uint64(100), w.cursor, "the cursor is kept while retrying")
			}},
		{"a page read resets the failures", func() *walk {
			w, _ := failingWalk(t0.Add(30 * time.Second))
			return w
		}, evPage{now: t0.Add(31 * time.Second), page: page(200, 1)},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actPublish](t, acts)
				require.Zero(t, w.failures)
				require.True(t, w.failingSince.IsZero())
			}},
		{"scan failing past the budget: the round ends failed, the next starts over after failed_round_pause",
			func() *walk {
				w, _ := failingWalk(t0.Add(time.Minute))
				return w
			}, evPage{now: t0.Add(61 * time.Second), err: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				sv := steptest.Only[actSave](t, acts)
				require.Equal(t, saveFailed, sv.why)
				c := sv.ckpt
				require.False(t, c.InRound)
				require.Zero(t, c.Cursor, "the next round starts from the keyspace's beginning")
				require.Zero(t, c.LastRoundEndUs, "no completed round")
				f := c.FailedRound
				require.Equal(t, pipeline.RoundFailure{Round: 4, Reason: pipeline.RoundFailedScan, Error: "boom",
					AtUs: t0.Add(61 * time.Second).UnixMicro(), FailingSinceUs: t0.UnixMicro(), Attempts: 8, Cursor: 100,
					KeysScanned: 50}, *f)
				require.Equal(t, t0.Add(61*time.Second+10*time.Minute).UnixMicro(), c.NextRoundUs)
				steptest.None[actRoundEnded](t, acts)

				acts = w.step(evSaved{now: t0.Add(61 * time.Second), why: saveFailed, ckpt: c, rev: 9})
				steptest.Only[actRoundFailed](t, acts)
				steptest.None[actRoundEnded](t, acts)
				ev := steptest.Only[actEvent](t, acts).ev
				require.Equal(t, "failed", ev.Outcome)
				require.Equal(t, pipeline.RoundFailedScan, ev.Reason)
				require.Zero(t, w.failures)

				// The pause, then a new round from cursor 0.
				acts = w.step(evTick{now: t0.Add(5 * time.Minute), leaseRev: 7})
				steptest.None[actSnapshot](t, acts)
				require.Equal(t, pipeline.WaitRoundPause, w.waiting)
				acts = w.step(evTick{now: t0.Add(12 * time.Minute), leaseRev: 7})
				require.True(t, steptest.Only[actSnapshot](t, acts).start)
				acts = w.step(evSnapshot{now: t0.Add(12 * time.Minute), start: true, instances: insts})
				sv = steptest.Only[actSave](t, acts)
				require.Equal(t, uint64(5), sv.ckpt.Round)
				require.Zero(t, sv.ckpt.Cursor)
				require.NotNil(t, sv.ckpt.FailedRound, "status shows the failure until a round completes")
				w.step(evSaved{now: t0.Add(12 * time.Minute), why: saveRoundStart, ckpt: sv.ckpt, rev: 10, instances: insts})
				require.Equal(t, uint64(0), steptest.Only[actScan](t, w.step(evTick{now: t0.Add(12 * time.Minute), leaseRev: 7})).cursor)
				w.step(evPage{now: t0.Add(12 * time.Minute), page: page(0, 1)})
				w.step(evRecorded{ckpt: pipeline.Checkpoint{Round: 5, InRound: true, Walked: true, FailedRound: sv.ckpt.FailedRound}, rev: 11})
				sv = steptest.Only[actSave](t, w.step(evTick{now: t0.Add(13 * time.Minute), leaseRev: 7}))
				require.Equal(t, saveRoundEnd, sv.why)
				require.Nil(t, sv.ckpt.FailedRound, "a completed round clears it")
			}},
		{"a failed round's pause is never longer than round_pause", func() *walk {
			w, _ := failingWalk(t0.Add(time.Minute))
			w.cfg.roundPause = time.Minute
			return w
		}, evPage{now: t0.Add(61 * time.Second), err: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, t0.Add(2*time.Minute+time.Second).UnixMicro(), steptest.Only[actSave](t, acts).ckpt.NextRoundUs)
			}},
		{"an operator's request made before the failure does not start the next round", func() *walk {
			w, _ := failingWalk(t0.Add(time.Minute))
			acts := w.step(evPage{now: t0.Add(61 * time.Second), err: errBoom})
			sv := steptest.Only[actSave](t, acts)
			w.step(evSaved{now: t0.Add(61 * time.Second), why: saveFailed, ckpt: sv.ckpt, rev: 9})
			return w
		}, evTick{now: t0.Add(2 * time.Minute), leaseRev: 7, roundStart: pipeline.RoundStartRecord{AllUs: t0.Add(time.Second).UnixMicro()}},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actSnapshot](t, acts)
				acts = w.step(evTick{now: t0.Add(2 * time.Minute), leaseRev: 7,
					roundStart: pipeline.RoundStartRecord{AllUs: t0.Add(90 * time.Second).UnixMicro()}})
				require.True(t, steptest.Only[actSnapshot](t, acts).start, "one made after it does")
			}},
		{"scan failing past the budget with a page pending: it is recorded first", func() *walk {
			w, _ := failingWalk(t0.Add(time.Minute))
			w.step(evPage{now: t0.Add(61 * time.Second), page: page(200, 1)})
			w.failures, w.failingSince = 3, t0
			return w
		}, evPage{now: t0.Add(62 * time.Second), err: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actAwait](t, acts)
				steptest.None[actSave](t, acts)
			}},
		{"publish fails: back to the checkpoint, the page read again later", pendingWalk,
			evRecorded{err: errBoom, failure: failPublish},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, uint64(100), w.cursor)
				require.Nil(t, w.pending)
				require.Equal(t, "publish", steptest.Only[actOpError](t, acts).op)
				noSpin(t, acts)
			}},
		{"publish fails with a page held: that page is dropped too", func() *walk {
			w := pendingWalk()
			w.step(evPage{now: t0, page: page(300, 4)})
			return w
		}, evRecorded{err: errBoom, failure: failPublish},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actPublish](t, acts)
				require.Nil(t, w.held)
				require.Equal(t, uint64(100), w.cursor)
			}},
		{"checkpoint write fails: read it again before going on", pendingWalk,
			evRecorded{err: errBoom, failure: failCheckpoint},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, pipeline.PhaseLoad, w.phase)
				noSpin(t, acts)
				require.Equal(t, []action{actReadCheckpoint{}}, w.step(evTick{now: t0, leaseRev: 7}))
			}},
		{"checkpoint written by someone else: step down at once", pendingWalk,
			evRecorded{err: errBoom, failure: failConflict},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actStepDown](t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
				require.Nil(t, w.step(evTick{now: t0, leaseRev: 7}), "a walk that is over does nothing")
			}},
		{"fencing: lease lost before the record: nothing more", pendingWalk,
			evRecorded{err: pipeline.ErrLeaseLost, failure: failLease},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actSave](t, acts)
				steptest.None[actPublish](t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
			}},
		{"lease lost with a page pending: its recording is waited for and dropped", pendingWalk, evTick{now: t0},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actDrop](t, acts)
				steptest.None[actAwait](t, acts)
				steptest.None[actScan](t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
			}},
		{"lease lost while loading", func() *walk {
			w := newWalk(testCfg(), "s1")
			w.step(evTick{now: t0, leaseRev: 7})
			return w
		}, evTick{now: t0},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, pipeline.PhaseDone, w.phase)
			}},
		{"the fencing token follows renewals", walking, evTick{now: t0, leaseRev: 9},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, uint64(9), w.leaseRev)
				p := steptest.Only[actPublish](t, w.step(evPage{now: t0, page: page(200, 1)}))
				require.Equal(t, uint64(9), p.leaseRev)
			}},
		{"paused: no page, status says so", walking, evTick{now: t0, leaseRev: 7, pausedUntil: t0.Add(time.Hour)},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actScan](t, acts)
				require.Equal(t, pipeline.WaitPaused, steptest.Only[actSave](t, acts).ckpt.Waiting)
				noSpin(t, acts)
			}},
		{"paused with a page pending: record it first", pendingWalk, evTick{now: t0, leaseRev: 7, pausedUntil: t0.Add(time.Hour)},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actAwait{}, actWait{0}}, acts)
			}},
		{"paused, already written: nothing more written", func() *walk {
			w := walking()
			w.step(evTick{now: t0, leaseRev: 7, pausedUntil: t0.Add(time.Hour)})
			w.step(evSaved{now: t0, why: saveWaiting, ckpt: pipeline.Checkpoint{Round: 4, InRound: true, Cursor: 100, Waiting: pipeline.WaitPaused}, rev: 4})
			return w
		}, evTick{now: t0.Add(time.Second), leaseRev: 7, pausedUntil: t0.Add(time.Hour)},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actSave](t, acts)
				noSpin(t, acts)
			}},
		{"pause over: walk on", walking, evTick{now: t0.Add(time.Hour), leaseRev: 7, pausedUntil: t0.Add(time.Hour)},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actScan](t, acts)
			}},
		{"a pause also holds the next round back", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, NextRoundUs: t0.UnixMicro()})
		}, evTick{now: t0, leaseRev: 7, pausedUntil: t0.Add(time.Hour)},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actSnapshot](t, acts)
			}},
		{"backlog full: no page, the skip counted", walking, evTick{now: t0, leaseRev: 7, backlogFull: true},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actScan](t, acts)
				steptest.Only[actSkipTick](t, acts)
				require.Equal(t, pipeline.WaitBackpressure, w.waiting)
				noSpin(t, acts)
			}},
		{"pause or backlog unreadable: fail closed", walking, evTick{now: t0, leaseRev: 7, controlErr: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actScan](t, acts)
				require.Equal(t, pipeline.WaitError, w.waiting)
				noSpin(t, acts)
			}},
		{"pause unreadable at a round's start: no round", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, NextRoundUs: t0.UnixMicro()})
		}, evTick{now: t0, leaseRev: 7, controlErr: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actSnapshot](t, acts)
				noSpin(t, acts)
			}},
		{"last page read: the round ends once it is recorded", func() *walk {
			w := walking()
			w.step(evPage{now: t0, page: page(0, 1)})
			return w
		}, evTick{now: t0, leaseRev: 7},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, []action{actAwait{}, actWait{0}}, acts)
			}},
		{"round end: the next round no earlier than round_pause later", func() *walk {
			w := walking()
			w.step(evPage{now: t0, page: page(0, 1)})
			w.step(evRecorded{ckpt: pipeline.Checkpoint{Round: 4, InRound: true, Walked: true, KeysScanned: 51, KeysVisited: 60,
				RoundStartedUs: t0.Add(-time.Minute).UnixMicro(), Layouts: map[string]uint64{LayoutLegacy: 51}}, rev: 20})
			return w
		}, evTick{now: t0, leaseRev: 7},
			func(t *testing.T, w *walk, acts []action) {
				s := steptest.Only[actSave](t, acts)
				require.Equal(t, saveRoundEnd, s.why)
				require.False(t, s.ckpt.InRound)
				require.Equal(t, t0.Add(time.Hour).UnixMicro(), s.ckpt.NextRoundUs)
				require.Equal(t, uint64(51), s.ckpt.LastRoundKeys)
				require.Equal(t, uint64(60), s.ckpt.LastRoundVisited)
				require.Equal(t, int64(60_000), s.ckpt.LastRoundDuration)
				require.Equal(t, pipeline.WaitRoundPause, s.ckpt.Waiting)
				require.Equal(t, uint64(20), s.rev)
			}},
		{"round end written: one event, metrics, no layout warning", func() *walk { return walking() },
			evSaved{now: t0, why: saveRoundEnd, ckpt: pipeline.Checkpoint{Round: 4, LastRoundKeys: 5, LastRoundLayouts: map[string]uint64{LayoutLegacy: 5}}, rev: 21},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, "end", steptest.Only[actEvent](t, acts).ev.Outcome)
				steptest.Only[actRoundEnded](t, acts)
				require.Nil(t, w.instances, "the next round reads the registry again")
			}},
		{"round end with both layouts: a warning and a mixed_layouts event", func() *walk { return walking() },
			evSaved{now: t0, why: saveRoundEnd, ckpt: pipeline.Checkpoint{Round: 4, LastRoundLayouts: map[string]uint64{LayoutLegacy: 5, LayoutLocation: 2}}, rev: 21},
			func(t *testing.T, w *walk, acts []action) {
				evs := steptest.OfType[actEvent](acts)
				require.Len(t, evs, 2)
				require.Equal(t, "mixed_layouts", evs[1].ev.Reason)
				require.Equal(t, map[string]int64{LayoutLegacy: 5, LayoutLocation: 2}, evs[1].ev.Counts)
				warns := 0
				for _, l := range steptest.OfType[actLog](acts) {
					if l.msg == "store holds keys of more than one layout" {
						warns++
					}
				}
				require.Equal(t, 1, warns)
			}},
		{"round end with an ambiguous key: mixed_layouts too", func() *walk { return walking() },
			evSaved{now: t0, why: saveRoundEnd, ckpt: pipeline.Checkpoint{Round: 4, LastRoundLayouts: map[string]uint64{LayoutLocation: 5, LayoutAmbiguous: 1}}, rev: 21},
			func(t *testing.T, w *walk, acts []action) {
				require.Len(t, steptest.OfType[actEvent](acts), 2)
			}},
		{"over the share mid-round: kept until the round ends", walking, evTick{now: t0, leaseRev: 7, release: true},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actRelease](t, acts)
				steptest.Only[actScan](t, acts)
			}},
		{"over the share between rounds: handed back", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2, NextRoundUs: t0.Add(time.Hour).UnixMicro()})
		}, evTick{now: t0, leaseRev: 7, release: true},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actRelease](t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
			}},
		{"store left the registry: handed back at once", walking, evTick{now: t0, leaseRev: 7, gone: true},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actRelease](t, acts)
			}},
		{"store left the registry with a page pending: recorded, then handed back", pendingWalk, evTick{now: t0, leaseRev: 7, gone: true},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actAwait](t, acts)
				steptest.None[actRelease](t, acts)
				acts = w.step(evRecorded{ckpt: pipeline.Checkpoint{Round: 4, InRound: true, Cursor: 200}, rev: 12})
				steptest.Only[actRelease](t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
			}},
		{"§6 stop with a page pending: recorded, nothing new read or published", func() *walk {
			w := pendingWalk()
			return w
		}, evTick{now: t0, leaseRev: 7, stop: true},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actAwait](t, acts)
				steptest.None[actScan](t, acts)
				acts = w.step(evRecorded{ckpt: pipeline.Checkpoint{Round: 4, InRound: true, Cursor: 200}, rev: 12})
				require.Empty(t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
				require.Equal(t, uint64(200), w.ckpt.Cursor)
			}},
		{"stop with nothing pending: over, lease left to the scanner", walking, evTick{now: t0, leaseRev: 7, stop: true},
			func(t *testing.T, w *walk, acts []action) {
				require.Empty(t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
			}},
		{"a status write conflicting: step down", walking, evSaved{now: t0, why: saveWaiting, err: errBoom, conflict: true},
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actStepDown](t, acts)
				require.Equal(t, pipeline.PhaseDone, w.phase)
			}},
		{"a round start not written: retried later, the round unchanged", func() *walk {
			return loaded(pipeline.Checkpoint{Round: 2})
		}, evSaved{now: t0, why: saveRoundStart, err: errBoom, ckpt: pipeline.Checkpoint{Round: 3, InRound: true}},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, uint64(2), w.ckpt.Round)
				noSpin(t, acts)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.walk()
			acts := w.step(tt.ev)
			tt.check(t, w, acts)
		})
	}
}

// A whole round, event by event: every page is published once, the checkpoint follows the
// pages in order and the keys add up.
func TestWalkRound(t *testing.T) {
	w := loaded(pipeline.Checkpoint{})
	now := t0
	acts := w.step(evTick{now: now, leaseRev: 7})
	require.Equal(t, []action{actSnapshot{start: true}}, acts)
	acts = w.step(evSnapshot{now: now, start: true, instances: insts, size: 9})
	s := steptest.Only[actSave](t, acts)
	w.step(evSaved{now: now, why: saveRoundStart, ckpt: s.ckpt, rev: 4, instances: insts})
	pages := []meta.Page{page(10, 1, 2), page(20, 3), page(0, 4, 5, 6)}
	var published []uint64
	var rev uint64 = 4
	var inflight *actPublish
	for i := 0; ; i++ {
		now = now.Add(time.Millisecond)
		acts = w.step(evTick{now: now, leaseRev: 7})
		for len(acts) > 0 {
			var next []action
			for _, a := range acts {
				switch a := a.(type) {
				case actScan:
					next = append(next, w.step(evPage{now: now, page: pages[len(published)]})...)
				case actPublish:
					published = append(published, a.cursor)
					if a.async {
						inflight = &a
						continue
					}
					rev++
					next = append(next, w.step(evRecorded{ckpt: a.next, rev: rev})...)
				case actAwait:
					require.NotNil(t, inflight)
					rev++
					p := inflight
					inflight = nil
					next = append(next, w.step(evRecorded{ckpt: p.next, rev: rev})...)
				case actSave:
					require.Equal(t, saveRoundEnd, a.why)
					require.Equal(t, []uint64{0, 10, 20}, published)
					require.Equal(t, uint64(6), a.ckpt.LastRoundKeys)
					require.Equal(t, rev, a.rev)
					return
				}
			}
			acts = next
		}
		require.Less(t, i, 10, "the round does not end")
	}
}

// The walk's rate follows its pages: the first measure is taken as it is, later ones are
// averaged over about rateWindow.
func TestWalkRate(t *testing.T) {
	w := walking()
	now := t0
	var last actPublish
	for i := range 20 {
		acts := w.step(evPage{now: now, page: page(uint64(200+i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)})
		last = steptest.Only[actPublish](t, acts)
		w.step(evRecorded{ckpt: last.next, rev: uint64(10 + i)})
		now = now.Add(100 * time.Millisecond) // 10 keys every 100ms: 100 keys/s
	}
	require.InDelta(t, 100, last.next.Rate, 1)
	// The walk slows to a tenth: the rate follows within a few windows.
	for i := range 60 {
		now = now.Add(time.Second)
		acts := w.step(evPage{now: now, page: page(uint64(300+i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)})
		last = steptest.Only[actPublish](t, acts)
		w.step(evRecorded{ckpt: last.next, rev: uint64(40 + i)})
	}
	require.InDelta(t, 10, last.next.Rate, 1)
}

// TestWalkCap runs a walk paced by max_keys_per_second through pages whose reads (and
// publishes and ticks) take the time given, the next page read when the wait asked has passed
// plus that time. Over the run the walk goes at the cap, within 1%, when the reads fit in the
// period; over any run of pages it never goes faster than the cap but for one page's keys.
func TestWalkCap(t *testing.T) {
	const capRate = 32_000 // keys/s: a page of 256 keys every 8ms
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	rnd := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		name  string
		keys  func(i int) int
		spent func(i int) time.Duration // the time besides the wait before page i+1
		atCap bool                      // the reads fit in the period: the walk goes at the cap
	}{
		{"reads of 3ms", func(int) int { return 256 }, func(int) time.Duration { return ms(3) }, true},
		{"reads of 0 to 6ms, pages of 200 to 300 keys",
			func(int) int { return 200 + rnd.IntN(101) }, func(int) time.Duration { return ms(6 * rnd.Float64()) }, true},
		{"a read of 30ms every tenth page", func(int) int { return 256 }, func(i int) time.Duration {
			if i%10 == 9 {
				return ms(30)
			}
			return ms(3)
		}, false},
		{"reads of 12ms, longer than the period", func(int) int { return 256 }, func(int) time.Duration { return ms(12) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := walking()
			w.cfg.scanInterval, w.cfg.maxKeysPerSecond = time.Nanosecond, capRate
			const pages = 500
			at := make([]time.Time, pages+1)
			keys := make([]int, pages)
			now := t0
			for i := range pages {
				at[i], keys[i] = now, tc.keys(i)
				ks := make([]int64, keys[i])
				for j := range ks {
					ks[j] = int64(j)
				}
				acts := w.step(evPage{now: now, page: page(uint64(1000+i), ks...)})
				w.step(evRecorded{ckpt: steptest.Only[actPublish](t, acts).next, rev: uint64(20 + i)})
				now = now.Add(lastWait(t, acts) + tc.spent(i))
			}
			at[pages] = now
			total := 0
			for _, k := range keys {
				total += k
			}
			rate := float64(total) / at[pages].Sub(at[0]).Seconds()
			t.Logf("%.0f keys/s at a cap of %d", rate, capRate)
			if tc.atCap {
				require.InEpsilon(t, capRate, rate, 0.01)
			}
			for i := range pages {
				sum := 0
				for j := i + 1; j <= pages; j++ {
					sum += keys[j-1]
					allowed := capRate*at[j].Sub(at[i]).Seconds() + float64(keys[i])
					require.LessOrEqual(t, float64(sum), allowed+1e-3, "pages %d to %d", i, j)
				}
			}
		})
	}
}

func TestNextCount(t *testing.T) {
	require.Equal(t, 256, nextCount(256, 256, 256))
	require.Equal(t, 768, nextCount(512, 128, 256), "a page with a quarter of the keys wanted: count up, halfway")
	require.Equal(t, 16*256, nextCount(16*256, 1, 256), "at most 16 times")
	require.Equal(t, 256, nextCount(256, 1000, 256), "never below want")
	require.Equal(t, 384, nextCount(256, 0, 256), "an empty page doubles the estimate")
}

func TestEstimateEnd(t *testing.T) {
	now := t0
	tests := []struct {
		name     string
		c        pipeline.Checkpoint
		eta      time.Time
		progress float64
		basis    string
	}{
		{"not in a round", pipeline.Checkpoint{}, time.Time{}, 0, ""},
		{"by DBSIZE", pipeline.Checkpoint{InRound: true, DBSize: 1000, KeysVisited: 400, Rate: 100}, now.Add(6 * time.Second), 0.4, "dbsize"},
		{"by the last round", pipeline.Checkpoint{InRound: true, LastRoundVisited: 1000, KeysVisited: 900, Rate: 50}, now.Add(2 * time.Second), 0.9, "last_round"},
		{"nothing to go by", pipeline.Checkpoint{InRound: true, KeysVisited: 900, Rate: 50}, time.Time{}, 0, ""},
		{"not moving: no end", pipeline.Checkpoint{InRound: true, DBSize: 1000, KeysVisited: 400, Rate: 100, Waiting: pipeline.WaitPaused}, time.Time{}, 0.4, "dbsize"},
		{"no rate yet", pipeline.Checkpoint{InRound: true, DBSize: 1000}, time.Time{}, 0, "dbsize"},
		{"past the estimate", pipeline.Checkpoint{InRound: true, DBSize: 100, KeysVisited: 150, Rate: 10}, time.Time{}, 0.99, "dbsize"},
		{"walked", pipeline.Checkpoint{InRound: true, Walked: true}, now, 1, "walked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eta, progress, basis := EstimateEnd(tt.c, now)
			require.True(t, tt.eta.Equal(eta), "eta %s, want %s", eta, tt.eta)
			require.InDelta(t, tt.progress, progress, 1e-9)
			require.Equal(t, tt.basis, basis)
		})
	}
}

// The summary of several stores' checkpoints: "round n done" only once every store is.
func TestFoldCheckpoints(t *testing.T) {
	sc := func(c pipeline.Checkpoint) StoreCheckpoint {
		return StoreCheckpoint{Checkpoint: c, Revision: 1, InRegistry: true}
	}
	sum, _ := Summarize([]StoreCheckpoint{
		sc(pipeline.Checkpoint{Store: "a", Round: 1, LastRoundKeys: 10, LastRoundEndUs: 50, NextRoundUs: 90, Instances: 2}),
		sc(pipeline.Checkpoint{Store: "b", Round: 1, InRound: true, Cursor: 7, KeysScanned: 3, Instances: 1}),
	})
	require.Equal(t, uint64(1), sum.Round)
	require.True(t, sum.InRound, "b is still in round 1")
	require.Equal(t, 1, sum.Index)
	require.Equal(t, 2, sum.Stores)
	require.Equal(t, "b", sum.Store)
	require.Equal(t, uint64(7), sum.Cursor)
	require.Equal(t, 3, sum.Instances)

	sum, _ = Summarize([]StoreCheckpoint{
		sc(pipeline.Checkpoint{Store: "a", Round: 2, InRound: true}),
		sc(pipeline.Checkpoint{Store: "b", Round: 1, LastRoundKeys: 5}),
	})
	require.Equal(t, uint64(1), sum.Round)
	require.False(t, sum.InRound, "round 1 is done everywhere")
	require.Equal(t, 2, sum.Index)

	sum, _ = Summarize([]StoreCheckpoint{
		sc(pipeline.Checkpoint{Store: "a", Round: 1}),
		{Checkpoint: pipeline.Checkpoint{Store: "new"}, InRegistry: true},
	})
	require.Zero(t, sum.Round, "a store not walked yet holds the summary at round 0")
}

// blockEntry is the one conversion of a scanned entry: an absent block is not published
// (§6: a key deleted after SCAN is skipped, not an error).
func TestBlockEntry(t *testing.T) {
	_, ok := BlockEntry(&meta.Entry{BlockKey: 1})
	require.False(t, ok, "no location field: nothing to judge")
	_, ok = BlockEntry(&meta.Entry{BlockKey: 1, Layout: kvcm.LayoutLegacy})
	require.False(t, ok, "an empty __uri__ is an absent block")
	b, ok := BlockEntry(&meta.Entry{BlockKey: -5, Layout: kvcm.LayoutLegacy, URI: []byte(`{"a":1}`), LRUTime: "9"})
	require.True(t, ok)
	require.Equal(t, subjects.BlockEntry{Key: -5, Layout: subjects.LayoutLegacy, URI: subjects.RawText(`{"a":1}`), LRUTime: "9"}, b)
	b, ok = BlockEntry(&meta.Entry{BlockKey: 7, Layout: kvcm.LayoutLocation, Locations: []meta.Field{{ID: "a", Value: []byte(`{"id":"a"}`)}, {ID: "t"}},
		Others: []string{"BP#prev_key"}})
	require.True(t, ok)
	require.Equal(t, subjects.BlockEntry{Key: 7, Layout: subjects.LayoutLocation, Locs: []subjects.LocField{{ID: subjects.RawText("a"), V: subjects.RawText(`{"id":"a"}`)},
		{ID: subjects.RawText("t"), V: subjects.RawText(nil)}}, Fields: []string{"BP#prev_key"}}, b)
	require.Equal(t, LayoutLegacy, entryLayout(&meta.Entry{Layout: kvcm.LayoutLegacy}))
	require.Equal(t, LayoutAmbiguous, entryLayout(&meta.Entry{Layout: kvcm.LayoutAmbiguous}))
}

// The state machine's own cost per page of 256 keys (the decision, not the I/O).
func BenchmarkWalkPage(b *testing.B) {
	keys := make([]int64, 256)
	for i := range keys {
		keys[i] = int64(i)
	}
	p := page(1, keys...)
	w := walking()
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Millisecond)
		acts := w.step(evPage{now: now, page: p})
		pub := acts[0].(actPublish)
		w.step(evRecorded{ckpt: pub.next, rev: uint64(i + 10)})
		w.step(evTick{now: now, leaseRev: 7})
	}
}

// TestWalkSealed: every event has a case in step, every action one in the driver's do: an
// action or event added without one fails here, not silently at run time.
func TestWalkSealed(t *testing.T) {
	sealed.Types(t, "", "isEvent", "step")
	sealed.Types(t, "", "isAction", "do")
}
