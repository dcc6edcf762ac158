package ops

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// WriteTable prints the report for a human: the rounds, the targets by outcome, then what the
// deletes would free (dry run) and what they freed, by instance, storage and reason, and the
// totals by storage and reason.
func (r DeleteReport) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "kvcm-gc report of cluster %q at %s\n", r.Cluster, timeOnly(r.At))
	if len(r.Rounds) == 0 {
		fmt.Fprintln(ew, "\nno round walked yet: nothing to report")
		return ew.err
	}
	fmt.Fprintln(ew, "\nROUNDS")
	tw := newTable(ew)
	fmt.Fprintln(tw, "STORE\tROUND\tWALK")
	for _, rd := range r.Rounds {
		walk := "ended"
		if rd.InProgress {
			walk = "in progress: the numbers are the round's so far"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", rd.Store, rd.Round, walk)
	}
	_ = tw.Flush()

	total := 0
	var outcomes []string
	for _, o := range slices.Sorted(maps.Keys(r.Targets)) {
		total += r.Targets[o]
		outcomes = append(outcomes, fmt.Sprintf("%d %s", r.Targets[o], o))
	}
	fmt.Fprintf(ew, "\n%d delete %s in %d %s", total, plural(total, "target", "targets"),
		r.Requests, plural(r.Requests, "request", "requests"))
	if len(outcomes) > 0 {
		fmt.Fprintf(ew, ": %s", strings.Join(outcomes, ", "))
	}
	fmt.Fprintln(ew)
	if n := r.Targets[ReportPending]; n > 0 {
		fmt.Fprintf(ew, "(%d pending: the deleter has not handled them yet, or is paused)\n", n)
	}
	if r.Undecoded > 0 {
		fmt.Fprintf(ew, "(%d freed %s not counted: the judged bytes are not a location)\n",
			r.Undecoded, plural(r.Undecoded, "target", "targets"))
	}
	for _, dry := range []bool{true, false} {
		rows, totals := pick(r.Rows, dry), pick(r.Totals, dry)
		if len(rows) == 0 {
			continue
		}
		title := "FREED (metadata removed: deleted, partial)"
		if dry {
			title = "WOULD FREE (dry run: would_delete)"
		}
		fmt.Fprintf(ew, "\n%s\n", title)
		tw = newTable(ew)
		fmt.Fprintln(tw, "INSTANCE\tSTORAGE\tREASON\tLOCATIONS\tFILES\tBYTES\tSIZE")
		for _, row := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", row.Instance, row.Storage, row.Reason,
				row.Locations, row.Files, row.Bytes, humanBytes(row.Bytes))
		}
		_ = tw.Flush()
		fmt.Fprintln(ew, "\nBY STORAGE AND REASON")
		tw = newTable(ew)
		fmt.Fprintln(tw, "STORAGE\tREASON\tLOCATIONS\tFILES\tBYTES\tSIZE")
		var all ReportRow
		for _, row := range totals {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", row.Storage, row.Reason, row.Locations,
				row.Files, row.Bytes, humanBytes(row.Bytes))
			all.Files += row.Files
			all.Bytes += row.Bytes
		}
		locations := r.Targets[subjects.OutcomeDeleted] + r.Targets[subjects.OutcomePartial]
		if dry {
			locations = r.Targets[subjects.OutcomeWouldDelete]
		}
		fmt.Fprintf(tw, "all\tall\t%d\t%d\t%d\t%s\n", locations, all.Files, all.Bytes, humanBytes(all.Bytes))
		_ = tw.Flush()
	}
	if len(r.Rows) == 0 {
		fmt.Fprintln(ew, "\nnothing freed, and nothing a dry run would free")
	}
	writeCountersTable(ew, r.Counters)
	return ew.err
}

// pick keeps the rows of a dry run (dry) or of real deletes.
func pick(rows []ReportRow, dry bool) []ReportRow {
	var out []ReportRow
	for _, r := range rows {
		if r.DryRun == dry {
			out = append(out, r)
		}
	}
	return out
}
