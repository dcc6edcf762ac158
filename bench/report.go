package bench

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/bench/stage"
)

// Targets of issue 6, on the 2-core development machine.
const (
	TargetScanner   = 0.7              // × raw SCAN + HMGET
	TargetDeleter   = 0.3              // × raw CAS + unlink + CAD composed
	TargetE2E       = 30 * time.Second // default keyspace
	TargetRSS       = 150 << 20        // bytes, each stage
	TargetRSSGrowth = 0.10             // between the two keyspace sizes
	TargetServing   = 0.10             // added to the p99 by default pacing
)

// Report renders the results as Markdown.
func Report(r *Results) string {
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	c := r.Config
	w("Command: `%s`\n\n", c.Command)
	m := r.Machine
	w("Machine: %d cores (%s), %.0f GiB memory, Linux %s; %s; redis-server %s. Run on %s, took %s.\n\n",
		m.Cores, orDash(m.CPU), m.MemoryGiB, orDash(m.Kernel), m.Go, orDash(m.RedisVersion),
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Elapsed.Round(time.Second))
	if len(r.Errors) > 0 {
		w("**Failed phases** (their figures are missing or partial):\n\n")
		for _, e := range r.Errors {
			w("- %s\n", e)
		}
		w("\n")
	}

	summaryAt := b.Len()
	w("### Summary\n\n")
	w("| measurement | kvcm-gc | raw baseline (same run) | ratio | target | met |\n|---|---|---|---|---|---|\n")
	rowsAt := b.Len()
	raw := r.Raw
	if a := r.Alone; a != nil && raw != nil {
		ratio := a.Scanner.Rate() / raw.ScanBare.PerSec()
		w("| scanner alone | %s keys/s | %s keys/s (SCAN COUNT %d + pipelined HMGET) | %.2f | ≥ %.1f | %s |\n",
			num(a.Scanner.Rate()), num(raw.ScanBare.PerSec()), c.Unpaced.ScanBatchSize, ratio, TargetScanner, yes(ratio >= TargetScanner))
		w("| scanner alone, vs a per-instance MATCH walk (the former scanner's) | %s keys/s | %s keys/s | %.2f | | |\n",
			num(a.Scanner.Rate()), num(raw.ScanMatch.PerSec()), a.Scanner.Rate()/raw.ScanMatch.PerSec())
		if sp := scanPublishRate(*raw); sp > 0 {
			w("| scanner alone, vs reading and storing in JetStream | %s keys/s | %s keys/s (SCAN + HMGET, then a synchronous publish per %d keys) | %.2f | | |\n",
				num(a.Scanner.Rate()), num(sp), raw.ScanPerMsg, a.Scanner.Rate()/sp)
		}
		sp := statPerLocation(r.Main)
		statBound := raw.StatRoot.PerSec() / sp
		w("| prober alone (stat probe) | %s locations/s | %s locations/s (os.Root lstat of %.2f specs per location, %d workers) | %.2f | | |\n",
			num(a.Prober.Rate()), num(statBound), sp, raw.Workers, a.Prober.Rate()/statBound)
		comp := composedDeleteRate(*raw, unlinkPerLocation(r.Main))
		ratio = a.Deleter.Rate() / comp
		w("| deleter alone | %s locations/s | %s locations/s (pipelined CAS + %.2f unlinks + pipelined CAD) | %.2f | ≥ %.1f | %s |\n",
			num(a.Deleter.Rate()), num(comp), unlinkPerLocation(r.Main), ratio, TargetDeleter, yes(ratio >= TargetDeleter))
		if raw.Sequential.Dur > 0 {
			w("| deleter alone, vs its protocol issued by hand | %s locations/s | %s locations/s (HGET, CAS, unlinks, HGET, CAD one after the other, %d workers) | %.2f | | |\n",
				num(a.Deleter.Rate()), num(raw.Sequential.PerSec()), raw.SeqWorkers, a.Deleter.Rate()/raw.Sequential.PerSec())
		}
	}
	if e := r.E2E; e != nil && e.Dur > 0 {
		line := fmt.Sprintf("| end to end, %s blocks | %.1f s |", num(float64(r.Main.Counts.Blocks)), e.Dur.Seconds())
		if raw != nil {
			lb := rawE2E(r)
			line += fmt.Sprintf(" %.1f s (the raw operations above, back to back) | %.2f |", lb.Seconds(), e.Dur.Seconds()/lb.Seconds())
		} else {
			line += " | |"
		}
		met := e.Dur <= TargetE2E && e.Verification.OK()
		if r.Main.Counts.Blocks < 1_000_000 {
			w("%s ≤ %s at 1,000,000 blocks | (smaller keyspace) |\n", line, TargetE2E)
		} else {
			w("%s ≤ %s | %s |\n", line, TargetE2E, yes(met))
		}
	}
	if a, s := r.Alone, r.AloneSmall; a != nil && s != nil {
		for _, pair := range [][2]StageRun{{s.Scanner, a.Scanner}, {s.Prober, a.Prober}, {s.Deleter, a.Deleter}} {
			small, big := pair[0].Usage.PeakRSS, pair[1].Usage.PeakRSS
			if small == 0 || big == 0 {
				continue
			}
			growth := float64(big)/float64(small) - 1
			w("| %s peak RSS, %s → %s blocks | %s → %s | | %+.0f%% | ≤ 150 MB, within 10%% | %s |\n", pair[1].Stage,
				num(float64(s.Blocks)), num(float64(a.Blocks)), mb(small), mb(big), 100*growth,
				yes(big <= TargetRSS && small <= TargetRSS && growth <= TargetRSSGrowth && growth >= -TargetRSSGrowth))
		}
	}
	if offs := servingP99s(r.Serving, ModeOff); offs != "" {
		for _, mode := range []string{ModeDefault, ModeUnpaced} {
			ps := servingP99s(r.Serving, mode)
			if ps == "" {
				continue
			}
			ratio := servingPaired(r.Serving, mode) - 1
			target, met := "", ""
			if mode == ModeDefault {
				target, met = "≤ +10%", yes(ratio <= TargetServing)
			}
			w("| serving p99 per window, kvcm-gc %s | %s | %s (kvcm-gc off) | %+.0f%% (median of each window against the off window before it) | %s | %s |\n",
				mode, ps, offs, 100*ratio, target, met)
		}
	}
	if b.Len() == rowsAt {
		b.Truncate(summaryAt) // a run of phases without a summary figure (stores, ab)
	} else {
		w("\n")
	}

	if st := r.Stores; st != nil && len(st.Runs) > 0 {
		w("### Scanner replicas over two metadata stores\n\n")
		w("Two stores, each a redis-server of its own holding %s blocks; one scanner round of both, timed from the first store's start to the last one's end; profile unpaced.\n\n",
			num(float64(st.BlocksPerStore)))
		w("| alternation | replicas | stores walked by each | keys | time | keys/s | vs one replica |\n|---|---|---|---|---|---|---|\n")
		var base float64
		for i, run := range st.Runs {
			walked := make([]string, len(run.Walked))
			for j, n := range run.Walked {
				walked[j] = strconv.Itoa(n)
			}
			if run.Replicas == 1 {
				base = run.Rate()
			}
			ratio := "1.00"
			if base > 0 {
				ratio = fmt.Sprintf("%.2f", run.Rate()/base)
			}
			w("| %d | %d | %s | %s | %s | %s | %s |\n", i/2+1, run.Replicas, strings.Join(walked, ", "), num(float64(run.Keys)),
				run.Dur.Round(time.Millisecond), num(run.Rate()), ratio)
		}
		if rs := st.Ratios(); len(rs) > 0 {
			sorted := slices.Sorted(slices.Values(rs))
			w("\nTwo replicas against one, median of %d alternations: **%.2f×** (in order: %s).\n", len(rs), sorted[len(sorted)/2], ratiosList(rs))
		}
		if len(st.Paced) > 0 {
			w("\nPaced, max_keys_per_second %s (a cap per store walk):\n\n", num(st.PacedCap))
			w("| replicas | stores walked by each | keys | time | keys/s | vs the cap of one walk |\n|---|---|---|---|---|---|\n")
			for _, run := range st.Paced {
				walked := make([]string, len(run.Walked))
				for j, n := range run.Walked {
					walked[j] = strconv.Itoa(n)
				}
				w("| %d | %s | %s | %s | %s | %.2f |\n", run.Replicas, strings.Join(walked, ", "), num(float64(run.Keys)),
					run.Dur.Round(time.Millisecond), num(run.Rate()), run.Rate()/st.PacedCap)
			}
		}
		w("\n")
	}

	w("### Keyspaces\n\n")
	w("| keyspace | blocks | locations | garbage | data files (links) | stat-probed specs | garbage files | seeded in | files linked in |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range []*Keyspace{r.Main, r.Small} {
		if k == nil {
			continue
		}
		n := k.Counts
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k.Spec.Cluster, num(float64(n.Blocks)), num(float64(n.Locations)),
			num(float64(n.Garbage)), num(float64(n.Files)), num(float64(n.StatSpecs)), num(float64(n.GarbageFiles)),
			n.SeedTime.Round(100*time.Millisecond), n.FilesTime.Round(100*time.Millisecond))
	}
	w("\n%d instances, %d locations per block, %.0f%% garbage (half orphan WRITING, half storage-missing SERVING), %.0f%% tricky live locations, seed %d.\n\n",
		c.Instances, c.Locations, 100*c.Garbage, 100*c.Tricky, c.Seed)

	if raw != nil {
		w("### Raw baselines (main keyspace)\n\n| operation | ops | time | ops/s |\n|---|---|---|---|\n")
		for _, row := range []struct {
			name string
			r    Rate
		}{
			{fmt.Sprintf("SCAN COUNT %d + pipelined HMGET, whole database", c.Unpaced.ScanBatchSize), raw.ScanBare},
			{"the same, per instance with a per-instance MATCH (the former walk)", raw.ScanMatch},
			{fmt.Sprintf("the same, per instance with MATCH and COUNT %d", c.Unpaced.ScanBatchSize*c.Instances), raw.ScanMatchWide},
			{"pipelined HGET __uri__", raw.HGet},
			{"pipelined EVALSHA, CAS script", raw.CAS},
			{"pipelined EVALSHA, CAD script", raw.CAD},
			{fmt.Sprintf("lstat(2), %d workers", raw.Workers), raw.Stat},
			{fmt.Sprintf("os.Root lstat, root opened per 512, %d workers", raw.Workers), raw.StatRoot},
			{fmt.Sprintf("os.Root lstat through a root per directory, %d workers", raw.Workers), raw.StatDirRoot},
			{fmt.Sprintf("unlink(2), %d workers", raw.Workers), raw.Unlink},
			{fmt.Sprintf("deleter protocol by hand: HGET, CAS, unlinks, HGET, CAD per location, %d workers", raw.SeqWorkers), raw.Sequential},
			{fmt.Sprintf("synchronous JetStream publish, %d kB per message (%d blocks)", raw.PublishBytes>>10, raw.ScanPerMsg), raw.Publish},
		} {
			w("| %s | %s | %s | %s |\n", row.name, num(float64(row.r.Ops)), row.r.Dur.Round(time.Millisecond), num(row.r.PerSec()))
		}
		if !raw.ScriptsMatch {
			w("\n**The harness's copies of the CAS/CAD scripts differ from kvcm-gc's**: the script rates may not be representative.\n")
		}
		w("\n")
	}

	for _, a := range []*AloneResults{r.Alone, r.AloneSmall} {
		if a == nil {
			continue
		}
		w("### Each stage alone, %s keyspace (%s blocks)\n\n", a.Keyspace, num(float64(a.Blocks)))
		w("| stage | work | time | rate | stage CPU | per 1k items | Redis CPU | NATS CPU | stage waited for a core | Redis waited | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range []StageRun{a.Scanner, a.Prober, a.Deleter} {
			if s.Stage == "" {
				continue
			}
			per := "–"
			if s.Items > 0 {
				per = (s.CPU.Stages * 1000 / time.Duration(s.Items)).Round(time.Microsecond).String()
			}
			w("| %s | %s %s | %s | %s/s | %s | %s | %s | %s | %s | %s | %s |\n", s.Stage, num(float64(s.Items)), unit(s.Stage),
				s.Dur.Round(time.Millisecond), num(s.Rate()), s.CPU.Stages.Round(10*time.Millisecond), per,
				s.CPU.Redis.Round(10*time.Millisecond), s.CPU.NATS.Round(10*time.Millisecond),
				s.CPU.StagesWait.Round(10*time.Millisecond), s.CPU.RedisWait.Round(10*time.Millisecond), mb(s.Usage.PeakRSS))
		}
		if a.ScanPages > 0 {
			w("\nThe scanner read %s pages (%.0f keys per page) and stored %s of batches in JetStream.\n",
				num(float64(a.ScanPages)), float64(a.Scanner.Items)/float64(a.ScanPages), mb(int64(a.PublishedBytes)))
		}
		w("\n%s\n\n", verification(a.Verification, a.Deleter.Metrics))
	}

	if e := r.E2E; e != nil && len(e.Runs) > 0 {
		w("### End to end, main keyspace\n\n%.1f s from starting the three stage processes until the round was over and both consumers drained; %s locations deleted.\n\n",
			e.Dur.Seconds(), num(float64(e.Deleted)))
		if raw != nil {
			w("The raw operations of the same collection, back to back, take %.1f s: reading every key %.1f s, the stat probe's lstats %.1f s (%.1f s through a root per directory), deleting the garbage %.1f s.\n\n",
				rawE2E(r).Seconds(), float64(r.Main.Counts.Blocks)/raw.ScanBare.PerSec(), float64(r.Main.Counts.StatSpecs)/raw.StatRoot.PerSec(),
				float64(r.Main.Counts.StatSpecs)/raw.StatDirRoot.PerSec(), float64(r.Main.Counts.Garbage)/composedDeleteRate(*raw, unlinkPerLocation(r.Main)))
		}
		w("Meanwhile the stages used %s of CPU, Redis %s, NATS %s (%.2f cores on average, of %d); the stages waited %s for a core, Redis %s.\n\n",
			e.CPU.Stages.Round(10*time.Millisecond), e.CPU.Redis.Round(10*time.Millisecond), e.CPU.NATS.Round(10*time.Millisecond),
			(e.CPU.Stages+e.CPU.Redis+e.CPU.NATS).Seconds()/e.Dur.Seconds(), m.Cores,
			e.CPU.StagesWait.Round(10*time.Millisecond), e.CPU.RedisWait.Round(10*time.Millisecond))
		w("| stage process | CPU | peak RSS |\n|---|---|---|\n")
		for _, s := range e.Runs {
			w("| %s | %s | %s |\n", s.Stage, s.Usage.CPU.Round(time.Millisecond), mb(s.Usage.PeakRSS))
		}
		w("\n%s\n\n", verification(e.Verification, e.Runs[len(e.Runs)-1].Metrics))
	}

	if len(r.Serving) > 0 {
		w("### Serving impact\n\nHMGET of random blocks at %d/s from 16 clients, %s per window, windows alternated; kvcm-gc in dry-run so every window sees the same keyspace. The summary compares each window with the kvcm-gc-off window just before it and takes the median over the repetitions.\n\n",
			c.ServingRate, c.ServingWindow)
		w("| window | kvcm-gc | requests | p50 | p99 | p99.9 | max | late | keys scanned by kvcm-gc | Redis CPU | Redis waited for a core | clients waited for a core |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for i, l := range r.Serving {
			w("| %d | %s | %s | %s | %s | %s | %s | %d | %s | %.0f%% | %s | %s |\n", i+1, l.Mode, num(float64(l.N)), us(l.P50), us(l.P99), us(l.P999), us(l.Max),
				l.Late, num(float64(l.GCKeys)), 100*l.CPU.Redis.Seconds()/max(l.CPU.Wall.Seconds(), 1e-9), l.CPU.RedisWait.Round(time.Millisecond),
				l.CPU.HarnessWait.Round(time.Millisecond))
		}
		w("\n")
	}

	if len(r.AB) > 0 {
		w("### A/B: `%s` (a) against `%s` (b), alternated\n\n", c.StageBin, c.ABStageBin)
		w("| stage | a | b | b / a |\n|---|---|---|---|\n")
		for _, st := range []string{stage.Scanner, stage.Prober, stage.Deleter} {
			var as, bs []string
			var sa, sb float64
			for _, pair := range r.AB {
				ra, rb := pick(pair[0], st).Rate(), pick(pair[1], st).Rate()
				as, bs = append(as, num(ra)), append(bs, num(rb))
				sa, sb = sa+ra, sb+rb
			}
			ratio := 0.0
			if sa > 0 {
				ratio = sb / sa
			}
			w("| %s (%s/s) | %s | %s | %.2f |\n", st, unit(st), strings.Join(as, ", "), strings.Join(bs, ", "), ratio)
		}
		w("\n")
	}

	w("### Configurations\n\n")
	for _, p := range []stage.Profile{c.Unpaced, stage.DefaultProfile()} {
		w("- **%s**: scan_interval %s, scan_batch_size %d, high-water %s, prober workers %d (max ack pending %d), deleter workers %d, max_inflight_delete_requests %d, probe %s.\n",
			p.Name, p.ScanInterval, p.ScanBatchSize, highWater(p.HighWater), p.ProberWorkers, p.ProberMaxAckPending, p.DeleterWorkers,
			p.DeleterMaxAckPending, map[bool]string{true: "stat", false: "none"}[p.ProbeStat])
	}
	w("\nThroughput, memory and end-to-end runs use %s; the serving windows use both, in dry-run. Each stage is a separate process; memory is its peak resident set (VmHWM).\n",
		c.Unpaced.Name)
	return b.String()
}

