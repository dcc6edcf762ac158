package demo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// sweepQuarantine is the demo's sweep_quarantine: seconds, so the orphans' unlink happens
// within the demo (a deployment keeps the default hour).
const sweepQuarantine = 2 * time.Second

// enableSweep turns the sweep of orphan data files on for the demo's NFS storage: a fast
// walk, one round, and a short quarantine.
func enableSweep(c *config.Config) {
	if c.Storage.Overrides == nil {
		c.Storage.Overrides = map[string]config.StorageOverride{}
	}
	o := c.Storage.Overrides[seed.StorageNFS]
	o.Sweep = true
	c.Storage.Overrides[seed.StorageNFS] = o
	c.Sweep.Interval = time.Millisecond
	c.Sweep.RoundPause = 24 * time.Hour
	c.Sweep.Quarantine = sweepQuarantine
	c.Sweep.BatchSize = 512
	c.MaxInflightSweep = 4
}

// sweepState is how far the sweep of the demo's storage is.
type sweepState struct {
	ck          sweep.Checkpoint
	pending     uint64 // sweep batches pending or in flight
	quarantined int    // files in the quarantine now
	ok          bool
}

// done: a round walked, every batch handled, a look into the quarantine after it, and the
// quarantine empty (the orphans unlinked after sweep_quarantine).
func (s sweepState) done() bool {
	return s.ok && s.ck.Round >= 1 && !s.ck.InRound && s.pending == 0 && s.quarantined == 0 &&
		s.ck.QLast.EndedUs > s.ck.LastRoundEndUs
}

func (s sweepState) line() string {
	switch {
	case !s.ok || s.ck.Round == 0:
		return "sweep starting"
	case s.ck.InRound:
		return fmt.Sprintf("sweep walked %d files, %d candidates", s.ck.Walked, s.ck.Candidates)
	}
	return fmt.Sprintf("sweep walked %d files; %d in quarantine", s.ck.LastWalked, s.quarantined)
}

func readSweep(ctx context.Context, js jetstream.JetStream, names subjects.Names, root string) sweepState {
	var s sweepState
	st, err := js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		return s
	}
	if s.ck, _, err = sweep.ReadCheckpoint(ctx, st, seed.StorageNFS); err != nil {
		return s
	}
	cons, err := js.Consumer(ctx, names.SweepStream(), names.SweeperConsumer())
	if err != nil {
		return s
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return s
	}
	s.pending = info.NumPending + uint64(info.NumAckPending)
	q := filepath.Join(root, seed.QuarantineDir)
	err = filepath.WalkDir(q, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(p, ".conflict") {
			s.quarantined++
		}
		return nil
	})
	s.ok = err == nil
	return s
}

// sweepReport is the sweep's part of the report: what the stages counted and what the
// verification found.
type sweepReport struct {
	On                              bool
	Files                           int // the seed's sweep files
	Walked, Candidates, Quarantined float64
	Restored, Conflicts, Unlinked   float64
	FreedBytes                      float64
	Kept                            map[string]float64 // by reason
	Errors                          float64
	Verify                          seed.SweepReport
}

func newSweepReport(g gathered, m *seed.Manifest, vr seed.SweepReport) sweepReport {
	errs := 0.0
	for _, v := range g.by("kvcm_gc_sweep_errors_total", "reason") {
		errs += v
	}
	return sweepReport{On: true, Files: len(m.SweepFiles),
		Walked: g.sum("kvcm_gc_sweep_walked_files_total"), Candidates: g.sum("kvcm_gc_sweep_candidates_total"),
		Quarantined: g.sum("kvcm_gc_sweep_quarantined_files_total"), Restored: g.sum("kvcm_gc_sweep_restored_files_total"),
		Conflicts: g.sum("kvcm_gc_sweep_conflicts_total"), Unlinked: g.sum("kvcm_gc_sweep_unlinked_files_total"),
		FreedBytes: g.sum("kvcm_gc_sweep_freed_bytes_total"), Kept: g.by("kvcm_gc_sweep_kept_files_total", "reason"),
		Errors: errs, Verify: vr}
}

func (s sweepReport) write(line func(format string, a ...any)) {
	if !s.On {
		return
	}
	v := s.Verify
	line("")
	line("sweep of orphan data files (storage %s, sweep_quarantine %s)", seed.StorageNFS, sweepQuarantine)
	line("  files walked        %.0f (%d of them seeded for the sweep)", s.Walked, s.Files)
	line("  candidates          %.0f", s.Candidates)
	line("  quarantined         %.0f, restored %.0f, conflicts %.0f", s.Quarantined, s.Restored, s.Conflicts)
	line("  unlinked            %.0f files, %s freed (%.0f bytes)", s.Unlinked, humanBytes(s.FreedBytes), s.FreedBytes)
	line("  kept                %.0f %s", sum(s.Kept), breakdown(s.Kept))
	line("  errors              %.0f", s.Errors)
	line("  verification        orphans gone %d/%d (%d bytes), kept files byte-identical %d/%d, left in quarantine %d",
		v.OrphansGone, v.Orphans, v.OrphanBytes, v.KeptIntact, v.Kept, v.Quarantined)
	line("                      every other live file on %s byte-identical %d/%d", seed.StorageNFS, v.OtherIntact, v.OtherFiles)
	if v.OK() {
		line("  sweep result        OK")
		return
	}
	line("  sweep result        MISMATCH (%d)", v.Mismatch)
	for _, p := range v.Problems {
		line("    %s", p)
	}
}

func humanBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
