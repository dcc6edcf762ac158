// Package demo proves kvcm-gc on one machine with one command: it starts a redis-server,
// seeds a KVCM keyspace with known garbage and tricky live entries (in the location layout of
// today's KVCM, or the legacy one), runs the all-in-one process (every stage and an embedded
// NATS JetStream server) for exactly one round, and verifies byte for byte that the garbage,
// and only the garbage, is gone.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// Cluster is the KVCM cluster name of the demo deployment.
const Cluster = "demo"

// Options size and steer the demo.
type Options struct {
	// Layout of the seeded blocks: kvcm.LayoutLocation (the zero value means it too) or
	// kvcm.LayoutLegacy.
	Layout kvcm.Layout
	// Ambiguous mixes upgraded blocks (both layouts) into a legacy keyspace.
	Ambiguous bool
	// EmptyBlock is the collector's empty_block setting ("": its default), which the
	// verification then checks.
	EmptyBlock string
	Instances  int
	Blocks     int // per instance
	Garbage    float64
	Tricky     float64
	Seed       uint64
	// Timeout bounds the collection (seeding excluded).
	Timeout time.Duration
	// Keep leaves the work directory (Redis data, files, JetStream store) in place.
	Keep bool
	// NoSweep leaves out the sweep of orphan data files (seeded files, the walker's and the
	// sweepers' work, its verification).
	NoSweep bool
	// DryRun collects with dry_run: true (and no sweep): nothing may change, and the report
	// is `kvcm-gc report` of the round, what the deletes would free, checked against the
	// seeded garbage.
	DryRun bool
	// Out receives the report, Err the progress and the process's warnings.
	Out, Err io.Writer
}

// ErrMismatch: the verification found a difference between what should be left and what is.
var ErrMismatch = errors.New("verification failed")

