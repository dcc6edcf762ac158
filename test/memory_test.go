package test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// The memory of a stage over many rounds. A stage runs alone in a process of its own (this
// test binary again, TestStageMemoryProcess), as deployed (app.Run, a stage process's
// collectors, scraped every 200ms as the soak scrapes them), against a redis-server and an
// embedded JetStream server in the test's process, whose memory is thus not the stage's.
// Between and during its rounds the test churns what the stage walks: files of new blocks
// appear on the swept storage and old ones go, entries come and go in the quarantine, block
// keys are added and removed, so a cache keyed by names once seen would grow. The stage's
// figures are read in one of three modes:
//
//   - gc: at the end of each of its rounds the process stops where it stands (inside the log
//     call of "round finished", on the walk's own goroutine) and reads, after a forced
//     collection, its live heap (heap_alloc), the heap's spans in use, its goroutines and
//     open files: what a leak raises, without the scatter of a GC cycle. The slope of each
//     over the rounds after the first tenth is fitted with a 95% interval (trend), and
//     judgeFlat fails a live heap, goroutines or open files that grow. A heap profile is
//     written after the first tenth and after the last round, for go tool pprof -diff_base;
//   - natural: the same moments, without the forced collection, at GOGC=400 as a stage runs
//     (app.TuneGC): how the soak's figures (the resident set, go_gc_heap_live_bytes, the heap
//     in use less what was allocated since the last collection) move when nothing leaks;
//   - rows: at the soak's pace (its pages, ticks and round pause), every 200ms as the soak
//     reads a stage, for KVCMGC_MEMORY_SECONDS; the run is cut into rows of
//     KVCMGC_MEMORY_ROW (the soak's rounds) and the soak's rule is read over every window of
//     10 rows (reportMemRows): what its slopes are when nothing leaks.
//
// Run it with, for example,
//
//	KVCMGC_MEMORY_ROUNDS=1000 KVCMGC_MEMORY_STAGES=walker,scanner KVCMGC_MEMORY_MODE=gc,natural \
//	  go test -run '^TestStageMemory$' -v -timeout 60m ./test/
//
// (KVCMGC_MEMORY_BLOCKS: blocks per instance, KVCMGC_MEMORY_LEAK: bytes a round to plant,
// KVCMGC_MEMORY_QUARANTINE: the walker's sweep_quarantine,
// KVCMGC_MEMORY_OUT: a directory that keeps the samples and the profiles). Without
// KVCMGC_MEMORY_ROUNDS it runs a short form (memShort) in `make test`.

// memConfig is what the stage process is told (KVCMGC_MEMORY_CHILD, JSON).
type memConfig struct {
	Stage  string `json:"stage"` // "walker" or "scanner"
	NATS   string `json:"nats"`
	Redis  string `json:"redis"`
	Rounds int    `json:"rounds"` // the process stops after this many rounds of its own
	Mode   string `json:"mode"`   // "gc", "natural" or "rows"
	// Seconds is how long a rows run lasts (Rounds is then only a bound).
	Seconds float64 `json:"seconds,omitempty"`
	// Quarantine is the walker's sweep_quarantine (0: 1s, the soak's); a look into the
	// quarantine, every half of it, closes the data walk, which lists its directory again.
	Quarantine time.Duration `json:"quarantine,omitempty"`
	Out        string        `json:"out"`      // the samples, one JSON line per round
	Profiles   string        `json:"profiles"` // directory of the heap profiles
	// ProfileAt are the rounds after which a heap profile is written (heap-<round>.pb.gz).
	ProfileAt []int `json:"profile_at"`
	// ProfileRate is runtime.MemProfileRate (0: Go's default, a sample every 512 KiB).
	ProfileRate int `json:"profile_rate"`
	// Leak, when set, is planted: the process keeps this many bytes more after every round,
	// in 64-byte pieces (a cache entry's size), to show the judgement catches such a leak.
	Leak int `json:"leak"`
}

