package ops

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// WriteReplayMessage prints one replayed message for a human: a header line, then one row per
// location with the decision then, the rules re-run on the recorded bytes (prober), the
// decision now and why; with dump, the raw message after it.
func WriteReplayMessage(w io.Writer, m ReplayMessage) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "#%d %s %s instance %s round %d msg-id %s\n", m.Seq, timeOnly(m.Time), m.Subject,
		strconv.Quote(m.Instance), m.Round, orDash(m.MsgID))
	if m.Poison != "" {
		fmt.Fprintf(ew, "  poison (terminated by the stage, see dlq): %s\n", m.Poison)
	}
	if len(m.Locations) > 0 {
		tw := newTable(ew)
		rerun := m.Locations[0].Rerun != nil
		if rerun {
			fmt.Fprintln(tw, "  KEY\tLOCATION\tSTATUS\tTHEN\tRERUN\tNOW\tWHY NOW")
		} else {
			fmt.Fprintln(tw, "  KEY\tLOCATION\tSTATUS\tREASON\tTHEN\tNOW\tWHY NOW")
		}
		for _, l := range m.Locations {
			why := l.Now.Detail
			if l.Now.Reason != "" && l.Now.Decision != "candidate" && l.Now.Decision != DecisionSkip {
				why = subjects.JoinDetail(l.Now.Reason, why)
			}
			if rerun {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Key, idCell(l.Location), l.Status,
					cell(l.Then.String(), 60), cell(l.Rerun.String(), 70), cell(nowCell(l.Now), 40), cell(orDash(why), 100))
			} else {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Key, idCell(l.Location), l.Status,
					orDash(l.Reason), cell(l.Then.String(), 60), cell(nowCell(l.Now), 40), cell(orDash(why), 100))
			}
		}
		_ = tw.Flush()
	}
	writeReplayFiles(ew, m.Files)
	if m.Raw != nil || m.RawText != "" {
		for k, vs := range m.Headers {
			for _, v := range vs {
				fmt.Fprintf(ew, "  header %s: %s\n", k, v)
			}
		}
		if m.Raw != nil {
			fmt.Fprintf(ew, "  raw: %s\n", m.Raw)
		} else {
			fmt.Fprintf(ew, "  raw (not JSON): %q\n", m.RawText)
		}
	}
	return ew.err
}

func nowCell(v Verdict) string {
	if v.Decision == DecisionKept || v.Decision == DecisionCandidate || v.Decision == DecisionSkip {
		s := v.Decision
		if v.Decision != DecisionKept && v.Reason != "" {
			s += " " + v.Reason
		}
		return s
	}
	return v.Decision
}

// WriteTable prints the replay's totals.
func (s ReplaySummary) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "replayed %d messages, %d locations (%d poison); decision now differs from then for %d\n",
		s.Messages, s.Locations, s.Poison, s.Differ)
	tw := newTable(ew)
	for _, side := range []struct {
		name string
		m    map[string]int
	}{{"then", s.Then}, {"now", s.Now}} {
		for _, k := range slices.Sorted(maps.Keys(side.m)) {
			fmt.Fprintf(tw, "  %s\t%s\t%d\n", side.name, k, side.m[k])
		}
	}
	_ = tw.Flush()
	return ew.err
}
