package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/bench/stage"
)

// StageRun is one stage process's work and cost.
type StageRun struct {
	Stage string
	// Items are keys scanned (scanner), locations judged (prober) or locations deleted
	// (deleter), over Dur from From.
	Items int
	From  time.Time
	Dur   time.Duration
	Usage Usage
	// CPU is where the machine's CPU went while the stage worked.
	CPU CPUShare
	// Metrics are the process's own counters when it stopped.
	Metrics stage.Metrics
}

// Rate is items per second.
func (r StageRun) Rate() float64 { return Rate{Ops: r.Items, Dur: r.Dur}.PerSec() }

// MeanRSS is the time-weighted mean of the process's resident set while it worked (over Dur
// from From), in bytes; 0 when unknown.
func (r StageRun) MeanRSS() int64 {
	if r.From.IsZero() || r.Dur <= 0 {
		return 0
	}
	return meanRSS(r.Usage.RSS, r.From, r.From.Add(r.Dur))
}

// AloneResults are the stages run one after the other on one keyspace, each over the full
// output of the previous one.
type AloneResults struct {
	Keyspace                  string
	Blocks                    int
	Scanner, Prober, Deleter  StageRun
	Verification              Verification
	ScanPages, PublishedBytes int
	// ScanRead are the keys the scanner read (of collected instances); Scanner.Items the
	// keys it walked.
	ScanRead int
	// DeleteRequests are the delete requests the prober stored for the deleter.
	DeleteRequests int
	// StreamBytes are the bytes each stream holds once the three stages are done (BATCHES,
	// DELETES, EVENTS: what max_bytes counts), and StreamDisk the bytes of each stream's
	// directory in the JetStream store.
	StreamBytes, StreamDisk map[string]int64
}

// Stream kinds of AloneResults.StreamBytes.
const (
	StreamBatches = "BATCHES"
	StreamDeletes = "DELETES"
	StreamEvents  = "EVENTS"
)

// streamSizes reads what each of the run's streams holds, and its directory's size.
func (r *run) streamSizes(ctx context.Context, res *AloneResults) {
	res.StreamBytes, res.StreamDisk = map[string]int64{}, map[string]int64{}
	for kind, name := range map[string]string{StreamBatches: r.names.BatchesStream(), StreamDeletes: r.names.DeletesStream(),
		StreamEvents: r.names.EventsStream()} {
		st, err := r.h.js.Stream(ctx, name)
		if err != nil {
			continue
		}
		res.StreamBytes[kind] = int64(st.CachedInfo().State.Bytes)
		// <store dir>/jetstream/<account>/streams/<stream>
		dirs, _ := filepath.Glob(filepath.Join(r.h.workDir, "jetstream", "*", "*", "streams", name))
		for _, d := range dirs {
			res.StreamDisk[kind] += dirSize(d)
		}
	}
}

// dirSize is the bytes of the files under dir (0 when it cannot be read).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// E2EResult is the whole pipeline on one keyspace.
type E2EResult struct {
	Profile      stage.Profile
	Dur          time.Duration // from starting the stages until every garbage location is gone
	CPU          CPUShare
	Runs         []StageRun // usage of each stage process
	Verification Verification
	Deleted      int
	// Idle is what the stages cost afterwards, still running, with nothing to do.
	Idle *IdleRun
}

// IdleRun is what the stage processes cost over a window in which they have nothing to do:
// the round is over (the next one is round_pause away) and both consumers are drained. It is
// what a deployment costs between its rounds.
type IdleRun struct {
	Window time.Duration
	// Stages are the stage processes' times on a core over the window, in the order they
	// were started, and NATS the server's (schedTimes: nanoseconds, not clock ticks); Redis
	// and RedisMain are Redis's own count (INFO cpu, microseconds), all its threads and the
	// main thread's.
	Stages                 []IdleStage
	NATS, Redis, RedisMain time.Duration
}

// IdleStage is one stage process's time on a core over an idle window.
type IdleStage struct {
	Stage string
	CPU   time.Duration
}

