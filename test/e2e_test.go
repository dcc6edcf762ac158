package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestE2E runs the shipped binaries as separate processes — two scanners, a prober and a
// deleter — against a NATS JetStream server and a redis-server of their own, the way a
// deployment runs them: configured by a YAML file plus flags, connected over TCP, observed
// through their HTTP endpoints and stopped with signals.
func TestE2E(t *testing.T) {
	bins := e2eBuild(t)
	t.Run("SeparateProcesses", func(t *testing.T) { e2eSeparateProcesses(t, bins) })
	t.Run("DeleterKilled", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the slowest scenario (a delete_delay and a redelivery wait); run without -short")
		}
		e2eDeleterKilled(t, bins)
	})
}

const e2eCluster = "e2e"

// e2eBuild builds every binary into a temporary directory.
func e2eBuild(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/scanner", "./cmd/prober", "./cmd/deleter", "./cmd/kvcm-gc")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return dir
}

// e2eEnv is one NATS server, one Redis, a seeded keyspace and a configuration file.
type e2eEnv struct {
	t      *testing.T
	bins   string
	redis  *testenv.Redis
	nats   *testenv.NATS
	js     jetstream.JetStream
	names  subjects.Names
	config string
	m      *seed.Manifest
	before seed.Snapshot
}

// e2eStart starts the servers, seeds the keyspace with the seed command and writes the
// configuration every process reads; extra is appended to it.
func e2eStart(t *testing.T, bins string, blocks int, extra string) *e2eEnv {
	t.Helper()
	e := newE2EEnv(t, bins, testenv.StartRedis(t))
	dir := t.TempDir()
	manifest := filepath.Join(dir, "manifest.json")
	out, err := exec.Command(filepath.Join(bins, "kvcm-gc"), "seed", "--redis", e.redis.URI(), "--cluster", e2eCluster,
		"--instances", "3", "--blocks", fmt.Sprint(blocks), "--garbage", "0.2", "--tricky", "0.1",
		"--root", filepath.Join(dir, "data"), "--manifest", manifest, "--seed", "7").CombinedOutput()
	require.NoError(t, err, "seed: %s", out)
	e.m, err = seed.ReadManifest(manifest)
	require.NoError(t, err)
	require.NotEmpty(t, e.m.Garbage())
	e.before, err = seed.Take(context.Background(), e.redis.Client(), "*")
	require.NoError(t, err)

	e.writeConfig(dir, e.redis.URI(), `scan_interval: 5ms
round_pause: 1h
scan_batch_size: 64
storage:
  default_probe: stat
jetstream:
  lease_ttl: 2s
  deleter_ack_wait: 2s
  prober_ack_wait: 5s
`+extra)
	return e
}

// newE2EEnv starts the NATS server of one test beside rdb, its redis-server (nil when the
// test starts its metadata stores itself).
func newE2EEnv(t *testing.T, bins string, rdb *testenv.Redis) *e2eEnv {
	t.Helper()
	e := &e2eEnv{t: t, bins: bins, redis: rdb, nats: testenv.StartNATS(t)}
	e.js = e.nats.JetStream(t)
	var err error
	e.names, err = subjects.NewNames("kvcmgc", e2eCluster)
	require.NoError(t, err)
	return e
}

// writeConfig writes dir/kvcm-gc.yaml, the configuration every process of the test reads:
// the cluster, the registry at registryURI and the NATS server, then settings, an HTTP
// listener on a free port and JSON logs.
func (e *e2eEnv) writeConfig(dir, registryURI, settings string) {
	e.t.Helper()
	e.config = filepath.Join(dir, "kvcm-gc.yaml")
	head := fmt.Sprintf("cluster: %s\nregistry:\n  uri: %s\nnats:\n  url: %s\n", e2eCluster, registryURI, e.nats.URL())
	const tail = "http:\n  listen: 127.0.0.1:0\nlog:\n  format: json\n"
	require.NoError(e.t, os.WriteFile(e.config, []byte(head+settings+tail), 0o600))
}

// e2eProc is one running binary; its log lines (JSON) are kept for assertions and failures.
type e2eProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}

	mu    sync.Mutex
	lines []string
}

// start runs a binary with the configuration file and args.
func (e *e2eEnv) start(name, bin string, args ...string) *e2eProc {
	t := e.t
	t.Helper()
	args = append(args, "--config", e.config, "--nats.name", "e2e-"+name)
	p := &e2eProc{name: name, cmd: exec.Command(filepath.Join(e.bins, bin), args...), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			p.mu.Lock()
			lines := p.lines[max(0, len(p.lines)-40):]
			p.mu.Unlock()
			t.Logf("last log lines of %s:\n%s", p.name, strings.Join(lines, "\n"))
		}
	})
	return p
}

