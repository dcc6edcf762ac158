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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/testenv"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/seed"
	"github.com/kvcm-gc/kvcm-gc/subjects"
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
	e := &e2eEnv{t: t, bins: bins, redis: testenv.StartRedis(t), nats: testenv.StartNATS(t)}
	e.js = e.nats.JetStream(t)
	var err error
	e.names, err = subjects.NewNames("kvcmgc", e2eCluster)
	require.NoError(t, err)

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

	e.config = filepath.Join(dir, "kvcm-gc.yaml")
	require.NoError(t, os.WriteFile(e.config, []byte(fmt.Sprintf(`
cluster: %s
registry:
  uri: %s
nats:
  url: %s
scan_interval: 5ms
round_pause: 1h
scan_batch_size: 64
storage:
  default_probe: stat
jetstream:
  lease_ttl: 2s
  deleter_ack_wait: 2s
  prober_ack_wait: 5s
http:
  listen: 127.0.0.1:0
log:
  format: json
%s`, e2eCluster, e.redis.URI(), e.nats.URL(), extra)), 0o600))
	return e
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
		ck, _, err := pipeline.ReadCheckpoint(ctx, kv)
		if err != nil || ck.Round < 1 || ck.InRound {
			return false
		}
		for _, sc := range [][2]string{{e.names.BatchesStream(), e.names.ProberConsumer()}, {e.names.DeletesStream(), e.names.DeleterConsumer()}} {
			info := e.consumer(sc[0], sc[1])
			if info == nil || info.NumPending != 0 || info.NumAckPending != 0 {
				return false
			}
		}
		return true
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
	for _, ev := range e2eEvents(t, e) {
		if ev.Kind == subjects.EventDelete && strings.Contains(ev.Detail, "resumed from DELETING") {
			resumed++
		}
	}
	require.Positive(t, resumed, "no redelivered request resumed from DELETING")
	restarted.stop(t)
}

// e2eEvents reads the EVENTS stream.
func e2eEvents(t *testing.T, e *e2eEnv) []subjects.Event {
	t.Helper()
	ctx := context.Background()
	s, err := e.js.Stream(ctx, e.names.EventsStream())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	// A delete event of a whole request comes back as one event per target.
	var out []subjects.Event
	for read := uint64(0); read < info.State.Msgs; {
		b, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		n := 0
		for m := range b.Messages() {
			ev, err := subjects.DecodeEvent(m.Data())
			require.NoError(t, err)
			out = append(out, ev.PerTarget()...)
			n++
		}
		require.NotZero(t, n, "events stream stalled at %d of %d", read, info.State.Msgs)
		read += uint64(n)
	}
	return out
}
