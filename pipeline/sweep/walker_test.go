package sweep

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// walkerEnv is an embedded JetStream server with kvcm-gc's topology, the storage nfs of a
// registry (sweepRegistry) and its files, and walkers on them.
type walkerEnv struct {
	t     *testing.T
	js    jetstream.JetStream
	names subjects.Names
	dir   string
	root  string
	reg   staticRegistry
	now   time.Time
}

func newWalkerEnv(t *testing.T) *walkerEnv {
	t.Helper()
	e := &walkerEnv{t: t, js: testenv.StartNATS(t).JetStream(t), names: subjects.Names{Prefix: "kvcmgc", Cluster: "c1"},
		dir: t.TempDir(), now: time.Now()}
	e.root = e.dir + "/nfs/"
	s := subjects.DefaultSettings()
	s.LeaseTTL = 2 * time.Second
	require.NoError(t, subjects.Ensure(context.Background(), e.js, e.names, s))
	e.reg = staticRegistry{sweepRegistry(t, e.dir)}
	return e
}

func (e *walkerEnv) file(object string, age time.Duration) string {
	e.t.Helper()
	p := e.root + object
	require.NoError(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(e.t, os.WriteFile(p, []byte("kv"), 0o644))
	mt := e.now.Add(-age)
	require.NoError(e.t, os.Chtimes(p, mt, mt))
	return p
}

func (e *walkerEnv) walker(holder string, batch int) *Walker {
	e.t.Helper()
	return e.walkerOf(holder, batch, "nfs")
}

// walkerOf is a walker of the given storages, with metrics on a registry of its own.
func (e *walkerEnv) walkerOf(holder string, batch int, storages ...string) *Walker {
	e.t.Helper()
	ctx := context.Background()
	leases, err := e.js.KeyValue(ctx, e.names.LeaseBucket())
	require.NoError(e.t, err)
	state, err := e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(e.t, err)
	cfg := DefaultConfig()
	cfg.Storages, cfg.Interval, cfg.BatchSize, cfg.Holder = storages, time.Millisecond, batch, holder
	cfg.LeaseRenew = 100 * time.Millisecond
	w, err := NewWalker(cfg, WalkerDeps{Names: e.names, Registry: e.reg, Leases: leases, LeaseTTL: 2 * time.Second, State: state,
		Publisher: pipeline.JSPublisher{JS: e.js}, Metrics: NewMetrics(prometheus.NewRegistry()), Now: func() time.Time { return e.now }})
	require.NoError(e.t, err)
	return w
}

// run starts w; the returned func stops it and waits.
func (e *walkerEnv) run(w *Walker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(e.t, <-done)
		})
	}
	e.t.Cleanup(stop)
	return stop
}

func (e *walkerEnv) checkpoint() Checkpoint {
	e.t.Helper()
	return e.checkpointOf("nfs")
}

func (e *walkerEnv) checkpointOf(storage string) Checkpoint {
	e.t.Helper()
	kv, err := e.js.KeyValue(context.Background(), e.names.StateBucket())
	require.NoError(e.t, err)
	c, _, err := ReadCheckpoint(context.Background(), kv, storage)
	require.NoError(e.t, err)
	return c
}

func (e *walkerEnv) waitRound(n uint64) Checkpoint {
	e.t.Helper()
	return e.waitRoundOf("nfs", n)
}

func (e *walkerEnv) waitRoundOf(storage string, n uint64) Checkpoint {
	e.t.Helper()
	var c Checkpoint
	require.Eventually(e.t, func() bool {
		c = e.checkpointOf(storage)
		return c.Round > n || c.Round == n && !c.InRound
	}, 20*time.Second, 5*time.Millisecond)
	return c
}

// published reads every sweep batch stored so far.
func (e *walkerEnv) published() []subjects.SweepBatch {
	e.t.Helper()
	var out []subjects.SweepBatch
	require.NoError(e.t, testenv.EachMessage(context.Background(), e.js, e.names.SweepStream(), nil, func(m jetstream.Msg) {
		sb, err := subjects.DecodeSweepBatch(m.Data())
		require.NoError(e.t, err)
		inst, err := e.names.InstanceOf(m.Subject())
		require.NoError(e.t, err)
		require.Equal(e.t, sb.Instance, inst)
		out = append(out, sb)
	}))
	return out
}

