package test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// sweepOptions are e.options with the sweep of nfs_01 on: fast pages, a one-second quarantine.
func (e *env) sweepOptions(reg prometheus.Registerer) app.Options {
	o := e.options(reg)
	sw := sweep.DefaultConfig()
	sw.Storages = []string{seed.StorageNFS}
	sw.Interval, sw.BatchSize, sw.Quarantine, sw.RoundPause = time.Millisecond, 16, time.Second, time.Hour
	sw.LeaseRenew, sw.AckWait = 200*time.Millisecond, o.JetStream.DeleterAckWait
	o.Sweep, o.SweeperWorkers = sw, 2
	return o
}

// sweepCheckpoint reads nfs_01's walk checkpoint (zero before the stages created the bucket).
func (e *env) sweepCheckpoint() sweep.Checkpoint {
	kv := e.stateKV()
	if kv == nil {
		return sweep.Checkpoint{}
	}
	ck, _, _ := sweep.ReadCheckpoint(context.Background(), kv, seed.StorageNFS)
	return ck
}

// quarantined lists the files in the quarantine of root.
func quarantined(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(filepath.Join(root, seed.QuarantineDir), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Errorf("walk the quarantine: %v", err)
	}
	return out
}

// waitSwept waits until a walk of round n has ended, every sweep batch is handled, a look
// into the quarantine came after the walk, and the quarantine is empty.
func (e *env) waitSwept(n uint64, root string, timeout time.Duration) sweep.Checkpoint {
	e.t.Helper()
	var ck sweep.Checkpoint
	require.Eventually(e.t, func() bool {
		ck = e.sweepCheckpoint()
		if ck.Round < n || ck.InRound || ck.QLast.EndedUs <= ck.LastRoundEndUs {
			return false
		}
		return testenv.ConsumerIdle(context.Background(), e.js, e.names.SweepStream(), e.names.SweeperConsumer()) &&
			len(quarantined(e.t, root)) == 0
	}, timeout, 20*time.Millisecond, "the sweep did not finish: %+v", ck)
	return ck
}

// TestSweepFullPipeline: every stage together, on a keyspace with garbage metadata and
// orphan data files: the collection removes exactly the garbage locations, the sweep exactly
// the orphan files (in either layout), and nothing stays in quarantine.
func TestSweepFullPipeline(t *testing.T) {
	for _, layout := range []kvcm.Layout{kvcm.LayoutLegacy, kvcm.LayoutLocation} {
		t.Run(layout.String(), func(t *testing.T) {
			e := newEnv(t)
			m, before := e.seed(seed.Spec{Layout: layout, Instances: []string{"inst0", "inst1"}, Blocks: 300,
				GarbageFraction: 0.2, TrickyFraction: 0.1, Seed: 11, SweepFiles: true})
			reg := prometheus.NewRegistry()
			e.run(e.sweepOptions(reg), app.All)
			e.waitRoundDone(1, time.Minute)
			e.waitSwept(1, m.SweepRoot, time.Minute)

			e.verify(before, m)
			sr, err := seed.VerifySweep(m)
			require.NoError(t, err)
			require.True(t, sr.OK(), sr.Problems)
			require.Positive(t, sr.Orphans)
			require.Equal(t, float64(sr.Orphans), metricValue(t, reg, "kvcm_gc_sweep_unlinked_files_total"))
			require.Equal(t, float64(sr.OrphanBytes), metricValue(t, reg, "kvcm_gc_sweep_freed_bytes_total"))
			require.Zero(t, metricValue(t, reg, "kvcm_gc_sweep_restored_files_total"))
			kept := metricByLabel(t, reg, "kvcm_gc_sweep_kept_files_total", "reason")
			for _, r := range []string{seed.SweepReasonReferenced, seed.SweepReasonYoung, seed.SweepReasonShared,
				seed.SweepReasonUnparsable, seed.SweepReasonUnknownInst, seed.SweepReasonUnknownSpec, seed.SweepReasonGroupSkipped,
				seed.SweepReasonCorrupt} {
				require.GreaterOrEqual(t, kept[r], float64(sr.KeptByReason[r]), r)
			}

			// status shows the walk, its leader and the quarantine.
			rep, err := ops.Status(context.Background(), e.js, e.names)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NotNil(t, rep.Sweep)
			require.Len(t, rep.Sweep.Storages, 1)
			st := rep.Sweep.Storages[0]
			require.Equal(t, seed.StorageNFS, st.Storage)
			require.NotNil(t, st.Leader)
			require.Equal(t, uint64(1), st.Round)
			require.False(t, st.InRound)
			require.Positive(t, st.Walked)
			require.Positive(t, st.Kept[seed.SweepReasonUnparsable])
			require.False(t, st.Quarantine.LookedAt.IsZero(), "the walker looked into the quarantine")
			require.NotNil(t, rep.Sweep.Consumer)
			require.Zero(t, rep.Sweep.Consumer.AckPending)
			require.Positive(t, rep.Sweep.Stream.Messages)
			var table strings.Builder
			require.NoError(t, rep.WriteTable(&table))
			for _, want := range []string{"SWEEP", seed.StorageNFS, "walk 1 done", "quarantine: ", "sweeper"} {
				require.Contains(t, table.String(), want)
			}
			t.Logf("status:\n%s", table.String())

			// Every step of the sweep of an orphan is an event with its file.
			steps := map[string]map[string]bool{}
			for _, ev := range e.events() {
				if ev.Kind == subjects.EventSweep && len(ev.File) > 0 {
					if steps[string(ev.File)] == nil {
						steps[string(ev.File)] = map[string]bool{}
					}
					steps[string(ev.File)][ev.Outcome] = true
				}
			}
			for _, f := range m.SweepFiles {
				if f.Fate == seed.SweepOrphan {
					require.True(t, steps[f.Path][subjects.SweepOutcomeQuarantined], f.Path)
					require.True(t, steps[f.Path][subjects.SweepOutcomeUnlinked], f.Path)
				}
			}
		})
	}
}

