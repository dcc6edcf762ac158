package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// Names of the deployment the suite runs.
const (
	suiteCluster = "faults"
	suitePrefix  = "kvcmgc"
)

// env is one scenario's deployment: a redis-server with persistence, a JetStream server, a
// seeded keyspace, and the stage processes.
type env struct {
	cfg   Config
	name  string
	dir   string
	rng   *rand.Rand
	redis *servers.Redis
	// stores are the metadata stores besides redis (which holds the registry), when a
	// scenario spreads its instances over several (spreadStores).
	stores []*servers.Redis
	nats   *servers.NATS // the JetStream server, in every scenario but the cluster one
	js3    *natsNodes    // the cluster scenario's three nodes
	nc     *nats.Conn
	js     jetstream.JetStream
	names  subjects.Names

	// layout is the block layout the keyspace is seeded in (and the writer writes).
	layout   kvcm.Layout
	manifest *seed.Manifest
	// base is the expectation about every location when collection starts: the manifest's,
	// and what the scenario's setup added or changed.
	base []Loc
	// present lists files that must exist whatever happens.
	present []string
	byLoc   map[string]seed.Loc // the manifest by "<key>/<location>", once needed
	before  Snapshot
	keys    int // block keys a full round scans

	mu       sync.Mutex
	procs    map[string][]*Proc // running processes by stage
	all      []*Proc
	started  map[string]int
	restarts int
	extra    []string // extra flags of every stage process
	// leak, when its Stage is set, runs that stage as LeakyStageBin with a leak planted.
	leak Leak
	logf func(format string, a ...any)

	// upstream is KVCM's own GC beside kvcm-gc (beside-upstream), once it ran, and expected
	// the location expectations the scenario's run returned.
	upstream *UpstreamGC
	expected []Loc
	// kvcmOwn are the live locations that are KVCM's GC's garbage and not kvcm-gc's: orphan
	// WRITING past KVCM's grace that kvcm_gc leaves to KVCM (beside-upstream).
	kvcmOwn map[UpstreamRef]bool
}