// memSample is one stage process's figures at the end of one of its rounds.
type memSample struct {
	N     int     `json:"n"`     // the process's own round count, from 1
	Round uint64  `json:"round"` // the round of the checkpoint
	T     float64 `json:"t"`     // seconds since the process started its stage
	// After a forced collection (gc mode), or as they stand (natural mode).
	HeapAlloc    float64 `json:"heap_alloc"`
	HeapInuse    float64 `json:"heap_inuse"`
	HeapSys      float64 `json:"heap_sys"`
	HeapReleased float64 `json:"heap_released"`
	HeapLive     float64 `json:"heap_live"`        // /gc/heap/live:bytes (go_gc_heap_live_bytes)
	InuseAtGC    float64 `json:"heap_inuse_at_gc"` // the soak's heap_inuse: inuse - (alloc - live)
	RSS          float64 `json:"rss"`
	RSSAnon      float64 `json:"rss_anon"`  // of the resident set, the anonymous memory (heap, stacks, runtime)
	RSSFile      float64 `json:"rss_file"`  // and the pages of files (the binary's text)
	GoMapped     float64 `json:"go_mapped"` // every byte the runtime maps, less the heap released to the OS
	StackInuse   float64 `json:"stack_inuse"`
	Goroutines   float64 `json:"goroutines"`
	FDs          float64 `json:"fds"`
	GCs          float64 `json:"gcs"` // collections so far
	// Rows mode: the directory the walk is in (its checkpoint's), "" between rounds.
	Dir string `json:"dir,omitempty"`
}

const (
	memChildEnv = "KVCMGC_MEMORY_CHILD"
	memCluster  = "mem"
)

// memFigures are the figures judged, by their JSON names, with how each is read.
var memFigures = []struct {
	name string
	of   func(memSample) float64
}{
	{"heap_alloc", func(s memSample) float64 { return s.HeapAlloc }},
	{"heap_inuse", func(s memSample) float64 { return s.HeapInuse }},
	{"heap_live", func(s memSample) float64 { return s.HeapLive }},
	{"heap_inuse_at_gc", func(s memSample) float64 { return s.InuseAtGC }},
	{"rss", func(s memSample) float64 { return s.RSS }},
	{"rss_anon", func(s memSample) float64 { return s.RSSAnon }},
	{"rss_file", func(s memSample) float64 { return s.RSSFile }},
	{"go_mapped", func(s memSample) float64 { return s.GoMapped }},
	{"stack_inuse", func(s memSample) float64 { return s.StackInuse }},
	{"goroutines", func(s memSample) float64 { return s.Goroutines }},
	{"fds", func(s memSample) float64 { return s.FDs }},
}

// TestStageMemoryProcess is the stage process of TestStageMemory; it does nothing in a test
// run of its own.
func TestStageMemoryProcess(t *testing.T) {
	raw := os.Getenv(memChildEnv)
	if raw == "" {
		t.Skip("the stage process of TestStageMemory")
	}
	var cfg memConfig
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	require.NoError(t, runMemoryStage(cfg))
}