func ratiosList(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(parts, ", ")
}

func pick(a AloneResults, st string) StageRun {
	switch st {
	case stage.Scanner:
		return a.Scanner
	case stage.Prober:
		return a.Prober
	}
	return a.Deleter
}

// WriteReport puts the report into path between the markers of section, keeping whatever
// else the file holds (the analysis written around the figures); a file without the markers
// gets the section appended.
func WriteReport(path, section, report string) error {
	begin, end := "<!-- kvcmbench:"+section+":begin -->", "<!-- kvcmbench:"+section+":end -->"
	block := begin + "\n" + report + end
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read report: %w", err)
	}
	s := string(old)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + block + s[j+len(end):]
	case s == "":
		s = block + "\n"
	default:
		s = strings.TrimRight(s, "\n") + "\n\n" + block + "\n"
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// scanPublishRate is the keys per second of reading with SCAN + HMGET and storing every page
// with a synchronous JetStream publish, one after the other.
func scanPublishRate(r RawResults) float64 {
	scan, pub := r.ScanBare.PerSec(), r.Publish.PerSec()*float64(r.ScanPerMsg)
	if scan == 0 || pub == 0 {
		return 0
	}
	return 1 / (1/scan + 1/pub)
}

// statPerLocation is how many specs the stat probe looks at per location.
func statPerLocation(k *Keyspace) float64 {
	if k == nil || k.Counts.Locations == 0 {
		return 1
	}
	return float64(k.Counts.StatSpecs) / float64(k.Counts.Locations)
}