// newEnv starts the servers (a JetStream cluster of three nodes when sc.cluster is set),
// seeds the keyspace in layout (with the sweep's files when sc.sweepFiles is set) and
// creates the topology. Stages are started by the scenario.
func newEnv(ctx context.Context, cfg Config, sc scenario, layout kvcm.Layout, seedValue uint64, logf func(string, ...any)) (*env, error) {
	name, cluster, sweepFiles := sc.name, sc.cluster, sc.sweepFiles
	dir := filepath.Join(cfg.WorkDir, name+"-"+layout.String())
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("create scenario directory: %w", err)
	}
	e := &env{cfg: cfg, name: name, dir: dir, layout: layout, rng: rand.New(rand.NewPCG(seedValue, seedValue^0x5deece66d)),
		procs: map[string][]*Proc{}, started: map[string]int{}, logf: logf}
	var err error
	if e.redis, err = servers.StartRedis("", servers.WithRedisPersistence()); err != nil {
		return nil, err
	}
	if cluster {
		e.js3, err = startNATSNodes(cfg.Bins[natsServerBin], filepath.Join(dir, "jetstream"), clusterNodes)
	} else {
		e.nats, err = servers.StartNATS(filepath.Join(dir, "jetstream"))
	}
	if err != nil {
		e.close()
		return nil, err
	}
	if e.nc, err = nats.Connect(e.natsURL(), nats.Name("faults-driver"), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0)); err != nil {
		e.close()
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	if e.js, err = jetstream.New(e.nc); err != nil {
		e.close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if e.names, err = subjects.NewNames(suitePrefix, suiteCluster); err != nil {
		e.close()
		return nil, err
	}
	if err := subjects.Ensure(ctx, e.js, e.names, e.settings()); err != nil {
		e.close()
		return nil, err
	}
	instances := make([]string, cfg.Instances)
	for i := range instances {
		instances[i] = "inst" + strconv.Itoa(i)
	}
	e.manifest, err = seed.Generate(ctx, e.redis.Client(), seed.Spec{Cluster: suiteCluster, Layout: layout, Instances: instances,
		Blocks: cfg.Blocks, GarbageFraction: 0.3, TrickyFraction: 0.1, Root: filepath.Join(dir, "data"), MetaURI: e.redis.URI(),
		Seed: seedValue, SweepFiles: sweepFiles, NoUpgraded: sc.noUpgraded, NoKVCMGC: sc.noKVCMGC,
		SpreadYoung: sc.spreadYoung})
	if err != nil {
		e.close()
		return nil, err
	}
	e.base = FromManifest(e.manifest)
	e.keys = e.manifest.Blocks
	return e, nil
}

// clusterNodes is the size of the cluster scenario's JetStream cluster, and its replicas.
const clusterNodes = 3

// natsURL is where the stages and the driver connect: the server, or every cluster node.
func (e *env) natsURL() string {
	if e.js3 != nil {
		return e.js3.URLs()
	}
	return e.nats.URL()
}

// snapshot records the state collection starts from.
func (e *env) snapshot(ctx context.Context) error {
	var err error
	e.before, err = takeSnapshots(ctx, e.clients(), "*")
	return err
}

// settings are the JetStream settings every process uses (they must agree: each process
// ensures the topology with its own).
func (e *env) settings() subjects.Settings {
	s := subjects.DefaultSettings()
	s.LeaseTTL = 2 * time.Second
	s.DeleterAckWait = 2 * time.Second
	s.ProberAckWait = 5 * time.Second
	if e.js3 != nil {
		s.Replicas = clusterNodes
	}
	s.SweeperAckWait = 2 * time.Second
	return s
}

// args are the flags of every stage process.
func (e *env) args() []string {
	s := e.settings()
	a := []string{
		"--cluster", suiteCluster, "--subject_prefix", suitePrefix,
		"--registry.uri", e.redis.URI(), "--nats.url", e.natsURL(), "--nats.connect_timeout", "60s",
		"--jetstream.replicas", strconv.Itoa(s.Replicas),
		"--scan_interval", "20ms", "--round_pause", e.cfg.RoundPause.String(), "--scan_batch_size", "32",
		"--backpressure_high_water", "1000", "--storage.default_probe", "stat",
		"--scanner.kvcm_persist_gap", "100ms", // no KVCM persists its counters in the scenarios
		"--max_inflight_delete_requests", "2", "--delete_delay", "100ms",
		"--workers.prober", "2", "--workers.deleter", "2",
		"--jetstream.lease_ttl", s.LeaseTTL.String(), "--jetstream.deleter_ack_wait", s.DeleterAckWait.String(),
		"--jetstream.prober_ack_wait", s.ProberAckWait.String(), "--jetstream.sweeper_ack_wait", s.SweeperAckWait.String(),
		"--http.listen", "127.0.0.1:0", "--log.format", "json", "--log.level", "info",
	}
	return append(a, e.extra...)
}

// startStage starts one process of stage.
func (e *env) startStage(stage string) (*Proc, error) {
	e.mu.Lock()
	n := e.started[stage]
	e.started[stage]++
	e.mu.Unlock()
	name := fmt.Sprintf("%s-%d", stage, n)
	bin, env := e.cfg.Bins[stage], []string(nil)
	if e.leak.Stage == stage {
		bin, env = e.cfg.Bins[LeakyStageBin], e.leak.env()
	}
	p, err := StartProc(name, filepath.Join(e.dir, "logs", name+".log"), bin, e.args(), env)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs[stage] = append(e.procs[stage], p)
	e.all = append(e.all, p)
	e.mu.Unlock()
	return p, nil
}

// startAll starts one process of each stage.
func (e *env) startAll() error {
	for _, s := range stageCommands {
		if _, err := e.startStage(s); err != nil {
			return err
		}
	}
	return nil
}

// kill forgets p and ends it with SIGKILL: forgotten first, so that a wait meanwhile (the
// soak's checks go on during its faults) does not take the killed process for one that exited
// by itself.
func (e *env) kill(stage string, p *Proc) {
	e.mu.Lock()
	ps := e.procs[stage]
	for i, q := range ps {
		if q == p {
			e.procs[stage] = append(ps[:i:i], ps[i+1:]...)
			break
		}
	}
	e.restarts++
	e.mu.Unlock()
	p.Kill()
}

// running returns the running processes of stage.
func (e *env) running(stage string) []*Proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*Proc
	for _, p := range e.procs[stage] {
		if p.Running() {
			out = append(out, p)
		}
	}
	return out
}

// exited reports a stage process that ended by itself (a crash the suite did not cause).
func (e *env) exited() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ps := range e.procs {
		for _, p := range ps {
			if !p.Running() {
				return fmt.Errorf("%s exited by itself; its log ends:\n%s", p.Name, p.LogTail(20))
			}
		}
	}
	return nil
}