// logged returns the log records whose msg is msg.
func (p *e2eProc) logged(msg string) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, l := range p.lines {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// httpBase waits for the process's HTTP endpoint and returns its base URL.
func (p *e2eProc) httpBase(t *testing.T) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		if recs := p.logged("http server listening"); len(recs) > 0 {
			addr, _ = recs[0]["addr"].(string)
		}
		return addr != ""
	}, 30*time.Second, 10*time.Millisecond, "%s never served http", p.name)
	return "http://" + addr
}

func (p *e2eProc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(p.httpBase(t) + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// metric returns the value of an unlabelled sample in the process's /metrics.
func (p *e2eProc) metric(t *testing.T, name string) string {
	t.Helper()
	_, body := p.get(t, "/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// stop sends SIGTERM and requires a clean exit: a graceful shutdown is a success.
func (p *e2eProc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30s of SIGTERM", p.name)
	}
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), "%s exit status", p.name)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *e2eProc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	<-p.done
}

// waitRound waits until round 1 has ended and both consumers are drained.
func (e *e2eEnv) waitRound(timeout time.Duration) {
	e.t.Helper()
	ctx := context.Background()
	require.Eventually(e.t, func() bool {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return false
		}
		ck, _, err := scanner.ReadCheckpoint(ctx, kv)
		if err != nil || ck.Round < 1 || ck.InRound {
			return false
		}
		return testenv.StagesDrained(ctx, e.js, e.names)
	}, timeout, 20*time.Millisecond, "round 1 not processed")
}

func (e *e2eEnv) consumer(stream, name string) *jetstream.ConsumerInfo {
	ctx := context.Background()
	c, err := e.js.Consumer(ctx, stream, name)
	if err != nil {
		return nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil
	}
	return info
}

// verify requires every garbage location gone and everything else byte-identical.
func (e *e2eEnv) verify() seed.Report {
	e.t.Helper()
	r, err := seed.Verify(context.Background(), e.redis.Client(), e.before, e.m, "*")
	require.NoError(e.t, err)
	require.True(e.t, r.OK(), "verification: %+v", r)
	require.Equal(e.t, r.GarbageLocations, r.GarbageGone)
	require.Equal(e.t, r.LiveLocations, r.LiveIntact)
	require.Zero(e.t, r.StrandedDeleting)
	return r
}

// deleting counts the garbage locations kvcm-gc has marked DELETING and not removed yet, in
// the layout of each (the seed command writes the location layout).
func (e *e2eEnv) deleting() int {
	ctx := context.Background()
	pipe := e.redis.Client().Pipeline()
	garbage := e.m.Garbage()
	cmds := make([]*redis.MapStringStringCmd, len(garbage))
	for i, l := range garbage {
		cmds[i] = pipe.HGetAll(ctx, kvcm.BlockKey(l.Instance, l.Key))
	}
	_, _ = pipe.Exec(ctx)
	n := 0
	for i, c := range cmds {
		fields, err := c.Result()
		if err != nil {
			continue
		}
		if loc, ok := locationOf(fields, garbage[i].FieldName(), garbage[i].Location); ok && loc.Status == kvcm.StatusDeleting {
			n++
		}
	}
	return n
}

