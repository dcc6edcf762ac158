package ops

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// WriteTable prints the report for a human: streams, consumers, scanner, last events.
func (r StatusReport) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	now := r.At
	fmt.Fprintf(ew, "kvcm-gc status of cluster %q (prefix %s) at %s\n", r.Cluster, r.Prefix, timeOnly(now))
	r.DryRun.write(ew, now)

	fmt.Fprintln(ew, "\nSTREAMS")
	tw := newTable(ew)
	fmt.Fprintln(tw, "NAME\tMESSAGES\tBYTES\tFIRST SEQ\tFIRST\tLAST SEQ\tLAST\tCONSUMERS")
	for _, s := range r.Streams {
		if s.Error != "" {
			fmt.Fprintf(tw, "%s\tnot read: %s\n", s.Name, cell(s.Error, 80))
			continue
		}
		size := humanBytes(s.Bytes)
		if s.MaxBytes > 0 {
			size += " of " + humanBytes(uint64(s.MaxBytes))
		}
		if s.Discarding {
			size += " DISCARDING oldest (at max_bytes)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%s\t%d\n", s.Name, s.Messages, size,
			s.FirstSeq, timeOnly(s.FirstTime), s.LastSeq, timeOnly(s.LastTime), s.Consumers)
	}
	_ = tw.Flush()

	fmt.Fprintln(ew, "\nSTAGES")
	tw = newTable(ew)
	fmt.Fprintln(tw, "STAGE\tCONSUMER\tPENDING\tACK PENDING\tREDELIVERED\tWAITING\tACK FLOOR\tPAUSED\tAGE")
	fmt.Fprintf(tw, "scanner\t-\t-\t-\t-\t-\t-\t%s\t-\n", pausedCell(r.Scanner.Paused, r.Scanner.PausedUntil, now))
	for _, c := range r.Consumers {
		if c.Error != "" {
			fmt.Fprintf(tw, "%s\t%s/%s\tnot read: %s\n", c.Stage, c.Stream, c.Name, cell(c.Error, 80))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%d\t%d/%d\t%d\t%d\t%d\t%s\t%s\n", c.Stage, c.Stream, c.Name, c.Pending,
			c.AckPending, c.MaxAckPending, c.Redelivered, c.Waiting, c.AckFloorSeq,
			pausedCell(c.Paused, c.PausedUntil, now), humanDuration(secs(c.AgeSeconds)))
	}
	_ = tw.Flush()

	fmt.Fprintln(ew, "\nSCANNER")
	tw = newTable(ew)
	sc := r.Scanner
	if held, holders := leaseHolders(sc.Stores); len(sc.Stores) > 1 && held > 0 {
		fmt.Fprintf(tw, "leases\t%d of %d stores held by %d %s (STORES below)\n", held,
			len(sc.Stores), holders, plural(holders, "replica", "replicas"))
	} else if l := sc.Leader; l != nil {
		// One store (or one held): its lease. Replicas divide the stores, each with a lease.
		of := ""
		if len(sc.Stores) == 1 {
			of = " (store " + sc.Stores[0].Store + ")"
		}
		fmt.Fprintf(tw, "lease\t%s since %s (held %s), renewed %s ago, revision %d%s\n", l.Holder, timeOnly(l.Since),
			humanDuration(secs(l.HeldSeconds)), humanDuration(secs(l.RenewedAgoSecs)), l.Revision, of)
	} else {
		fmt.Fprintln(tw, "lease\tnone (no replica holds a store lease)")
	}
	if rd := sc.Round; rd != nil {
		switch {
		case rd.InProgress && rd.Stores > 1:
			// Stores are walked at once, each by its lease holder: the count done, not a position.
			fmt.Fprintf(tw, "round\t%d in progress: %d of %d stores done, %d instances\n", rd.ID,
				rd.StoresDone, rd.Stores, rd.Instances)
		case rd.InProgress:
			fmt.Fprintf(tw, "round\t%d in progress: store %d of %d (%s), %d instances, cursor %d\n", rd.ID, rd.Store,
				rd.Stores, orDash(rd.StoreName), rd.Instances, rd.Cursor)
		}
		if rd.InProgress {
			if sc.HeldBack != "" {
				fmt.Fprintf(tw, "\tnot moving: %s\n", sc.HeldBack)
			}
			fmt.Fprintf(tw, "\t%d keys scanned since %s, %.0f keys/s\n", rd.Keys, stamp(rd.Started, now), rd.KeysPerSecond)
			if !rd.ETA.IsZero() {
				basis := rd.ETABasis
				if basis == "store_estimates" {
					basis = "the latest of the stores' estimates"
				}
				fmt.Fprintf(tw, "\testimated end %s, by %s\n", stamp(rd.ETA, now), basis)
			} else {
				fmt.Fprintln(tw, "\testimated end unknown")
			}
		} else {
			fmt.Fprintf(tw, "round\t%d done: %d stores, %d instances, %d keys, %.0f keys/s\n",
				rd.ID, rd.Stores, rd.Instances, rd.Keys, rd.KeysPerSecond)
		}
	} else {
		fmt.Fprintln(tw, "round\tnone yet")
	}
	if lr := sc.LastRound; lr != nil {
		fmt.Fprintf(tw, "last round\tended %s, %d keys in %s\n", stamp(lr.Ended, now), lr.Keys,
			humanDuration(secs(lr.DurationSeconds)))
	}
	if !sc.NextRound.IsZero() {
		fmt.Fprintf(tw, "next round\t%s\n", stamp(sc.NextRound, now))
	}
	if sc.Holder != "" {
		fmt.Fprintf(tw, "checkpoint\tsaved by %s at %s\n", sc.Holder, stamp(sc.SavedAt, now))
	}
	if len(sc.Replicas) > 0 {
		fmt.Fprintf(tw, "replicas\t%d: %s\n", len(sc.Replicas), strings.Join(sc.Replicas, ", "))
	}
	_ = tw.Flush()

	if len(sc.Stores) > 0 {
		fmt.Fprintln(ew, "\nSTORES")
		tw = newTable(ew)
		fmt.Fprintln(tw, "STORE\tHOLDER\tROUND\tPOSITION\tKEYS\tKEYS/S\tPACE\tEST. END\tSTATE\tLAYOUTS")
		for _, st := range sc.Stores {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", cell(st.Store, 40), holderCell(st), st.Round,
				positionCell(st), st.Keys, rateCell(st.KeysPerSecond), paceCell(st.Pace), etaCell(st, now), stateCell(st, now),
				layoutsCell(st.Layouts))
		}
		_ = tw.Flush()
		writeFailedRounds(ew, sc.Stores, now)
	}
	writeUnregistered(ew, sc.Stores, now)
	r.Sweep.writeSweep(ew, now)
	r.StuckDeleting.writeStuck(ew)
	if len(r.KVCMCounters) > 0 {
		writeCountersTable(ew, r.KVCMCounters)
	}

	fmt.Fprintln(ew, "\nLAST EVENTS")
	tw = newTable(ew)
	fmt.Fprintln(tw, "KIND\tSEQ\tTIME\tSTAGE\tINSTANCE\tKEY\tLOCATION\tREASON\tOUTCOME\tSOURCE")
	for _, e := range r.LastEvents {
		ev := e.Event
		key := "-"
		if ev.Key != nil {
			key = strconv.FormatInt(*ev.Key, 10)
		}
		src := "-"
		if ev.Source != nil && ev.Source.Stream != "" {
			src = fmt.Sprintf("%s#%d", ev.Source.Stream, ev.Source.Seq)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Kind, e.Seq, stamp(e.Time, now), ev.Stage,
			cell(orDash(ev.Instance), 24), key, idCell(ev.Location), cell(orDash(ev.Reason), 40),
			orDash(ev.Outcome), src)
	}
	_ = tw.Flush()

	if len(r.Warnings) > 0 {
		fmt.Fprintln(ew, "\nWARNINGS")
		for _, w := range r.Warnings {
			fmt.Fprintln(ew, "  "+w)
		}
	}
	if len(r.Problems) > 0 {
		fmt.Fprintln(ew, "\nPROBLEMS")
		for _, p := range r.Problems {
			fmt.Fprintln(ew, "  "+p)
		}
	}
	return ew.err
}

