package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// paceSummaryRows are the summary rows of the pace phase: the curve in one row, then each
// target of the adaptive pacer against its baseline of the same run.
func paceSummaryRows(row func(measurement, gc, base, ratio, target, met string), lr *LayoutResults, p *PaceResults) {
	curve := paceCurve(p)
	var fixed []string
	var adaptive *PaceCurvePoint
	for i, c := range curve {
		if c.Point.Adaptive() {
			adaptive = &curve[i]
			continue
		}
		fixed = append(fixed, fmt.Sprintf("%s: %s keys/s measured, %+.0f%%", c.Point, num(c.KeysPerSec), 100*(c.Ratio()-1)))
	}
	if len(fixed) > 0 && len(curve) > 0 {
		row("serving p99 against the scan rate, fixed rates, pinned (pooled: every request of a rate's windows against every request of the curve's off windows)",
			strings.Join(fixed, "; "), fmt.Sprintf("%s (kvcm-gc off)", us(curve[0].OffP99)), "", "", "")
	}
	if a, b, ok := servingOffHalves(paceOffs(p), PinPinned); ok {
		row("serving p99 of the pace curve's kvcm-gc-off windows against themselves, pinned", us(a), us(b),
			fmt.Sprintf("%+.0f%% (pooled p99 of the odd repetitions' off windows against the even ones': what this run resolves)", 100*(float64(a)/float64(b)-1)), "", "")
	}
	if a := adaptive; a != nil && a.N > 0 {
		row(fmt.Sprintf("serving p99, adaptive walk (latency_budget %g) once settled, pinned", a.Point.Budget),
			fmt.Sprintf("%s at %s keys/s measured (pace %s keys/s in bursts of %.0f)", us(a.P99), num(a.KeysPerSec), num(a.Rate), a.Burst),
			fmt.Sprintf("%s (kvcm-gc off, every off window of the curve)", us(a.OffP99)),
			fmt.Sprintf("%+.0f%% pooled (%s requests)", 100*(a.Ratio()-1), num(float64(a.N))),
			fmt.Sprintf("≤ +%.0f%%", 100*TargetPaceServing), yes(a.OffP99 > 0 && a.Ratio()-1 <= TargetPaceServing))
	}
	if ad, un := p.Adaptive, p.Unpaced; ad != nil && un != nil && ad.Dur > 0 && un.Dur > 0 {
		ratio := ad.Rate() / un.Rate()
		took := fmt.Sprintf("%s keys/s (%.1f s)", num(ad.Rate()), ad.Dur.Seconds())
		if ad.Partial {
			took = fmt.Sprintf("%s keys/s (not over after %.1f s: %s keys so far)", num(ad.Rate()), ad.Dur.Seconds(), num(float64(ad.Keys)))
		}
		row("adaptive round of the keyspace, read load running, pinned", took,
			fmt.Sprintf("%s keys/s (an unpaced round under the same load, %.1f s)", num(un.Rate()), un.Dur.Seconds()),
			fmt.Sprintf("%.2f", ratio), fmt.Sprintf("≥ %.2f", TargetPaceRoundRate), yes(ratio >= TargetPaceRoundRate))
		if a := lr.Alone; a != nil && a.Scanner.Rate() > 0 {
			row("adaptive round, vs the scanner alone (unpaced, both cores, no read load)", num(ad.Rate())+" keys/s",
				num(a.Scanner.Rate())+" keys/s", fmt.Sprintf("%.2f", ad.Rate()/a.Scanner.Rate()), "", "")
		}
	}
	if len(p.RoundOff) == 3 {
		for _, rd := range []struct {
			r    *PaceRound
			offs []Latency
		}{{p.Unpaced, p.RoundOff[:2]}, {p.Adaptive, p.RoundOff[1:]}} {
			if rd.r == nil || rd.r.Lat.N == 0 {
				continue
			}
			ratio, off := pacePooledAgainst(rd.r.Lat, rd.offs)
			target, met := "", ""
			if rd.r.Point.Adaptive() {
				target, met = fmt.Sprintf("≤ +%.0f%%", 100*TargetPaceServing), yes(off > 0 && ratio-1 <= TargetPaceServing)
			}
			row(fmt.Sprintf("serving p99 during the %s round, pinned", roundName(rd.r.Point)),
				fmt.Sprintf("%s (%s requests)", us(rd.r.Lat.P99), num(float64(rd.r.Lat.N))),
				fmt.Sprintf("%s (kvcm-gc off, the windows just before and after)", us(off)),
				fmt.Sprintf("%+.0f%% pooled", 100*(ratio-1)), target, met)
		}
	}
	if st := p.Step; st != nil && !st.Up.IsZero() && !st.End.IsZero() {
		up := stepReaction(st.Samples, st.Up, st.Down, true)
		row(fmt.Sprintf("load step %s → %s requests/s during an adaptive walk: time until its rate falls", num(float64(st.From)), num(float64(st.To))),
			reactionText(up, "fell", st.Down.Sub(st.Up)), "", "",
			fmt.Sprintf("≤ %s", TargetPaceReaction), yes(up.Reacted && up.Took <= TargetPaceReaction))
		down := stepReaction(st.Samples, st.Down, st.End, false)
		row(fmt.Sprintf("load back %s → %s requests/s: time until its rate rises", num(float64(st.To)), num(float64(st.From))),
			reactionText(down, "rose", st.End.Sub(st.Down)), "", "", "", "")
	}
}

func roundName(p PacePoint) string {
	if p.Adaptive() {
		return "adaptive"
	}
	return "unpaced"
}