// PerSecond is d as CPU time per second of the window.
func (r IdleRun) PerSecond(d time.Duration) time.Duration {
	if r.Window <= 0 {
		return 0
	}
	return time.Duration(float64(d) / r.Window.Seconds())
}

// onCore is a process's threads' time on a core so far (0 for pid 0: no process).
func onCore(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	run, _ := schedTimes(pid)
	return run
}

// idle measures the run's stage processes, stages in order, over window while the store's
// checkpoint shows the round over: a round that starts or a process that exits within it
// fails the measurement.
func (r *run) idle(ctx context.Context, window time.Duration, stages []string) (*IdleRun, error) {
	before, err := r.checkpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("idle window: %w", err)
	}
	if !roundDone(before) {
		return nil, fmt.Errorf("idle window: round %d is not over", before.Round)
	}
	natsPid := 0
	if r.h.nats != nil {
		natsPid = r.h.nats.c.Pid()
	}
	res := &IdleRun{}
	for _, st := range stages {
		p := r.procs[st]
		if p == nil {
			return nil, fmt.Errorf("idle window: stage %s not running", st)
		}
		res.Stages = append(res.Stages, IdleStage{Stage: st, CPU: onCore(p.c.Pid())})
	}
	nats, redis, t0 := onCore(natsPid), r.h.cpuNow(ctx), time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(window): // the measured window: the stages have nothing to do in it
	}
	for i, s := range res.Stages {
		res.Stages[i].CPU = onCore(r.procs[s.Stage].c.Pid()) - s.CPU
	}
	end := r.h.cpuNow(ctx)
	res.Window, res.NATS = time.Since(t0), onCore(natsPid)-nats
	res.Redis, res.RedisMain = end.redis-redis.redis, end.redisMain-redis.redisMain
	if err := r.checkAlive(); err != nil {
		return nil, fmt.Errorf("idle window: %w", err)
	}
	after, err := r.checkpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("idle window: %w", err)
	}
	if !roundDone(after) || after.Round != before.Round {
		return nil, fmt.Errorf("idle window: a round ran in it (round %d, then round %d, in round: %v)",
			before.Round, after.Round, after.InRound)
	}
	return res, nil
}

// run is one configured use of the stage processes: its own subject prefix, hence its own
// streams, consumers and buckets, removed afterwards.
type run struct {
	h       *Harness
	phase   string
	k       *Keyspace
	names   subjects.Names
	profile stage.Profile
	bin     string // the stage binary
	// cpus, when set, are the only cores the run's stage processes may use (taskset -c).
	cpus string
	// serve makes the scanner serve its metrics while it runs (serveAddr finds them).
	serve bool
	procs map[string]*proc
	// Handles kept across polls, so polling costs one request per check.
	kv   jetstream.KeyValue
	cons map[string]jetstream.Consumer
}

func (h *Harness) newRun(ctx context.Context, phase string, k *Keyspace, p stage.Profile) (*run, error) {
	h.seq++
	names, err := subjects.NewNames(fmt.Sprintf("kb%d", h.seq), k.Spec.Cluster)
	if err != nil {
		return nil, err
	}
	// The harness creates the topology, so no stage races another to create it.
	if err := subjects.Ensure(ctx, h.js, names, p.Settings()); err != nil {
		return nil, fmt.Errorf("ensure topology of %s: %w", phase, err)
	}
	return &run{h: h, phase: phase, k: k, names: names, profile: p, bin: h.stageBin, procs: map[string]*proc{},
		cons: map[string]jetstream.Consumer{}}, nil
}

// start starts one stage process.
func (r *run) start(st string) error { return r.startAs(st, st) }

