package sweep

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/sealed"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/steptest"
)

// Table tests of a storage walk's state machine: no server, no clock, no file. Each case
// builds a walk in some state, feeds it one event and checks the next state and the actions.

var (
	w0      = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	errBoom = errors.New("boom")
)

func testWalkConfig() walkConfig {
	return walkConfig{interval: time.Millisecond, roundPause: time.Hour, quarantine: time.Hour}
}

func tickAt(now time.Time, rev uint64) evTick {
	return evTick{WalkTick: pipeline.WalkTick{Now: now, LeaseRev: rev}}
}

// ready is a walk whose lease (revision 7) is held, whose checkpoint c (revision 3) is read
// and whose storage is open.
func ready(c Checkpoint) *walk {
	w := newWalk(testWalkConfig(), "nfs")
	w.step(tickAt(w0, 7))
	w.step(evLoaded{ck: c, rev: 3})
	w.step(tickAt(w0, 7))
	w.step(evOpened{})
	return w
}

// inRound is round 2 walked up to "a/1" (page 5), the next look into the quarantine an hour
// away.
func inRound() Checkpoint {
	return Checkpoint{Storage: "nfs", Round: 2, InRound: true, Cursor: subjects.RawText("a/1"), Page: 5, Walked: 40, Candidates: 4,
		RoundStartedUs: w0.Add(-time.Minute).UnixMicro(), Kept: map[string]uint64{KeptYoung: 3},
		QPass: 1, QNextUs: w0.Add(time.Hour).UnixMicro()}
}

// walking is a walk in inRound whose QNextUs survived the load (a leader's first look is
// done).
func walking() *walk {
	w := ready(inRound())
	w.ck.QNextUs = w0.Add(time.Hour).UnixMicro()
	return w
}

func dataPage(done bool) pageRead {
	return pageRead{n: 3, last: "b/2", done: done, kept: map[string]uint64{KeptYoung: 1},
		files: []candidate{{instance: "i1", file: subjects.SweepFile{Path: subjects.RawText("/nfs/i1/tp0/1")}},
			{instance: "i1", file: subjects.SweepFile{Path: subjects.RawText("/nfs/i1/tp0/2")}}}}
}

// publishing is a walk whose data page was read and is being published.
func publishing(done bool) *walk {
	w := walking()
	w.step(evPage{now: w0, kind: subjects.SweepWalk, read: dataPage(done)})
	return w
}

func waited(t *testing.T, acts []action) time.Duration {
	t.Helper()
	return steptest.Last[actWait](t, acts).d
}