// e2eSeparateProcesses: two scanners share the lease, one prober, one deleter; the garbage
// is collected exactly; every process is ready and stops cleanly on SIGTERM, and the leader
// hands the lease over at once when it stops.
func e2eSeparateProcesses(t *testing.T, bins string) {
	e := e2eStart(t, bins, 1000, "")
	// One scanner is the dedicated binary, the other the all-in-one CLI's subcommand.
	scanners := []*e2eProc{e.start("scanner-a", "scanner"), e.start("scanner-b", "kvcm-gc", "scanner")}
	prober := e.start("prober", "prober")
	deleter := e.start("deleter", "deleter")

	started := time.Now()
	e.waitRound(60 * time.Second)
	t.Logf("round collected by separate processes in %s", time.Since(started).Round(time.Millisecond))
	r := e.verify()
	require.Greater(t, r.GarbageLocations, 500)

	for _, p := range append([]*e2eProc{prober, deleter}, scanners...) {
		require.Eventually(t, func() bool { code, _ := p.get(t, "/readyz"); return code == http.StatusOK },
			10*time.Second, 20*time.Millisecond, "%s not ready", p.name)
		code, body := p.get(t, "/healthz")
		require.Equal(t, http.StatusOK, code, body)
	}
	// Exactly one scanner leads; the other reports that it waits.
	var leader, follower *e2eProc
	for _, s := range scanners {
		switch s.metric(t, "kvcm_gc_scanner_lease_held") {
		case "1":
			require.Nil(t, leader, "two scanners hold the lease")
			leader = s
		case "0":
			follower = s
		}
	}
	require.NotNil(t, leader, "no scanner holds the lease")
	require.NotNil(t, follower)
	_, body := follower.get(t, "/readyz")
	require.Contains(t, body, "waiting for the lease")
	_, body = leader.get(t, "/readyz")
	require.Contains(t, body, "lease held")
	_, body = deleter.get(t, "/metrics")
	require.Contains(t, body, `kvcm_gc_consumer_ack_pending_messages{consumer="deleter"`)

	// A leader stopped with SIGTERM releases the lease: the follower takes it well before
	// the lease TTL would have let it.
	leader.stop(t)
	require.Eventually(t, func() bool { return follower.metric(t, "kvcm_gc_scanner_lease_held") == "1" },
		5*time.Second, 20*time.Millisecond, "the lease was not handed over")
	for _, p := range []*e2eProc{follower, prober, deleter} {
		p.stop(t)
	}
	rec, _, err := pipeline.ReadLease(context.Background(), e.lease())
	require.NoError(t, err)
	require.Nil(t, rec, "the last scanner left its lease behind")
	e.verify() // nothing moved while stopping
}

func (e *e2eEnv) lease() jetstream.KeyValue {
	kv, err := e.js.KeyValue(context.Background(), e.names.LeaseBucket())
	require.NoError(e.t, err)
	return kv
}

// e2eDeleterKilled: the deleter is killed with SIGKILL while it holds locations in DELETING
// (a delete_delay keeps them there); a new deleter resumes the redelivered requests and the
// round still converges exactly, with nothing left DELETING.
func e2eDeleterKilled(t *testing.T, bins string) {
	e := e2eStart(t, bins, 500, "delete_delay: 400ms\n")
	e.start("scanner", "scanner")
	e.start("prober", "prober")
	deleter := e.start("deleter", "deleter")

	require.Eventually(t, func() bool { return e.deleting() > 0 }, 60*time.Second, 5*time.Millisecond,
		"the deleter never marked a location DELETING")
	deleter.kill(t)
	stranded := e.deleting()
	info := e.consumer(e.names.DeletesStream(), e.names.DeleterConsumer())
	require.NotNil(t, info)
	t.Logf("killed the deleter with %d locations DELETING and %d requests unacknowledged", stranded, info.NumAckPending)
	require.Positive(t, stranded, "the kill did not land mid-request")
	require.Positive(t, info.NumAckPending, "no request was in flight at the kill")

	restarted := e.start("deleter-2", "deleter")
	e.waitRound(90 * time.Second)
	e.verify()
	require.Zero(t, e.deleting())

	// The restarted deleter got the dead one's requests again and resumed them from DELETING.
	resumed := 0
	for _, ev := range readEvents(t, e.js, e.names) {
		if ev.Kind == subjects.EventDelete && strings.Contains(ev.Detail, "resumed from DELETING") {
			resumed++
		}
	}
	require.Positive(t, resumed, "no redelivered request resumed from DELETING")
	restarted.stop(t)
}

