package faults

import (
	"bufio"
	"context"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/tools/trend"
)

// Steadiness. All the time, every stage process's own /metrics is read every samplePoll,
// and each round keeps, from its start to its end, the smallest reading of each figure: the
// process at rest between bursts of work (goroutines come and go with the messages in flight,
// a fault's disturbance passes):
//   - rss (process_resident_memory_bytes), goroutines (go_goroutines) and fds
//     (process_open_fds);
//   - heap_live (go_gc_heap_live_bytes): the heap the last collection found live. A heap read
//     at a random point of its GC cycle (go_memstats_heap_alloc_bytes) is anywhere between that
//     and the goal, five times as much at the stages' GOGC of 400, which would drown any trend;
//   - heap_inuse: the heap's spans in use (go_memstats_heap_inuse_bytes) less what was
//     allocated since the last collection (heap_alloc - heap_live): the live heap with its
//     fragmentation, which a leak of half-empty spans raises.
//
// A leak raises these floors round after round. The rule (SteadyRule): over the last Window
// rounds, the slope of each figure per round, fitted with a 95% confidence interval, must be
// under MaxSlope of the figure's mean. The samples wander (a heap that held a large batch at the
// round's collections, a resident set that keeps its last peak until the scavenger returns it),
// so the slope is fitted through the means of batches of Batch rounds (trend.FitSegments), and
// with a level of its own for each process: a stage a fault restarted starts over lower, which
// is neither a decline nor a leak, and its first WarmRounds rounds, while it fills its heap and
// pools, are left out. A figure grows when even the interval's low end is above the limit, is
// flat when its high end is not, and otherwise the run could not tell: in a long run
// (Conclude) that fails it too, since a run too short to tell has shown nothing.

// stageMetrics are the figures sampled, by name, with the metric they come from.
var stageMetrics = []struct{ name, metric string }{
	{"rss", "process_resident_memory_bytes"},
	{"heap_live", "go_gc_heap_live_bytes"},
	{"heap_inuse", heapInuseAtGC},
	{"goroutines", "go_goroutines"},
	{"fds", "process_open_fds"},
}

// heapInuseAtGC names the figure derived from three of the readings (see above).
const heapInuseAtGC = "heap_inuse_at_gc"

// deriveHeapInuse adds heapInuseAtGC to a reading that has its three figures.
func deriveHeapInuse(vals map[string]float64) {
	inuse, ok1 := vals["go_memstats_heap_inuse_bytes"]
	alloc, ok2 := vals["go_memstats_heap_alloc_bytes"]
	live, ok3 := vals["go_gc_heap_live_bytes"]
	if ok1 && ok2 && ok3 {
		vals[heapInuseAtGC] = inuse - max(alloc-live, 0)
	}
}

const (
	samplePoll = 200 * time.Millisecond
)

// stageSample is one stage process's figures over one round.
type stageSample struct {
	Stage, Proc string
	Round       uint64
	// Age is how many rounds the process had been running at the sample (1: it started
	// during this round).
	Age    int
	Values map[string]float64
}

// procFloor is what the readings of one stage's process since the last row say.
type procFloor struct {
	proc  string
	least map[string]float64 // every figure, smallest reading
}

func (f *procFloor) add(vals map[string]float64) {
	deriveHeapInuse(vals)
	for _, m := range stageMetrics {
		v, ok := vals[m.metric]
		if !ok {
			continue
		}
		if cur, seen := f.least[m.name]; !seen || v < cur {
			f.least[m.name] = v
		}
	}
}

// stageWatch reads every stage's current process all the time.
type stageWatch struct {
	e *env

	mu     sync.Mutex
	floors map[string]*procFloor // by stage
}

func newStageWatch(e *env) *stageWatch { return &stageWatch{e: e, floors: map[string]*procFloor{}} }

// run reads each stage every samplePoll until ctx ends.
func (w *stageWatch) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, st := range soakStages {
		wg.Go(func() { tick(ctx, samplePoll, func() { w.read(ctx, st) }) })
	}
	wg.Wait()
}