// runMemoryStage runs cfg.Stage until it has finished cfg.Rounds rounds, sampling after each.
func runMemoryStage(cfg memConfig) error {
	if cfg.ProfileRate > 0 {
		runtime.MemProfileRate = cfg.ProfileRate
	}
	if cfg.Mode != "gc" {
		app.TuneGC()
	}
	out, err := os.Create(cfg.Out)
	if err != nil {
		return err
	}
	defer out.Close()
	nc, err := nats.Connect(cfg.NATS)
	if err != nil {
		return err
	}
	defer nc.Close()
	conn, err := redismeta.ParseURI(cfg.Redis)
	if err != nil {
		return err
	}

	// What a stage process registers (cli.Process), scraped every 200ms as the soak does.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	var mu sync.Mutex // the samples' file, n, failed
	enc := json.NewEncoder(out)
	var failed error
	record := func(s memSample) {
		if err := enc.Encode(s); err != nil && failed == nil {
			failed = err
		}
	}
	n := 0
	var scrapes sync.WaitGroup
	scrapes.Go(func() {
		var state jetstream.KeyValue
		names, _ := subjects.NewNames("kvcmgc", memCluster)
		if js, err := jetstream.New(nc); err == nil && cfg.Mode == "rows" {
			state, _ = js.KeyValue(ctx, names.StateBucket())
		}
		every(ctx, 200*time.Millisecond, func() {
			mfs, _ := reg.Gather()
			if cfg.Mode != "rows" {
				return
			}
			s := scraped(mfs)
			if cfg.Stage == "walker" && state != nil {
				if c, _, err := sweep.ReadCheckpoint(ctx, state, seed.StorageNFS); err == nil && c.InRound {
					s.Dir = path.Dir(string(c.Cursor))
				}
			}
			mu.Lock()
			s.N, s.T = n, time.Since(start).Seconds()
			record(s)
			mu.Unlock()
			if s.T >= cfg.Seconds {
				cancel()
			}
		})
	})
	defer scrapes.Wait()

	// The planted leak's pieces; the slice is made whole first, so that each round adds its
	// pieces and nothing else.
	leaked := make([][]byte, 0, cfg.Rounds*cfg.Leak/64)
	onRound := func(round uint64) {
		mu.Lock()
		defer mu.Unlock()
		n++
		if cfg.Mode == "rows" {
			return
		}
		for range cfg.Leak / 64 {
			leaked = append(leaked, make([]byte, 64))
		}
		s := sampleMemory(cfg.Mode == "gc")
		s.N, s.Round, s.T = n, round, time.Since(start).Seconds()
		record(s)
		for _, at := range cfg.ProfileAt {
			if at == n {
				if err := writeHeapProfile(filepath.Join(cfg.Profiles, fmt.Sprintf("heap-%d.pb.gz", n))); err != nil && failed == nil {
					failed = err
				}
			}
		}
		if n >= cfg.Rounds {
			cancel()
		}
	}
	msg := "round finished"
	if cfg.Stage == "walker" {
		msg = "sweep round finished"
	}
	var logTo slog.Handler = slog.DiscardHandler
	if os.Getenv("KVCMGC_TEST_LOG") != "" {
		logTo = slog.NewTextHandler(os.Stderr, nil)
	}
	o := memOptions(cfg, conn)
	o.Reg = reg
	o.Logger = slog.New(&roundHandler{Handler: logTo, msg: msg, onRound: onRound})
	which := app.Stages{Scanner: cfg.Stage == "scanner", Walker: cfg.Stage == "walker"}
	if err := app.Run(ctx, nc, o, which); err != nil {
		return err
	}
	runtime.KeepAlive(leaked)
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		return failed
	}
	if n < cfg.Rounds && cfg.Mode != "rows" {
		return fmt.Errorf("stopped after %d rounds of %d", n, cfg.Rounds)
	}
	return nil
}

// memOptions are a stage's settings for rounds back to back: a round pause of 1ms (the next
// round starts after one idle wait, in which the sample is taken), short ticks, the registry
// read again every 100ms, no backpressure (the test empties the streams). In rows mode they
// are `make soak`'s instead (faults.soak.flags): its pages, ticks and round pause.
func memOptions(cfg memConfig, conn redismeta.ConnOptions) app.Options {
	js := subjects.DefaultSettings()
	js.LeaseTTL = 2 * time.Second
	sc := scanner.DefaultConfig()
	sc.ScanInterval, sc.RoundPause, sc.ScanBatchSize = time.Millisecond, time.Millisecond, 256
	sc.HighWater, sc.LeaseRenew = 1<<40, 200*time.Millisecond
	sc.KVCMPersistGap = time.Millisecond // no KVCM persists its counters here
	sw := sweep.DefaultConfig()
	sw.Storages = []string{seed.StorageNFS}
	sw.Interval, sw.RoundPause, sw.BatchSize, sw.Quarantine = time.Millisecond, time.Millisecond, 64, time.Second
	sw.HighWater, sw.LeaseRenew, sw.RegistryRefresh = 1<<40, 200*time.Millisecond, 100*time.Millisecond
	sw.CollectUnregistered, sw.UnregisteredGrace = true, 24*time.Hour
	if cfg.Quarantine > 0 {
		sw.Quarantine = cfg.Quarantine
	}
	if cfg.Mode == "rows" {
		sc.ScanInterval, sc.RoundPause, sc.ScanBatchSize = 10*time.Millisecond, 2*time.Second, 256
		sw.Interval, sw.RoundPause, sw.BatchSize, sw.RegistryRefresh = 20*time.Millisecond, 2*time.Second, 64, 30*time.Second
	}
	o := app.Options{Cluster: memCluster, Prefix: "kvcmgc", Registry: conn, Meta: conn,
		Storage: storage.Options{DefaultProbe: storage.ProbeStat}, Scanner: sc, Prober: prober.DefaultConfig(),
		Deleter: deleter.DefaultConfig(), JetStream: js, Sweep: sw}
	if cfg.Stage != "walker" {
		o.Sweep = sweep.Config{}
	}
	return o
}