func TestWalkLoad(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func() *walk
		ev    event
		check func(t *testing.T, w *walk, acts []action)
	}{
		{"no lease: nothing read, an idle wait", func() *walk { return newWalk(testWalkConfig(), "nfs") }, tickAt(w0, 0),
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, pipeline.PhaseLoad, w.phase)
				steptest.None[actReadCheckpoint](t, acts)
				require.Equal(t, pipeline.IdleWait, waited(t, acts))
			}},
		{"the lease held: the checkpoint is read", func() *walk { return newWalk(testWalkConfig(), "nfs") }, tickAt(w0, 7),
			func(t *testing.T, w *walk, acts []action) {
				steptest.Only[actReadCheckpoint](t, acts)
				require.Equal(t, uint64(7), w.leaseRev)
			}},
		{"the checkpoint cannot be read: counted, said once, an idle wait", func() *walk {
			w := newWalk(testWalkConfig(), "nfs")
			w.step(tickAt(w0, 7))
			return w
		}, evLoaded{err: errBoom}, func(t *testing.T, w *walk, acts []action) {
			require.Equal(t, pipeline.PhaseLoad, w.phase)
			require.Equal(t, "checkpoint", steptest.Only[actOpError](t, acts).op)
			require.Equal(t, "read sweep checkpoint", steptest.Only[actWarn](t, acts).what)
			require.Equal(t, pipeline.IdleWait, waited(t, acts))
		}},
		{"the checkpoint read: a new leader looks into the quarantine first", func() *walk {
			w := newWalk(testWalkConfig(), "nfs")
			w.step(tickAt(w0, 7))
			return w
		}, evLoaded{ck: inRound(), rev: 3}, func(t *testing.T, w *walk, acts []action) {
			require.Equal(t, pipeline.PhaseReady, w.phase)
			require.Equal(t, uint64(3), w.rev)
			require.Zero(t, w.ck.QNextUs)
			require.Equal(t, "nfs", w.ck.Storage)
			require.Equal(t, actClose{}, steptest.Only[actClose](t, acts), "no walk left from an earlier leadership")
			require.Zero(t, waited(t, acts))
		}},
		{"ready, the storage not open: opened", func() *walk {
			w := newWalk(testWalkConfig(), "nfs")
			w.step(tickAt(w0, 7))
			w.step(evLoaded{ck: inRound(), rev: 3})
			return w
		}, tickAt(w0, 7), func(t *testing.T, w *walk, acts []action) {
			steptest.Only[actOpen](t, acts)
		}},
		{"the storage cannot be opened: not walked, counted, an idle wait", func() *walk {
			w := newWalk(testWalkConfig(), "nfs")
			w.step(tickAt(w0, 7))
			w.step(evLoaded{ck: inRound(), rev: 3})
			w.step(tickAt(w0, 7))
			return w
		}, evOpened{err: errBoom}, func(t *testing.T, w *walk, acts []action) {
			require.False(t, w.opened)
			require.Equal(t, "open", steptest.Only[actOpError](t, acts).op)
			require.Equal(t, "open swept storage; not walked", steptest.Only[actWarn](t, acts).what)
			require.Equal(t, pipeline.IdleWait, waited(t, acts))
		}},
		{"the lease lost: the checkpoint forgotten, the storage closed", walking, tickAt(w0, 0),
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, pipeline.PhaseLoad, w.phase)
				require.False(t, w.opened)
				require.Equal(t, actClose{root: true}, steptest.Only[actClose](t, acts))
				steptest.None[actReadPage](t, acts)
				require.Equal(t, pipeline.IdleWait, waited(t, acts))
			}},
		{"the lease lost while a page is published: the page is forgotten", func() *walk { return publishing(false) }, tickAt(w0, 0),
			func(t *testing.T, w *walk, acts []action) {
				require.Nil(t, w.plan)
				require.Equal(t, pipeline.PhaseLoad, w.phase)
			}},
		{"stopping: the walk is over", walking, evTick{WalkTick: pipeline.WalkTick{Now: w0, LeaseRev: 7}, stop: true},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, pipeline.PhaseDone, w.phase)
				require.Empty(t, acts)
				require.Nil(t, w.step(tickAt(w0, 7)), "a walk that is done does nothing")
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.setup()
			tt.check(t, w, w.step(tt.ev))
		})
	}
}

// TestWalkHolds: every reason not to move is an idle wait with no page read, never a spin.
func TestWalkHolds(t *testing.T) {
	for _, tt := range []struct {
		name string
		ev   evTick
		want func(t *testing.T, acts []action)
	}{
		{"the registry cannot be read", evTick{WalkTick: pipeline.WalkTick{Now: w0, LeaseRev: 7}, viewErr: errBoom},
			func(t *testing.T, acts []action) {
				require.Equal(t, "read registry", steptest.Only[actWarn](t, acts).what)
			}},
		{"the pause or the backlog cannot be read: fail closed", evTick{WalkTick: pipeline.WalkTick{Now: w0, LeaseRev: 7, ControlErr: errBoom}},
			func(t *testing.T, acts []action) {}},
		{"paused by an operator", evTick{WalkTick: pipeline.WalkTick{Now: w0, LeaseRev: 7, PausedUntil: w0.Add(time.Hour)}},
			func(t *testing.T, acts []action) {}},
		{"the sweeper backlog is above the high-water mark", evTick{WalkTick: pipeline.WalkTick{Now: w0, LeaseRev: 7, BacklogFull: true}},
			func(t *testing.T, acts []action) { steptest.Only[actSkip](t, acts) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := walking()
			before := w.ck
			acts := w.step(tt.ev)
			tt.want(t, acts)
			steptest.None[actReadPage](t, acts)
			steptest.None[actSave](t, acts)
			steptest.None[actProgress](t, acts)
			require.Equal(t, pipeline.IdleWait, waited(t, acts))
			require.Equal(t, before, w.ck)
		})
	}
	// A pause that is over holds nothing.
	w := walking()
	acts := w.step(evTick{WalkTick: pipeline.WalkTick{Now: w0, LeaseRev: 7, PausedUntil: w0}})
	require.Equal(t, subjects.RawText("a/1"), steptest.Only[actReadPage](t, acts).cursor)
}

