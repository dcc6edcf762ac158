package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/internal/testenv"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/seed"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestSweepKilled runs the walker and the sweeper as separate processes of their own
// binaries, kills each with SIGKILL mid-batch (a sweeper with batches in flight, the walker
// in the middle of its round) and starts new ones, with two files left in quarantine by a
// sweeper that died before it finished them (an orphan and a file a location names). Nothing
// is lost: exactly the orphans are unlinked, every other file keeps its bytes, the quarantine
// ends empty, and Redis is not written at all.
func TestSweepKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stage binaries and kills them; run without -short")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/walker", "./cmd/sweeper")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	ctx := context.Background()
	e := &e2eEnv{t: t, bins: dir, redis: testenv.StartRedis(t), nats: testenv.StartNATS(t)}
	e.js = e.nats.JetStream(t)
	e.names, err = subjects.NewNames("kvcmgc", e2eCluster)
	require.NoError(t, err)
	m, err := seed.Generate(ctx, e.redis.Client(), seed.Spec{Cluster: e2eCluster, Instances: []string{"inst0", "inst1"},
		Blocks: 600, GarbageFraction: 0.1, TrickyFraction: 0.1, Root: filepath.Join(dir, "data"), MetaURI: e.redis.URI(),
		Seed: 21, SweepFiles: true})
	require.NoError(t, err)
	e.m = m
	e.before, err = seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)

	// What a sweeper killed between its rename and its second read leaves: an orphan in
	// quarantine for an hour, and a file a SERVING location names.
	var orphan, named seed.SweepFile
	for _, f := range m.SweepFiles {
		switch {
		case orphan.Path == "" && f.Fate == seed.SweepOrphan:
			orphan = f
		case named.Path == "" && f.Reason == seed.SweepReasonReferenced:
			named = f
		}
	}
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{seed.StorageNFS: {Type: kvcm.TypeFile, TypeName: "file",
		Name: seed.StorageNFS, RootPath: m.SweepRoot, KeyCountPerFile: 1}}, storage.Options{})
	require.NoError(t, err)
	sfs, err := set.SweepFS(seed.StorageNFS)
	require.NoError(t, err)
	root, err := sfs.Open()
	require.NoError(t, err)
	for _, f := range []seed.SweepFile{orphan, named} {
		_, err := root.Quarantine(strings.TrimPrefix(f.Path, m.SweepRoot), time.Now().Add(-time.Hour))
		require.NoError(t, err)
	}
	require.NoError(t, root.Close())
	require.Len(t, quarantined(t, m.SweepRoot), 2)

	e.config = filepath.Join(dir, "kvcm-gc.yaml")
	require.NoError(t, os.WriteFile(e.config, []byte(fmt.Sprintf(`
cluster: %s
registry:
  uri: %s
nats:
  url: %s
sweep_interval: 15ms
sweep_batch_size: 8
sweep_quarantine: 1s
sweep_round_pause: 1h
max_inflight_sweep_batches: 2
workers:
  sweeper: 2
storage:
  overrides:
    %s:
      sweep: true
jetstream:
  lease_ttl: 2s
  sweeper_ack_wait: 2s
http:
  listen: 127.0.0.1:0
log:
  format: json
`, e2eCluster, e.redis.URI(), e.nats.URL(), seed.StorageNFS)), 0o600))

	walker := e.start("walker-0", "walker")
	sweeper := e.start("sweeper-0", "sweeper")
	ackPending := func() int {
		info := e.consumer(e.names.SweepStream(), e.names.SweeperConsumer())
		if info == nil {
			return 0
		}
		return info.NumAckPending
	}
	ckpt := func() sweep.Checkpoint {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return sweep.Checkpoint{}
		}
		c, _, _ := sweep.ReadCheckpoint(ctx, kv, seed.StorageNFS)
		return c
	}
	// A sweeper with batches in flight, killed.
	require.Eventually(t, func() bool { return ackPending() > 0 }, time.Minute, time.Millisecond)
	sweeper.kill(t)
	sweeper = e.start("sweeper-1", "sweeper")
	// The walker in the middle of its round, killed; its successor waits out the lease.
	require.Eventually(t, func() bool { c := ckpt(); return c.InRound && c.Page >= 4 }, time.Minute, time.Millisecond)
	page := ckpt().Page
	walker.kill(t)
	walker = e.start("walker-1", "walker")
	require.Eventually(t, func() bool { return ackPending() > 0 }, time.Minute, time.Millisecond)
	sweeper.kill(t)
	sweeper = e.start("sweeper-2", "sweeper")

	var last sweep.Checkpoint
	require.Eventually(t, func() bool {
		last = ckpt()
		info := e.consumer(e.names.SweepStream(), e.names.SweeperConsumer())
		return last.Round == 1 && !last.InRound && last.QLast.EndedUs > last.LastRoundEndUs && info != nil &&
			info.NumPending == 0 && info.NumAckPending == 0 && len(quarantined(t, m.SweepRoot)) == 0
	}, 2*time.Minute, 20*time.Millisecond, "the sweep did not finish after the kills")
	require.Greater(t, last.Page, page, "the new walker resumed the round")
	require.Equal(t, 1, int(last.Round), "resumed, not restarted")

	sr, err := seed.VerifySweep(m)
	require.NoError(t, err)
	require.True(t, sr.OK(), sr.Problems)
	require.FileExists(t, named.Path, "the quarantined file a location names was moved back")
	require.NoFileExists(t, orphan.Path)

	after, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	require.Equal(t, e.before, after, "the sweep never writes Redis")

	walker.stop(t)
	sweeper.stop(t)
	restored := false
	for _, ev := range e2eEvents(t, e) {
		if ev.Kind == subjects.EventSweep && string(ev.File) == named.Path && ev.Outcome == subjects.SweepOutcomeRestored {
			require.Equal(t, sweep.KeptReferenced, ev.Reason)
			restored = true
		}
	}
	require.True(t, restored, "the restore is an event")
}