// roundHandler calls onRound, on the logging goroutine, for every record msg with its
// "round" attribute.
type roundHandler struct {
	slog.Handler
	msg     string
	onRound func(round uint64)
}

func (h *roundHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.Handler.Enabled(ctx, l)
}

func (h *roundHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		var round uint64
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "round" {
				round = a.Value.Uint64()
				return false
			}
			return true
		})
		h.onRound(round)
	}
	if h.Handler.Enabled(ctx, r.Level) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h *roundHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &roundHandler{Handler: h.Handler.WithAttrs(as), msg: h.msg, onRound: h.onRound}
}

func (h *roundHandler) WithGroup(name string) slog.Handler {
	return &roundHandler{Handler: h.Handler.WithGroup(name), msg: h.msg, onRound: h.onRound}
}

// sampleMemory reads the process's figures, after a forced collection when gc is set.
func sampleMemory(gc bool) memSample {
	if gc {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	s := memSample{HeapAlloc: float64(ms.HeapAlloc), HeapInuse: float64(ms.HeapInuse), HeapSys: float64(ms.HeapSys),
		HeapReleased: float64(ms.HeapReleased), HeapLive: float64(live[0].Value.Uint64()), GCs: float64(ms.NumGC),
		Goroutines: float64(runtime.NumGoroutine())}
	s.InuseAtGC = s.HeapInuse - max(s.HeapAlloc-s.HeapLive, 0)
	s.GoMapped, s.StackInuse = float64(ms.Sys-ms.HeapReleased), float64(ms.StackInuse)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "VmRSS:":
				s.RSS = kb * 1024
			case "RssAnon:":
				s.RSSAnon = kb * 1024
			case "RssFile:":
				s.RSSFile = kb * 1024
			}
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.FDs = float64(len(fds))
	}
	return s
}

// scraped reads a sample from a gathering of the process's registry, as the soak reads a
// stage's /metrics page (faults.stageWatch).
func scraped(mfs []*dto.MetricFamily) memSample {
	v := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > 0 {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				v[mf.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				v[mf.GetName()] = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				v[mf.GetName()] = m.GetUntyped().GetValue()
			}
		}
	}
	s := memSample{HeapAlloc: v["go_memstats_heap_alloc_bytes"], HeapInuse: v["go_memstats_heap_inuse_bytes"],
		HeapSys: v["go_memstats_heap_sys_bytes"], HeapReleased: v["go_memstats_heap_released_bytes"],
		HeapLive: v["go_gc_heap_live_bytes"], RSS: v["process_resident_memory_bytes"],
		Goroutines: v["go_goroutines"], FDs: v["process_open_fds"]}
	s.InuseAtGC = s.HeapInuse - max(s.HeapAlloc-s.HeapLive, 0)
	return s
}

// writeHeapProfile writes the heap profile as of a collection made now.
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// memRun is one stage process's run.
type memRun struct {
	cfg      memConfig
	samples  []memSample
	elapsed  time.Duration
	profiles []string
}

// memEnv is the servers and the keyspace a stage process runs against, and the churn.
type memEnv struct {
	t     *testing.T
	redis *testenv.Redis
	nats  *testenv.NATS
	js    jetstream.JetStream
	names subjects.Names
	m     *seed.Manifest
}