// TestWalkDecides: what a tick that may move does, by where the checkpoint stands.
func TestWalkDecides(t *testing.T) {
	between := Checkpoint{Storage: "nfs", Round: 2, NextRoundUs: w0.Add(time.Minute).UnixMicro(), QPass: 1,
		QNextUs: w0.Add(time.Hour).UnixMicro(), Kept: map[string]uint64{KeptYoung: 1}}
	for _, tt := range []struct {
		name  string
		ck    Checkpoint
		now   time.Time
		check func(t *testing.T, acts []action)
	}{
		{"in a round: the next data page, from the cursor", inRound(), w0, func(t *testing.T, acts []action) {
			require.Equal(t, actReadPage{kind: subjects.SweepWalk, cursor: subjects.RawText("a/1")}, steptest.Only[actReadPage](t, acts))
		}},
		{"a look under way: the next page of the quarantine", func() Checkpoint {
			c := inRound()
			c.QInPass, c.QCursor = true, subjects.RawText("q/7")
			return c
		}(), w0, func(t *testing.T, acts []action) {
			require.Equal(t, actReadPage{kind: subjects.SweepQuarantine, cursor: subjects.RawText("q/7")}, steptest.Only[actReadPage](t, acts))
		}},
		{"a look due: it starts, recorded first", func() Checkpoint {
			c := inRound()
			c.QNextUs = w0.UnixMicro()
			return c
		}(), w0, func(t *testing.T, acts []action) {
			s := steptest.Only[actSave](t, acts)
			require.Equal(t, saveLookStart, s.why)
			require.Equal(t, uint64(2), s.ck.QPass)
			require.True(t, s.ck.QInPass)
			require.Empty(t, s.ck.QCursor)
			require.Equal(t, uint64(3), s.rev)
			steptest.None[actReadPage](t, acts)
		}},
		{"between rounds, the pause not over: an idle wait", between, w0, func(t *testing.T, acts []action) {
			steptest.None[actSave](t, acts)
			steptest.None[actReadPage](t, acts)
			require.Equal(t, pipeline.IdleWait, waited(t, acts))
		}},
		{"between rounds, the pause over: a round starts with a look", between, w0.Add(time.Minute), func(t *testing.T, acts []action) {
			s := steptest.Only[actSave](t, acts)
			require.Equal(t, saveRoundStart, s.why)
			require.Equal(t, uint64(3), s.ck.Round)
			require.True(t, s.ck.InRound)
			require.Zero(t, s.ck.QNextUs)
			require.Empty(t, s.ck.Cursor)
			require.Nil(t, s.ck.Kept)
			require.Equal(t, w0.Add(time.Minute).UnixMicro(), s.ck.RoundStartedUs)
			require.Equal(t, map[string]uint64{KeptYoung: 1}, between.Kept, "the checkpoint read is not changed")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := ready(tt.ck)
			w.ck.QNextUs = tt.ck.QNextUs
			tt.check(t, w.step(tickAt(tt.now, 7)))
		})
	}
}