// reactionText is "1.2 s (24,000 → 19,200 keys/s; 15,000 at the end)".
func reactionText(r StepReaction, moved string, watched time.Duration) string {
	if !r.Reacted {
		return fmt.Sprintf("never in %s (pace %s keys/s at the step, %s; %s at the end)", watched.Round(time.Second), num(r.At), r.Reason, num(r.Final))
	}
	return fmt.Sprintf("%.1f s (%s from %s keys/s, %s at the step, to %s; %s at the end, %s later)", r.Took.Seconds(), moved, num(r.At), r.Reason,
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
	w("Pinned placement (Redis and the read load on one core, kvcm-gc's three stages and NATS on the other), stages in dry-run with the unpaced profile (scan_interval 1ns, high-water off, rounds back to back) and the scanner's rate, page size (scan_batch_size: the keys of one pipelined burst at a fixed rate) or latency_budget as named. ")
	w("The read load (%s of random blocks at %d/s from 16 clients) runs from %s before the stages start until they stop, so an adaptive walk measures its idle baseline under it, as it would in production. ",
		read, c.ServingRate, loadLead)
	w("A window is the %s of requests sent after the walk is at its pace: a fixed pace a second after its first round began, the adaptive pace %s after it left its baseline hold. Each point's window follows a kvcm-gc-off window, %d repetitions; a point's p99 pools every request of its windows, against every request of every off window of the curve.\n\n",
		c.ServingWindow, paceSettle, max(c.PaceReps, 1))
	curve := paceCurve(p)
	w("| scanner | windows | keys/s measured | pace (adaptive: mean over its windows) | requests | p99 pooled | vs kvcm-gc off |\n|---|---|---|---|---|---|---|\n")
	for _, cp := range curve {
		pace := "–"
		if cp.Point.Adaptive() {
			pace = fmt.Sprintf("%s keys/s, bursts of %.0f", num(cp.Rate), cp.Burst)
		}
		w("| %s | %d | %s | %s | %s | %s | %+.0f%% |\n", cp.Point, cp.Windows, num(cp.KeysPerSec), pace, num(float64(cp.N)), us(cp.P99), 100*(cp.Ratio()-1))
	}
	offs := paceOffs(p)
	off, n := pooledP99(offs, func(Latency) bool { return true })
	w("| kvcm-gc off | %d | – | – | %s | %s | |\n", len(offs), num(float64(n)), us(off))
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

	if p.Unpaced != nil || p.Adaptive != nil {
		w("\n**Rounds.** One whole round of the keyspace unpaced, then adaptive (round_pause 24h: one round), timed by the scanner's checkpoint from the round's start to its end (an adaptive round includes its %s baseline hold and its slow start), the read load running all through each; kvcm-gc-off windows of %s before, between and after. An adaptive round not over after ten times the unpaced round's time (at least a minute) is measured as far as it got.\n\n",
			2*time.Second, c.ServingWindow)
		w("| round | keys | time | keys/s | pace (mean) | requests | p99 | p99, off windows before and after |\n|---|---|---|---|---|---|---|---|\n")
		for i, rd := range []*PaceRound{p.Unpaced, p.Adaptive} {
			if rd == nil {
				continue
			}
			pace := "–"
			if rd.Point.Adaptive() {
				r, b := paceMean(rd.Pace)
				pace = fmt.Sprintf("%s keys/s, bursts of %.0f", num(r), b)
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
			w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, num(float64(rd.Keys)), rd.Dur.Round(time.Millisecond), num(rd.Rate()),
				pace, num(float64(rd.Lat.N)), us(rd.Lat.P99), offTxt)
		}
	}

	if st := p.Step; st != nil && !st.End.IsZero() {
		w("\n**Load step.** An adaptive walk (latency_budget %g, rounds back to back) under %s requests/s, %s after it left its baseline hold watched for %s, then the load raised to %s requests/s for %s, then back to %s for %s; its pace read from the scanner's /metrics and its progress from its checkpoint every %s.\n\n",
			st.Budget, num(float64(st.From)), paceSettle, st.Up.Sub(st.SettledAt).Round(time.Second), num(float64(st.To)), st.Down.Sub(st.Up).Round(time.Second),
			num(float64(st.From)), st.End.Sub(st.Down).Round(time.Second), pacePoll)
		w("| period | load | pace at its start → end | times the pace fell | keys/s measured | p99 |\n|---|---|---|---|---|---|\n")
		for _, per := range []struct {
			name     string
			load     int
			from, to time.Time
			lat      Latency
		}{{"before the step", st.From, st.SettledAt, st.Up, st.Before}, {"after the step up", st.To, st.Up, st.Down, st.During},
			{"after the step down", st.From, st.Down, st.End, st.After}} {
			a, b := paceAt(st.Samples, per.from), paceAt(st.Samples, per.to)
			w("| %s | %s/s | %s → %s keys/s | %d | %s | %s |\n", per.name, num(float64(per.load)), num(a), num(b),
				paceFalls(st.Samples, per.from, per.to), num(visitedRate(st.Samples, per.from, per.to)), us(per.lat.P99))
		}
		w("\nThe walk's pace in order, one entry per change, from the step up: keys/s/burst, why, and the probe latency quantile the decision compared against the idle store's:\n\n%s\n", paceChanges(st))
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

// paceChanges lists the step's pace changes with their time from the step up.
func paceChanges(st *PaceStep) string {
	var parts []string
	var last PaceSample
	for _, x := range st.Samples {
		if x.Reason == "" || (x.Rate == last.Rate && x.Burst == last.Burst && x.Reason == last.Reason) {
			continue
		}
		last = x
		part := fmt.Sprintf("%+.1f s %s/%d %s", x.At.Sub(st.Up).Seconds(), num(x.Rate), x.Burst, x.Reason)
		if x.Probe > 0 { // none for the decision that ends the baseline hold
			part += fmt.Sprintf(" (%s against %s idle)", us(x.Probe), us(x.Idle))
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}