func newMemEnv(t *testing.T, blocks int) *memEnv {
	t.Helper()
	e := &memEnv{t: t, redis: testenv.StartRedis(t), nats: testenv.StartNATS(t)}
	e.js = e.nats.JetStream(t)
	var err error
	e.names, err = subjects.NewNames("kvcmgc", memCluster)
	require.NoError(t, err)
	st := subjects.DefaultSettings()
	st.LeaseTTL = 2 * time.Second
	require.NoError(t, subjects.Ensure(context.Background(), e.js, e.names, st))
	e.m, err = seed.Generate(context.Background(), e.redis.Client(), seed.Spec{Cluster: memCluster, Layout: kvcm.LayoutLocation,
		Instances: []string{"inst0", "inst1", "inst2", "inst3"}, Blocks: blocks, GarbageFraction: 0.3, TrickyFraction: 0.1,
		Root: t.TempDir(), MetaURI: e.redis.URI(), Seed: 37, SweepFiles: true})
	require.NoError(t, err)
	return e
}

// run runs stage in a process of its own for rounds rounds, churning meanwhile.
func (e *memEnv) run(stage, mode string, rounds, leak int, seconds float64, keep string) memRun {
	q, _ := time.ParseDuration(os.Getenv("KVCMGC_MEMORY_QUARANTINE"))
	t := e.t
	t.Helper()
	dir := keep
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := memConfig{Stage: stage, NATS: e.nats.URL(), Redis: e.redis.URI(), Rounds: rounds, Mode: mode, Leak: leak,
		Out: filepath.Join(dir, fmt.Sprintf("%s-%s.jsonl", stage, mode)), Profiles: dir,
		ProfileAt: []int{max(rounds/10, 1), rounds}, ProfileRate: 4096, Seconds: seconds, Quarantine: q}
	limit := time.Duration(rounds)*5*time.Second + time.Minute // generous: a loaded machine, the race detector
	if mode == "rows" {
		cfg.ProfileAt, limit = nil, time.Duration(seconds*1.5)*time.Second+time.Minute
	}
	if leak > 0 {
		cfg.Out = filepath.Join(dir, fmt.Sprintf("%s-%s-leak%d.jsonl", stage, mode, leak))
	}
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { e.drain(ctx) })
	switch stage {
	case "walker":
		wg.Go(func() { e.churnFiles(ctx) })
	case "scanner":
		wg.Go(func() { e.churnKeys(ctx) })
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestStageMemoryProcess$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), memChildEnv+"="+string(raw), "GOMAXPROCS=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	started := time.Now()
	require.NoError(t, cmd.Start())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-waited
		t.Fatalf("%s process: not done after %s", stage, limit)
	}
	require.NoError(t, err, "%s process", stage)
	r := memRun{cfg: cfg, elapsed: time.Since(started)}
	f, err := os.Open(cfg.Out)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s memSample
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s))
		r.samples = append(r.samples, s)
	}
	require.NoError(t, sc.Err())
	if mode != "rows" {
		require.Len(t, r.samples, rounds)
	}
	if stage == "walker" {
		files, dirs := countTree(e.m.SweepRoot)
		t.Logf("the swept storage at the end: %d files in %d directories", files, dirs)
	}
	for _, at := range cfg.ProfileAt {
		r.profiles = append(r.profiles, filepath.Join(dir, fmt.Sprintf("heap-%d.pb.gz", at)))
	}
	return r
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	tk := time.NewTicker(d)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		f()
	}
}

// drain empties the streams the stage publishes to, so nothing holds it back and the
// server's memory stays flat.
func (e *memEnv) drain(ctx context.Context) {
	every(ctx, 500*time.Millisecond, func() {
		for _, name := range []string{e.names.SweepStream(), e.names.BatchesStream(), e.names.DeletesStream(), e.names.EventsStream()} {
			if s, err := e.js.Stream(ctx, name); err == nil {
				_ = s.Purge(ctx)
			}
		}
	})
}