func filesOf(bs []subjects.SweepBatch, kind string) []string {
	var out []string
	for _, b := range bs {
		if b.Kind != kind {
			continue
		}
		for _, f := range b.Files {
			out = append(out, string(f.Path))
		}
	}
	slices.Sort(out)
	return out
}

// TestWalkerRound: a round publishes exactly the candidates — per-block names of collected
// instances and specs older than the grace — each once, and counts every other file by reason.
func TestWalkerRound(t *testing.T) {
	e := newWalkerEnv(t)
	old := 48 * time.Hour
	want := []string{
		e.file("inst0/tp0/1", old), e.file("inst0/tp0/ffffffffffffffff", old), e.file("inst0/tp1/2", old),
		e.file("inst1/tp0/a", old), e.file("solo/x/y/7", old),
	}
	slices.Sort(want)
	e.file("inst0/tp0/3", time.Minute)           // young
	e.file("inst0/tp0/4", -time.Hour)            // mtime in the future
	e.file("inst0/tp0/1f_9c0e77d2b4a1e2f0", old) // shared
	e.file("inst0/tp0/1F", old)                  // unparsable
	e.file("inst0/tp0/01", old)                  // unparsable
	e.file("ghost/tp0/1", old)                   // unknown instance
	e.file("local_inst/tp0/1", old)              // skipped group
	e.file("inst0/tp7/1", old)                   // unknown spec
	e.file("a/b/c/1", old)                       // two readings
	e.file(storage.QuarantineDir+"x/tp0/1", old) // unknown instance ".kvcm-gc-quarantinex"
	require.NoError(t, os.Symlink("/etc/passwd", e.root+"inst0/tp0/5"))

	w := e.walker("w1", 3)
	e.run(w)
	c := e.waitRound(1)
	require.Equal(t, want, filesOf(e.published(), subjects.SweepWalk))
	require.Equal(t, uint64(len(want)+11), c.LastWalked)
	require.Equal(t, uint64(len(want)), c.LastCandidates)
	require.Equal(t, map[string]uint64{KeptYoung: 2, KeptShared: 1, KeptUnparsable: 2,
		KeptUnknownInstance: 2, KeptGroupSkipped: 1, KeptUnknownSpec: 1, KeptAmbiguousName: 1,
		KeptNotRegular: 1}, c.LastKept)
	require.Greater(t, c.NextRoundUs, e.now.UnixMicro(), "the next round waits the round pause")
	for _, b := range e.published() {
		require.Equal(t, "nfs", b.Storage)
		for _, f := range b.Files {
			require.Equal(t, e.root+kvcm.BlockObjectName(b.Instance, f.Spec, f.Key), string(f.Path))
		}
	}
}

// TestWalkerResumes: a walker stopped mid-round and a new one publish every candidate once.
func TestWalkerResumes(t *testing.T) {
	e := newWalkerEnv(t)
	var want []string
	for i := range 40 {
		want = append(want, e.file(kvcm.BlockObjectName("inst0", "tp0", int64(i)), 48*time.Hour))
	}
	slices.Sort(want)
	w1 := e.walker("w1", 4)
	w1.cfg.Interval = 20 * time.Millisecond
	stop1 := e.run(w1)
	require.Eventually(t, func() bool { c := e.checkpoint(); return c.InRound && c.Page >= 3 }, 20*time.Second, time.Millisecond)
	stop1()
	c := e.checkpoint()
	require.True(t, c.InRound)
	require.NotEmpty(t, c.Cursor)
	e.run(e.walker("w2", 4))
	c = e.waitRound(1)
	require.Equal(t, "w2", c.Holder)
	got := filesOf(e.published(), subjects.SweepWalk)
	require.Equal(t, want, got, "each candidate exactly once")
	require.Equal(t, uint64(40), c.LastWalked)
}

// TestWalkerOneLeader: two walkers on one storage: one walks, the other waits for the lease.
func TestWalkerOneLeader(t *testing.T) {
	e := newWalkerEnv(t)
	for i := range 10 {
		e.file(kvcm.BlockObjectName("inst1", "tp1", int64(i)), 48*time.Hour)
	}
	a, b := e.walker("a", 2), e.walker("b", 2)
	e.run(a)
	e.run(b)
	c := e.waitRound(1)
	held := 0
	for _, w := range []*Walker{a, b} {
		held += int(testenv.GaugeValue(t, w.metrics.LeasesHeld))
	}
	require.Equal(t, 1, held)
	require.Len(t, filesOf(e.published(), subjects.SweepWalk), 10)
	require.Contains(t, []string{"a", "b"}, c.Holder)
}