// paceCell says a duty-paced walk's pace and why ("-": paced by scan_interval and
// max_keys_per_second): "duty 0.10 took 0.09, wait 2.1ms (duty), redis cpu 0.35/0.70 ok".
func paceCell(p *pipeline.PaceRecord) string {
	if p == nil {
		return "-"
	}
	s := fmt.Sprintf("duty %.2f took %.2f, wait %s (%s)", p.Duty, p.Share,
		time.Duration(p.WaitUs)*time.Microsecond, p.Reason)
	switch {
	case p.CPULimit <= 0:
	case p.CPUShare >= 0:
		s += fmt.Sprintf(", redis cpu %.2f/%.2f %s", p.CPUShare, p.CPULimit, p.CPU)
	default:
		s += fmt.Sprintf(", redis cpu ?/%.2f %s", p.CPULimit, p.CPU)
	}
	return s
}

func holderCell(st StoreStatus) string {
	if st.Holder == "" {
		return "-"
	}
	return fmt.Sprintf("%s (rev %d)", cell(st.Holder, 32), st.Revision)
}

func positionCell(st StoreStatus) string {
	switch {
	case st.Round == 0:
		return "-"
	case !st.InRound:
		return "done"
	case st.ETABasis == "walked":
		return "last page read"
	case st.ETABasis != "":
		return fmt.Sprintf("cursor %d (%.0f%% of %s)", st.Cursor, st.Progress*100, basisName(st))
	}
	return fmt.Sprintf("cursor %d", st.Cursor)
}

func basisName(st StoreStatus) string {
	if st.ETABasis == "dbsize" {
		return fmt.Sprintf("%d keys", st.DBSize)
	}
	return "last round"
}