// churnFiles replaces the files of the swept storage all the time: every 10ms a file of a new
// block appears (a per-block name, old enough to be a candidate, or a location's name) and,
// past 300 of them, the oldest goes; every 100ms the same in the quarantine, past 20.
func (e *memEnv) churnFiles(ctx context.Context) {
	rng := rand.New(rand.NewPCG(37, 1))
	root := e.m.SweepRoot
	qdir := filepath.Join(root, storage.QuarantineDir, base64.RawURLEncoding.EncodeToString([]byte(seed.StorageNFS)))
	old := time.Now().Add(-48 * time.Hour)
	var files, quarantined []string
	write := func(p string) {
		if os.MkdirAll(filepath.Dir(p), 0o755) == nil && os.WriteFile(p, []byte("kv"), 0o644) == nil {
			_ = os.Chtimes(p, old, old)
		}
	}
	i := 0
	every(ctx, 10*time.Millisecond, func() {
		inst := e.m.Instances[rng.IntN(len(e.m.Instances))]
		key := int64(rng.Uint64() >> 1)
		var p string
		if i%2 == 0 {
			p = root + kvcm.BlockObjectName(inst, "tp"+strconv.Itoa(rng.IntN(2)), key)
		} else {
			p = fmt.Sprintf("%s%s/tp0/%016x_%08x", root, inst, key, rng.Uint32())
		}
		write(p)
		if files = append(files, p); len(files) > 300 {
			_ = os.Remove(files[0])
			files = files[1:]
		}
		if i%10 == 0 {
			q := filepath.Join(qdir, kvcm.BlockObjectName(inst, "tp0", key)) + "~" + strconv.FormatInt(time.Now().UnixMicro(), 10)
			write(q)
			if quarantined = append(quarantined, q); len(quarantined) > 20 {
				_ = os.Remove(quarantined[0])
				quarantined = quarantined[1:]
			}
		}
		i++
	})
}

// churnKeys adds and removes block keys all the time: every 10ms a copy of a seeded block
// under a new key and, past 300 of them, the oldest goes.
func (e *memEnv) churnKeys(ctx context.Context) {
	rng := rand.New(rand.NewPCG(37, 2))
	rdb := e.redis.Client()
	type template struct {
		inst   string
		fields map[string]string
	}
	var templates []template
	for _, l := range e.m.Locations[:min(len(e.m.Locations), 64)] {
		f, err := rdb.HGetAll(ctx, kvcm.BlockKey(l.Instance, l.Key)).Result()
		if err == nil && len(f) > 0 {
			templates = append(templates, template{l.Instance, f})
		}
	}
	if len(templates) == 0 {
		e.t.Errorf("churn keys: no seeded block to copy")
		return
	}
	var keys []string
	every(ctx, 10*time.Millisecond, func() {
		tp := templates[rng.IntN(len(templates))]
		k := kvcm.BlockKey(tp.inst, int64(rng.Uint64()>>1))
		if rdb.HSet(ctx, k, tp.fields).Err() != nil {
			return
		}
		if keys = append(keys, k); len(keys) > 300 {
			if err := rdb.Del(ctx, keys[0]).Err(); err != nil && !errors.Is(err, redis.Nil) {
				return
			}
			keys = keys[1:]
		}
	})
}

// TestStageMemory runs each stage alone for many rounds and judges the slopes of its figures
// (see the top of this file).
func TestStageMemory(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("KVCMGC_MEMORY_ROUNDS"))
	if rounds == 0 {
		if testing.Short() {
			t.Skip("a few minutes of rounds; run without -short")
		}
		memShort(t)
		return
	}
	stages := strings.Split(cmpOr(os.Getenv("KVCMGC_MEMORY_STAGES"), "walker"), ",")
	modes := strings.Split(cmpOr(os.Getenv("KVCMGC_MEMORY_MODE"), "gc"), ",")
	blocks, _ := strconv.Atoi(cmpOr(os.Getenv("KVCMGC_MEMORY_BLOCKS"), "1000"))
	seconds, _ := strconv.ParseFloat(cmpOr(os.Getenv("KVCMGC_MEMORY_SECONDS"), "600"), 64)
	row, _ := time.ParseDuration(cmpOr(os.Getenv("KVCMGC_MEMORY_ROW"), "16s"))
	leak, _ := strconv.Atoi(os.Getenv("KVCMGC_MEMORY_LEAK"))
	keep := os.Getenv("KVCMGC_MEMORY_OUT")
	for _, stage := range stages {
		t.Run(stage, func(t *testing.T) {
			e := newMemEnv(t, blocks)
			for _, mode := range modes {
				r := e.run(stage, mode, rounds, leak, seconds, keep)
				if mode == "rows" {
					reportMemRows(t, r, row)
					continue
				}
				fits := report(t, r)
				if mode == "gc" && leak == 0 {
					judgeFlat(t, fits)
				}
			}
		})
	}
}

