package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
)

// paceSummaryRows are the summary rows of the pace phase: the curve in one row, then each
// target of the duty pace against its baseline of the same run.
func paceSummaryRows(row func(measurement, gc, base, ratio, target, met string), lr *LayoutResults, p *PaceResults) {
	curve := paceCurve(p)
	var fixed []string
	for _, c := range curve {
		if !c.Point.Paced() {
			fixed = append(fixed, fmt.Sprintf("%s: %s keys/s measured, %+.0f%%", c.Point, num(c.KeysPerSec), 100*(c.Ratio()-1)))
		}
	}
	if len(fixed) > 0 && len(curve) > 0 {
		row("serving p99 against the scan rate, fixed rates, pinned (pooled: every request of a rate's windows against every request of the curve's off windows)",
			strings.Join(fixed, "; "), fmt.Sprintf("%s (kvcm-gc off)", us(curve[0].OffP99)), "", "", "")
	}
	offA, offB, resolved := servingOffHalves(paceOffs(p), PinPinned)
	if resolved {
		row("serving p99 of the pace curve's kvcm-gc-off windows against themselves, pinned", us(offA), us(offB),
			fmt.Sprintf("%+.0f%% (pooled p99 of the odd repetitions' off windows against the even ones': what this run resolves)", 100*(float64(offA)/float64(offB)-1)), "", "")
	}
	for _, c := range curve {
		if !c.Point.Paced() || c.N == 0 {
			continue
		}
		row(fmt.Sprintf("%s, read load running, pinned: the walk's share of Redis's main-thread CPU (INFO cpu, less the off window's before each window)", c.Point),
			fmt.Sprintf("%.3f (pacer's own measure: %s) at %s keys/s", c.CPUShare, c.pacerShare(), num(c.KeysPerSec)),
			fmt.Sprintf("duty %g", c.Point.Duty), fmt.Sprintf("%+.1f points", 100*(c.CPUShare-c.Point.Duty)),
			fmt.Sprintf("within ±%.0f points", 100*TargetDutyShare), yes(math.Abs(c.CPUShare-c.Point.Duty) <= TargetDutyShare))
		row(fmt.Sprintf("serving p99, %s, pinned", c.Point),
			fmt.Sprintf("%s (%s requests)", us(c.P99), num(float64(c.N))),
			fmt.Sprintf("%s (kvcm-gc off, every off window of the curve)", us(c.OffP99)),
			fmt.Sprintf("%+.0f%% pooled (off against off: %s)", 100*(c.Ratio()-1), offSpread(offA, offB, resolved)), "", "")
	}
	if d, un := p.Duty, p.Unpaced; d != nil && un != nil && d.Dur > 0 && un.Dur > 0 {
		took := fmt.Sprintf("%s keys/s (%.1f s)", num(d.Rate()), d.Dur.Seconds())
		if d.Partial {
			took = fmt.Sprintf("%s keys/s (not over after %.1f s: %s keys so far)", num(d.Rate()), d.Dur.Seconds(), num(float64(d.Keys)))
		}
		row(fmt.Sprintf("round of the keyspace at the default duty (%g), read load running, pinned", d.Point.Duty), took,
			fmt.Sprintf("%s keys/s (an unpaced round under the same load, %.1f s)", num(un.Rate()), un.Dur.Seconds()),
			fmt.Sprintf("%.2f", d.Rate()/un.Rate()), "", "")
		if len(p.RoundOffWork) == 3 {
			share := d.Work.Share() - (p.RoundOffWork[1].Share()+p.RoundOffWork[2].Share())/2
			row("the default duty's round: its share of Redis's main-thread CPU (INFO cpu, less the off windows' before and after)",
				fmt.Sprintf("%.3f", share), fmt.Sprintf("duty %g", d.Point.Duty), fmt.Sprintf("%+.1f points", 100*(share-d.Point.Duty)),
				fmt.Sprintf("within ±%.0f points", 100*TargetDutyShare), yes(math.Abs(share-d.Point.Duty) <= TargetDutyShare))
		}
		if d.Rate() > 0 {
			t100 := time.Duration(blocks100M / d.Rate() * float64(time.Second))
			row("a 100M-block round at the default duty, extrapolated from its round's rate (the cost per key at this keyspace's size)",
				fmt.Sprintf("%.2f h", t100.Hours()), "", "", fmt.Sprintf("≤ %.0f h", TargetRound100M.Hours()), yes(t100 <= TargetRound100M))
		}
		if a := lr.Alone; a != nil && a.Scanner.Rate() > 0 {
			row("round at the default duty, vs the scanner alone (unpaced, both cores, no read load)", num(d.Rate())+" keys/s",
				num(a.Scanner.Rate())+" keys/s", fmt.Sprintf("%.2f", d.Rate()/a.Scanner.Rate()), "", "")
		}
	}
	if len(p.RoundOff) == 3 {
		for _, rd := range []struct {
			r    *PaceRound
			offs []Latency
		}{{p.Unpaced, p.RoundOff[:2]}, {p.Duty, p.RoundOff[1:]}} {
			if rd.r == nil || rd.r.Lat.N == 0 {
				continue
			}
			ratio, off := pacePooledAgainst(rd.r.Lat, rd.offs)
			row(fmt.Sprintf("serving p99 during the %s round, pinned", roundName(rd.r.Point)),
				fmt.Sprintf("%s (%s requests)", us(rd.r.Lat.P99), num(float64(rd.r.Lat.N))),
				fmt.Sprintf("%s (kvcm-gc off, the windows just before and after)", us(off)),
				fmt.Sprintf("%+.0f%% pooled (off against off: %s)", 100*(ratio-1), offSpread(offA, offB, resolved)), "", "")
		}
	}
	if st := p.Step; st != nil && !st.Up.IsZero() && !st.End.IsZero() {
		up := stepReaction(st.Samples, st.Up, st.Down, true)
		row(fmt.Sprintf("load step %s → %s requests/s during a walk at duty %g: time until its rate falls", num(float64(st.From)), num(float64(st.To)), st.Duty),
			reactionText(up, "fell", st.Down.Sub(st.Up)), "", "",
			fmt.Sprintf("≤ %s", TargetPaceReaction), yes(up.Reacted && up.Took <= TargetPaceReaction))
		down := stepReaction(st.Samples, st.Down, st.End, false)
		row(fmt.Sprintf("load back %s → %s requests/s: time until its rate rises", num(float64(st.To)), num(float64(st.From))),
			reactionText(down, "rose", st.End.Sub(st.Down)), "", "", "", "")
		if st.IdleFrom.Wall > 0 && st.IdleTo.Wall > 0 && st.WorkDuring.Wall > 0 {
			b, d, a := st.StepShares()
			row("the load step's walk: its share of Redis's main-thread CPU before, during and after the step (INFO cpu, less the read load's own at each rate without the walk)",
				fmt.Sprintf("%.3f, %.3f, %.3f (read load alone: %.3f at %s/s, %.3f at %s/s)", b, d, a,
					st.IdleFrom.Share(), num(perSec(st.IdleFromLat.N, st.IdleFrom.Wall)), st.IdleTo.Share(), num(perSec(st.IdleToLat.N, st.IdleTo.Wall))),
				fmt.Sprintf("duty %g", st.Duty), fmt.Sprintf("%+.1f points during the step", 100*(d-st.Duty)),
				fmt.Sprintf("≤ duty + %.0f points in each period", 100*TargetDutyShare),
				yes(max(b, d, a) <= st.Duty+TargetDutyShare))
		}
	}
}