// TestWalkPages: a page is published, then recorded; every failure leaves the checkpoint
// where it was and the page is read again from it.
func TestWalkPages(t *testing.T) {
	t.Run("a page read is published under the lease's revision", func(t *testing.T) {
		w := walking()
		r := dataPage(false)
		r.unreadable = []walkFailure{{path: "c", err: errBoom}}
		acts := w.step(evPage{now: w0, kind: subjects.SweepWalk, read: r})
		p := steptest.Only[actPublish](t, acts)
		require.Equal(t, actPublish{now: w0, kind: subjects.SweepWalk, round: 2, page: 5, leaseRev: 7, files: r.files}, p)
		require.Equal(t, "walk", steptest.Only[actOpError](t, acts).op, "an unreadable directory is counted")
		require.Equal(t, "walk a directory of the swept storage; skipped", steptest.Only[actWarn](t, acts).what)
		steptest.None[actSave](t, acts)
		require.Equal(t, inRound().Cursor, w.ck.Cursor, "not recorded before it is stored")
	})
	t.Run("the quarantine cannot be opened", func(t *testing.T) {
		w := walking()
		acts := w.step(evPage{now: w0, kind: subjects.SweepQuarantine, err: errBoom})
		require.Equal(t, "walk", steptest.Only[actOpError](t, acts).op)
		require.Equal(t, "open the quarantine", steptest.Only[actWarn](t, acts).what)
		steptest.None[actPublish](t, acts)
		require.Equal(t, pipeline.IdleWait, waited(t, acts))
	})
	t.Run("published: recorded by revision", func(t *testing.T) {
		w := publishing(false)
		s := steptest.Only[actSave](t, w.step(evPublished{now: w0}))
		require.Equal(t, savePage, s.why)
		require.Equal(t, uint64(3), s.rev)
		require.Equal(t, subjects.RawText("b/2"), s.ck.Cursor)
		require.Equal(t, uint64(6), s.ck.Page)
		require.Equal(t, uint64(43), s.ck.Walked)
		require.Equal(t, uint64(6), s.ck.Candidates)
		require.Equal(t, map[string]uint64{KeptYoung: 4}, s.ck.Kept)
		require.True(t, s.ck.InRound)
	})
	failures := []struct {
		name  string
		ev    event
		check func(t *testing.T, w *walk, acts []action)
	}{
		{"the publish fails: counted, said once, the walks closed, an idle wait", evPublished{now: w0, err: errBoom, what: "store sweep batch"},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, "publish", steptest.Only[actOpError](t, acts).op)
				require.Equal(t, "store sweep batch", steptest.Only[actWarn](t, acts).what)
				require.Equal(t, pipeline.PhaseReady, w.phase)
			}},
		{"the lease went before the publish (fencing): nothing sent, nothing counted", evPublished{now: w0, fenced: true},
			func(t *testing.T, w *walk, acts []action) { steptest.None[actOpError](t, acts) }},
		{"the checkpoint was written by another walker: the walk steps down", evSaved{now: w0, why: savePage, err: jetstream.ErrKeyExists},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, "checkpoint", steptest.Only[actOpError](t, acts).op)
				steptest.Only[actStepDown](t, acts)
				require.Equal(t, slog.LevelWarn, steptest.Only[actLog](t, acts).level)
				require.Equal(t, pipeline.PhaseLoad, w.phase, "read again before anything else")
			}},
		{"a revision mismatch is a conflict too", evSaved{now: w0, why: savePage, err: fmt.Errorf("update: %w", jetstream.ErrKeyRevisionMismatch)},
			func(t *testing.T, w *walk, acts []action) { steptest.Only[actStepDown](t, acts) }},
		{"the checkpoint write fails: read again first, no step down", evSaved{now: w0, why: savePage, err: errBoom},
			func(t *testing.T, w *walk, acts []action) {
				require.Equal(t, "checkpoint", steptest.Only[actOpError](t, acts).op)
				require.Equal(t, "save sweep checkpoint", steptest.Only[actWarn](t, acts).what)
				steptest.None[actStepDown](t, acts)
				require.Equal(t, pipeline.PhaseLoad, w.phase)
			}},
		{"the lease went before the write (fencing): nothing recorded", evSaved{now: w0, why: savePage, fenced: true},
			func(t *testing.T, w *walk, acts []action) {
				steptest.None[actOpError](t, acts)
				steptest.None[actStepDown](t, acts)
			}},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			w := publishing(false)
			if _, ok := tt.ev.(evSaved); ok {
				w.step(evPublished{now: w0})
			}
			acts := w.step(tt.ev)
			tt.check(t, w, acts)
			require.Equal(t, actClose{}, steptest.Only[actClose](t, acts), "the page is read again from the checkpoint")
			steptest.None[actProgress](t, acts)
			steptest.None[actCount](t, acts)
			require.Equal(t, pipeline.IdleWait, waited(t, acts))
			require.Equal(t, inRound().Cursor, w.ck.Cursor, "the checkpoint stays before the page")
			require.Equal(t, uint64(3), w.rev)
			require.Nil(t, w.plan)
			// The walk goes on from the checkpoint (or reads it again first).
			next := w.step(tickAt(w0, 7))
			if w.phase == pipeline.PhaseLoad {
				steptest.Only[actReadCheckpoint](t, next)
				return
			}
			require.Equal(t, inRound().Cursor, steptest.Only[actReadPage](t, next).cursor)
		})
	}
	t.Run("recorded: counted, the walk moves on at the interval", func(t *testing.T) {
		w := publishing(false)
		s := steptest.Only[actSave](t, w.step(evPublished{now: w0}))
		acts := w.step(evSaved{now: w0, why: savePage, ck: s.ck, rev: 4})
		steptest.Only[actProgress](t, acts)
		require.Equal(t, 3, steptest.Only[actCount](t, acts).read.n)
		steptest.None[actClose](t, acts)
		steptest.None[actRoundEnded](t, acts)
		require.Equal(t, time.Millisecond, waited(t, acts))
		require.Equal(t, uint64(4), w.rev)
		require.Equal(t, subjects.RawText("b/2"), w.ck.Cursor)
		require.Equal(t, subjects.RawText("b/2"), steptest.Only[actReadPage](t, w.step(tickAt(w0, 7))).cursor)
	})
	t.Run("the last page ends the round", func(t *testing.T) {
		w := publishing(true)
		s := steptest.Only[actSave](t, w.step(evPublished{now: w0}))
		require.False(t, s.ck.InRound)
		require.Equal(t, w0.Add(time.Hour).UnixMicro(), s.ck.NextRoundUs)
		require.Equal(t, w0.UnixMicro(), s.ck.LastRoundEndUs)
		require.Equal(t, time.Minute.Milliseconds(), s.ck.LastRoundMs)
		require.Equal(t, uint64(43), s.ck.LastWalked)
		require.Equal(t, uint64(6), s.ck.LastCandidates)
		require.Equal(t, map[string]uint64{KeptYoung: 4}, s.ck.LastKept)
		acts := w.step(evSaved{now: w0, why: savePage, ck: s.ck, rev: 4})
		require.Equal(t, actClose{}, steptest.Only[actClose](t, acts))
		require.Equal(t, s.ck, steptest.Only[actRoundEnded](t, acts).ck)
		steptest.None[actReadPage](t, w.step(tickAt(w0, 7)))
	})
	t.Run("a round started: the storage opened anew", func(t *testing.T) {
		w := ready(Checkpoint{Storage: "nfs", Round: 2, QNextUs: w0.Add(time.Hour).UnixMicro()})
		w.ck.QNextUs = w0.Add(time.Hour).UnixMicro()
		s := steptest.Only[actSave](t, w.step(tickAt(w0, 7)))
		acts := w.step(evSaved{now: w0, why: saveRoundStart, ck: s.ck, rev: 4})
		require.Equal(t, actClose{root: true}, steptest.Only[actClose](t, acts))
		require.Equal(t, uint64(3), steptest.Only[actRoundStarted](t, acts).round)
		require.False(t, w.opened)
		steptest.Only[actOpen](t, w.step(tickAt(w0, 7)))
	})
}