// TestE2EScannersShareStores: three metadata stores (a redis-server each), two scanner
// processes. Both walk at once, each its own stores; one is killed with SIGKILL mid-walk; the
// survivor takes its stores and resumes each from its checkpoint. In round 1 every key of every
// store is batched, each store's fencing revision never goes back in stream order, and no page
// is published by two holders but the one page the dead holder had not recorded yet. The
// duplicate window is short, so a page published twice stays visible in the stream.
func TestE2EScannersShareStores(t *testing.T) {
	bins := e2eBuild(t)
	ctx := context.Background()
	ms := seedStores(t, e2eCluster, 3, 2, 600, filepath.Join(t.TempDir(), "data"))
	e := newE2EEnv(t, bins, nil)
	var err error
	e.writeConfig(t.TempDir(), ms.registry.URI(), `scan_interval: 10ms
max_keys_per_second: 500
round_pause: 1h
scan_batch_size: 32
backpressure_high_water: 1000000
jetstream:
  lease_ttl: 2s
  duplicate_window: 100ms
`)

	scanners := []*e2eProc{e.start("scanner-a", "scanner"), e.start("scanner-b", "kvcm-gc", "scanner")}
	lease, state := e.buckets(t)
	// Both replicas are present before the stores appear, so they divide them at once.
	require.Eventually(t, func() bool {
		m, err := scanner.ReadMembers(ctx, lease)
		return err == nil && len(m) == 2
	}, 30*time.Second, 10*time.Millisecond, "the scanners never registered")
	ms.register(t)

	pidOf := func(holder string) int {
		i := strings.LastIndexByte(holder, '/')
		pid, err := strconv.Atoi(holder[i+1:])
		require.NoError(t, err, holder)
		return pid
	}
	procOf := map[int]*e2eProc{}
	for _, p := range scanners {
		procOf[p.cmd.Process.Pid] = p
	}

	// Both scan at once: each holds a store whose walk has read pages.
	var leases []pipeline.StoreLease
	require.Eventually(t, func() bool {
		leases, err = pipeline.ReadLeases(ctx, lease)
		if err != nil || len(leases) != 3 {
			return false
		}
		walking := map[string]bool{}
		for _, l := range leases {
			c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, l.Store)
			if err == nil && c.InRound && c.KeysScanned > 0 {
				walking[l.Record.Holder] = true
			}
		}
		return len(walking) == 2
	}, time.Minute, 10*time.Millisecond, "the two scanners do not walk at once")
	byHolder := map[string][]string{}
	for _, l := range leases {
		byHolder[l.Record.Holder] = append(byHolder[l.Record.Holder], l.Store)
	}
	t.Logf("stores by holder: %v", byHolder)

	// Kill the holder of the most stores, mid-walk.
	var victim, survivor string
	for h := range byHolder {
		if victim == "" || len(byHolder[h]) > len(byHolder[victim]) {
			victim = h
		}
	}
	for h := range byHolder {
		if h != victim {
			survivor = h
		}
	}
	// Well into its walks: a quarter of each of its stores read, none done.
	require.Eventually(t, func() bool {
		for _, st := range byHolder[victim] {
			c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, st)
			if err != nil || c.KeysScanned < 300 {
				return false
			}
		}
		return true
	}, time.Minute, 5*time.Millisecond, "the walks to be under way")
	walking := e.status(t)
	t.Logf("kvcm-gc status while both walk:\n%s", walking)
	// Several stores: the summary counts leases and stores done (the victim's are not), the
	// STORES table has the positions.
	require.Regexp(t, `leases +[1-3] of 3 stores held by [12] replicas \(STORES below\)`, walking)
	require.Regexp(t, `round +1 in progress: [0-2] of 3 stores done, \d+ instances`, walking)
	procOf[pidOf(victim)].kill(t)
	at := map[string]pipeline.Checkpoint{} // the dead holder's last checkpoint of each store
	for _, st := range byHolder[victim] {
		c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, st)
		require.NoError(t, err)
		require.Equal(t, victim, c.Holder)
		require.True(t, c.InRound, "killed mid-walk")
		at[st] = c
	}
	for st, c := range at {
		t.Logf("killed %s on %s in round %d at cursor %d, %d keys", victim, st, c.Round, c.Cursor, c.KeysScanned)
	}

	// The survivor takes every store and ends round 1 of each.
	require.Eventually(t, func() bool {
		cks, err := scanner.ReadCheckpoints(ctx, state)
		if err != nil || len(cks) != 3 {
			return false
		}
		for _, c := range cks {
			if c.Round < 1 || (c.Round == 1 && c.InRound) {
				return false
			}
		}
		return true
	}, 2*time.Minute, 20*time.Millisecond, "round 1 not done on every store")
	leases, err = pipeline.ReadLeases(ctx, lease)
	require.NoError(t, err)
	require.Len(t, leases, 3)
	for _, l := range leases {
		require.Equal(t, survivor, l.Record.Holder, l.Store)
	}
	for st, k := range at {
		c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, st)
		require.NoError(t, err)
		require.Equal(t, k.Round, c.Round, "%s: resumed in the same round, not a new one", st)
		require.GreaterOrEqual(t, c.LastRoundKeys, k.KeysScanned, "%s: resumed from the checkpoint's count", st)
	}

	pages := readPages(t, e.js, e.names)
	for i := range ms.stores {
		name := ms.storeName(i)
		ps := pages[name]
		require.NotEmpty(t, ps, name)
		// Fencing: the revision of a store's batches never goes back in stream order.
		for j := 1; j < len(ps); j++ {
			require.GreaterOrEqual(t, ps[j].LeaseRev, ps[j-1].LeaseRev, "%s: batch %d", name, j)
		}
		// Every key of the store is batched in round 1.
		got := map[string]bool{}
		for _, p := range ps {
			if p.Round == 1 {
				for _, k := range p.keys {
					got[k] = true
				}
			}
		}
		for k := range ms.blockKeys(i) {
			require.True(t, got[k], "%s: %s never batched in round 1", name, k)
		}
		// No page published by two holders, but the page after the dead holder's checkpoint.
		k, killed := at[name]
		holders := map[string]map[uint64]bool{}
		for _, p := range ps {
			id := fmt.Sprintf("%d/%d/%s/%d", p.Round, p.Cursor, p.Instance, p.Part)
			if holders[id] == nil {
				holders[id] = map[uint64]bool{}
			}
			holders[id][p.LeaseRev] = true
		}
		for id, revs := range holders {
			if len(revs) == 1 {
				continue
			}
			require.True(t, killed, "%s: page %s published under revisions %v", name, id, revs)
			require.Len(t, revs, 2, "%s: page %s", name, id)
			require.True(t, strings.HasPrefix(id, fmt.Sprintf("%d/%d/", k.Round, k.Cursor)),
				"%s: page %s published by both holders, past the checkpoint (round %d, cursor %d)", name, id, k.Round, k.Cursor)
		}
	}

	// status lists every store with its holder.
	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.Len(t, rep.Scanner.Stores, 3)
	for _, st := range rep.Scanner.Stores {
		require.Equal(t, survivor, st.Holder)
		require.Equal(t, "round_pause", st.State)
		require.True(t, st.InRegistry)
	}
	out := e.status(t)
	for i := range ms.stores {
		require.Contains(t, out, ms.storeName(i))
	}
	t.Logf("kvcm-gc status after the failover:\n%s", out)

	procOf[pidOf(survivor)].stop(t)
	leases, err = pipeline.ReadLeases(ctx, lease)
	require.NoError(t, err)
	require.Empty(t, leases, "the survivor released its leases on SIGTERM")
}

