package demo

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// dryRunReport prints what the dry-run round's deletes would free (`kvcm-gc report`) and checks
// that the round changed nothing and would have deleted exactly the seeded garbage.
func dryRunReport(ctx context.Context, w io.Writer, rdb redis.UniversalClient, m *seed.Manifest, before seed.Snapshot,
	r ops.DeleteReport, took time.Duration) error {
	after, err := seed.Take(ctx, rdb, "*")
	if err != nil {
		return err
	}
	changed := 0
	for k, fields := range before {
		if !maps.Equal(fields, after[k]) {
			changed++
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			changed++
		}
	}
	files, missing := 0, 0
	for _, l := range m.Locations {
		for _, f := range l.Files {
			files++
			if _, err := os.Lstat(f); err != nil {
				missing++
			}
		}
	}
	garbage, would, pending := len(m.Garbage()), r.Targets[subjects.OutcomeWouldDelete], r.Targets[ops.ReportPending]
	if err := r.WriteTable(w); err != nil {
		return err
	}
	ok := changed == 0 && missing == 0 && would == garbage && pending == 0
	result := "OK"
	if !ok {
		result = "MISMATCH"
	}
	fmt.Fprintf(w, "\nverification (dry run, collected in %s)\n", took.Round(time.Millisecond))
	fmt.Fprintf(w, "  keys unchanged      %d/%d (byte-identical to the seed)\n", len(before)-min(changed, len(before)), len(before))
	fmt.Fprintf(w, "  files present       %d/%d\n", files-missing, files)
	fmt.Fprintf(w, "  would delete        %d of %d garbage locations (%d pending)\n", would, garbage, pending)
	fmt.Fprintf(w, "  result              %s\n", result)
	if !ok {
		return fmt.Errorf("%w: dry run: %d keys changed, %d files missing, %d of %d garbage locations would be deleted",
			ErrMismatch, changed, missing, would, garbage)
	}
	return nil
}