// perSec is n over d, per second (0 without time).
func perSec(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// offSpread is the off windows' spread against themselves, for beside a p99 ratio.
func offSpread(a, b time.Duration, ok bool) string {
	if !ok || b <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%+.0f%%", 100*(float64(a)/float64(b)-1))
}

func roundName(p PacePoint) string {
	if p.Paced() {
		return fmt.Sprintf("duty %g", p.Duty)
	}
	return "unpaced"
}

// reactionText is "1.2 s (24,000 → 19,200 keys/s; 15,000 at the end)".
func reactionText(r StepReaction, moved string, watched time.Duration) string {
	if !r.Reacted {
		return fmt.Sprintf("never in %s (%s keys/s at the step; %s at the end)", watched.Round(time.Second), num(r.At), num(r.Final))
	}
	return fmt.Sprintf("%.1f s (%s from %s keys/s at the step to %s; %s at the end, %s later)", r.Took.Seconds(), moved, num(r.At),
		num(r.First), num(r.Final), watched.Round(time.Second))
}

// paceReport is the pace phase's section of one layout.
func paceReport(w func(string, ...any), c Config, lr *LayoutResults) {
	p, lay := lr.Pace, lr.Layout
	read := "HGETALL"
	if lay == kvcm.LayoutLegacy {
		read = "HMGET __uri__ __lru_time__"
	}
	w("### Scan rate against serving latency, %s layout\n\n", lay)
	w("Pinned placement (Redis and the read load on one core, kvcm-gc's three stages and NATS on the other), stages in dry-run with the unpaced profile (scanner.duty 0, scan_interval 1ns, high-water off, rounds back to back) and the scanner's rate, page size (scan_batch_size: the keys of one pipelined burst at a fixed rate) or scanner.duty (pages read in bursts of scanner.burst_keys) as named. ")
	w("The read load (%s of random blocks at %d/s from 16 clients) runs from %s before the stages start until they stop. ",
		read, c.ServingRate, loadLead)
	w("A window is the %s of requests sent %s after the walk's first round began. Each point's window follows a kvcm-gc-off window, %d repetitions; a point's p99 pools every request of its windows, against every request of every off window of the curve. ",
		c.ServingWindow, paceSettle, max(c.PaceReps, 1))
	w("Redis CPU is the main thread's (INFO cpu: used_cpu_user_main_thread + used_cpu_sys_main_thread) over the window's wall time, less the same share of the off window just before it (the read load's own); the pacer's share is the scanner's own measure (Redis's clock over each round trip, kvcm_gc_store_pace_share_ratio). The longest stall one round trip adds, from the page: a fixed pace sends a page of scan_batch_size keys in one pipeline, a duty pace bursts of %d; at the cost per key of the cost phase (Redis CPU per key walked) that is the bound in the table.\n\n", scanner.DefaultBurstKeys)
	curve := paceCurve(p)
	perKey := costPerKey(lr)
	w("| scanner | windows | keys/s measured | Redis CPU share (walk) | pacer's share | longest stall of one round trip | requests | p99 pooled | vs kvcm-gc off |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, cp := range curve {
		pacer, burst := "–", cp.Point.Batch
		if cp.Point.Paced() {
			pacer, burst = cp.pacerShare(), scanner.DefaultBurstKeys
		}
		stall := "–"
		if perKey > 0 {
			stall = fmt.Sprintf("%d × %.2f µs = %s", burst, perKey.Seconds()*1e6, us(time.Duration(burst)*perKey))
		}
		w("| %s | %d | %s | %.3f | %s | %s | %s | %s | %+.0f%% |\n", cp.Point, cp.Windows, num(cp.KeysPerSec), cp.CPUShare, pacer, stall, num(float64(cp.N)), us(cp.P99), 100*(cp.Ratio()-1))
	}
	offs := paceOffs(p)
	off, n := pooledP99(offs, func(Latency) bool { return true })
	w("| kvcm-gc off | %d | – | – | – | – | %s | %s | |\n", len(offs), num(float64(n)), us(off))
	if a, b, ok := servingOffHalves(offs, PinPinned); ok {
		w("\nThe off windows of odd repetitions against those of even ones, pooled: %s against %s, %+.0f%% (what this run resolves).\n", us(a), us(b), 100*(float64(a)/float64(b)-1))
	}
	w("\n| window | rep | scanner | keys/s | p50 | p99 | max | late |\n|---|---|---|---|---|---|---|---|\n")
	for i, pw := range p.Windows {
		name := ModeOff
		if pw.Point >= 0 && pw.Point < len(p.Points) {
			name = p.Points[pw.Point].String()
		}
		w("| %d | %d | %s | %s | %s | %s | %s | %d |\n", i+1, pw.Rep, name, num(Rate{Ops: int(pw.Keys), Dur: pw.Dur}.PerSec()),
			us(pw.Lat.P50), us(pw.Lat.P99), us(pw.Lat.Max), pw.Lat.Late)
	}

	if p.Unpaced != nil || p.Duty != nil {
		w("\n**Rounds.** One whole round of the keyspace unpaced, then at the default duty (round_pause 24h: one round), timed by the scanner's checkpoint from the round's start to its end, the read load running all through each; kvcm-gc-off windows of %s before, between and after. A paced round not over after ten times the unpaced round's time (at least a minute) is measured as far as it got. Redis CPU is the main thread's share over the round (INFO cpu), beside the off windows'; 100M blocks is the round's time at its rate.\n\n",
			c.ServingWindow)
		w("| round | keys | time | keys/s | 100M blocks at this rate | Redis CPU share (off windows) | pacer's share (mean) | requests | p99 | p99, off windows before and after |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for i, rd := range []*PaceRound{p.Unpaced, p.Duty} {
			if rd == nil {
				continue
			}
			pace := "–"
			if rd.Point.Paced() {
				_, sh := paceMean(rd.Pace)
				pace = fmt.Sprintf("%.3f", sh)
			}
			t100, cpu := "–", fmt.Sprintf("%.3f", rd.Work.Share())
			if rd.Rate() > 0 {
				t100 = fmt.Sprintf("%.2f h", blocks100M/rd.Rate()/3600)
			}
			if len(p.RoundOffWork) >= i+2 {
				cpu += fmt.Sprintf(" (%.3f, %.3f)", p.RoundOffWork[i].Share(), p.RoundOffWork[i+1].Share())
			}
			offTxt := "–"
			if len(p.RoundOff) >= i+2 {
				_, o := pacePooledAgainst(rd.Lat, p.RoundOff[i:i+2])
				offTxt = us(o)
			}
			name := roundName(rd.Point)
			if rd.Partial {
				name += " (not over: its progress when the time allowed ran out)"
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, num(float64(rd.Keys)), rd.Dur.Round(time.Millisecond), num(rd.Rate()),
				t100, cpu, pace, num(float64(rd.Lat.N)), us(rd.Lat.P99), offTxt)
		}
	}

	if st := p.Step; st != nil && !st.End.IsZero() {
		w("\n**Load step.** A walk at duty %g (rounds back to back) under %s requests/s, %s after its first round began watched for %s, then the load raised to %s requests/s for %s, then back to %s for %s; its progress read from its checkpoint and its pace from the scanner's /metrics every %s, its rate over the second before each reading.\n\n",
			st.Duty, num(float64(st.From)), paceSettle, st.Up.Sub(st.SettledAt).Round(time.Second), num(float64(st.To)), st.Down.Sub(st.Up).Round(time.Second),
			num(float64(st.From)), st.End.Sub(st.Down).Round(time.Second), pacePoll)
		w("Redis CPU is the main thread's share over each period (INFO cpu read at its start and end); the read load's own share at each rate was read over %s without the walk before it started (%s/s asked, %s done: %.3f; %s/s asked, %s done: %.3f), and the walk's share is the period's less its rate's.\n\n",
			stepIdle, num(float64(st.From)), num(perSec(st.IdleFromLat.N, st.IdleFrom.Wall)), st.IdleFrom.Share(),
			num(float64(st.To)), num(perSec(st.IdleToLat.N, st.IdleTo.Wall)), st.IdleTo.Share())
		w("| period | load asked | requests/s done | rate at its start → end | times the rate fell | keys/s measured | Redis CPU share | walk's share | duty | p99 |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, per := range []struct {
			name       string
			load       int
			from, to   time.Time
			lat        Latency
			work, idle RedisWork
		}{{"before the step", st.From, st.SettledAt, st.Up, st.Before, st.WorkBefore, st.IdleFrom},
			{"after the step up", st.To, st.Up, st.Down, st.During, st.WorkDuring, st.IdleTo},
			{"after the step down", st.From, st.Down, st.End, st.After, st.WorkAfter, st.IdleFrom}} {
			a, b := paceAt(st.Samples, per.from), paceAt(st.Samples, per.to)
			cpu, walk := "–", "–"
			if per.work.Wall > 0 {
				cpu = fmt.Sprintf("%.3f", per.work.Share())
				if per.idle.Wall > 0 {
					walk = fmt.Sprintf("%.3f", walkShare(per.work, per.idle))
				}
			}
			w("| %s | %s/s | %s | %s → %s keys/s | %d | %s | %s | %s | %g | %s |\n", per.name, num(float64(per.load)), num(perSec(per.lat.N, per.to.Sub(per.from))), num(a), num(b),
				paceFalls(st.Samples, per.from, per.to), num(visitedRate(st.Samples, per.from, per.to)), cpu, walk, st.Duty, us(per.lat.P99))
		}
	}
	w("\n")
}

// paceOffs are the latencies of the curve's kvcm-gc-off windows.
func paceOffs(p *PaceResults) []Latency {
	var offs []Latency
	for _, pw := range p.Windows {
		if pw.Point < 0 {
			offs = append(offs, pw.Lat)
		}
	}
	return offs
}

// paceAt is the pace of the last sample at or before at that says one (0 without one).
func paceAt(s []PaceSample, at time.Time) float64 {
	var v float64
	for _, x := range s {
		if x.At.After(at) {
			break
		}
		if paced(x) {
			v = x.Rate
		}
	}
	return v
}

// costPerKey is Redis's main-thread CPU per key the scanner walked: from the scanner alone
// where it ran, else from the unpaced round less the read load's share of its off windows.
func costPerKey(lr *LayoutResults) time.Duration {
	if a := lr.Alone; a != nil && a.Scanner.Items > 0 && a.Scanner.CPU.RedisMain > 0 {
		return a.Scanner.CPU.RedisMain / time.Duration(a.Scanner.Items)
	}
	p := lr.Pace
	if p == nil || p.Unpaced == nil || p.Unpaced.Keys <= 0 || len(p.RoundOffWork) < 2 {
		return 0
	}
	w := p.Unpaced.Work
	load := (p.RoundOffWork[0].Share() + p.RoundOffWork[1].Share()) / 2
	main := w.Main - time.Duration(load*float64(w.Wall))
	if main <= 0 {
		return 0
	}
	return main / time.Duration(p.Unpaced.Keys)
}