// rawE2E is the time the raw operations of a whole collection take back to back: read every
// key, stat every probed spec, delete every garbage location.
func rawE2E(r *Results) time.Duration {
	raw, k := r.Raw, r.Main
	s := float64(k.Counts.Blocks)/raw.ScanBare.PerSec() + float64(k.Counts.StatSpecs)/raw.StatRoot.PerSec() +
		float64(k.Counts.Garbage)/composedDeleteRate(*raw, unlinkPerLocation(k))
	return time.Duration(s * float64(time.Second))
}

// servingP99s lists the p99 of a mode's windows, in order.
func servingP99s(ls []Latency, mode string) string {
	var ps []string
	for _, l := range ls {
		if l.Mode == mode && l.N > 0 {
			ps = append(ps, us(l.P99))
		}
	}
	return strings.Join(ps, ", ")
}

// servingPaired is the median, over repetitions, of a mode's p99 divided by the p99 of the
// window with kvcm-gc off just before it: neighbouring windows share the machine's
// background load, so the pairs cancel most of it.
func servingPaired(ls []Latency, mode string) float64 {
	off := map[int]time.Duration{}
	for _, l := range ls {
		if l.Mode == ModeOff && l.N > 0 {
			off[l.Rep] = l.P99
		}
	}
	var rs []float64
	for _, l := range ls {
		if l.Mode == mode && l.N > 0 && off[l.Rep] > 0 {
			rs = append(rs, float64(l.P99)/float64(off[l.Rep]))
		}
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	if len(rs)%2 == 0 {
		return (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return rs[len(rs)/2]
}

func verification(v Verification, deleter stage.Metrics) string {
	s := "Verification: every garbage location and its files gone, every live location byte-identical."
	if !v.OK() {
		s = fmt.Sprintf("**Verification failed**: %d garbage locations left, %d live locations changed, %d blocks changed, %d garbage files left, %d sampled live files gone. %s",
			v.GarbageLeft, v.LiveChanged, v.BlocksChanged, v.FilesLeft, v.LiveFilesGone, strings.Join(v.Problems, "; "))
	}
	if deleter != nil {
		var outs []string
		for _, o := range []string{"deleted", "partial", "noop_mismatch", "noop_gone", "error"} {
			if n := deleter.Get("kvcm_gc_delete_results_total", "outcome", o); n > 0 {
				outs = append(outs, fmt.Sprintf("%s %s", o, num(n)))
			}
		}
		if len(outs) > 0 {
			s += " Deleter outcomes: " + strings.Join(outs, ", ") + "."
		}
	}
	return s
}

func unit(st string) string {
	switch st {
	case stage.Scanner:
		return "keys"
	default:
		return "locations"
	}
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func highWater(v uint64) string {
	if v >= 1<<60 {
		return "off"
	}
	return fmt.Sprint(v)
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }

func us(d time.Duration) string {
	if d >= 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%d µs", d.Microseconds())
}

// num formats a number with thousands separators.
func num(v float64) string {
	n := int64(v + 0.5)
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
