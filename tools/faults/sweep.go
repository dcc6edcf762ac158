package faults

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// Stage binaries of the sweep of orphan data files, run by the sweep scenario only.
var sweepCommands = []string{"walker", "sweeper"}

const (
	stageWalker  = "walker"
	stageSweeper = "sweeper"
)

// sweepFlags turn the sweep on for the seeded NFS storage: short pages and rounds, a quarantine
// of a second, so several walks and looks into the quarantine happen within the scenario.
var sweepFlags = []string{
	"--storage.overrides", seed.StorageNFS + ".sweep=true",
	"--sweep_interval", "10ms", "--sweep_batch_size", "8", "--sweep_round_pause", "1s", "--sweep_quarantine", "1s",
	"--max_inflight_sweep_batches", "2", "--workers.sweeper", "2",
}

// sweepKills runs every stage, the walker and the sweeper too, on a keyspace with orphan data
// files, and kills the walker or a sweeper with SIGKILL cfg.Kills times — a sweeper with
// batches in flight, the walker inside a walk — starting a new one after each. Then a whole
// walk must pass with every batch handled and the quarantine empty, and exactly the orphans
// must be gone, every other file byte-identical (seed.VerifySweep). The collection of the
// metadata runs beside it and is checked as in every scenario.
func sweepKills(ctx context.Context, e *env) (string, *Expect, error) {
	for _, s := range sweepCommands {
		if _, err := os.Stat(e.cfg.Bins[s]); err != nil {
			return "", nil, fmt.Errorf("stage binary %s: %w", s, err)
		}
	}
	e.extra = append(e.extra, sweepFlags...)
	if err := e.startAll(); err != nil {
		return "", nil, err
	}
	for _, s := range sweepCommands {
		if _, err := e.startStage(s); err != nil {
			return "", nil, err
		}
	}
	var killed []string
	for range e.cfg.Kills {
		st := sweepCommands[e.rng.IntN(len(sweepCommands))]
		wait := e.between(0, 200*time.Millisecond)
		down := e.between(0, 300*time.Millisecond)
		_ = e.waitFor(withTimeout(ctx, 5*time.Second), "a busy moment", func() bool {
			if st == stageSweeper {
				return e.ackPending(ctx, e.names.SweepStream(), e.names.SweeperConsumer()) > 0
			}
			ck, err := e.sweepCheckpoint(ctx)
			return err == nil && ck.InRound && ck.Page > 0
		})
		if err := sleep(ctx, wait); err != nil {
			return "", nil, err
		}
		ps := e.running(st)
		if len(ps) == 0 {
			return "", nil, fmt.Errorf("no running %s to kill", st)
		}
		ck, _ := e.sweepCheckpoint(ctx)
		inflight := e.ackPending(ctx, e.names.SweepStream(), e.names.SweeperConsumer())
		e.kill(st, ps[0])
		killed = append(killed, fmt.Sprintf("%s@r%d/p%d/%d", st, ck.Round, ck.Page, inflight))
		if err := sleep(ctx, down); err != nil {
			return "", nil, err
		}
		if _, err := e.startStage(st); err != nil {
			return "", nil, err
		}
	}
	// A walk that starts after the last kill, then every batch handled and the quarantine
	// empty: whatever the killed stages left is finished or undone.
	ck, err := e.sweepCheckpoint(ctx)
	if err != nil {
		return "", nil, err
	}
	after := ck.Round
	if err := e.waitFor(ctx, "a whole walk after the kills, its batches handled and the quarantine empty", func() bool {
		c, err := e.sweepCheckpoint(ctx)
		if err != nil || c.Round <= after || c.InRound || c.QLast.EndedUs <= c.LastRoundEndUs {
			return false
		}
		ck = c
		n, err := quarantinedFiles(e.manifest.SweepRoot)
		return err == nil && n == 0 && servers.ConsumerIdle(ctx, e.js, e.names.SweepStream(), e.names.SweeperConsumer())
	}); err != nil {
		return "", nil, err
	}
	r, err := seed.VerifySweep(e.manifest)
	if err != nil {
		return "", nil, err
	}
	if !r.OK() {
		return "", nil, fmt.Errorf("%w: sweep: %s", errViolation, strings.Join(r.Problems, "; "))
	}
	return fmt.Sprintf("killed %s; %d/%d orphans unlinked (%d bytes), %d kept files intact, walk %d",
		strings.Join(killed, " "), r.OrphansGone, r.Orphans, r.OrphanBytes, r.KeptIntact, ck.Round), nil, nil
}

// sweepCheckpoint reads the seeded NFS storage's walk checkpoint.
func (e *env) sweepCheckpoint(ctx context.Context) (sweep.Checkpoint, error) {
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	if err != nil {
		return sweep.Checkpoint{}, err
	}
	ck, _, err := sweep.ReadCheckpoint(ctx, kv, seed.StorageNFS)
	return ck, err
}

// quarantinedFiles counts the files in the quarantine of a root.
func quarantinedFiles(root string) (int, error) {
	n := 0
	err := filepath.WalkDir(filepath.Join(root, seed.QuarantineDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	return n, err
}