// status runs `kvcm-gc status` with the deployment's configuration.
func (e *e2eEnv) status(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(e.bins, "kvcm-gc"), "status", "--config", e.config).Output()
	require.NoError(t, err, "kvcm-gc status: %s", out)
	return string(out)
}

func (e *e2eEnv) buckets(t *testing.T) (lease, state jetstream.KeyValue) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var err1, err2 error
		lease, err1 = e.js.KeyValue(ctx, e.names.LeaseBucket())
		state, err2 = e.js.KeyValue(ctx, e.names.StateBucket())
		return err1 == nil && err2 == nil
	}, 30*time.Second, 10*time.Millisecond, "the scanners never created their buckets")
	return lease, state
}

// pageMsg is one batch message of the BATCHES stream, in stream order.
type pageMsg struct {
	subjects.Batch
	keys []string // "instance/key" of its blocks
}

// readPages reads every batch of the BATCHES stream, by store, in stream order.
func readPages(t *testing.T, js jetstream.JetStream, names subjects.Names) map[string][]pageMsg {
	t.Helper()
	out := map[string][]pageMsg{}
	require.NoError(t, testenv.EachMessage(context.Background(), js, names.BatchesStream(), nil, func(msg jetstream.Msg) {
		b, err := subjects.DecodeBatch(msg.Data())
		require.NoError(t, err)
		p := pageMsg{Batch: b}
		for _, blk := range b.Blocks {
			p.keys = append(p.keys, b.Instance+"/"+strconv.FormatInt(blk.Key, 10))
		}
		p.Blocks = nil
		out[b.Store] = append(out[b.Store], p)
	}))
	return out
}