// Run runs the demo. It cleans up what it started (redis-server, the work directory) whatever
// happens, Ctrl-C included.
func Run(ctx context.Context, o Options) error {
	started := time.Now()
	prog := cli.NewProgress(o.Err, 2*time.Second)
	say := func(format string, a ...any) {
		prog.Clear()
		fmt.Fprintf(o.Err, format+"\n", a...)
	}

	dir, err := workDir()
	if err != nil {
		return err
	}
	if o.Keep {
		say("work directory %s (kept)", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	rs, err := servers.StartRedis("")
	if err != nil {
		return fmt.Errorf("%w (scripts/ensure-redis.sh installs it; make demo runs it)", err)
	}
	defer func() {
		if err := rs.Close(); err != nil {
			say("stop redis-server: %v", err)
		}
	}()
	say("redis-server listening on %s", rs.Addr())
	rdb := rs.Client()
	if o.Layout == kvcm.LayoutNone {
		o.Layout = kvcm.LayoutLocation
	}
	cfg := Config(rs.URI(), filepath.Join(dir, "jetstream"))
	emptyBlock, err := setEmptyBlock(&cfg, o.EmptyBlock)
	if err != nil {
		return err
	}
	if o.DryRun {
		cfg.DryRun, o.NoSweep = true, true
	}
	if !o.NoSweep {
		enableSweep(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}

	instances := make([]string, o.Instances)
	for i := range instances {
		instances[i] = fmt.Sprintf("inst%d", i)
	}
	seedStart := time.Now()
	m, err := seed.Generate(ctx, rdb, seed.Spec{Cluster: Cluster, Layout: o.Layout, Ambiguous: o.Ambiguous, Instances: instances, Blocks: o.Blocks,
		LocationsPerBlock: 2, GarbageFraction: o.Garbage, TrickyFraction: o.Tricky, Root: filepath.Join(dir, "data"),
		MetaURI: rs.URI(), Seed: o.Seed, SweepFiles: !o.NoSweep, SweepGrace: cfg.Sweep.Grace, DeletingGrace: cfg.Prober.DeletingGrace,
		Progress: func(done, total int) {
			prog.Update(fmt.Sprintf("seeding  %s %d/%d blocks", cli.Bar(done, total, 30), done, total))
		}})
	if err != nil {
		return interrupted(ctx, fmt.Errorf("seed: %w", err))
	}
	prog.Done(fmt.Sprintf("seeded   %d instances × %d blocks in the %s layout, %d locations (%d garbage) in %s",
		o.Instances, o.Blocks, m.Layout, len(m.Locations), len(m.Garbage()), time.Since(seedStart).Round(time.Millisecond)))
	if err := seedRemoved(ctx, rdb, o.Layout); err != nil {
		return interrupted(ctx, err)
	}
	before, err := seed.Take(ctx, rdb, "*")
	if err != nil {
		return interrupted(ctx, err)
	}

	collectStart := time.Now()
	reg := prometheus.NewRegistry()
	var dry *ops.DeleteReport
	finish := func(context.Context, jetstream.JetStream) error { return nil }
	if o.DryRun {
		finish = func(ctx context.Context, js jetstream.JetStream) error {
			names, err := cfg.Names()
			if err != nil {
				return err
			}
			r, err := ops.Report(ctx, js, names, ops.ReportQuery{})
			dry = &r
			return err
		}
	}
	res, err := collect(ctx, cfg, reg, o, prog, m.SweepRoot, func(ctx context.Context, js jetstream.JetStream) error {
		return backdateStuck(ctx, js, cfg, m, before)
	}, finish)
	collectTime := time.Since(collectStart)
	if err != nil {
		return interrupted(ctx, err)
	}
	intact, total, err := removedIntact(context.WithoutCancel(ctx), rdb, before)
	if err != nil {
		return err
	}
	if intact != total || total != removedBlocks {
		return fmt.Errorf("%w: the removed instance's keys: %d of %d byte-identical (%d seeded)", ErrMismatch, intact, total, removedBlocks)
	}
	fmt.Fprintf(o.Err, "removed instance %s: %d/%d keys byte-identical\n", RemovedInstance, intact, total)
	if o.Layout == kvcm.LayoutLocation {
		intact, total, err := eventReportIntact(context.WithoutCancel(ctx), rdb, before)
		if err != nil {
			return err
		}
		if intact != total || total == 0 {
			return fmt.Errorf("%w: EventReport location %s: %d of %d byte-identical", ErrMismatch, seed.EventReportID, intact, total)
		}
		fmt.Fprintf(o.Err, "EventReport location L#%s: %d/%d byte-identical\n", seed.EventReportID, intact, total)
	}
	if o.DryRun {
		return dryRunReport(context.WithoutCancel(ctx), o.Out, rdb, m, before, *dry, collectTime)
	}

	vr, err := seed.VerifyWith(context.WithoutCancel(ctx), rdb, before, m, seed.VerifyOptions{EmptyBlock: emptyBlock})
	if err != nil {
		return err
	}
	rep := newReport(o, m, res, vr)
	if !o.NoSweep {
		vs, err := seed.VerifySweep(m)
		if err != nil {
			return err
		}
		rep.Sweep = newSweepReport(res.Gathered, m, vs)
	}
	rep.SeedTime, rep.CollectTime, rep.Total = collectStart.Sub(seedStart), collectTime, time.Since(started)
	rep.Write(o.Out)
	if o.Layout == kvcm.LayoutLocation {
		// A legacy KVCM keeps no usage in its hash: nothing drifts there but keys.
		if err := countersRepair(context.WithoutCancel(ctx), o.Out, rs.URI(), instances); err != nil {
			return err
		}
	}
	if !vr.OK() {
		return fmt.Errorf("%w: %d mismatches", ErrMismatch, vr.Mismatch)
	}
	if o.Layout == kvcm.LayoutLocation && o.Tricky > 0 && vr.GuardedLocations == 0 {
		return fmt.Errorf("%w: no copy target or source under a migration guard was seeded", ErrMismatch)
	}
	if !rep.Sweep.Verify.OK() {
		return fmt.Errorf("%w: sweep: %d mismatches", ErrMismatch, rep.Sweep.Verify.Mismatch)
	}
	return nil
}

// workDir creates the work directory: under TMPDIR when set, else on a memory file system
// when there is one. The demo writes some 200,000 small throwaway files; on a disk that syncs
// metadata eagerly, creating them would take most of the demo's time.
func workDir() (string, error) {
	if os.Getenv("TMPDIR") == "" {
		if dir, err := os.MkdirTemp("/dev/shm", "kvcm-gc-demo-"); err == nil {
			return dir, nil
		}
	}
	dir, err := os.MkdirTemp("", "kvcm-gc-demo-")
	if err != nil {
		return "", fmt.Errorf("create work directory: %w", err)
	}
	return dir, nil
}

// setEmptyBlock sets the collector's empty_block to want ("": leave its default) and
// returns the setting in force, for the verification. A build whose deleter predates the
// setting DELs every key it empties: that is then the only setting there is.
func setEmptyBlock(c *config.Config, want string) (string, error) {
	k, ok := config.Lookup("empty_block")
	if !ok {
		if want == "" || want == seed.EmptyDelete {
			return seed.EmptyDelete, nil
		}
		return "", fmt.Errorf("--empty-block %s: this build's deleter has no empty_block setting; it deletes every key it empties", want)
	}
	if want != "" {
		if err := k.Set(c, want); err != nil {
			return "", fmt.Errorf("--empty-block: %w", err)
		}
	}
	return k.Format(c), nil
}

// Config is the all-in-one configuration of the demo: the defaults, except short intervals
// so one round takes seconds, a round pause long enough that exactly one round runs, the stat
// probe (the seeded files are local), and an embedded NATS server on a free loopback port.
func Config(redisURI, jsDir string) config.Config {
	c := config.Default()
	c.Cluster = Cluster
	c.Registry.URI = redisURI
	c.Scanner.ScanInterval = time.Millisecond
	c.Scanner.RoundPause = 24 * time.Hour
	c.Prober.OrphanWritingGrace = 24 * time.Hour
	// Stuck DELETING are collected too; the seed's own DELETING were last written 26h ago
	// (the orphan grace + 2h), and are not stuck yet under this grace, the seeded stuck ones
	// are DELETING for 48h.
	c.Prober.CollectDeleting = true
	c.Prober.DeletingGrace = 36 * time.Hour
	c.Storage.DefaultProbe = storage.ProbeStat
	c.Workers.Prober = 2
	// Deletes are the long pole of a round with 10% garbage; a wider window hides the Redis
	// and file-system round trips of each target.
	c.MaxInflightDeletes = 4
	c.NATS.Embedded = config.EmbeddedJS{StoreDir: jsDir, Listen: "127.0.0.1:0"}
	c.HTTP.Listen = "127.0.0.1:0"
	c.Log.Level = "warn"
	return c
}

// result is what collect saw.
type result struct {
	Round    pipeline.Checkpoint
	Metrics  string   // the HTTP endpoint's /metrics URL
	Gathered gathered // the process's metrics when the round was done
}

// collect runs the all-in-one process until round 1 has ended and both consumers are
// drained (and, with sweepRoot set, the sweep of that storage has ended with its quarantine
// empty), showing progress, then stops it gracefully. prepare runs once the process's NATS
// server is up and before its stages start.
func collect(ctx context.Context, cfg config.Config, reg *prometheus.Registry, o Options, prog *cli.Progress, sweepRoot string,
	prepare, finish func(context.Context, jetstream.JetStream) error) (result, error) {
	var res result
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	started := make(chan string, 1)
	var metrics *app.Metrics
	var prepErr error
	p := &cli.Process{Stages: app.All, Embedded: true, Registry: reg,
		Started: func(url string, m *app.Metrics) {
			metrics = m
			if prepErr = withJetStream(pctx, url, prepare); prepErr != nil {
				stop() // the stages start, and stop at once
			}
			started <- url
		},
		HTTPStarted: func(a net.Addr) { res.Metrics = "http://" + a.String() + "/metrics" }}
	logs := &clearing{p: prog, w: o.Err}
	env := &cli.Env{Prog: "kvcm-gc demo", Name: "run", Config: cfg, Stdout: o.Out, Stderr: o.Err,
		Logger: cli.NewLogger(logs, cfg.Log)}
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx, env) }()

	var url string
	select {
	case url = <-started:
	case err := <-done:
		return res, fmt.Errorf("all-in-one process: %w", err)
	}
	if prepErr != nil {
		<-done
		return res, prepErr
	}
	fmt.Fprintf(logs, "all-in-one running: embedded NATS %s, metrics %s\n", url, res.Metrics)
	ck, werr := watch(ctx, url, cfg, metrics, o.Timeout, prog, sweepRoot)
	if werr == nil {
		werr = withJetStream(ctx, url, finish)
	}
	res.Round = ck
	// Read while the process runs: its JetStream collectors need the connection.
	res.Gathered = gather(reg)
	stop()
	if err := <-done; err != nil {
		return res, fmt.Errorf("all-in-one process: %w", err)
	}
	return res, werr
}

// withJetStream runs f on a connection of its own to the NATS server at url.
func withJetStream(ctx context.Context, url string, f func(context.Context, jetstream.JetStream) error) error {
	nc, err := nats.Connect(url, nats.Name("kvcm-gc-demo-prepare"))
	if err != nil {
		return fmt.Errorf("connect to the embedded nats server: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return f(ctx, js)
}

// backdateStuck records, in the location layout, the first sight of every seeded stuck
// DELETING in the OBSERVED bucket, as a prober of an earlier round would have: nothing in
// Redis says when a location became DELETING, so only kvcm-gc's own first sight tells its
// age, and the prober never nominates a location in the round that first saw it. The legacy
// layout needs nothing: the blocks' __lru_time__ tells the age.
func backdateStuck(ctx context.Context, js jetstream.JetStream, cfg config.Config, m *seed.Manifest, before seed.Snapshot) error {
	if m.Layout != kvcm.LayoutLocation.String() {
		return nil
	}
	names, err := cfg.Names()
	if err != nil {
		return err
	}
	opts, err := app.OptionsOf(cfg)
	if err != nil {
		return err
	}
	// The topology the stages would create at their start, with the same settings.
	if err := subjects.Ensure(ctx, js, names, opts.JetStream); err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, names.ObservedBucket())
	if err != nil {
		return fmt.Errorf("open the observed bucket: %w", err)
	}
	obs := prober.KVObserver{KV: kv, TTL: prober.ObservationTTL(cfg.Prober.DeletingGrace, cfg.Scanner.RoundPause)}
	for _, l := range m.Locations {
		if l.Kind != seed.KindStuckDeleting {
			continue
		}
		raw, ok := before[kvcm.BlockKey(l.Instance, l.Key)][l.FieldName()]
		if !ok {
			return fmt.Errorf("stuck DELETING %s/%d/%s: not in the seeded keyspace", l.Instance, l.Key, l.Location)
		}
		if err := obs.Backdate(ctx, l.Instance, l.Key, l.Location, []byte(raw), l.DeletingSinceUs); err != nil {
			return err
		}
	}
	return nil
}

// watch shows the round's progress until round 1 has ended and both consumers are drained,
// and the sweep of sweepRoot (when set) is done.
func watch(ctx context.Context, url string, cfg config.Config, m *app.Metrics, timeout time.Duration, prog *cli.Progress, sweepRoot string) (pipeline.Checkpoint, error) {
	var ck pipeline.Checkpoint
	nc, err := nats.Connect(url, nats.Name("kvcm-gc-demo-watch"))
	if err != nil {
		return ck, fmt.Errorf("connect to the embedded nats server: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return ck, fmt.Errorf("jetstream: %w", err)
	}
	names, err := cfg.Names()
	if err != nil {
		return ck, err
	}
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			prog.Clear()
			return ck, ctx.Err()
		case <-deadline:
			prog.Done(statusLine(ck, m, backlog{}))
			return ck, fmt.Errorf("round 1 not processed within %s", timeout)
		case <-tick.C:
		}
		st, err := js.KeyValue(ctx, names.StateBucket())
		if err != nil {
			continue // the stages create it at start
		}
		if ck, _, err = scanner.ReadCheckpoint(ctx, st); err != nil {
			continue
		}
		b := readBacklog(ctx, js, cfg)
		line := statusLine(ck, m, b)
		swept := true
		if sweepRoot != "" {
			sw := readSweep(ctx, js, names, sweepRoot)
			line += "  " + sw.line()
			swept = sw.done()
		}
		if ck.Round >= 1 && !ck.InRound && b.ok && b.drained() && swept {
			prog.Done(line)
			return ck, nil
		}
		prog.Update(line)
	}
}

type backlog struct {
	ok                                           bool
	proberPending, proberAck, delPending, delAck uint64
}

func (b backlog) drained() bool {
	return b.proberPending+b.proberAck+b.delPending+b.delAck == 0
}

func readBacklog(ctx context.Context, js jetstream.JetStream, cfg config.Config) backlog {
	names, _ := cfg.Names()
	var b backlog
	for _, c := range []struct {
		stream, consumer string
		pending, ack     *uint64
	}{
		{names.BatchesStream(), names.ProberConsumer(), &b.proberPending, &b.proberAck},
		{names.DeletesStream(), names.DeleterConsumer(), &b.delPending, &b.delAck},
	} {
		cons, err := js.Consumer(ctx, c.stream, c.consumer)
		if err != nil {
			return backlog{}
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return backlog{}
		}
		*c.pending, *c.ack = info.NumPending, uint64(info.NumAckPending)
	}
	b.ok = true
	return b
}

func statusLine(ck pipeline.Checkpoint, m *app.Metrics, b backlog) string {
	pos := "starting"
	switch {
	case ck.Round == 0:
	case ck.InRound:
		pos = fmt.Sprintf("round %d: store %d/%d", ck.Round, min(ck.Index+1, ck.Stores), ck.Stores)
	default:
		pos = fmt.Sprintf("round %d: scan done", ck.Round)
	}
	deleted := counter(m.Deleter.DeleteResults.WithLabelValues("deleted")) + counter(m.Deleter.DeleteResults.WithLabelValues("partial"))
	return fmt.Sprintf("%-26s scanned %7.0f keys  candidates %6.0f  deleted %6.0f  backlog %d/%d",
		pos, counter(m.Scanner.ScannedKeys), sumVec(m.Prober.Candidates), deleted, b.proberPending+b.proberAck, b.delPending+b.delAck)
}

// interrupted turns an error caused by Ctrl-C into cli.ErrInterrupted.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", cli.ErrInterrupted, err)
	}
	return err
}

// clearing writes log lines after clearing the progress line, so the two never mix.
type clearing struct {
	p *cli.Progress
	w io.Writer
}

func (c *clearing) Write(b []byte) (int, error) {
	c.p.Clear()
	return c.w.Write(b)
}
