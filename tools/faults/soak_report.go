package faults

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// SoakRow is one round of a soak run. Every figure is the round's: counted from the end of the
// round before to its end, read at its end, or (Check) checked after it, before the next one
// ended (CheckedIn says when).
type SoakRow struct {
	Round    uint64
	Duration time.Duration // the round's, as the scanner measured it
	Keys     uint64        // block keys it scanned
	// Span is the time from the end of the round before (the first: from the start) to the
	// round's end; Steps are KVCM's workload's steps in it (one operation each, plus the later
	// steps of its write sessions and deletes that came due), Writes its writes.
	Span         time.Duration
	Steps        int
	Writes       int
	GarbageMade  int // garbage locations KVCM's workload made (round 1: and the seeded ones)
	Upstream     int // locations upstream's GC removed
	Outcomes     roundOutcomes
	Swept        int // the seeded orphan data files the sweep has unlinked so far
	SweepOrphans int
	Fault        string // the fault that hit the round
	Drain        time.Duration
	Check        checkReport
	CheckTime    time.Duration
	CheckedIn    uint64 // the round under way when the check ended
	Lagged       bool   // that was not the next round
	Stages       []stageSample
	Streams      []StreamFigures
}

func (s *soak) addRow(r SoakRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.table = append(s.table, r)
}

// rows returns the rows, each with the delete outcomes of its round known by now (events of a
// round's requests may be read after its row was made).
func (s *soak) rows() []SoakRow {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.table)
	for i := range out {
		if o := s.byRound[out[i].Round]; o != nil {
			out[i].Outcomes = *o
		}
	}
	return out
}

// stageValue is a stage's figure of the row.
func (r SoakRow) stageValue(stage, metric string) (float64, bool) {
	for _, smp := range r.Stages {
		if smp.Stage == stage {
			v, ok := smp.Values[metric]
			return v, ok
		}
	}
	return 0, false
}

// stream is the row's figures of the stream named <…>_name.
func (r SoakRow) stream(name string) (StreamFigures, bool) {
	for _, st := range r.Streams {
		if strings.HasSuffix(st.Name, "_"+name) {
			return st, true
		}
	}
	return StreamFigures{}, false
}

// rate is the workload's steps a second in the round.
func (r SoakRow) rate() float64 {
	if r.Span <= 0 {
		return 0
	}
	return float64(r.Steps) / r.Span.Seconds()
}

// checked says what the check read: "all N" or "N".
func (r SoakRow) checked() string {
	if r.Check.Full {
		return fmt.Sprintf("all %d", r.Check.Keys)
	}
	return fmt.Sprint(r.Check.Keys)
}

// lost is the messages the input streams lost in the round (each a problem).
func (r SoakRow) lost() uint64 {
	var n uint64
	for _, st := range r.Streams {
		n += st.Lost
	}
	return n
}

// line is the row as one progress line.
func (r SoakRow) line() string {
	var st []string
	for _, s := range soakStages {
		rss, _ := r.stageValue(s, "rss")
		g, _ := r.stageValue(s, "goroutines")
		st = append(st, fmt.Sprintf("%s %.0fM/%.0f", s, mib(rss), g))
	}
	fault := ""
	if r.Fault != "" {
		fault = "; fault: " + r.Fault
	}
	return fmt.Sprintf("round %d: %s, %d keys, %.0f steps/s, garbage +%d, upstream %d, drain %s, checked %s in %s, live %d; %s%s",
		r.Round, r.Duration.Round(100*time.Millisecond), r.Keys, r.rate(), r.GarbageMade, r.Upstream,
		r.Drain.Round(100*time.Millisecond), r.checked(), r.CheckTime.Round(100*time.Millisecond), r.Check.Live, strings.Join(st, " "), fault)
}

