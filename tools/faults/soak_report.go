package faults

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// SoakRow is one round of a soak run.
type SoakRow struct {
	Round    uint64
	Duration time.Duration // the round's, as the scanner measured it
	Keys     uint64        // block keys it scanned
	// GarbageMade: garbage locations KVCM's workload made during the round (round 1: and the
	// seeded ones); Collected: targets kvcm-gc's deletes removed (events read after the round);
	// Upstream: locations upstream's GC removed; LostRaces: kvcm-gc's deletes that found the
	// location changed (KVCM wrote it after the judgement); Beaten: found it gone (upstream
	// was first).
	GarbageMade, Collected, Upstream, LostRaces, Beaten, DeleteErrors, DeadLetters int
	// Writes are KVCM's writes.
	Writes int
	// Swept of SweepOrphans: the seeded orphan data files the sweep has unlinked so far.
	Swept, SweepOrphans int
	Fault               string
	Drain               time.Duration
	Check               checkReport
	Stages              []stageSample
	Streams             []StreamBytes
}

func (s *soak) addRow(r SoakRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.table = append(s.table, r)
}

func (s *soak) rows() []SoakRow {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.table)
}

// stageValue is a stage's figure of the row ("-" when not sampled).
func (r SoakRow) stageValue(stage, metric string) (float64, bool) {
	for _, smp := range r.Stages {
		if smp.Stage == stage {
			v, ok := smp.Values[metric]
			return v, ok
		}
	}
	return 0, false
}

func (r SoakRow) streamBytes(name string) string {
	for _, st := range r.Streams {
		if strings.HasSuffix(st.Name, "_"+name) {
			return fmt.Sprintf("%.1f", float64(st.Bytes)/(1<<20))
		}
	}
	return "-"
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
	return fmt.Sprintf("round %d: %s, %d keys, garbage +%d, collected %d (upstream %d), races %d, drain %s, live %d, checked %d keys; %s%s",
		r.Round, r.Duration.Round(100*time.Millisecond), r.Keys, r.GarbageMade, r.Collected, r.Upstream, r.LostRaces,
		r.Drain.Round(100*time.Millisecond), r.Check.Live, r.Check.Keys, strings.Join(st, " "), fault)
}

// WriteSoakTable prints a run's rounds, its steadiness and its outcome.
func WriteSoakTable(w io.Writer, res SoakResult, cfg SoakConfig) error {
	fmt.Fprintf(w, "kvcm-gc soak, %s, seed %d: %d×%d blocks seeded, round_pause %s, a fault every %d rounds, upstream GC %v\n\n",
		res.Run, res.Seed, cfg.Instances, cfg.Blocks, cfg.RoundPause, cfg.FaultEvery, cfg.Upstream)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	head := []string{"ROUND", "TIME", "KEYS", "LIVE", "GARBAGE+", "COLLECTED", "UPSTREAM", "RACES", "WRITES", "DRAIN", "SWEPT"}
	for _, s := range soakStages {
		head = append(head, strings.ToUpper(s[:4])+" MiB", "GOR")
	}
	head = append(head, "BATCHES MiB", "DELETES MiB", "EVENTS MiB", "FAULT")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range res.Rows {
		keys, dur := "-", "-"
		if r.Keys > 0 {
			keys = fmt.Sprint(r.Keys)
		}
		if r.Duration > 0 {
			dur = r.Duration.Round(100 * time.Millisecond).String()
		}
		cells := []string{fmt.Sprint(r.Round), dur, keys,
			fmt.Sprint(r.Check.Live), fmt.Sprint(r.GarbageMade), fmt.Sprint(r.Collected), fmt.Sprint(r.Upstream),
			fmt.Sprint(r.LostRaces), fmt.Sprint(r.Writes), r.Drain.Round(100 * time.Millisecond).String(),
			fmt.Sprintf("%d/%d", r.Swept, r.SweepOrphans)}
		for _, s := range soakStages {
			rss, ok := r.stageValue(s, "rss")
			g, _ := r.stageValue(s, "goroutines")
			if !ok {
				cells = append(cells, "-", "-")
				continue
			}
			cells = append(cells, fmt.Sprintf("%.1f", mib(rss)), fmt.Sprintf("%.0f", g))
		}
		fault := r.Fault
		if fault == "" {
			fault = "-"
		}
		cells = append(cells, r.streamBytes("BATCHES"), r.streamBytes("DELETES"), r.streamBytes("EVENTS"), fault)
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nSteadiness over the last %d rounds (heap: each round's floor of %d rounds; repeated-median slope per round, pairs within one process, its first %d rounds left out; limit %+.1f%% of the mean):\n\n",
		cfg.Window, floorRounds, cfg.WarmRounds, 100*cfg.MaxSlope)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tMETRIC\tMEAN\tSLOPE/ROUND\tOF MEAN\tSAMPLES\tPROCESSES\tRESULT")
	for _, st := range res.Steady {
		mean, slope := fmt.Sprintf("%.0f", st.Mean), fmt.Sprintf("%+.1f", st.Slope)
		if st.Metric != "goroutines" && st.Metric != "fds" {
			mean, slope = fmt.Sprintf("%.1f MiB", mib(st.Mean)), fmt.Sprintf("%+.3f MiB", st.Slope/(1<<20))
		}
		result := "flat"
		switch {
		case st.Unknown:
			result, slope = "n/a (too few samples of one process)", "-"
		case st.Fail:
			result = "GROWS"
		case st.Unjudged:
			result = "reported, not judged"
		case st.Slack:
			result = fmt.Sprintf("flat (within %.0f KiB a round)", cfg.HeapSlack/1024)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%+.2f%%\t%d\t%d\t%s\n", st.Stage, st.Metric, mean, slope, 100*st.Rel, st.Samples, st.Procs, result)
	}
	if err := tw.Flush(); err != nil {
		return err
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
		"TIME and KEYS: the round's, as the scanner's checkpoint says (\"-\": not read, e.g. NATS was down when it ended).\n"+
		"LIVE: live locations checked byte for byte after the round (with their files). GARBAGE+: garbage KVCM made (round 1: and the seed's).\n"+
		"RACES: kvcm-gc deletes that found the location rewritten by KVCM since the judgement. DRAIN: until every batch, request and sweep\n"+
		"batch published before the round's end was handled. SWEPT: seeded orphan data files unlinked. MiB/GOR: each stage's resident set and goroutines (least reading of the round, read every %s).\n",
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