// startAs starts one process of stage st under name (several of one stage need names).
func (r *run) startAs(name, st string) error {
	spec := stage.Spec{Stage: st, NATSURL: r.h.natsURL, RedisURI: r.k.URI, Cluster: r.k.Spec.Cluster,
		Prefix: r.names.Prefix, Profile: r.profile, MetricsOut: r.file(name, "metrics.json")}
	if r.serve && st == stage.Scanner {
		spec.ServeAddrOut = r.file(name, "addr")
	}
	if r.h.cfg.CPUProfile != "" {
		spec.CPUProfile = filepath.Join(r.h.cfg.CPUProfile, fmt.Sprintf("%s-%s.pprof", r.phase, name))
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode stage spec: %w", err)
	}
	bin, args := r.bin, []string{"-spec", string(data)}
	if r.cpus != "" {
		// taskset execs the stage: the process (and pid) is the stage's, every thread on cpus.
		bin, args = "taskset", append([]string{"-c", r.cpus, r.bin}, args...)
	}
	p, err := startProc(r.phase+"/"+name, r.file(name, "log"), bin, args...)
	if err != nil {
		return err
	}
	r.procs[name] = p
	return nil
}

func (r *run) file(st, ext string) string {
	return filepath.Join(r.h.logDir, fmt.Sprintf("%s-%s.%s", r.phase, st, ext))
}

// stop stops one stage process and collects its usage and metrics.
func (r *run) stop(st string) (StageRun, error) {
	p := r.procs[st]
	if p == nil {
		return StageRun{}, fmt.Errorf("%s: stage %s not running", r.phase, st)
	}
	delete(r.procs, st)
	u, err := p.Stop(time.Minute)
	res := StageRun{Stage: st, Usage: u}
	m, merr := stage.ReadMetrics(r.file(st, "metrics.json"))
	res.Metrics = m
	return res, errors.Join(err, merr)
}

// close stops what still runs and removes the run's streams and buckets.
func (r *run) close(ctx context.Context) {
	// Every process is told at once, so they drain side by side.
	for _, p := range r.procs {
		p.Terminate()
	}
	for st := range r.procs {
		_, _ = r.stop(st)
	}
	// Every stream: one left behind keeps its max_bytes reserved on the server, and the runs of
	// a full bench then run out of JetStream storage.
	for _, s := range r.names.Streams() {
		if err := r.h.js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			r.h.log.Warn("delete stream", "stream", s, "err", err)
		}
	}
}

// checkAlive fails when a stage process ended by itself: its log says why.
func (r *run) checkAlive() error {
	for st, p := range r.procs {
		if p.Exited() {
			return fmt.Errorf("%s: stage %s exited early; see %s", r.phase, st, r.file(st, "log"))
		}
	}
	return nil
}

// pollEvery is the resolution of the harness's completion checks.
const pollEvery = 20 * time.Millisecond

// checkpoint reads the scanner's checkpoint.
func (r *run) checkpoint(ctx context.Context) (pipeline.Checkpoint, error) {
	if r.kv == nil {
		kv, err := r.h.js.KeyValue(ctx, r.names.StateBucket())
		if err != nil {
			return pipeline.Checkpoint{}, fmt.Errorf("open state bucket: %w", err)
		}
		r.kv = kv
	}
	c, _, err := scanner.ReadCheckpoint(ctx, r.kv)
	return c, err
}

// roundDone reports whether the scanner has finished its first round.
func roundDone(c pipeline.Checkpoint) bool { return c.Round >= 1 && !c.InRound }

// consumerState is what a completion check needs of a consumer.
type consumerState struct {
	delivered uint64
	drained   bool
	pending   uint64
}

func (r *run) consumer(ctx context.Context, stream, name string) (consumerState, error) {
	c := r.cons[stream]
	if c == nil {
		var err error
		if c, err = r.h.js.Consumer(ctx, stream, name); err != nil {
			return consumerState{}, fmt.Errorf("open consumer %s: %w", name, err)
		}
		r.cons[stream] = c
	}
	info, err := c.Info(ctx)
	if err != nil {
		return consumerState{}, fmt.Errorf("consumer info %s: %w", name, err)
	}
	return consumerState{delivered: info.Delivered.Consumer, pending: info.NumPending,
		drained: info.NumPending == 0 && info.NumAckPending == 0}, nil
}

