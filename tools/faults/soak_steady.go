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
)

// Steadiness. All the time, every stage process's own /metrics is read every samplePoll,
// and each round's row keeps, since the last row, the smallest reading of each figure: the
// process at rest between bursts of work (goroutines come and go with the messages in flight,
// a fault's disturbance passes):
//   - rss (process_resident_memory_bytes), goroutines (go_goroutines) and fds
//     (process_open_fds);
//   - heap_live (go_gc_heap_live_bytes): the heap the last collection found live. A heap read
//     at a random point of its GC cycle (go_memstats_heap_alloc_bytes) is anywhere between that
//     and the goal, five times as much at the stages' GOGC of 400, which would drown any trend;
//     read right after a collection it still holds what was allocated in the moment since,
//     megabytes on a busy prober whose live heap is a few;
//   - heap_inuse: the heap's spans in use (go_memstats_heap_inuse_bytes) less what was
//     allocated since the last collection (heap_alloc - heap_live): the live heap with its
//     fragmentation, which a leak of half-empty spans raises.
//
// A leak raises these floors round after round. Each round's heap figures judged are the
// lowest of its process's last floorRounds rounds (floors), and the slope over the last Window rounds is
// a repeated median of the slopes between rounds (slopeOf), robust to rounds a fault
// disturbed, taken only between samples of the same process, and only of processes that have
// run WarmRounds rounds: a stage restarted by a fault starts small and fills its heap and its
// pools for a while, which is neither a decline nor a leak. It must be under MaxSlope of the
// mean per round.

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

// heapFigures are the figures whose floors over floorRounds rounds are judged.
var heapFigures = map[string]bool{"heap_live": true, "heap_inuse": true}

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

// sample takes every stage's figures over round r.
func (s *soak) sample(r uint64) []stageSample {
	got := s.stages.take()
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

// Steadiness is one stage's figure over the last rounds.
type Steadiness struct {
	Stage, Metric string
	// Mean of the samples used; Slope per round (slopeOf); Rel = Slope / Mean.
	Mean, Slope, Rel float64
	// Samples and Pairs used, Procs the processes they came from.
	Samples, Pairs, Procs int
	// Fail: Rel above the limit. Unknown: too few samples of one process (restarted). Slack:
	// Rel above the limit but the slope within HeapSlack. Unjudged: a figure of
	// SoakConfig.Unjudged, never failed.
	Fail, Unknown, Slack, Unjudged bool
}

// minPairs is the fewest same-process pairs a slope is computed from.
const minPairs = 6

// steadiness evaluates every stage's figures over the last Window rounds.
func (s *soak) steadiness() []Steadiness {
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	var last uint64
	for _, smp := range samples {
		last = max(last, smp.Round)
	}
	var out []Steadiness
	for _, st := range soakStages {
		var settled []stageSample
		for _, smp := range samples {
			if smp.Stage == st && smp.Age > s.cfg.WarmRounds {
				settled = append(settled, smp)
			}
		}
		var use []stageSample
		for _, smp := range floors(settled) {
			if smp.Round+uint64(s.cfg.Window) > last {
				use = append(use, smp)
			}
		}
		for _, m := range stageMetrics {
			res := slopeOf(st, m.name, use, s.cfg.MaxSlope)
			if heapFigures[m.name] && res.Fail && res.Slope <= s.cfg.HeapSlack {
				res.Fail, res.Slack = false, true
			}
			if slices.Contains(s.cfg.Unjudged, m.name) {
				res.Fail, res.Unjudged = false, true
			}
			out = append(out, res)
		}
	}
	return out
}

// floorRounds is how many rounds of one process the figure judged at a round is the floor of.
const floorRounds = 3

// floors replaces each sample's heap figures with the smallest of its process's samples over
// the floorRounds rounds up to it: the lower envelope. A prober that held a batch through its
// round's only collection reads high for that round; a leak lifts the envelope itself. The
// other figures are the round's smallest reading already, and an envelope of them would rise
// after every dip (a goroutine between two lives of it).
func floors(samples []stageSample) []stageSample {
	out := make([]stageSample, len(samples))
	for i, smp := range samples {
		f := smp
		f.Values = maps.Clone(smp.Values)
		for _, o := range samples {
			if o.Proc != smp.Proc || o.Round > smp.Round || o.Round+floorRounds <= smp.Round {
				continue
			}
			for k, v := range o.Values {
				if cur, ok := f.Values[k]; heapFigures[k] && ok && v < cur {
					f.Values[k] = v
				}
			}
		}
		out[i] = f
	}
	return out
}

// slopeOf is the slope of metric over samples per round, as a share of the mean: Siegel's
// repeated median (for each sample the median of its slopes to the others of its process, then
// the median of those), which holds even when up to half the samples are disturbed, where the
// plain Theil–Sen median of all pairs gives way to two high samples at the end of the window.
func slopeOf(stage, metric string, samples []stageSample, limit float64) Steadiness {
	res := Steadiness{Stage: stage, Metric: metric}
	var per []float64
	sum, n, pairs := 0.0, 0, 0
	procs := map[string]bool{}
	for i, a := range samples {
		va, ok := a.Values[metric]
		if !ok {
			continue
		}
		sum += va
		n++
		procs[a.Proc] = true
		var slopes []float64
		for j, b := range samples {
			vb, ok := b.Values[metric]
			if !ok || i == j || b.Proc != a.Proc || b.Round == a.Round {
				continue
			}
			slopes = append(slopes, (vb-va)/float64(int64(b.Round)-int64(a.Round)))
		}
		pairs += len(slopes)
		if len(slopes) > 0 {
			per = append(per, median(slopes))
		}
	}
	res.Samples, res.Pairs, res.Procs = n, pairs/2, len(procs)
	if n > 0 {
		res.Mean = sum / float64(n)
	}
	if res.Pairs < minPairs || res.Mean <= 0 {
		res.Unknown = true
		return res
	}
	res.Slope = median(per)
	res.Rel = res.Slope / res.Mean
	res.Fail = res.Rel > limit
	return res
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// mib is bytes in MiB.
func mib(v float64) float64 { return math.Round(v/(1<<20)*10) / 10 }