// TestWalkerLooksIntoQuarantine: a new leader publishes what is in the quarantine.
func TestWalkerLooksIntoQuarantine(t *testing.T) {
	e := newWalkerEnv(t)
	p := e.file("inst0/tp0/1", 48*time.Hour)
	set, err := storage.NewSet(e.reg.reg.Storages, storage.Options{})
	require.NoError(t, err)
	fs, err := set.SweepFS("nfs")
	require.NoError(t, err)
	root, err := fs.Open()
	require.NoError(t, err)
	defer root.Close()
	at := e.now.Add(-time.Minute)
	qrel, err := root.Quarantine("inst0/tp0/1", at)
	require.NoError(t, err)
	_, err = root.Quarantine("nothing", at)
	require.Error(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(fs.QuarantinePath(), "junk"), []byte("x"), 0o644))

	e.run(e.walker("w1", 8))
	c := e.waitRound(1)
	require.Equal(t, QuarantineCount{Files: 1, Bytes: 2, Foreign: 1, OldestUs: at.UnixMicro(), EndedUs: c.QLast.EndedUs}, c.QLast)
	var q []subjects.SweepFile
	for _, b := range e.published() {
		if b.Kind == subjects.SweepQuarantine {
			require.Equal(t, "inst0", b.Instance)
			q = append(q, b.Files...)
		}
	}
	require.NotEmpty(t, q)
	require.Equal(t, p, string(q[0].Path))
	require.Equal(t, qrel, string(q[0].Quarantine))
	require.Equal(t, at.UnixMicro(), q[0].QuarantinedUs)
	require.Equal(t, "tp0", q[0].Spec)
	require.Empty(t, filesOf(e.published(), subjects.SweepWalk), "the quarantined file is not walked as data")
}

// storageSeries gathers a walker's series labelled by swept storage: name{storage} -> value.
func storageSeries(t *testing.T, w *Walker) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, v := range w.metrics.storageGauges() {
		ch := make(chan prometheus.Metric, 16)
		go func() { v.Collect(ch); close(ch) }()
		for m := range ch {
			var d dto.Metric
			require.NoError(t, m.Write(&d))
			require.Len(t, d.GetLabel(), 1)
			require.Equal(t, "storage", d.GetLabel()[0].GetName())
			name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(m.Desc().String())[1]
			out[name+"{"+d.GetLabel()[0].GetValue()+"}"] = d.GetGauge().GetValue()
		}
	}
	return out
}

