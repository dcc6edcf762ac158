package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// The deleter-duty phase runs each stage alone on the main keyspace, as the alone phase does,
// once for each delete_duty of Config.DeleterDuties (0: off), the keyspace restored before
// each: the deleter's share of Redis's main thread (Redis's own count of its main thread's CPU
// time over the deleter's drain, /proc) against the duty, its rate, and a verification that
// the paced deleter still removed exactly the garbage. The scanner and the prober run
// unpaced, as in the alone phase; only the deleter's delete_duty changes.

// DeleterDutyRun is the deleter alone under one delete_duty.
type DeleterDutyRun struct {
	Duty    float64
	Rep     int
	Deleter StageRun
	// Verification is the keyspace checked after the deleter (every garbage location gone,
	// every live one intact).
	Verification Verification
}

// MainShare is the share of Redis's main thread busy while the deleter drained its requests.
func (r DeleterDutyRun) MainShare() float64 {
	if r.Deleter.CPU.Wall <= 0 {
		return 0
	}
	return r.Deleter.CPU.RedisMain.Seconds() / r.Deleter.CPU.Wall.Seconds()
}

// deleterDuty runs the phase; restore puts the main keyspace back before each run but the
// first when nothing collected it yet.
func (h *Harness) deleterDuty(ctx context.Context, phase func(string) string, k *Keyspace, restore func() error) ([]DeleterDutyRun, error) {
	var out []DeleterDutyRun
	for rep := 1; rep <= max(h.cfg.DeleterDutyReps, 1); rep++ {
		duties := slices.Clone(h.cfg.DeleterDuties)
		if rep%2 == 0 {
			slices.Reverse(duties)
		}
		for _, d := range duties {
			if err := restore(); err != nil {
				return out, err
			}
			p := h.cfg.Unpaced
			p.DeleteDuty = d
			a, err := h.runAlone(ctx, phase(fmt.Sprintf("deleter-duty-%g-%d", d, rep)), k, p)
			run := DeleterDutyRun{Duty: d, Rep: rep, Deleter: a.Deleter, Verification: a.Verification}
			out = append(out, run)
			if err != nil {
				return out, err
			}
			h.log.Info("deleter under delete_duty", "duty", d, "rep", rep, "locations", a.Deleter.Items,
				"took", a.Deleter.Dur.Round(time.Millisecond), "redis_main_share", fmt.Sprintf("%.3f", run.MainShare()))
		}
	}
	return out, nil
}

// deleterDutyReport is the phase's section of one layout.
func deleterDutyReport(w func(string, ...any), c Config, lay fmt.Stringer, runs []DeleterDutyRun) {
	if len(runs) == 0 {
		return
	}
	w("### The deleter under delete_duty, %s layout\n\n", lay)
	w("Each stage alone on the main keyspace (the scanner and the prober unpaced, as in the alone phase), the keyspace restored before each run, the deleter's `delete_duty` as named (0: off, its in-flight cap alone: %d requests in flight, %d workers). Redis's main thread busy is Redis's own count of its main thread's CPU time over the deleter's drain, against the duty. The deleter times each pipeline by its round trip, which counts the client's and the network's time too: Redis's share stays below the duty.\n\n",
		c.Unpaced.DeleterMaxAckPending, c.Unpaced.DeleterWorkers)
	w("| delete_duty | run | locations deleted | time | locations/s | Redis main thread busy | Redis CPU | deleter CPU | deleter waited for a core | verification |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		s := r.Deleter
		duty := "0 (off)"
		if r.Duty > 0 {
			duty = fmt.Sprintf("%.2f", r.Duty)
		}
		w("| %s | %d | %s | %s | %s | %.3f | %s | %s | %s | %s |\n", duty, r.Rep, num(float64(s.Items)), s.Dur.Round(time.Millisecond), num(s.Rate()),
			r.MainShare(), s.CPU.Redis.Round(10*time.Millisecond), s.CPU.Stages.Round(10*time.Millisecond), s.CPU.StagesWait.Round(10*time.Millisecond),
			verifiedCell(r.Verification))
	}
	w("\n")
}

// verifiedCell is a verification in a table cell.
func verifiedCell(v Verification) string {
	if v.OK() {
		return "exactly the garbage gone"
	}
	return fmt.Sprintf("**failed**: %d garbage left, %d live changed", v.GarbageLeft, v.LiveChanged+v.BlocksChanged)
}