// TestSweepKilled runs the walker and the sweeper as separate processes of their own
// binaries, kills each with SIGKILL mid-batch (a sweeper with batches in flight, the walker
// in the middle of its round) and starts new ones, with two files left in quarantine by a
// sweeper that died before it finished them (an orphan and a file a location names). Nothing
// is lost: exactly the orphans are unlinked, every other file keeps its bytes, the quarantine
// ends empty, and Redis is not written at all.
func TestSweepKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stage binaries and kills them; run without -short")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/walker", "./cmd/sweeper")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	ctx := context.Background()
	e := newE2EEnv(t, dir, testenv.StartRedis(t))
	m, err := seed.Generate(ctx, e.redis.Client(), seed.Spec{Cluster: e2eCluster, Instances: []string{"inst0", "inst1"},
		Blocks: 600, GarbageFraction: 0.1, TrickyFraction: 0.1, Root: filepath.Join(dir, "data"), MetaURI: e.redis.URI(),
		Seed: 21, SweepFiles: true})
	require.NoError(t, err)
	e.m = m
	e.before, err = seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)

	// What a sweeper killed between its rename and its second read leaves: an orphan in
	// quarantine for an hour, and a file a SERVING location names.
	orphan, named := orphanAndNamed(m)
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{seed.StorageNFS: {Type: kvcm.TypeFile, TypeName: "file",
		Name: seed.StorageNFS, RootPath: m.SweepRoot, KeyCountPerFile: 1}}, storage.Options{})
	require.NoError(t, err)
	sfs, err := set.SweepFS(seed.StorageNFS)
	require.NoError(t, err)
	root, err := sfs.Open()
	require.NoError(t, err)
	for _, f := range []seed.SweepFile{orphan, named} {
		_, err := root.Quarantine(strings.TrimPrefix(f.Path, m.SweepRoot), time.Now().Add(-time.Hour))
		require.NoError(t, err)
	}
	require.NoError(t, root.Close())
	require.Len(t, quarantined(t, m.SweepRoot), 2)

	e.writeConfig(dir, e.redis.URI(), fmt.Sprintf(`sweep_interval: 15ms
sweep_batch_size: 8
sweep_quarantine: 1s
sweep_round_pause: 1h
max_inflight_sweep_batches: 2
workers:
  sweeper: 2
storage:
  overrides:
    %s:
      sweep: true
jetstream:
  lease_ttl: 2s
  sweeper_ack_wait: 2s
`, seed.StorageNFS))

	walker := e.start("walker-0", "walker")
	sweeper := e.start("sweeper-0", "sweeper")
	ackPending := func() int {
		info := e.consumer(e.names.SweepStream(), e.names.SweeperConsumer())
		if info == nil {
			return 0
		}
		return info.NumAckPending
	}
	ckpt := func() sweep.Checkpoint {
		kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
		if err != nil {
			return sweep.Checkpoint{}
		}
		c, _, _ := sweep.ReadCheckpoint(ctx, kv, seed.StorageNFS)
		return c
	}
	// A sweeper with batches in flight, killed.
	require.Eventually(t, func() bool { return ackPending() > 0 }, time.Minute, time.Millisecond)
	sweeper.kill(t)
	sweeper = e.start("sweeper-1", "sweeper")
	// The walker in the middle of its round, killed; its successor waits out the lease.
	require.Eventually(t, func() bool { c := ckpt(); return c.InRound && c.Page >= 4 }, time.Minute, time.Millisecond)
	page := ckpt().Page
	walker.kill(t)
	walker = e.start("walker-1", "walker")
	require.Eventually(t, func() bool { return ackPending() > 0 }, time.Minute, time.Millisecond)
	sweeper.kill(t)
	sweeper = e.start("sweeper-2", "sweeper")

	var last sweep.Checkpoint
	require.Eventually(t, func() bool {
		last = ckpt()
		return last.Round == 1 && !last.InRound && last.QLast.EndedUs > last.LastRoundEndUs &&
			testenv.ConsumerIdle(context.Background(), e.js, e.names.SweepStream(), e.names.SweeperConsumer()) &&
			len(quarantined(t, m.SweepRoot)) == 0
	}, 2*time.Minute, 20*time.Millisecond, "the sweep did not finish after the kills")
	require.Greater(t, last.Page, page, "the new walker resumed the round")
	require.Equal(t, 1, int(last.Round), "resumed, not restarted")

	sr, err := seed.VerifySweep(m)
	require.NoError(t, err)
	require.True(t, sr.OK(), sr.Problems)
	require.FileExists(t, named.Path, "the quarantined file a location names was moved back")
	require.NoFileExists(t, orphan.Path)

	after, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	require.Equal(t, e.before, after, "the sweep never writes Redis")

	walker.stop(t)
	sweeper.stop(t)
	restored := false
	for _, ev := range readEvents(t, e.js, e.names) {
		if ev.Kind == subjects.EventSweep && string(ev.File) == named.Path && ev.Outcome == subjects.SweepOutcomeRestored {
			require.Equal(t, sweep.KeptReferenced, ev.Reason)
			restored = true
		}
	}
	require.True(t, restored, "the restore is an event")
}