// TestWalkerMetricsPerStorage: a walker leading two swept storages exports each one's last
// walk and quarantine under its storage label, one quarantine's files never hiding the
// other's; a walker that leads nothing exports no storage series, and a walker that stops
// leading removes them.
func TestWalkerMetricsPerStorage(t *testing.T) {
	e := newWalkerEnv(t)
	e.reg.reg.Storages["nfs2"] = kvcm.StorageConfig{Type: kvcm.TypeFile, TypeName: "file", Name: "nfs2", RootPath: e.dir + "/nfs2/", KeyCountPerFile: 1}
	require.NoError(t, os.MkdirAll(e.dir+"/nfs2", 0o755))
	set, err := storage.NewSet(e.reg.reg.Storages, storage.Options{})
	require.NoError(t, err)
	// nfs: one file in quarantine since an hour ago; nfs2: two, since two minutes ago.
	atA, atB := e.now.Add(-time.Hour).Truncate(time.Second), e.now.Add(-2*time.Minute).Truncate(time.Second)
	quarantine := func(name string, at time.Time, objects ...string) {
		fs, err := set.SweepFS(name)
		require.NoError(t, err)
		root, err := fs.Open()
		require.NoError(t, err)
		defer root.Close()
		for _, o := range objects {
			p := e.dir + "/" + name + "/" + o
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte("kv"), 0o644))
			_, err := root.Quarantine(o, at)
			require.NoError(t, err)
		}
	}
	quarantine("nfs", atA, "inst0/tp0/1")
	quarantine("nfs2", atB, "inst0/tp0/1", "inst0/tp0/2")

	a := e.walkerOf("a", 8, "nfs", "nfs2")
	stopA := e.run(a)
	ckA, ckB := e.waitRoundOf("nfs", 1), e.waitRoundOf("nfs2", 1)
	b := e.walkerOf("b", 8, "nfs", "nfs2")
	e.run(b)
	want := map[string]float64{
		"kvcm_gc_sweep_last_round_end_timestamp_seconds{nfs}":     float64(ckA.LastRoundEndUs / 1e6),
		"kvcm_gc_sweep_last_round_end_timestamp_seconds{nfs2}":    float64(ckB.LastRoundEndUs / 1e6),
		"kvcm_gc_sweep_quarantine_files{nfs}":                     1,
		"kvcm_gc_sweep_quarantine_files{nfs2}":                    2,
		"kvcm_gc_sweep_quarantine_bytes{nfs}":                     2,
		"kvcm_gc_sweep_quarantine_bytes{nfs2}":                    4,
		"kvcm_gc_sweep_quarantine_conflicts{nfs}":                 0,
		"kvcm_gc_sweep_quarantine_conflicts{nfs2}":                0,
		"kvcm_gc_sweep_quarantine_oldest_timestamp_seconds{nfs}":  float64(atA.Unix()),
		"kvcm_gc_sweep_quarantine_oldest_timestamp_seconds{nfs2}": float64(atB.Unix()),
	}
	require.Equal(t, want, storageSeries(t, a))
	require.Empty(t, storageSeries(t, b), "b leads no walk")

	// a stops and releases its leases: b takes both walks over, from their checkpoints.
	stopA()
	require.Empty(t, storageSeries(t, a), "a leads no walk any more")
	require.Eventually(t, func() bool { return len(storageSeries(t, b)) == len(want) }, 20*time.Second, 5*time.Millisecond)
	got := storageSeries(t, b)
	for _, k := range []string{"kvcm_gc_sweep_last_round_end_timestamp_seconds{nfs}", "kvcm_gc_sweep_last_round_end_timestamp_seconds{nfs2}"} {
		require.GreaterOrEqual(t, got[k], want[k], k)
	}
	require.Equal(t, float64(atA.Unix()), got["kvcm_gc_sweep_quarantine_oldest_timestamp_seconds{nfs}"])
	require.Equal(t, float64(atB.Unix()), got["kvcm_gc_sweep_quarantine_oldest_timestamp_seconds{nfs2}"])
}

// TestWalkerPaused: an operator's pause of the walker (its key in the state bucket) holds
// every walk: the lease is held, no round starts and nothing is published; once the pause is
// lifted the round runs.
func TestWalkerPaused(t *testing.T) {
	e := newWalkerEnv(t)
	e.file("inst0/tp0/1", 48*time.Hour)
	ctx := context.Background()
	state, err := e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(t, err)
	val, err := json.Marshal(pipeline.PauseRecord{UntilUs: time.Now().Add(time.Hour).UnixMicro()})
	require.NoError(t, err)
	_, err = state.Put(ctx, subjects.WalkerPauseKey, val)
	require.NoError(t, err)

	w := e.walker("w1", 4)
	e.run(w)
	require.Eventually(t, func() bool { return testenv.GaugeValue(t, w.metrics.WalkerPaused) == 1 }, 10*time.Second, 5*time.Millisecond)
	// Held for several renewals of its lease (every 100ms): still no round.
	leases, err := e.js.KeyValue(ctx, e.names.LeaseBucket())
	require.NoError(t, err)
	_, first, err := ReadLease(ctx, leases, "nfs")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, rev, err := ReadLease(ctx, leases, "nfs")
		return err == nil && rev >= first+3
	}, 10*time.Second, 5*time.Millisecond)
	c := e.checkpoint()
	require.Zero(t, c.Round, "no round while paused")
	require.Zero(t, c.QPass, "no look into the quarantine either")
	require.Empty(t, e.published())

	require.NoError(t, state.Delete(ctx, subjects.WalkerPauseKey))
	e.waitRound(1)
	require.Len(t, filesOf(e.published(), subjects.SweepWalk), 1)
	require.Zero(t, testenv.GaugeValue(t, w.metrics.WalkerPaused))
}