// WriteSoakTable prints a run's rounds, its steadiness and its outcome.
func WriteSoakTable(w io.Writer, res SoakResult, cfg SoakConfig) error {
	fmt.Fprintf(w, "kvcm-gc soak, %s, seed %d: %d×%d blocks seeded, round_pause %s, a fault every %d rounds, upstream GC %v, "+
		"KVCM's workload a step every %s (%.0f a second), every key read at least every %d rounds\n\n",
		res.Run, res.Seed, cfg.Instances, cfg.Blocks, cfg.RoundPause, cfg.FaultEvery, cfg.Upstream, cfg.WritePeriod,
		1/cfg.WritePeriod.Seconds(), cfg.CheckEvery)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	head := []string{"ROUND", "TIME", "KEYS", "STEPS/S", "WRITES", "GARBAGE+", "COLLECTED", "UPSTREAM", "RACES",
		"DRAIN", "CHECKED", "CHECK", "IN", "LIVE", "SWEPT"}
	for _, s := range soakStages {
		head = append(head, strings.ToUpper(s[:4])+" MiB", "GOR")
	}
	head = append(head, "BATCHES MiB", "DELETES MiB", "SWEEP MiB", "LOST", "FAULT")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range res.Rows {
		keys, dur := "-", "-"
		if r.Keys > 0 {
			keys = fmt.Sprint(r.Keys)
		}
		if r.Duration > 0 {
			dur = r.Duration.Round(100 * time.Millisecond).String()
		}
		rate := "-" // a round seen ending with a later one at once: counted with it
		if r.Span > 0 {
			rate = fmt.Sprintf("%.0f", r.rate())
		}
		cells := []string{fmt.Sprint(r.Round), dur, keys, rate, fmt.Sprint(r.Writes),
			fmt.Sprint(r.GarbageMade), fmt.Sprint(r.Outcomes.Collected), fmt.Sprint(r.Upstream), fmt.Sprint(r.Outcomes.LostRaces),
			r.Drain.Round(100 * time.Millisecond).String(), r.checked(), r.CheckTime.Round(100 * time.Millisecond).String(),
			fmt.Sprint(r.CheckedIn), fmt.Sprint(r.Check.Live), fmt.Sprintf("%d/%d", r.Swept, r.SweepOrphans)}
		for _, s := range soakStages {
			rss, ok := r.stageValue(s, "rss")
			g, _ := r.stageValue(s, "goroutines")
			if !ok {
				cells = append(cells, "-", "-")
				continue
			}
			cells = append(cells, fmt.Sprintf("%.1f", mib(rss)), fmt.Sprintf("%.0f", g))
		}
		for _, name := range []string{"BATCHES", "DELETES", "SWEEP"} {
			if st, ok := r.stream(name); ok {
				cells = append(cells, fmt.Sprintf("%.1f", float64(st.Bytes)/(1<<20)))
			} else {
				cells = append(cells, "-")
			}
		}
		fault := r.Fault
		if fault == "" {
			fault = "-"
		}
		cells = append(cells, fmt.Sprint(r.lost()), fault)
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rule := cfg.Steady
	fmt.Fprintf(w, "\nSteadiness over the last %d rounds: the least-squares slope per round through the means of batches of %d rounds, "+
		"a level per process, each process's first %d rounds left out, with its 95%% interval; at most %+.1f%% of the mean a round "+
		"(GROWS: the interval is above it; flat: below; cannot tell: it holds it%s):\n\n",
		rule.Window, rule.Batch, rule.WarmRounds, 100*rule.MaxSlope, map[bool]string{true: ", which fails the run", false: ", reported"}[rule.Conclude])
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tMETRIC\tMEAN\tSLOPE/ROUND\t95% INTERVAL\tOF MEAN\t95% OF MEAN\tSAMPLES\tBATCHES\tPROCESSES\tRESULT")
	for _, st := range res.Steady {
		f := st.Fit
		unit := func(v float64) string {
			if st.Metric == "goroutines" || st.Metric == "fds" {
				return fmt.Sprintf("%+.2f", v)
			}
			return fmt.Sprintf("%+.3f MiB", v/(1<<20))
		}
		mean := fmt.Sprintf("%.1f MiB", mib(f.Mean))
		if st.Metric == "goroutines" || st.Metric == "fds" {
			mean = fmt.Sprintf("%.1f", f.Mean)
		}
		interval, ofMean := "-", "-"
		if !math.IsInf(f.Lo, 0) && !math.IsInf(f.Hi, 0) {
			interval = unit(f.Lo) + " .. " + unit(f.Hi)
			ofMean = fmt.Sprintf("%+.2f%% .. %+.2f%%", 100*st.RelLo, 100*st.RelHi)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%+.2f%%\t%s\t%d\t%d\t%d\t%s\n", st.Stage, st.Metric, mean, unit(f.Slope), interval,
			100*st.Rel, ofMean, f.Samples, f.Batches, st.Procs, st.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.FaultsHit) > 0 {
		fmt.Fprintf(w, "\nFaults by kind, and the rounds they hit:\n")
		for _, k := range allKinds(res.Run.Cluster) {
			fmt.Fprintf(w, "  %-22s %d: %v\n", kindName(k), len(res.FaultsHit[k]), res.FaultsHit[k])
		}
	}
	if len(res.Ops) > 0 {
		var ops []string
		for _, k := range slices.Sorted(maps.Keys(res.Ops)) {
			ops = append(ops, fmt.Sprintf("%s %d", k, res.Ops[k]))
		}
		fmt.Fprintf(w, "\nKVCM's operations: %s; upstream's GC collected %d.\n", strings.Join(ops, ", "), res.Upstream)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, p := range res.Problems {
		fmt.Fprintf(w, "PROBLEM: %s\n", p)
	}
	result := "ok"
	if res.Err != nil {
		result = "FAILED: " + res.Err.Error()
	}
	_, err := fmt.Fprintf(w, "\nresult: %s (%s)\n"+
		"TIME and KEYS: the round's, as the scanner's checkpoint says (\"-\": not read, e.g. NATS was down when it ended). STEPS/S: KVCM's\n"+
		"workload's steps a second from the end of the round before to the round's end, WRITES its writes, GARBAGE+ the garbage it made\n"+
		"(round 1: and the seed's). COLLECTED and RACES: targets of the round's delete requests kvcm-gc removed, and found rewritten by KVCM\n"+
		"since the judgement. UPSTREAM: locations upstream's GC removed in the round. DRAIN: until every batch, request and sweep batch\n"+
		"published before the round's end was handled. CHECKED: the keys compared with the model after the round (written since the last\n"+
		"check, holding garbage due or a mark, and a share of the others in turn; \"all\": every key), CHECK how long it took, IN the\n"+
		"round under way when it ended, LIVE the live locations it read byte for byte (with their files). SWEPT: seeded orphan data files\n"+
		"unlinked. MiB/GOR: each stage's resident set and goroutines, the least reading of the round (every %s). BATCHES/DELETES/SWEEP\n"+
		"MiB: the streams' size at the round's end; LOST: messages that left them in the round before their consumer acknowledged them.\n",
		result, res.Duration.Round(time.Second), samplePoll)
	return err
}

// writeSoakFiles writes the run's table and plot.
func writeSoakFiles(res SoakResult, cfg SoakConfig) error {
	if err := os.MkdirAll(cfg.ReportDir, 0o755); err != nil {
		return fmt.Errorf("soak report: %w", err)
	}
	f, err := os.Create(res.TablePath)
	if err != nil {
		return fmt.Errorf("soak report: %w", err)
	}
	if err := WriteSoakTable(f, res, cfg); err != nil {
		_ = f.Close()
		return fmt.Errorf("soak report: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("soak report: %w", err)
	}
	if err := writeSoakSamples(strings.TrimSuffix(res.TablePath, ".txt")+"-samples.tsv", res); err != nil {
		return err
	}
	return writeSoakPlot(res.PlotPath, res)
}

// writeSoakSamples writes every stage sample of the run, one line per round and stage.
func writeSoakSamples(path string, res SoakResult) error {
	var b strings.Builder
	b.WriteString("round\tstage\tprocess\tage")
	for _, m := range stageMetrics {
		b.WriteString("\t" + m.name)
	}
	b.WriteString("\n")
	for _, r := range res.Rows {
		for _, smp := range r.Stages {
			fmt.Fprintf(&b, "%d\t%s\t%s\t%d", smp.Round, smp.Stage, smp.Proc, smp.Age)
			for _, m := range stageMetrics {
				fmt.Fprintf(&b, "\t%.0f", smp.Values[m.name])
			}
			b.WriteString("\n")
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("soak samples: %w", err)
	}
	return nil
}