func rateCell(r float64) string {
	if r <= 0 {
		return "-"
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}

func etaCell(st StoreStatus, now time.Time) string {
	if st.ETA.IsZero() {
		return "-"
	}
	if d := st.ETA.Sub(now); d >= 0 {
		return "in " + humanDuration(d)
	}
	return humanDuration(now.Sub(st.ETA)) + " ago"
}

// writeFailedRounds says, under the stores, which store's last round ended failed, and why.
func writeFailedRounds(w io.Writer, stores []StoreStatus, now time.Time) {
	for _, st := range stores {
		f := st.FailedRound
		if f == nil {
			continue
		}
		since := ""
		if f.FailingSinceUs > 0 {
			since = fmt.Sprintf(" after %d failed reads over %s", f.Attempts,
				humanDuration(time.Duration(f.AtUs-f.FailingSinceUs)*time.Microsecond))
		}
		fmt.Fprintf(w, "store %s: round %d FAILED %s ago (%s)%s, at cursor %d with %d keys read; "+
			"the next round starts over: %s\n", st.Store, f.Round, humanDuration(now.Sub(time.UnixMicro(f.AtUs))), f.Reason,
			since, f.Cursor, f.KeysScanned, f.Error)
	}
}

func stateCell(st StoreStatus, now time.Time) string {
	s := strings.ReplaceAll(st.State, "_", " ")
	if st.State == "round_pause" && st.FailedRound != nil && st.FailedRound.Round == st.Round {
		s = "round failed"
	}
	if st.State == "round_pause" && !st.NextRound.IsZero() {
		if d := st.NextRound.Sub(now); d > 0 {
			return s + ", next in " + humanDuration(d)
		}
		return s + ", next due"
	}
	if !st.StateSince.IsZero() && st.State != "scanning" {
		s += " for " + humanDuration(now.Sub(st.StateSince))
	}
	return s
}

func layoutsCell(l map[string]uint64) string {
	if len(l) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, l[k]))
	}
	return strings.Join(parts, ", ")
}

// write prints the DRY RUN line: whether the deployment deletes, as configured and as each
// stage's newest event shows.
func (d DryRunStatus) write(w io.Writer, now time.Time) {
	parts := []string{fmt.Sprintf("configuration: dry_run %v", d.Configured)}
	for _, s := range d.Stages {
		mode := "live"
		if s.DryRun {
			mode = "dry run"
		}
		parts = append(
			parts,
			fmt.Sprintf("%s: %s (its %s event %s ago)", s.Stage, mode, s.Kind, humanDuration(now.Sub(s.Time))),
		)
	}
	switch {
	case d.Any():
		fmt.Fprintf(w, "DRY RUN: the stages record what they would do and delete nothing, where they run dry; %s.\n"+
			"  Promote with dryRun: false (docs/operating.md).\n", strings.Join(parts, "; "))
	default:
		fmt.Fprintf(w, "dry run: no, deletes are on; %s\n", strings.Join(parts, "; "))
	}
}

func pausedCell(paused bool, until, now time.Time) string {
	if !paused {
		return "no"
	}
	if until.IsZero() {
		return "yes"
	}
	return pauseEnd(until, now)
}

// pauseEnd says when a pause ends: "until resumed", or "until" and the time as stamp shows it.
func pauseEnd(until, now time.Time) string {
	if end := pipeline.PauseEnd(until, now); end == "until resumed" {
		return end
	}
	return "until " + stamp(until, now)
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// newTable is the tabwriter every table of the operator's commands is written with: columns
// two spaces apart, left-aligned.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// errWriter remembers the first write error, so a table is written without checking each line.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// leaseHolders counts the stores whose lease a replica holds, and the replicas holding them.
func leaseHolders(stores []StoreStatus) (held, holders int) {
	seen := map[string]bool{}
	for _, st := range stores {
		if st.Holder != "" {
			held++
			seen[st.Holder] = true
		}
	}
	return held, len(seen)
}

// writeUnregistered lists, per store, the keys of instances the registry does not list (a
// failed instance removal leaves them; nothing collects them), when there are any.
func writeUnregistered(w io.Writer, stores []StoreStatus, now time.Time) {
	n := 0
	for _, st := range stores {
		n += len(st.Unregistered)
	}
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nUNREGISTERED INSTANCES (keys of instances the registry does not list; counted, not collected)")
	tw := newTable(w)
	fmt.Fprintln(tw, "STORE\tINSTANCE\tKEYS\tLOCATIONS\tBYTES\tFIRST SEEN")
	for _, st := range stores {
		for _, u := range st.Unregistered {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", cell(st.Store, 40), idCell(u.Instance), u.Keys, u.Locations,
				humanBytes(u.Bytes), stamp(usTime(u.FirstSeenUs), now))
		}
		if st.UnregisteredMore > 0 {
			fmt.Fprintf(tw, "%s\t(%d more)\t\t\t\t\n", cell(st.Store, 40), st.UnregisteredMore)
		}
	}
	_ = tw.Flush()
}