func (w *stageWatch) read(ctx context.Context, stage string) {
	ps := w.e.running(stage)
	if len(ps) == 0 {
		return
	}
	p := ps[0]
	addr := p.HTTPAddr()
	if addr == "" {
		return
	}
	vals, err := scrapeAll(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.floors[stage]
	if f == nil || f.proc != p.Name {
		// A new process (a fault restarted the stage): its readings start over.
		f = &procFloor{proc: p.Name, least: map[string]float64{}}
		w.floors[stage] = f
	}
	f.add(vals)
}

// take returns each stage's figures since the last call, and starts over.
func (w *stageWatch) take() []stageSample {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []stageSample
	for _, st := range soakStages {
		f := w.floors[st]
		if f == nil || len(f.least) == 0 {
			continue
		}
		smp := stageSample{Stage: st, Proc: f.proc, Values: map[string]float64{}}
		maps.Copy(smp.Values, f.least)
		out = append(out, smp)
		f.least = map[string]float64{}
	}
	return out
}

// sample records every stage's figures over round r (taken at its end), with each process's
// age in rounds.
func (s *soak) sample(r uint64, got []stageSample) []stageSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range got {
		smp := &got[i]
		smp.Round, smp.Age = r, 1
		for j := len(s.samples) - 1; j >= 0; j-- {
			if s.samples[j].Proc == smp.Proc {
				smp.Age = s.samples[j].Age + int(r-s.samples[j].Round)
				break
			}
		}
		s.samples = append(s.samples, *smp)
	}
	return got
}

// scrapeClient opens a connection per reading and closes it: a kept-alive connection would be
// a goroutine of the stage's HTTP server, there in one reading and not in the next.
var scrapeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// scrapeAll reads the unlabelled samples of a Prometheus text page.
func scrapeAll(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// SteadyRule is how each stage's figures are judged at the end of a run (see Steadiness).
type SteadyRule struct {
	// Window is the number of last rounds judged, Batch the rounds of one batch mean, and
	// WarmRounds the rounds a process runs before its samples count.
	Window, Batch, WarmRounds int
	// MaxSlope is the largest slope allowed per round, as a share of the mean.
	MaxSlope float64
	// Conclude: a figure the run could not tell (its interval holds the limit) fails the run.
	Conclude bool
}

// Verdicts of a figure.
const (
	VerdictFlat     = "flat"
	VerdictGrows    = "GROWS"
	VerdictCantTell = "cannot tell"
)

// Steadiness is one stage's figure over the last rounds.
type Steadiness struct {
	Stage, Metric string
	// Fit is the slope per round with its 95% interval; Rel, RelLo and RelHi the three as a
	// share of the mean.
	Fit               trend.Fit
	Rel, RelLo, RelHi float64
	// Procs is the number of processes the samples came from.
	Procs   int
	Verdict string
	// Fail: the verdict fails the run.
	Fail bool
}

// steadiness judges every stage's figures over the last Window rounds.
func (s *soak) steadiness() []Steadiness {
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	return judgeSteady(samples, s.cfg.Steady)
}

// judgeSteady judges samples by rule.
func judgeSteady(samples []stageSample, rule SteadyRule) []Steadiness {
	var last uint64
	for _, smp := range samples {
		last = max(last, smp.Round)
	}
	var out []Steadiness
	for _, st := range soakStages {
		var use []stageSample
		for _, smp := range samples {
			if smp.Stage == st && smp.Age > rule.WarmRounds && smp.Round+uint64(rule.Window) > last {
				use = append(use, smp)
			}
		}
		for _, m := range stageMetrics {
			out = append(out, judgeFigure(st, m.name, use, rule))
		}
	}
	return out
}

// judgeFigure fits metric of one stage's samples, a segment per process, and judges it.
func judgeFigure(stage, metric string, samples []stageSample, rule SteadyRule) Steadiness {
	res := Steadiness{Stage: stage, Metric: metric}
	var segs []trend.Segment
	index := map[string]int{}
	for _, smp := range samples {
		v, ok := smp.Values[metric]
		if !ok {
			continue
		}
		i, seen := index[smp.Proc]
		if !seen {
			i = len(segs)
			index[smp.Proc] = i
			segs = append(segs, trend.Segment{})
		}
		segs[i].X = append(segs[i].X, float64(smp.Round))
		segs[i].Y = append(segs[i].Y, v)
	}
	res.Procs = len(segs)
	res.Fit = trend.FitSegments(segs, rule.Batch)
	f := res.Fit
	if f.Mean > 0 {
		res.Rel, res.RelLo, res.RelHi = f.Slope/f.Mean, f.Lo/f.Mean, f.Hi/f.Mean
	}
	switch {
	case f.Mean <= 0 || f.Samples == 0:
		res.Verdict = VerdictCantTell
	case res.RelLo > rule.MaxSlope:
		res.Verdict = VerdictGrows
	case res.RelHi <= rule.MaxSlope:
		res.Verdict = VerdictFlat
	default:
		res.Verdict = VerdictCantTell
	}
	res.Fail = res.Verdict == VerdictGrows || res.Verdict == VerdictCantTell && rule.Conclude
	return res
}

// mib is bytes in MiB.
func mib(v float64) float64 { return math.Round(v/(1<<20)*10) / 10 }