// until polls cond until it is true, a stage dies, or timeout passes.
func (r *run) until(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := r.checkAlive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not done after %s", r.phase, what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// pids are the running stage processes.
func (r *run) pids() []int {
	var out []int
	for _, p := range r.procs {
		out = append(out, p.c.Pid())
	}
	return out
}

// drain starts one consumer stage over a stream that already holds all its input and
// returns the time of its first delivery and the time from then until the consumer is
// drained.
func (r *run) drain(ctx context.Context, st, stream, consumer string, timeout time.Duration) (time.Time, time.Duration, CPUShare, error) {
	if err := r.start(st); err != nil {
		return time.Time{}, 0, CPUShare{}, err
	}
	var first time.Time
	var cpu cpuSample
	err := r.until(ctx, timeout, st, func() (bool, error) {
		cs, err := r.consumer(ctx, stream, consumer)
		if err != nil {
			return false, err
		}
		if first.IsZero() && cs.delivered > 0 {
			first, cpu = time.Now(), r.h.cpuNow(ctx, r.pids()...)
		}
		return !first.IsZero() && cs.drained, nil
	})
	return first, time.Since(first), r.h.cpuSince(ctx, cpu, r.pids()...), err
}

// runAlone measures each stage alone on k: the scanner's round publishes every batch, then
// the prober judges them all, then the deleter executes every delete request. The keyspace's
// garbage is gone afterwards.
func (h *Harness) runAlone(ctx context.Context, phase string, k *Keyspace, p stage.Profile) (res AloneResults, err error) {
	return h.runAloneWith(ctx, phase, k, p, h.stageBin)
}

func (h *Harness) runAloneWith(ctx context.Context, phase string, k *Keyspace, p stage.Profile, bin string) (res AloneResults, err error) {
	res.Keyspace, res.Blocks = k.Spec.Cluster, k.Counts.Blocks
	r, err := h.newRun(ctx, phase, k, p)
	if err != nil {
		return res, err
	}
	r.bin = bin
	defer r.close(context.WithoutCancel(ctx))
	timeout := h.stageTimeout(k)

	h.log.Info("scanner alone", "phase", phase, "blocks", k.Counts.Blocks)
	if err := r.start(stage.Scanner); err != nil {
		return res, err
	}
	cpu := h.cpuNow(ctx, r.pids()...)
	var ck pipeline.Checkpoint
	if err := r.until(ctx, timeout, "scan round", func() (bool, error) {
		var err error
		ck, err = r.checkpoint(ctx)
		return err == nil && roundDone(ck), nil
	}); err != nil {
		return res, err
	}
	scanCPU := h.cpuSince(ctx, cpu, r.pids()...)
	if res.Scanner, err = r.stop(stage.Scanner); err != nil {
		return res, err
	}
	res.Scanner.CPU = scanCPU
	// Keys SCAN returned, as the raw walks count them (every key of the database): the keys of
	// skipped groups are walked and not read.
	res.Scanner.Items, res.ScanRead = int(ck.LastRoundVisited), int(ck.LastRoundKeys)
	if res.Scanner.Items == 0 {
		res.Scanner.Items = res.ScanRead
	}
	res.Scanner.From = time.UnixMicro(ck.RoundStartedUs)
	res.Scanner.Dur = time.Duration(ck.LastRoundEndUs-ck.RoundStartedUs) * time.Microsecond
	res.ScanPages = int(res.Scanner.Metrics.Sum("kvcm_gc_scan_pages_total"))
	if st, err := h.js.Stream(ctx, r.names.BatchesStream()); err == nil {
		res.PublishedBytes = int(st.CachedInfo().State.Bytes)
	}

	h.log.Info("prober alone", "phase", phase)
	from, d, c, err := r.drain(ctx, stage.Prober, r.names.BatchesStream(), r.names.ProberConsumer(), timeout)
	if err != nil {
		return res, err
	}
	if res.Prober, err = r.stop(stage.Prober); err != nil {
		return res, err
	}
	res.Prober.From, res.Prober.Dur, res.Prober.CPU = from, d, c
	res.Prober.Items = int(res.Prober.Metrics.Sum("kvcm_gc_judged_locations_total"))
	if st, err := h.js.Stream(ctx, r.names.DeletesStream()); err == nil {
		res.DeleteRequests = int(st.CachedInfo().State.Msgs)
		h.log.Info("delete requests", "phase", phase, "requests", res.DeleteRequests,
			"targets", int(res.Prober.Metrics.Sum("kvcm_gc_candidates_total")))
	}

	h.log.Info("deleter alone", "phase", phase)
	from, d, c, err = r.drain(ctx, stage.Deleter, r.names.DeletesStream(), r.names.DeleterConsumer(), timeout)
	if err != nil {
		return res, err
	}
	if res.Deleter, err = r.stop(stage.Deleter); err != nil {
		return res, err
	}
	res.Deleter.From, res.Deleter.Dur, res.Deleter.CPU, res.Deleter.Items = from, d, c, deleted(res.Deleter.Metrics)
	r.streamSizes(ctx, &res)

	if k.Spec.NoFiles {
		return res, nil // metadata only: nothing read back to verify against
	}
	if res.Verification, err = k.Verify(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// deleted counts locations whose metadata the deleter removed.
func deleted(m stage.Metrics) int {
	return int(m.Get("kvcm_gc_delete_results_total", "outcome", subjects.OutcomeDeleted) +
		m.Get("kvcm_gc_delete_results_total", "outcome", subjects.OutcomePartial))
}

// runE2E starts the three stages at once on a fresh keyspace and measures the time until the
// scanner's round is over and both consumers are drained: then every garbage location has
// been judged and deleted (Verify confirms it).
func (h *Harness) runE2E(ctx context.Context, phase string, k *Keyspace, p stage.Profile) (res E2EResult, err error) {
	res.Profile = p
	r, err := h.newRun(ctx, phase, k, p)
	if err != nil {
		return res, err
	}
	defer r.close(context.WithoutCancel(ctx))
	h.log.Info("end to end", "phase", phase, "blocks", k.Counts.Blocks)
	started := time.Now()
	cpu := h.cpuNow(ctx)
	stages := []string{stage.Scanner, stage.Prober, stage.Deleter}
	for _, st := range stages {
		if err := r.start(st); err != nil {
			return res, err
		}
	}
	// The order of the reads matters: a round that is over has published every batch, and
	// the prober stores a delete request before it acks the batch it came from.
	err = r.until(ctx, h.stageTimeout(k), "pipeline", func() (bool, error) {
		ck, err := r.checkpoint(ctx)
		if err != nil || !roundDone(ck) {
			return false, nil
		}
		pr, err := r.consumer(ctx, r.names.BatchesStream(), r.names.ProberConsumer())
		if err != nil || !pr.drained {
			return false, err
		}
		de, err := r.consumer(ctx, r.names.DeletesStream(), r.names.DeleterConsumer())
		return err == nil && de.drained, err
	})
	res.Dur = time.Since(started)
	res.CPU = h.cpuSince(ctx, cpu, r.pids()...)
	if err != nil {
		return res, err
	}
	if w := h.cfg.IdleWindow; w > 0 {
		if res.Idle, err = r.idle(ctx, w, stages); err != nil {
			return res, err
		}
	}
	for _, st := range stages {
		sr, err := r.stop(st)
		if err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, sr)
		if st == stage.Deleter {
			res.Deleted = deleted(sr.Metrics)
		}
	}
	if res.Verification, err = k.Verify(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// stageTimeout is generous: a stage that takes this long is broken, not slow.
func (h *Harness) stageTimeout(k *Keyspace) time.Duration {
	return 2*time.Minute + time.Duration(k.Counts.Blocks)*500*time.Microsecond
}