// memShort is TestStageMemory's form in `make test`: 200 rounds of the walker on a small
// tree must be flat (judgeFlat); then, the same with a leak of 2 KiB a round planted, the
// judgement must catch it, and read about that much. (Under the race detector the live heap's
// interval is about ±200 bytes a round over 180 rounds; a cache entry for each file of the
// churn would add 2 to 4 KiB a round.)
func memShort(t *testing.T) {
	e := newMemEnv(t, 100)
	judgeFlat(t, report(t, e.run("walker", "gc", 200, 0, 0, "")))
	const leak = 2 << 10
	f := report(t, e.run("walker", "gc", 200, leak, 0, ""))["heap_alloc"]
	require.Greater(t, f.Lo, 0.5*leak, "a leak of %d bytes a round not caught: %+v", leak, f)
	require.Less(t, f.Hi, 2.0*leak, "a leak of %d bytes a round read as more: %+v", leak, f)
}

// judgeFlat fails a run whose live heap, goroutines or open files grow: the upper 95% bound
// of the slope of heap_alloc (after a forced collection) must be under 1 KiB a round, of
// goroutines and open files under one every 50 rounds.
func judgeFlat(t *testing.T, fits map[string]trendFit) {
	t.Helper()
	for name, limit := range map[string]float64{"heap_alloc": 1 << 10, "goroutines": 0.02, "fds": 0.02} {
		f := fits[name]
		require.Less(t, f.Hi, limit, "%s grows: %+v a round", name, f)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// report logs a run's figures: each one's mean and its slope per round over the rounds
// after the warm-up, with the 95% bounds, and the heap profiles' difference.
func report(t *testing.T, r memRun) map[string]trendFit {
	t.Helper()
	warm := r.cfg.ProfileAt[0]
	ss := r.samples[warm-1:]
	fits := map[string]trendFit{}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s mode, %d rounds in %s (%.0f ms a round), leak %d B/round; rounds %d-%d fitted:\n",
		r.cfg.Stage, r.cfg.Mode, len(r.samples), r.elapsed.Round(time.Second),
		r.elapsed.Seconds()*1000/float64(len(r.samples)), r.cfg.Leak, ss[0].N, ss[len(ss)-1].N)
	fmt.Fprintf(&b, "  %-17s %12s %12s %12s %12s %9s %9s\n", "figure", "mean", "min", "max", "slope/round", "95% lo", "95% hi")
	for _, f := range memFigures {
		xs, ys := make([]float64, len(ss)), make([]float64, len(ss))
		for i, s := range ss {
			xs[i], ys[i] = float64(s.N), f.of(s)
		}
		fit := trend(xs, ys)
		fits[f.name] = fit
		fmt.Fprintf(&b, "  %-17s %12.0f %12.0f %12.0f %12.1f %9.1f %9.1f  (%+.3f%% of the mean)\n",
			f.name, fit.Mean, fit.Min, fit.Max, fit.Slope, fit.Lo, fit.Hi, 100*fit.Slope/fit.Mean)
	}
	t.Log(b.String())
	if len(r.profiles) == 2 {
		out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=15", "-sample_index=inuse_space",
			"-diff_base="+r.profiles[0], r.profiles[1]).CombinedOutput()
		if err != nil {
			t.Logf("go tool pprof -diff_base: %v\n%s", err, out)
		} else {
			t.Logf("heap in use, round %d less round %d (go tool pprof -top -diff_base):\n%s", r.cfg.ProfileAt[1], r.cfg.ProfileAt[0], out)
		}
	}
	return fits
}