// orphanAndNamed returns the first orphan file of m and the first file a location names.
func orphanAndNamed(m *seed.Manifest) (orphan, named seed.SweepFile) {
	for _, f := range m.SweepFiles {
		switch {
		case orphan.Path == "" && f.Fate == seed.SweepOrphan:
			orphan = f
		case named.Path == "" && f.Reason == seed.SweepReasonReferenced:
			named = f
		}
	}
	return orphan, named
}

// TestSweepReplay: `replay --stage sweeper` explains a file's fate: what the sweeper did
// with it in each batch, the last step recorded, and what a sweeper would do now (dry-run).
func TestSweepReplay(t *testing.T) {
	e := newEnv(t)
	m, _ := e.seed(seed.Spec{Instances: []string{"inst0"}, Blocks: 100, Seed: 14, SweepFiles: true})
	o := e.sweepOptions(nil)
	e.run(o, app.Stages{Walker: true, Sweeper: true})
	e.waitSwept(1, m.SweepRoot, time.Minute)
	orphan, named := orphanAndNamed(m)
	setup := opsReplaySetup(t, e, o)
	setup.Sweep = o.Sweep
	deps, err := ops.OpenReplayDeps(context.Background(), setup)
	require.NoError(t, err)
	defer func() { _ = deps.Close() }()
	replay := func(file string) []ops.FileReplay {
		var out []ops.FileReplay
		_, err := ops.Replay(context.Background(), e.js, e.names, ops.ReplayQuery{Stage: pipeline.StageSweeper, File: file}, *deps,
			func(rm ops.ReplayMessage) error { out = append(out, rm.Files...); return nil })
		require.NoError(t, err)
		return out
	}
	rows := replay(orphan.Path)
	require.GreaterOrEqual(t, len(rows), 2, "walked, then looked at in quarantine")
	require.Equal(t, subjects.SweepOutcomeQuarantined, rows[0].Then.Decision)
	for _, r := range rows {
		require.Equal(t, orphan.Path, r.Path)
		require.Equal(t, subjects.SweepOutcomeUnlinked, r.Fate.Decision, "its fate")
		require.Equal(t, subjects.SweepOutcomeGone, r.Now.Decision, "gone now")
	}
	rows = replay(named.Path)
	require.Len(t, rows, 1)
	require.Equal(t, "kept referenced", rows[0].Then.String())
	require.Equal(t, "kept referenced", rows[0].Now.String())

	// Through the command line, as a table: the swept storage from a configuration file.
	cfgPath := filepath.Join(t.TempDir(), "kvcm-gc.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("storage:\n  overrides:\n    "+seed.StorageNFS+":\n      sweep: true\n"), 0o600))
	var out, errOut strings.Builder
	require.NoError(t, opsCommand("replay")(context.Background(), opsEnv(t, e, o),
		[]string{"--stage", "sweeper", "--file", orphan.Path, "--no-progress", "--config", cfgPath}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), orphan.Path)
	require.Contains(t, out.String(), "unlinked")
	t.Logf("replay:\n%s", out.String())
}

// TestSweepWriteAfterWalk: a block that gains a WRITING location naming its file after the
// walk published it keeps the file; a file quarantined by hand whose block names it again is
// moved back; one of an unregistered instance, and shared and young files, are never touched.
func TestSweepWriteAfterWalk(t *testing.T) {
	e := newEnv(t)
	m, _ := e.seed(seed.Spec{Instances: []string{"inst0"}, Blocks: 100, GarbageFraction: 0.1, Seed: 12, SweepFiles: true})
	var orphans []seed.SweepFile
	for _, f := range m.SweepFiles {
		if f.Fate == seed.SweepOrphan && f.Reason == seed.SweepReasonAbsent {
			orphans = append(orphans, f)
		}
	}
	require.GreaterOrEqual(t, len(orphans), 2)
	raced := orphans[0]
	// Only the walker first: the batch waits in the stream.
	o := e.sweepOptions(nil)
	stopWalker := e.run(o, app.Stages{Walker: true})
	require.Eventually(t, func() bool { ck := e.sweepCheckpoint(); return ck.Round == 1 && !ck.InRound }, time.Minute, 10*time.Millisecond)
	stopWalker()
	// KVCM starts a write of the block: WRITING, before any client writes the file.
	key, inst := keyOfPath(t, m, raced.Path)
	uri := metatest.URI(metatest.Location("w1", kvcm.StatusWriting, kvcm.TypeFile, "file://"+seed.StorageNFS+raced.Path+"?size=1024"))
	require.NoError(t, e.redis.Client().HSet(context.Background(), kvcm.BlockKey(inst, key), "__uri__", uri,
		"__lru_time__", fmt.Sprint(time.Now().UnixMicro())).Err())
	e.run(o, app.Stages{Walker: true, Sweeper: true})
	e.waitSwept(1, m.SweepRoot, time.Minute)
	require.FileExists(t, raced.Path, "a file a WRITING location names stays")
	for _, f := range orphans[1:] {
		require.NoFileExists(t, f.Path)
	}
	sr, err := seed.VerifySweep(m)
	require.NoError(t, err)
	require.Equal(t, 1, sr.Mismatch, "only the file written for meanwhile is still there: %v", sr.Problems)
	require.Contains(t, sr.Problems[0], raced.Path)
}

// keyOfPath reads the instance and block key back from a seeded per-block file's path.
func keyOfPath(t *testing.T, m *seed.Manifest, path string) (int64, string) {
	t.Helper()
	n, err := kvcm.ParseBlockFileName(strings.TrimPrefix(path, m.SweepRoot))
	require.NoError(t, err)
	return n.Key, n.Splits()[0].Instance
}

// TestSweepDryRun: a dry run renames nothing and says what it would have quarantined.
func TestSweepDryRun(t *testing.T) {
	e := newEnv(t)
	m, _ := e.seed(seed.Spec{Instances: []string{"inst0"}, Blocks: 100, Seed: 13, SweepFiles: true})
	o := e.sweepOptions(nil)
	o.DryRun, o.Storage.DryRun = true, true
	e.run(o, app.Stages{Walker: true, Sweeper: true})
	require.Eventually(t, func() bool {
		ck := e.sweepCheckpoint()
		if ck.Round < 1 || ck.InRound {
			return false
		}
		return testenv.ConsumerIdle(context.Background(), e.js, e.names.SweepStream(), e.names.SweeperConsumer())
	}, time.Minute, 10*time.Millisecond)
	for _, f := range m.SweepFiles {
		require.FileExists(t, f.Path)
	}
	require.Empty(t, quarantined(t, m.SweepRoot))
	would := 0
	for _, ev := range e.events() {
		if ev.Kind == subjects.EventSweep && ev.Outcome == subjects.SweepOutcomeWouldQuarantine {
			require.True(t, ev.DryRun)
			would++
		}
	}
	orphans := 0
	for _, f := range m.SweepFiles {
		if f.Fate == seed.SweepOrphan {
			orphans++
		}
	}
	require.Equal(t, orphans, would)
	_, err := os.Stat(filepath.Join(m.SweepRoot, seed.QuarantineDir))
	require.ErrorIs(t, err, fs.ErrNotExist)
}
