package faults

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// The sweep under the soak: the seeded orphan data files must go, every file the seed says must
// stay must keep its size (unless upstream's GC changed the block that kept it), and at the
// end nothing may be left in the quarantine. (KVCM's
// workload leaves files too: those its deletes no longer name, which are young, so no sweep
// takes them within a soak.)

// sweepCheck counts the seeded sweep files after a round; a kept file gone or changed is a
// problem at once, an orphan still there only at the end.
type sweepCheck struct {
	Orphans, OrphansGone, Kept, KeptIntact int
	// Released: kept files gone after upstream's GC changed their block.
	Released int
	Problems []string
}

// blockChanged reports whether a block a sweep file's name can be of is one changed says so.
func blockChanged(m *seed.Manifest, f seed.SweepFile, changed func(key string) bool) bool {
	n, err := kvcm.ParseBlockFileName(strings.TrimPrefix(f.Path, m.SweepRoot))
	if err != nil {
		return false
	}
	for _, sp := range n.Splits() {
		if changed(kvcm.BlockKey(sp.Instance, n.Key)) {
			return true
		}
	}
	return false
}

// sweepSeen is what a stat of the seeded sweep files found, by path: the size of each file there.
type sweepSeen map[string]int64

// statSweep stats every seeded sweep file.
func statSweep(m *seed.Manifest) sweepSeen {
	seen := sweepSeen{}
	for _, f := range m.SweepFiles {
		if fi, err := os.Stat(f.Path); err == nil {
			seen[f.Path] = fi.Size()
		}
	}
	return seen
}

// judgeSweep judges what seen found. A kept file of a block upstream's GC changed (changed)
// may go: what kept it (a location naming it, the block being upgraded) may be gone. changed
// must come from a read of the blocks after the stat (see checkAfterRound).
func judgeSweep(m *seed.Manifest, seen sweepSeen, changed func(key string) bool) sweepCheck {
	var c sweepCheck
	for _, f := range m.SweepFiles {
		size, present := seen[f.Path]
		if f.Fate == seed.SweepOrphan {
			c.Orphans++
			if !present {
				c.OrphansGone++
			}
			continue
		}
		c.Kept++
		if !present && blockChanged(m, f, changed) {
			c.Released++
			continue
		}
		switch {
		case !present:
			c.Problems = append(c.Problems, fmt.Sprintf("sweep: kept file %s (%s) is gone", f.Path, f.Reason))
		case size != int64(f.Size):
			c.Problems = append(c.Problems, fmt.Sprintf("sweep: kept file %s (%s) changed size: %d, was %d", f.Path, f.Reason, size, f.Size))
		default:
			c.KeptIntact++
		}
	}
	return c
}

// checkAfterRound runs the checks after a round in the one order that is sound: stat the
// sweep's files, then check the keys (checkKeys, which learns what upstream's GC changed),
// then judge the files by what the check learnt. The sweep and upstream's GC run on while the
// checks do: a file unlinked after upstream's GC changed its block is then seen gone only by a
// stat after that change, and so before a key check that sees the change too. Checking the
// keys first would let a change made behind the key check, and the unlink it allowed, reach
// the stat: a released file would read as a kept file lost.
func checkAfterRound(m *seed.Manifest, checkKeys func() (checkReport, error), changed func(key string) bool) (checkReport, sweepCheck, error) {
	seen := statSweep(m)
	rep, err := checkKeys()
	if err != nil {
		return rep, sweepCheck{}, err
	}
	return rep, judgeSweep(m, seen, changed), nil
}

// sweepDone waits, at the end of a run, until every seeded orphan file is gone and the
// quarantine is empty, for up to the drain timeout.
func (s *soak) sweepDone(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	defer cancel()
	var c sweepCheck
	var q int
	err := s.e.waitFor(ctx, "the sweep's orphans gone and its quarantine empty", func() bool {
		c = judgeSweep(s.e.manifest, statSweep(s.e.manifest), s.sm.changedByUpstream)
		var err error
		q, err = quarantinedFiles(s.e.manifest.SweepRoot)
		return err == nil && c.OrphansGone == c.Orphans && q == 0
	})
	if err != nil {
		return fmt.Errorf("%w: sweep: %d of %d orphan files gone, %d in quarantine: %v", errViolation, c.OrphansGone, c.Orphans, q, err)
	}
	s.note("sweep: %d of %d orphan files unlinked, %d of %d kept files intact (%d released: upstream's GC changed their block), the quarantine empty",
		c.OrphansGone, c.Orphans, c.KeptIntact, c.Kept, c.Released)
	return nil
}