// countTree counts the files and the directories below root.
func countTree(root string) (files, dirs int) {
	_ = filepath.WalkDir(root, func(_ string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
		case d.IsDir():
			dirs++
		default:
			files++
		}
		return nil
	})
	return files, dirs
}

// reportMemRows logs what the soak's rule reads of a rows run: the run cut into rows of row
// each (the soak's rounds), each row's smallest readings, the heap figures' floors over 3
// rows, and the slope of every 10 rows in a row as a share of the mean (Siegel's repeated
// median, faults.slopeOf), over every window of the run.
func reportMemRows(t *testing.T, r memRun, row time.Duration) {
	t.Helper()
	type rowMin struct {
		dirs map[string]bool
		v    map[string]float64
	}
	figs := []string{"rss", "heap_live", "heap_inuse_at_gc"}
	var rows []rowMin
	for _, s := range r.samples {
		i := int(s.T / row.Seconds())
		for len(rows) <= i {
			rows = append(rows, rowMin{dirs: map[string]bool{}, v: map[string]float64{}})
		}
		rows[i].dirs[s.Dir] = true
		for _, f := range memFigures {
			if !slices.Contains(figs, f.name) {
				continue
			}
			if cur, ok := rows[i].v[f.name]; !ok || f.of(s) < cur {
				rows[i].v[f.name] = f.of(s)
			}
		}
	}
	rows = rows[:len(rows)-1] // the last one is cut short
	var b strings.Builder
	fmt.Fprintf(&b, "%s, rows of %s, %d rows, %d rounds:\n  %4s %8s %10s %10s  %s\n", r.cfg.Stage, row, len(rows),
		r.samples[len(r.samples)-1].N, "row", "rss MiB", "live MiB", "inuse MiB", "directories walked")
	floor := func(i int, f string) float64 {
		v := rows[i].v[f]
		if f != "rss" {
			for j := max(i-2, 0); j < i; j++ {
				v = min(v, rows[j].v[f])
			}
		}
		return v
	}
	for i, rw := range rows {
		dirs := slices.Sorted(maps.Keys(rw.dirs))
		fmt.Fprintf(&b, "  %4d %8.1f %10.2f %10.2f  %s\n", i+1, rw.v["rss"]/(1<<20), floor(i, "heap_live")/(1<<20),
			floor(i, "heap_inuse_at_gc")/(1<<20), strings.Join(dirs, " "))
	}
	const window, skip = 10, 3 // the soak's Window and WarmRounds
	for _, f := range figs {
		var rels []float64
		for end := skip + window; end <= len(rows); end++ {
			xs, ys := make([]float64, 0, window), make([]float64, 0, window)
			for i := end - window; i < end; i++ {
				xs, ys = append(xs, float64(i)), append(ys, floor(i, f))
			}
			rels = append(rels, repeatedMedian(xs, ys)/mean(ys))
		}
		if len(rels) == 0 {
			continue
		}
		over := 0
		for _, r := range rels {
			if r > 0.01 {
				over++
			}
		}
		sorted := slices.Sorted(slices.Values(rels))
		fmt.Fprintf(&b, "  %-16s slope of 10 rows, %% of the mean a row, over %d windows: min %+.2f, median %+.2f, max %+.2f; above +1%% in %d\n",
			f, len(rels), 100*sorted[0], 100*sorted[len(sorted)/2], 100*sorted[len(sorted)-1], over)
	}
	t.Log(b.String())
}

// repeatedMedian is Siegel's repeated median slope of ys over xs.
func repeatedMedian(xs, ys []float64) float64 {
	var per []float64
	for i := range xs {
		var sl []float64
		for j := range xs {
			if i != j && xs[i] != xs[j] {
				sl = append(sl, (ys[j]-ys[i])/(xs[j]-xs[i]))
			}
		}
		per = append(per, medianOf(sl))
	}
	return medianOf(per)
}

func medianOf(v []float64) float64 {
	v = slices.Sorted(slices.Values(v))
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