// readTimeout bounds each of the suite's reads of JetStream. A request whose context has a
// deadline waits for it, and one lost while a node is killed or a leader elected would wait
// for the scenario's: bounded, the next poll asks again.
const readTimeout = 10 * time.Second

// checkpoint reads the scanner's checkpoint.
func (e *env) checkpoint(ctx context.Context) (pipeline.Checkpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	if err != nil {
		return pipeline.Checkpoint{}, err
	}
	ck, _, err := scanner.ReadCheckpoint(ctx, kv)
	return ck, err
}

// drained reports whether both consumers have nothing pending or unacknowledged.
func (e *env) drained(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	return servers.StagesDrained(ctx, e.js, e.names)
}

// ackPending is a consumer's number of messages in flight.
func (e *env) ackPending(ctx context.Context, stream, consumer string) int {
	c, err := e.js.Consumer(ctx, stream, consumer)
	if err != nil {
		return 0
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0
	}
	return info.NumAckPending
}

// pollPeriod is how often the suite looks at the deployment while it waits for a condition.
const pollPeriod = 20 * time.Millisecond

// waitFor polls cond until it holds, ctx ends, or a stage process dies by itself.
func (e *env) waitFor(ctx context.Context, what string, cond func() bool) error {
	t := time.NewTicker(pollPeriod)
	defer t.Stop()
	for !cond() {
		if err := e.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// tick calls f every period until ctx ends, the first time one period after the start.
func tick(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// roundStarted waits until the scanner is inside round n.
func (e *env) roundStarted(ctx context.Context, n uint64) error {
	return e.waitFor(ctx, fmt.Sprintf("round %d", n), func() bool {
		ck, err := e.checkpoint(ctx)
		return err == nil && (ck.Round > n || ck.Round == n && ck.InRound)
	})
}

// sleep waits d (a fault's duration or a random moment, not a condition).
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// goroutines scrapes go_goroutines from every running stage process and returns the largest.
func (e *env) goroutines(ctx context.Context) (int, error) {
	e.mu.Lock()
	var ps []*Proc
	for _, l := range e.procs {
		ps = append(ps, l...)
	}
	e.mu.Unlock()
	most := 0
	for _, p := range ps {
		addr := p.HTTPAddr()
		if addr == "" || !p.Running() {
			continue
		}
		n, err := scrapeGauge(ctx, "http://"+addr+"/metrics", "go_goroutines")
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.Name, err)
		}
		most = max(most, int(n))
	}
	return most, nil
}

func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("scrape %s: no %s", url, name)
}

// peakRSS is the largest peak resident set size of any stage process of the scenario.
func (e *env) peakRSS() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var most int64
	for _, p := range e.all {
		most = max(most, p.PeakRSS())
	}
	return most
}

// stopAll stops every running process gracefully; a process that does not exit cleanly is
// an error.
func (e *env) stopAll() error {
	e.mu.Lock()
	var ps []*Proc
	for _, l := range e.procs {
		ps = append(ps, l...)
	}
	e.procs = map[string][]*Proc{}
	e.mu.Unlock()
	var errs []error
	for _, p := range ps {
		if !p.Running() {
			continue
		}
		if err := p.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("%w; log ends:\n%s", err, p.LogTail(10)))
		}
	}
	return errors.Join(errs...)
}

// close stops everything the environment started.
func (e *env) close() {
	_ = e.stopAll()
	if e.nc != nil {
		e.nc.Close()
	}
	if e.nats != nil {
		e.nats.Shutdown()
	}
	if e.js3 != nil {
		e.js3.Shutdown()
	}
	if e.redis != nil {
		_ = e.redis.Close()
	}
	for _, r := range e.stores {
		_ = r.Close()
	}
}

// errViolation marks a broken safety invariant (as opposed to a failure of the suite).
var errViolation = errors.New("invariant violated")

// readEvents visits every event stored so far, a request's delete event once per target;
// what does not decode is skipped.
func (e *env) readEvents(ctx context.Context, visit func(subjects.Event)) error {
	return e.readWholeEvents(ctx, func(ev subjects.Event) {
		for _, one := range ev.PerTarget() {
			visit(one)
		}
	})
}

// readWholeEvents visits every event stored so far as it was stored.
func (e *env) readWholeEvents(ctx context.Context, visit func(subjects.Event)) error {
	err := servers.EachMessage(ctx, e.js, e.names.EventsStream(), nil, func(m jetstream.Msg) {
		if ev, err := subjects.DecodeEvent(m.Data()); err == nil {
			visit(ev)
		}
	})
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	return nil
}