// TestWalkLooks: a look into the quarantine counts what it finds over its pages and is due
// again half a quarantine after it ends.
func TestWalkLooks(t *testing.T) {
	c := inRound()
	c.QInPass, c.QCursor, c.QPage, c.QSeen = true, subjects.RawText("q/1"), 2, QuarantineCount{Files: 2, Bytes: 20, OldestUs: 50}
	w := ready(c)
	page := pageRead{n: 4, last: "q/9", done: true, seen: QuarantineCount{Files: 1, Bytes: 5, Conflicts: 1, Foreign: 2, OldestUs: 40},
		files: []candidate{{instance: "i1"}}}
	p := steptest.Only[actPublish](t, w.step(evPage{now: w0, kind: subjects.SweepQuarantine, read: page}))
	require.Equal(t, uint64(1), p.round, "a look's batches carry its pass")
	require.Equal(t, uint64(2), p.page)
	s := steptest.Only[actSave](t, w.step(evPublished{now: w0}))
	require.False(t, s.ck.QInPass)
	require.Equal(t, subjects.RawText("q/9"), s.ck.QCursor)
	require.Equal(t, QuarantineCount{}, s.ck.QSeen)
	require.Equal(t, QuarantineCount{Files: 3, Bytes: 25, Conflicts: 1, Foreign: 2, OldestUs: 40, EndedUs: w0.UnixMicro()}, s.ck.QLast)
	require.Equal(t, w0.Add(30*time.Minute).UnixMicro(), s.ck.QNextUs)
	acts := w.step(evSaved{now: w0, why: savePage, ck: s.ck, rev: 4})
	require.Equal(t, actClose{quarantineOnly: true}, steptest.Only[actClose](t, acts))
	require.Equal(t, s.ck.QLast, steptest.Only[actLookEnded](t, acts).seen)
	steptest.None[actCount](t, acts)
	// Back to the data, where the round stood.
	require.Equal(t, actReadPage{kind: subjects.SweepWalk, cursor: subjects.RawText("a/1")}, steptest.Only[actReadPage](t, w.step(tickAt(w0, 7))))
}

// TestWalkSealed: every event has a case in step, every action one in the driver's do.
func TestWalkSealed(t *testing.T) {
	sealed.Types(t, "", "isEvent", "step")
	sealed.Types(t, "", "isAction", "do")
}
