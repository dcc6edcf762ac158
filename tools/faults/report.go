package faults

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the results as a table of scenarios × outcomes, with the seed that
// reproduces the run.
func WriteTable(w io.Writer, seed uint64, results []Result) error {
	if _, err := fmt.Fprintf(w, "kvcm-gc fault suite, seed %d (reproduce with -seed %d)\n\n", seed, seed); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tLAYOUT\tGARBAGE GONE\tLIVE INTACT\tSTRANDED DELETING\tROUNDS\tRESTARTS\tPEAK RSS\tGOROUTINES\tTIME\tRESULT")
	for _, r := range results {
		result := "ok"
		if r.Err != nil {
			result = "FAIL"
		}
		garbage := fmt.Sprintf("%d/%d", r.Report.GarbageGone, r.Report.Garbage)
		if r.Report.Either > 0 {
			garbage += fmt.Sprintf(" (+%d/%d either)", r.Report.EitherGone, r.Report.Either)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%.0f MiB\t%d\t%s\t%s\n", r.Scenario, r.Layout, garbage,
			r.Report.LiveIntact, r.Report.Live, r.Report.Stranded, r.Rounds, r.Restarts,
			float64(r.PeakRSS)/(1<<20), r.Goroutines, r.Duration.Round(100_000_000), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes strings.Builder
	for _, r := range results {
		if r.Notes != "" {
			fmt.Fprintf(&notes, "  %s (%s): %s\n", r.Scenario, r.Layout, r.Notes)
		}
		if r.Err != nil {
			fmt.Fprintf(&notes, "  %s (%s) FAILED: %v\n", r.Scenario, r.Layout, r.Err)
		}
	}
	if notes.Len() > 0 {
		if _, err := fmt.Fprintf(w, "\n%s", notes.String()); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, "\nLAYOUT: the block layout seeded and written (location: today's KVCM; legacy: KVCM f6aa2b2).\n"+
		"ROUNDS: rounds after the fault ended until every garbage location was gone and everything else byte-identical (at most 2).")
	return err
}
