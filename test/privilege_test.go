package test

// Least privilege (DESIGN §8.5; security.md): every stage runs as a Redis ACL user and a NATS
// user holding only what it needs, as deploy/privileges renders them (the Helm chart renders
// the same), and a full round and a sweep still work. What a stage must not do is refused by
// the servers themselves.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/config"
	"github.com/kvcm-gc/kvcm-gc/deploy/privileges"
	"github.com/kvcm-gc/kvcm-gc/internal/natsperm"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/natsembed"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/faults"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// Users of the least-privilege definitions (deploy/privileges, the chart's
// files/privileges.json).
var (
	userAdmin   = privileges.DefaultUser(privileges.StageAdmin)
	userScanner = privileges.DefaultUser(pipeline.StageScanner)
	userProber  = privileges.DefaultUser(pipeline.StageProber)
	userDeleter = privileges.DefaultUser(pipeline.StageDeleter)
	userWalker  = privileges.DefaultUser(pipeline.StageWalker)
	userSweeper = privileges.DefaultUser(pipeline.StageSweeper)
)

// loadNATSUsers returns the NATS users of the least-privilege definitions for names, with the
// given passwords, as the chart renders them into a nats-server account.
func loadNATSUsers(t *testing.T, names subjects.Names, passwords map[string]string) []natsembed.User {
	t.Helper()
	var users []natsembed.User
	for _, u := range privileges.NATS(names) {
		name := privileges.DefaultUser(u.Stage)
		pw, ok := passwords[name]
		require.True(t, ok, "no password for %s", name)
		users = append(users, natsembed.User{Name: name, Password: pw,
			Publish:   &natsembed.Permission{Allow: u.Publish},
			Subscribe: &natsembed.Permission{Allow: u.Subscribe}})
	}
	return users
}

// startRedisWithACL starts a redis-server loading the rendered ACL file and turns its users on
// with the given passwords (the file ships them off and without a password).
func startRedisWithACL(t *testing.T, passwords map[string]string) *testenv.Redis {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.acl")
	acl := privileges.ACLFile(privileges.Redis(privileges.DefaultGuardPrefix), nil)
	require.NoError(t, os.WriteFile(path, []byte(acl), 0o600))
	r := testenv.StartRedis(t, testenv.WithRedisArgs("--aclfile", path))
	ctx := context.Background()
	for user, pw := range passwords {
		// Only "on" and the password: every permission comes from the file.
		require.NoError(t, r.Client().Do(ctx, "ACL", "SETUSER", user, "on", ">"+pw).Err())
	}
	return r
}

// runStageProcess runs stages the way a stage binary does: it connects with the binaries'
// NATS code (credentials, TLS) and runs app.Run until the test ends or stop is called.
func runStageProcess(t *testing.T, nc config.NATSConfig, url string, o app.Options, which app.Stages, log *slog.Logger) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if nc.ConnectTimeout == 0 {
		nc.ConnectTimeout = 10 * time.Second
	}
	conn, err := cli.ConnectNATS(ctx, nc, url, "kvcm-gc-test", log)
	require.NoError(t, err)
	// As the stage binaries: the server's first refusal of a subject stops the stages.
	ctx, unguard := natsperm.Watch(conn, cli.Identity(nc)).Guard(ctx, ">")
	o.Logger = log
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, conn, o, which) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			refused := natsperm.Refused(ctx)
			cancel()
			unguard()
			require.Nil(t, refused, "the stages were refused a subject")
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("stages did not stop within 30s")
			}
			conn.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// lpEnv is a deployment with the shipped Redis ACL users and NATS permissions, the NATS
// server serving TLS only.
type lpEnv struct {
	*env
	nats    *testenv.NATS
	redisPW map[string]string
	natsPW  map[string]string
}

func newLeastPrivilegeEnv(t *testing.T) *lpEnv {
	t.Helper()
	redisPW := map[string]string{userAdmin: "admin-pw", userScanner: "scan-pw", userProber: "probe-pw", userDeleter: "delete-pw",
		userWalker: "walk-pw", userSweeper: "sweep-pw"}
	natsPW := map[string]string{userAdmin: "admin-pw", userScanner: "scan-pw", userProber: "probe-pw", userDeleter: "delete-pw",
		userWalker: "walk-pw", userSweeper: "sweep-pw"}
	names, err := subjects.NewNames("kvcmgc", cluster)
	require.NoError(t, err)
	n := testenv.StartNATS(t, testenv.WithNATSTLS(),
		testenv.WithNATSAccounts(natsembed.Account{Name: "KVCMGC", JetStream: true, Users: loadNATSUsers(t, names, natsPW)}))
	admin := n.Conn(t, nats.UserInfo(userAdmin, natsPW[userAdmin]))
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	e := &env{t: t, redis: startRedisWithACL(t, redisPW), srv: n.Server(), nc: admin, js: js, names: names, root: t.TempDir()}
	return &lpEnv{env: e, nats: n, redisPW: redisPW, natsPW: natsPW}
}

// natsConfig is the configuration of a stage connecting as user.
func (l *lpEnv) natsConfig(user string) config.NATSConfig {
	c := config.NATSConfig{User: user, Password: l.natsPW[user], TLS: config.NATSTLS{CAFile: l.nats.CAFile()}}
	// Replies under the stage's own inbox, the only one its user may read (as a stage binary).
	return cli.WithInbox(c, l.names, strings.TrimPrefix(user, "kvcm-gc-"))
}

// stageOptions are the test options, with the sweep of nfs_01 on, the stage's own Redis user
// on every connection and no topology management (the admin created it).
func (l *lpEnv) stageOptions(user string) app.Options {
	o := l.sweepOptions(prometheus.NewRegistry())
	o.SkipEnsure = true
	o.Registry.Username, o.Registry.Password = user, l.redisPW[user]
	o.Meta.Username, o.Meta.Password = user, l.redisPW[user]
	return o
}

// redisAs is a plain client of the stage's Redis user.
func (l *lpEnv) redisAs(user string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: l.redis.Addr(), Username: user, Password: l.redisPW[user], Protocol: 2,
		DisableIdentity: true, MaxRetries: -1})
	l.t.Cleanup(func() { _ = c.Close() })
	return c
}

// storeAs opens the metadata store as the stage's Redis user, with the store's own code.
func (l *lpEnv) storeAs(t *testing.T, user string) *redismeta.Store {
	t.Helper()
	conn, err := redismeta.ParseURI(l.redis.URI())
	require.NoError(t, err)
	conn.Username, conn.Password = user, l.redisPW[user]
	st, err := redismeta.OpenStore(context.Background(), conn, redismeta.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// requireCASRefused attempts the store's own conditional write of a block of inst1 with the
// stage's credentials, which read it, and shows Redis refuses the write.
func (l *lpEnv) requireCASRefused(t *testing.T, user string, key int64) {
	t.Helper()
	ctx := context.Background()
	st := l.storeAs(t, user)
	cur, ok, err := metatest.GetURI(ctx, st, "inst1", key)
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorContains(t, metatest.CAS(ctx, st, "inst1", key, cur, []byte(`{}`)), "NOPERM", "%s wrote a block", user)
}

func requireNoPerm(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	require.True(t, strings.HasPrefix(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't access"),
		"%s: want a permission error, got %v", what, err)
}

// TestLeastPrivilege runs a full round and a sweep with each stage as its own Redis and NATS
// user, as the least-privilege definitions give them, then shows what each user is refused.
func TestLeastPrivilege(t *testing.T) {
	l := newLeastPrivilegeEnv(t)
	ctx := context.Background()
	m, before := l.seed(seed.Spec{Blocks: 300, GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 21, SweepFiles: true})
	require.NoError(t, subjects.Ensure(ctx, l.js, l.names, l.options(nil).JetStream), "the admin creates the topology")
	require.NoError(t, l.redis.Client().ACLLogReset(ctx).Err())

	logs := map[string]*testenv.Buffer{}
	for _, st := range []struct {
		user  string
		which app.Stages
	}{{userScanner, app.Stages{Scanner: true}}, {userProber, app.Stages{Prober: true}}, {userDeleter, app.Stages{Deleter: true}},
		{userWalker, app.Stages{Walker: true}}, {userSweeper, app.Stages{Sweeper: true}}} {
		logs[st.user] = &testenv.Buffer{}
		log := slog.New(slog.NewTextHandler(logs[st.user], &slog.HandlerOptions{Level: slog.LevelDebug}))
		runStageProcess(t, l.natsConfig(st.user), l.nats.URL(), l.stageOptions(st.user), st.which, log)
	}

	l.waitRoundDone(1, time.Minute)
	l.waitSwept(1, m.SweepRoot, time.Minute)
	r := l.verify(before, m)
	require.Positive(t, r.GarbageGone)
	sr, err := seed.VerifySweep(m)
	require.NoError(t, err)
	require.True(t, sr.OK(), sr.Problems)
	require.Positive(t, sr.Orphans, "the sweeper unlinked orphan files")
	kinds := map[string]int{}
	for _, ev := range readEventsTolerant(t, l.js, l.names) {
		kinds[ev.Kind]++
	}
	for _, k := range []string{subjects.EventRound, subjects.EventCandidate, subjects.EventDelete, subjects.EventSkip, subjects.EventSweep} {
		require.Positive(t, kinds[k], "events of kind %s were stored", k)
	}
	for user, b := range logs {
		require.NotContains(t, strings.ToLower(b.String()), "permissions violation", "%s was refused something during the round", user)
		require.NotContains(t, strings.ToLower(b.String()), "authorization violation", user)
	}
	// Redis refused nothing the round and the sweep needed.
	entries, err := l.redis.Client().ACLLog(ctx, 128).Result()
	require.NoError(t, err)
	for _, en := range entries {
		t.Errorf("unexpected ACL denial during the round: user %s, %s %q (%s)", en.Username, en.Reason, en.Object, en.Context)
	}

	t.Run("redis scanner is read-only", func(t *testing.T) {
		c := l.redisAs(userScanner)
		k := kvcm.BlockKey("inst1", m.Locations[0].Key)
		require.NoError(t, c.HGet(ctx, k, "__uri__").Err(), "reads work")
		requireNoPerm(t, c.HSet(ctx, k, "__uri__", "{}").Err(), "HSET a block")
		requireNoPerm(t, c.Del(ctx, k).Err(), "DEL a block")
		requireNoPerm(t, c.HSet(ctx, "kvcache_registry:"+cluster+":storage", "x", "y").Err(), "HSET the registry")
		requireNoPerm(t, c.Eval(ctx, "return 1", []string{k}).Err(), "EVAL")
		requireNoPerm(t, c.FlushAll(ctx).Err(), "FLUSHALL")
		requireNoPerm(t, c.Get(ctx, "kvcm_lock:_TAIR_KVCM_LEADER_KEY").Err(), "KVCM's leader lock")
		l.requireCASRefused(t, userScanner, m.Locations[0].Key)
	})

	t.Run("redis prober reads the registry only", func(t *testing.T) {
		c := l.redisAs(userProber)
		require.NoError(t, c.HGetAll(ctx, "kvcache_registry:"+cluster+":storage").Err())
		requireNoPerm(t, c.HGet(ctx, kvcm.BlockKey("inst1", m.Locations[0].Key), "__uri__").Err(), "HGET a block")
		requireNoPerm(t, c.HSet(ctx, "kvcache_registry:"+cluster+":storage", "x", "y").Err(), "HSET the registry")
		requireNoPerm(t, c.Scan(ctx, 0, "*", 10).Err(), "SCAN")
	})

	t.Run("redis deleter touches block keys only, through the scripts", func(t *testing.T) {
		c := l.redisAs(userDeleter)
		reg := "kvcache_registry:" + cluster + ":storage"
		requireNoPerm(t, c.HGet(ctx, reg, seed.StorageNFS).Err(), "HGET the registry")
		requireNoPerm(t, c.HGetAll(ctx, reg).Err(), "HGETALL the registry")
		requireNoPerm(t, c.HSet(ctx, reg, "x", "y").Err(), "HSET the registry")
		requireNoPerm(t, c.HGet(ctx, "kvcache:instance_inst1:metadata", "__key_count__").Err(), "the instance metadata hash")
		requireNoPerm(t, c.Get(ctx, "kvcm_lock:_TAIR_KVCM_LEADER_KEY").Err(), "KVCM's leader lock")
		requireNoPerm(t, c.Scan(ctx, 0, "*", 10).Err(), "SCAN")
		requireNoPerm(t, c.Keys(ctx, "*").Err(), "KEYS")
		requireNoPerm(t, c.FlushAll(ctx).Err(), "FLUSHALL")
		requireNoPerm(t, c.Eval(ctx, "return redis.call('HGET', KEYS[1], 'x')", []string{reg}).Err(), "a script naming the registry")
		requireNoPerm(t, c.Eval(ctx, "return redis.call('HSET', '"+reg+"', 'x', 'y')", nil).Err(), "a script reaching the registry unnamed")
		before, err := l.redis.Client().HGetAll(ctx, reg).Result()
		require.NoError(t, err)
		require.NotContains(t, before, "x")

		// The CAS and CAD scripts run under the deleter's permissions (Redis 7 checks every
		// command a script calls against the caller's ACL).
		st := l.storeAs(t, userDeleter)
		const key = int64(424242)
		first := []byte(`{"a":{"id":"a","status":2,"type":4,"spec_size":0,"location_specs":[]}}`)
		require.NoError(t, l.redis.Client().HSet(ctx, kvcm.BlockKey("inst1", key), "__uri__", first, "__lru_time__", "1").Err())
		marked := []byte(`{"a":{"id":"a","status":4,"type":4,"spec_size":0,"location_specs":[]}}`)
		require.NoError(t, metatest.CAS(ctx, st, "inst1", key, first, marked))
		got, ok, err := metatest.GetURI(ctx, st, "inst1", key)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, string(marked), string(got))
		// An emptied script cache (a restarted server): EVALSHA answers NOSCRIPT and the store
		// falls back to EVAL, also allowed.
		require.NoError(t, l.redis.Client().ScriptFlush(ctx).Err())
		evals := l.redis.CommandStats(t)["eval"]
		require.NoError(t, metatest.CAD(ctx, st, "inst1", key, marked, nil))
		require.Equal(t, "{}", l.redis.Client().HGet(ctx, kvcm.BlockKey("inst1", key), "__uri__").Val(), "kept as KVCM reads \"exists, no location\"")
		require.Equal(t, evals+1, l.redis.CommandStats(t)["eval"], "the CAD ran through EVAL")
	})

	t.Run("redis walker reads the registry only", func(t *testing.T) {
		c := l.redisAs(userWalker)
		reg := "kvcache_registry:" + cluster + ":storage"
		k := kvcm.BlockKey("inst1", m.Locations[0].Key)
		require.NoError(t, c.HGetAll(ctx, reg).Err(), "reads the registry")
		requireNoPerm(t, c.HGetAll(ctx, k).Err(), "HGETALL a block")
		requireNoPerm(t, c.HGet(ctx, k, "__uri__").Err(), "HGET a block")
		requireNoPerm(t, c.HSet(ctx, reg, "x", "y").Err(), "HSET the registry")
		requireNoPerm(t, c.Del(ctx, k).Err(), "DEL a block")
		requireNoPerm(t, c.Scan(ctx, 0, "*", 10).Err(), "SCAN")
		requireNoPerm(t, c.Eval(ctx, "return 1", nil).Err(), "EVAL")
		requireNoPerm(t, c.Get(ctx, "kvcm_lock:_TAIR_KVCM_LEADER_KEY").Err(), "KVCM's leader lock")
	})

	t.Run("redis sweeper reads blocks and the registry, writes nothing", func(t *testing.T) {
		c := l.redisAs(userSweeper)
		reg := "kvcache_registry:" + cluster + ":storage"
		k := kvcm.BlockKey("inst1", m.Locations[0].Key)
		require.NoError(t, c.HGetAll(ctx, k).Err(), "reads a block")
		require.NoError(t, c.HGetAll(ctx, reg).Err(), "reads the registry")
		requireNoPerm(t, c.HSet(ctx, k, "__uri__", "{}").Err(), "HSET a block")
		requireNoPerm(t, c.HDel(ctx, k, "__uri__").Err(), "HDEL a block")
		requireNoPerm(t, c.Del(ctx, k).Err(), "DEL a block")
		requireNoPerm(t, c.HSet(ctx, reg, "x", "y").Err(), "HSET the registry")
		requireNoPerm(t, c.Eval(ctx, "return 1", []string{k}).Err(), "EVAL")
		requireNoPerm(t, c.Scan(ctx, 0, "*", 10).Err(), "SCAN")
		requireNoPerm(t, c.HGet(ctx, "kvcache:instance_inst1:metadata", "__key_count__").Err(), "the instance metadata hash")
		requireNoPerm(t, c.FlushAll(ctx).Err(), "FLUSHALL")
		l.requireCASRefused(t, userSweeper, m.Locations[0].Key)
	})

	t.Run("redis admin reads for replay, writes nothing", func(t *testing.T) {
		require.NoError(t, l.redis.Client().ACLLogReset(ctx).Err())
		conn, err := redismeta.ParseURI(l.redis.URI())
		require.NoError(t, err)
		conn.Username, conn.Password = userAdmin, l.redisPW[userAdmin]
		o := l.stageOptions(userAdmin)
		deps, err := ops.OpenReplayDeps(ctx, ops.ReplaySetup{Cluster: cluster, Registry: conn, Meta: conn, Storage: o.Storage,
			Prober: o.Prober, Sweep: o.Sweep})
		require.NoError(t, err)
		defer func() { _ = deps.Close() }()
		for _, stage := range []string{pipeline.StageProber, pipeline.StageDeleter, pipeline.StageSweeper} {
			n := 0
			sum, err := ops.Replay(ctx, l.js, l.names, ops.ReplayQuery{Stage: stage}, *deps, func(ops.ReplayMessage) error { n++; return nil })
			require.NoError(t, err, "replay %s as the admin's Redis user", stage)
			require.Positive(t, n, "%s: messages replayed", stage)
			t.Logf("replay %s as %s: %d messages, %+v", stage, userAdmin, n, sum)
		}
		entries, err := l.redis.Client().ACLLog(ctx, 128).Result()
		require.NoError(t, err)
		for _, en := range entries {
			t.Errorf("the replays were refused: user %s, %s %q (%s)", en.Username, en.Reason, en.Object, en.Context)
		}
		c := l.redisAs(userAdmin)
		k := kvcm.BlockKey("inst1", m.Locations[0].Key)
		reg := "kvcache_registry:" + cluster + ":storage"
		require.NoError(t, c.HGetAll(ctx, reg).Err(), "reads the registry")
		requireNoPerm(t, c.HSet(ctx, k, "__uri__", "{}").Err(), "HSET a block")
		requireNoPerm(t, c.Del(ctx, k).Err(), "DEL a block")
		requireNoPerm(t, c.HSet(ctx, reg, "x", "y").Err(), "HSET the registry")
		requireNoPerm(t, c.Eval(ctx, "return 1", []string{k}).Err(), "EVAL")
		requireNoPerm(t, c.Scan(ctx, 0, "*", 10).Err(), "SCAN")
		requireNoPerm(t, c.FlushAll(ctx).Err(), "FLUSHALL")
		requireNoPerm(t, c.Do(ctx, "ACL", "LIST").Err(), "ACL")
		requireNoPerm(t, c.Get(ctx, "kvcm_lock:_TAIR_KVCM_LEADER_KEY").Err(), "KVCM's leader lock")
		l.requireCASRefused(t, userAdmin, m.Locations[len(m.Locations)-1].Key)
	})

	t.Run("nats stages are refused outside their permissions", func(t *testing.T) {
		batches, deletes, sweep := l.names.BatchesStream(), l.names.DeletesStream(), l.names.SweepStream()
		state, lease := l.names.StateBucket(), l.names.LeaseBucket()
		sweepKey := subjects.SweepKey(seed.StorageNFS)
		for _, c := range []struct {
			user    string
			subject string
		}{
			{userScanner, l.names.DeleteSubject("inst1")},
			{userScanner, l.names.EventSubject(subjects.EventDelete, "inst1")},
			{userScanner, "$JS.API.STREAM.DELETE." + batches},
			{userScanner, "$JS.API.CONSUMER.MSG.NEXT." + batches + ".prober"},
			{userScanner, l.names.SweepSubject("inst1")},
			{userProber, l.names.BatchSubject("inst1")},
			{userProber, subjects.KVSubjectPrefix(state) + "checkpoint"},
			{userProber, "$JS.API.CONSUMER.MSG.NEXT." + deletes + ".deleter"},
			{userProber, "$JS.ACK." + deletes + ".deleter.1.1.1.1.0"},
			{userProber, "$JS.API.STREAM.PURGE." + batches},
			{userProber, l.names.SweepSubject("inst1")},
			{userDeleter, l.names.DeleteSubject("inst1")},
			{userDeleter, l.names.BatchSubject("inst1")},
			{userDeleter, l.names.EventSubject(subjects.EventCandidate, "inst1")},
			{userDeleter, "$JS.API.CONSUMER.DELETE." + deletes + ".deleter"},
			{userDeleter, "$JS.API.STREAM.MSG.DELETE." + deletes},
			{userDeleter, l.names.SweepSubject("inst1")},
			{userWalker, l.names.DeleteSubject("inst1")},
			{userWalker, l.names.BatchSubject("inst1")},
			{userWalker, l.names.EventSubject(subjects.EventDelete, "inst1")},
			{userWalker, subjects.KVSubjectPrefix(state) + subjects.CheckpointKey("store-0")},
			{userWalker, subjects.KVSubjectPrefix(lease) + subjects.StoreLeaseKey("store-0")},
			{userWalker, "$JS.API.CONSUMER.MSG.NEXT." + sweep + ".sweeper"},
			{userWalker, "$JS.ACK." + sweep + ".sweeper.1.1.1.1.0"},
			{userWalker, "$JS.API.STREAM.PURGE." + sweep},
			{userWalker, subjects.KVSubjectPrefix(state) + subjects.WalkerPauseKey}, // an operator's pause holds
			{userWalker, subjects.KVSubjectPrefix(state) + subjects.ScannerPauseKey},
			{userSweeper, l.names.SweepSubject("inst1")},
			{userSweeper, l.names.DeleteSubject("inst1")},
			{userSweeper, subjects.KVSubjectPrefix(lease) + sweepKey},
			{userSweeper, subjects.KVSubjectPrefix(state) + sweepKey},
			{userSweeper, "$JS.API.CONSUMER.MSG.NEXT." + batches + ".prober"},
			{userSweeper, l.names.EventSubject(subjects.EventDelete, "inst1")},
			{userSweeper, "$JS.API.CONSUMER.DELETE." + sweep + ".sweeper"},
			{userSweeper, "$JS.API.STREAM.MSG.DELETE." + sweep},
			{userSweeper, "$JS.API.CONSUMER.PAUSE." + sweep + ".sweeper"}, // nor does it lift its pause
			// Bucket keys: each stage writes its own keys only.
			{userScanner, subjects.KVSubjectPrefix(state) + subjects.ScannerPauseKey}, // nor does it lift its pause
			// Only the admin asks for a round now (kvcm-gc round start); the scanner reads it.
			{userScanner, subjects.KVSubjectPrefix(state) + subjects.RoundStartKey},
			{userProber, subjects.KVSubjectPrefix(state) + subjects.RoundStartKey},
			{userDeleter, subjects.KVSubjectPrefix(state) + subjects.RoundStartKey},
			{userWalker, subjects.KVSubjectPrefix(state) + subjects.RoundStartKey},
			{userSweeper, subjects.KVSubjectPrefix(state) + subjects.RoundStartKey},
			{userScanner, subjects.KVSubjectPrefix(state) + subjects.WalkerPauseKey},
			{userScanner, subjects.KVSubjectPrefix(state) + sweepKey},
			{userScanner, subjects.KVSubjectPrefix(state) + "deleted_keys.aW5zdDE"},
			{userScanner, subjects.KVSubjectPrefix(state) + "other"},
			{userScanner, subjects.KVSubjectPrefix(lease) + sweepKey},
			{userScanner, subjects.KVSubjectPrefix(l.names.ObservedBucket()) + "x"},
			{userDeleter, subjects.KVSubjectPrefix(state) + subjects.CheckpointKey("store-0")},
			{userDeleter, subjects.KVSubjectPrefix(state) + subjects.StoresKey},
			{userDeleter, subjects.KVSubjectPrefix(lease) + subjects.StoreLeaseKey("store-0")},
			{userProber, subjects.KVSubjectPrefix(lease) + subjects.StoreLeaseKey("store-0")},
			// A bucket read by sequence or by a subject in the payload would reach every key.
			{userScanner, "$JS.API.STREAM.MSG.GET." + subjects.KVStream(state)},
			{userScanner, "$JS.API.DIRECT.GET." + subjects.KVStream(state)},
			{userScanner, "$JS.API.DIRECT.GET." + subjects.KVStream(state) + "." + subjects.KVSubjectPrefix(state) + sweepKey},
			{userWalker, "$JS.API.STREAM.MSG.GET." + subjects.KVStream(state)},
			{userWalker, "$JS.API.DIRECT.GET." + subjects.KVStream(state) + "." + subjects.KVSubjectPrefix(state) + subjects.CheckpointKey("store-0")},
			{userDeleter, "$JS.API.STREAM.MSG.GET." + subjects.KVStream(state)},
			{userSweeper, "$JS.API.STREAM.MSG.GET." + subjects.KVStream(state)},
		} {
			refused := make(chan error, 4)
			nc := l.nats.Conn(t, nats.UserInfo(c.user, l.natsPW[c.user]),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused <- err }))
			require.NoError(t, nc.Publish(c.subject, []byte("x")))
			require.NoError(t, nc.Flush())
			select {
			case err := <-refused:
				require.ErrorIs(t, err, nats.ErrPermissionViolation, "%s publishing to %s", c.user, c.subject)
				require.Contains(t, err.Error(), c.subject)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s may publish to %s", c.user, c.subject)
			}
			nc.Close()
		}
		// Subscriptions: only the identity's own reply inbox (and the stage's advisories), so
		// no stage reads the replies to another identity, the admin's included.
		stages := []string{pipeline.StageScanner, pipeline.StageProber, pipeline.StageDeleter, pipeline.StageWalker, pipeline.StageSweeper}
		for i, stage := range stages {
			user := privileges.DefaultUser(stage)
			other := stages[(i+1)%len(stages)]
			for _, subject := range []string{l.names.BatchFilter(), "_INBOX.>", "_INBOX.*", ">",
				l.names.InboxPrefix(subjects.IdentityAdmin) + ".>", l.names.InboxPrefix(other) + ".>", l.names.InboxPrefix(other) + ".x.y"} {
				refused := make(chan error, 4)
				nc := l.nats.Conn(t, nats.UserInfo(user, l.natsPW[user]), nats.CustomInboxPrefix(l.names.InboxPrefix(stage)),
					nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused <- err }))
				_, err := nc.SubscribeSync(subject)
				require.NoError(t, err)
				require.NoError(t, nc.Flush())
				select {
				case err := <-refused:
					require.ErrorIs(t, err, nats.ErrPermissionViolation, "%s subscribing to %s", user, subject)
					require.Contains(t, err.Error(), subject)
				case <-time.After(10 * time.Second):
					t.Fatalf("%s may subscribe to %s", user, subject)
				}
				nc.Close()
			}
		}
	})
	t.Logf("garbage gone %d of %d, live intact %d of %d", r.GarbageGone, r.GarbageLocations, r.LiveIntact, r.LiveLocations)
}

// readEventsTolerant reads every message of the EVENTS stream, skipping what does not decode
// (the poison test stores garbage there on purpose).
func readEventsTolerant(t *testing.T, js jetstream.JetStream, names subjects.Names) []subjects.Event {
	t.Helper()
	out, _ := readEventsCounting(t, js, names)
	return out
}

// readEventsCounting is readEventsTolerant that also counts the undecodable messages.
func readEventsCounting(t *testing.T, js jetstream.JetStream, names subjects.Names) ([]subjects.Event, int) {
	t.Helper()
	var out []subjects.Event
	bad := 0
	require.NoError(t, testenv.EachMessage(context.Background(), js, names.EventsStream(), nil, func(m jetstream.Msg) {
		ev, err := subjects.DecodeEvent(m.Data())
		if err != nil {
			bad++
			return
		}
		out = append(out, ev.PerTarget()...) // a request's delete event: one per target
	}))
	return out, bad
}

// eventsOf filters events by kind.
func eventsOf(evs []subjects.Event, kind string) []subjects.Event {
	return slices.DeleteFunc(slices.Clone(evs), func(e subjects.Event) bool { return e.Kind != kind })
}

// stagePermissions renders the shipped permissions of user for names.
func stagePermissions(t *testing.T, names subjects.Names, user string) (pub, sub []string) {
	t.Helper()
	all := map[string]string{}
	for _, st := range append([]string{privileges.StageAdmin}, privileges.Stages...) {
		all[privileges.DefaultUser(st)] = "x"
	}
	for _, u := range loadNATSUsers(t, names, all) {
		if u.Name == user {
			return u.Publish.Allow, u.Subscribe.Allow
		}
	}
	t.Fatalf("no NATS user %s", user)
	return nil, nil
}

// startNATSWith starts a JetStream server whose options change sets up authentication.
func startNATSWith(t *testing.T, change func(o *server.Options)) *server.Server {
	t.Helper()
	opts, err := natsembed.Options(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	require.NoError(t, err)
	change(opts)
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second))
	return s
}

// checkStageAuth connects as the scanner with c and as the admin with admin (the binaries'
// connection code), then shows the scanner may publish a batch and may not publish a delete
// request.
func checkStageAuth(t *testing.T, url string, admin, c config.NATSConfig, names subjects.Names) {
	t.Helper()
	ctx := context.Background()
	c.ConnectTimeout, admin.ConnectTimeout = 5*time.Second, 5*time.Second
	anc, err := cli.ConnectNATS(ctx, admin, url, "admin", nil)
	require.NoError(t, err)
	defer anc.Close()
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	require.NoError(t, subjects.Ensure(ctx, ajs, names, subjects.DefaultSettings()))

	var log testenv.Buffer
	c = cli.WithInbox(c, names, pipeline.StageScanner)
	nc, err := cli.ConnectNATS(ctx, c, url, "scanner", slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	b := subjects.Batch{V: subjects.SchemaVersion, Cluster: names.Cluster, Instance: "inst1", Parts: 1}
	data, err := subjects.Encode(b)
	require.NoError(t, err)
	_, err = js.Publish(ctx, names.BatchSubject("inst1"), data)
	require.NoError(t, err, "the scanner publishes batches")
	kv, err := js.KeyValue(ctx, names.StateBucket())
	require.NoError(t, err, "the scanner opens its state bucket")
	_, err = kv.Create(ctx, subjects.CheckpointKey("probe:6379"), []byte("1"))
	require.NoError(t, err, "and writes a checkpoint")

	require.NoError(t, nc.Publish(names.DeleteSubject("inst1"), data))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return strings.Contains(strings.ToLower(log.String()), "permissions violation") },
		10*time.Second, 10*time.Millisecond, "the scanner may not publish delete requests")
}

// TestNATSAuthMethods: besides user/password over TLS (TestLeastPrivilege), the stages sign in
// with an nkey seed file or a credentials file (JWT), with the shipped permissions.
func TestNATSAuthMethods(t *testing.T) {
	names, err := subjects.NewNames("kvcmgc", cluster)
	require.NoError(t, err)
	perms := func(user string) *server.Permissions {
		pub, sub := stagePermissions(t, names, user)
		return &server.Permissions{Publish: &server.SubjectPermission{Allow: pub}, Subscribe: &server.SubjectPermission{Allow: sub}}
	}
	dir := t.TempDir()

	t.Run("nkey seed file", func(t *testing.T) {
		var seeds [2]string
		var users []*server.NkeyUser
		for i, user := range []string{userAdmin, userScanner} {
			kp, err := nkeys.CreateUser()
			require.NoError(t, err)
			pub, err := kp.PublicKey()
			require.NoError(t, err)
			seed, err := kp.Seed()
			require.NoError(t, err)
			seeds[i] = filepath.Join(dir, user+".nk")
			require.NoError(t, os.WriteFile(seeds[i], seed, 0o600))
			users = append(users, &server.NkeyUser{Nkey: pub, Permissions: perms(user)})
		}
		s := startNATSWith(t, func(o *server.Options) { o.Nkeys = users })
		checkStageAuth(t, s.ClientURL(), config.NATSConfig{NkeySeedFile: seeds[0]}, config.NATSConfig{NkeySeedFile: seeds[1]}, names)
	})

	t.Run("credentials file", func(t *testing.T) {
		okp, err := nkeys.CreateOperator()
		require.NoError(t, err)
		opub, err := okp.PublicKey()
		require.NoError(t, err)
		// JetStream in operator mode needs a system account.
		skp, err := nkeys.CreateAccount()
		require.NoError(t, err)
		spub, err := skp.PublicKey()
		require.NoError(t, err)
		sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
		require.NoError(t, err)
		oc := jwt.NewOperatorClaims(opub)
		oc.SystemAccount = spub
		_, err = oc.Encode(okp)
		require.NoError(t, err)
		akp, err := nkeys.CreateAccount()
		require.NoError(t, err)
		apub, err := akp.PublicKey()
		require.NoError(t, err)
		ac := jwt.NewAccountClaims(apub)
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		ajwt, err := ac.Encode(okp)
		require.NoError(t, err)
		var creds [2]string
		for i, user := range []string{userAdmin, userScanner} {
			ukp, err := nkeys.CreateUser()
			require.NoError(t, err)
			upub, err := ukp.PublicKey()
			require.NoError(t, err)
			useed, err := ukp.Seed()
			require.NoError(t, err)
			uc := jwt.NewUserClaims(upub)
			uc.Name = user
			p := perms(user)
			uc.Pub.Allow.Add(p.Publish.Allow...)
			uc.Sub.Allow.Add(p.Subscribe.Allow...)
			ujwt, err := uc.Encode(akp)
			require.NoError(t, err)
			data, err := jwt.FormatUserConfig(ujwt, useed)
			require.NoError(t, err)
			creds[i] = filepath.Join(dir, user+".creds")
			require.NoError(t, os.WriteFile(creds[i], data, 0o600))
		}
		resolver := &server.MemAccResolver{}
		require.NoError(t, resolver.Store(apub, ajwt))
		require.NoError(t, resolver.Store(spub, sjwt))
		s := startNATSWith(t, func(o *server.Options) {
			o.TrustedOperators = []*jwt.OperatorClaims{oc}
			o.AccountResolver = resolver
			o.SystemAccount = spub
		})
		checkStageAuth(t, s.ClientURL(), config.NATSConfig{CredentialsFile: creds[0]}, config.NATSConfig{CredentialsFile: creds[1]}, names)
	})
}

// TestCredentialsNeverLeak runs the stages with distinctive passwords in the Redis URIs
// (KVCM-style userinfo, also inside the registry), an ACL password, and NATS credentials in
// the URL and in the configuration, then makes every connection fail with other distinctive
// passwords. No log line, error, readiness report, status output, stored message or event
// may contain any of them.
func TestCredentialsNeverLeak(t *testing.T) {
	const (
		kvcmUserInfo = "kvcm-user:Rk7Secret-REDIS" // KVCM-style: the whole userinfo is the AUTH argument
		metaPass     = "Mp9Secret-META"
		natsPass     = "Np4Secret-NATS"
		wrongRedis   = "kvcm-user:Wx1Wrong-REDIS"
		wrongMeta    = "Wd2Wrong-META"
		wrongNATS    = "Nw3Wrong-NATS"
	)
	secrets := []string{"Rk7Secret", "Mp9Secret", "Np4Secret", "Wx1Wrong", "Wd2Wrong", "Nw3Wrong"}
	ctx := context.Background()

	r := testenv.StartRedis(t)
	r.AddUser(t, "gc-meta", metaPass, "~*", "+@all")
	r.RequirePass(t, kvcmUserInfo)
	n := testenv.StartNATS(t, testenv.WithNATSAccounts(natsembed.Account{Name: "KVCMGC", JetStream: true,
		Users: []natsembed.User{{Name: "gc", Password: natsPass}}}))
	admin := n.Conn(t, nats.UserInfo("gc", natsPass))
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	names, err := subjects.NewNames("kvcmgc", cluster)
	require.NoError(t, err)
	e := &env{t: t, redis: r, srv: n.Server(), nc: admin, js: js, names: names, root: t.TempDir()}
	withCreds := func(userInfo string) string { return "redis://" + userInfo + "@" + r.Addr() }
	// KVCM writes the metadata store URI, credentials included, into the registry.
	m, err := seed.Generate(ctx, r.Client(), seed.Spec{Cluster: cluster, Instances: []string{"inst1"}, Blocks: 100,
		GarbageFraction: 0.3, Seed: 22, Root: e.root, MetaURI: withCreds(kvcmUserInfo)})
	require.NoError(t, err)
	before, err := seed.Take(ctx, r.Client(), "*")
	require.NoError(t, err)

	var logs testenv.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var outputs []string // errors and reports to check besides the log
	o := e.options(prometheus.NewRegistry())
	o.Registry, err = redismeta.ParseURI(withCreds(kvcmUserInfo))
	require.NoError(t, err)
	o.Meta = redismeta.ConnOptions{Username: "gc-meta", Password: metaPass}
	natsURL := strings.Replace(n.URL(), "nats://", "nats://gc:"+natsPass+"@", 1)
	health := &app.Health{}
	o.Health = health
	stop := runStageProcess(t, config.NATSConfig{}, natsURL, o, app.Stages{Scanner: true, Prober: true}, log)
	od := e.options(prometheus.NewRegistry())
	od.Meta = o.Meta
	stopDeleter := runStageProcess(t, config.NATSConfig{User: "gc", Password: natsPass}, n.URL(), od, app.Stages{Deleter: true}, log)
	e.waitRoundDone(1, time.Minute)
	e.verify(before, m)
	report, err := health.Ready(ctx)
	require.NoError(t, err)
	outputs = append(outputs, report)
	var status bytes.Buffer
	ajs, err := jetstream.New(admin)
	require.NoError(t, err)
	rep, err := ops.Status(ctx, ajs, names)
	require.NoError(t, err)
	require.NoError(t, rep.WriteTable(&status))
	outputs = append(outputs, status.String())
	stop()
	stopDeleter()

	// Wrong passwords everywhere.
	for _, c := range []struct {
		url string
		cfg config.NATSConfig
	}{
		{strings.Replace(n.URL(), "nats://", "nats://gc:"+wrongNATS+"@", 1), config.NATSConfig{}},
		{n.URL(), config.NATSConfig{User: "gc", Password: wrongNATS}},
	} {
		c.cfg.ConnectTimeout = time.Second
		_, err := cli.ConnectNATS(ctx, c.cfg, c.url, "wrong", log)
		require.Error(t, err)
		outputs = append(outputs, err.Error())
	}
	bad := e.options(prometheus.NewRegistry())
	bad.Registry, err = redismeta.ParseURI(withCreds(wrongRedis))
	require.NoError(t, err)
	bad.Meta = redismeta.ConnOptions{Username: "gc-meta", Password: wrongMeta}
	bad.Health = &app.Health{}
	// A batch for the prober (whose registry read fails) and a request for the deleter
	// (whose metadata store refuses it): both fail on every delivery.
	b := subjects.Batch{V: subjects.SchemaVersion, Cluster: cluster, Instance: "inst1", Group: seed.GroupRedis, Store: r.Addr(), Round: 9, Parts: 1,
		Blocks: []subjects.BlockEntry{{Key: m.Locations[0].Key, URI: subjects.RawText(before[kvcm.BlockKey("inst1", m.Locations[0].Key)]["__uri__"])}}}
	data, err := subjects.Encode(b)
	require.NoError(t, err)
	_, err = js.Publish(ctx, names.BatchSubject("inst1"), data)
	require.NoError(t, err)
	req := subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: cluster, Instance: "inst1", Store: r.Addr(), Source: subjects.Source{MsgID: "x"},
		Targets: []subjects.Target{{Key: m.Locations[0].Key, Location: m.Locations[0].Location, Reason: subjects.ReasonOrphanWriting,
			Expected: subjects.RawText(`{"id":"` + m.Locations[0].Location + `","status":2,"type":4,"spec_size":0,"location_specs":[]}`)}}}
	data, err = subjects.Encode(req)
	require.NoError(t, err)
	_, err = js.Publish(ctx, names.DeleteSubject("inst1"), data)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	bad.Reg = reg
	stop = runStageProcess(t, config.NATSConfig{}, natsURL, bad, app.Stages{Prober: true, Deleter: true}, log)
	require.Eventually(t, func() bool {
		return metricLabeled(t, reg, "kvcm_gc_messages_total", map[string]string{"stage": "prober", "result": "nak"}) >= 1 &&
			metricLabeled(t, reg, "kvcm_gc_messages_total", map[string]string{"stage": "deleter", "result": "nak"}) >= 1
	}, 30*time.Second, 20*time.Millisecond, "both failing messages were tried: %s", &logs)
	report, err = bad.Health.Ready(ctx)
	require.Error(t, err, "the registry refuses the wrong password")
	outputs = append(outputs, report, err.Error())
	stop()
	for _, u := range []string{withCreds(wrongRedis), "redis://gc-meta:" + wrongMeta + "@" + r.Addr()} {
		conn, err := redismeta.ParseURI(u)
		require.NoError(t, err)
		st, err := redismeta.OpenStore(ctx, conn, redismeta.StoreOptions{})
		require.NoError(t, err)
		_, _, err = metatest.GetURI(ctx, st, "inst1", 1)
		require.Error(t, err)
		outputs = append(outputs, err.Error(), fmt.Sprint(conn), fmt.Sprintf("%+v %#v", conn, conn))
		require.NoError(t, st.Close())
	}

	// The binaries: a configuration file and the environment carry the secrets.
	// One binary, every stage: the stage binaries share all their code with it (cli.StageCommand).
	bins, err := faults.Build(ctx, t.TempDir(), "kvcm-gc")
	require.NoError(t, err)
	kvcmgc := bins["kvcm-gc"]
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`cluster: %s
registry:
  uri: %s
meta:
  username: gc-meta
  password: %s
nats:
  url: %s
  connect_timeout: 2s
http:
  listen: 127.0.0.1:0
log:
  level: debug
  format: json
round_pause: 1h
`, cluster, withCreds(kvcmUserInfo), metaPass, natsURL)), 0o600))
	run := func(bin string, env []string, args ...string) string {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	outputs = append(outputs,
		run(kvcmgc, nil, "deleter", "--config", cfgPath, "--print-config"),
		run(kvcmgc, []string{"KVCMGC_NATS_URL=" + n.URL(), "KVCMGC_NATS_USER=gc", "KVCMGC_NATS_PASSWORD=" + wrongNATS}, "deleter", "--config", cfgPath),
		run(kvcmgc, nil, "scanner", "--config", cfgPath, "--nats.url", strings.Replace(n.URL(), "nats://", "nats://gc:"+wrongNATS+"@", 1)),
	)
	// A scanner that starts: its log, /readyz and /metrics; then one whose registry refuses it.
	for _, regURI := range []string{withCreds(kvcmUserInfo), withCreds(wrongRedis)} {
		dir := t.TempDir()
		p, err := faults.StartProc("scanner", filepath.Join(dir, "scanner.log"), kvcmgc, []string{"scanner", "--config", cfgPath, "--registry.uri", regURI}, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return p.HTTPAddr() != "" }, 30*time.Second, 20*time.Millisecond, p.LogTail(20))
		for _, path := range []string{"/readyz", "/metrics", "/healthz"} {
			var body string
			require.Eventually(t, func() bool {
				resp, err := http.Get("http://" + p.HTTPAddr() + path)
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				data, err := io.ReadAll(resp.Body)
				body = string(data)
				return err == nil && (path != "/readyz" || strings.Contains(body, "registry:"))
			}, 30*time.Second, 50*time.Millisecond)
			outputs = append(outputs, body)
		}
		require.NoError(t, p.Stop())
		data, err := os.ReadFile(p.LogPath())
		require.NoError(t, err)
		outputs = append(outputs, string(data))
	}

	// Everything stored in NATS: batches, requests, events, checkpoint and lease.
	for _, stream := range []string{names.BatchesStream(), names.DeletesStream(), names.EventsStream(), subjects.KVStream(names.StateBucket()), subjects.KVStream(names.LeaseBucket())} {
		s, err := js.Stream(ctx, stream)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			msg, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted
			}
			outputs = append(outputs, msg.Subject+" "+string(msg.Data))
		}
	}
	outputs = append(outputs, logs.String())
	all := strings.Join(outputs, "\n")
	require.Contains(t, all, "WRONGPASS", "the failures were exercised")
	require.Contains(t, strings.ToLower(all), "authorization violation")
	for _, s := range secrets {
		if i := strings.Index(all, s); i >= 0 {
			t.Fatalf("credential %q leaked: …%s…", s, all[max(i-300, 0):min(i+100, len(all))])
		}
	}
}

// TestNATSServerConfig loads the nats-server account the least-privilege definitions render
// (what the chart's privileges ConfigMap holds) as nats-server would, checks it grants exactly
// the permissions of every user, and serves a stage with it.
func TestNATSServerConfig(t *testing.T) {
	passwords := map[string]string{}
	for _, st := range append([]string{privileges.StageAdmin}, privileges.Stages...) {
		passwords[privileges.DefaultUser(st)] = st + "-pw"
		t.Setenv(privileges.PasswordEnv(st), st+"-pw")
	}
	names, err := subjects.NewNames("kvcmgc", "kvcm-prod")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kvcm-gc.conf")
	require.NoError(t, os.WriteFile(path, []byte(privileges.AccountConfig(privileges.NATS(names), nil)), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	want := map[string]natsembed.User{}
	for _, u := range loadNATSUsers(t, names, passwords) {
		want[u.Name] = u
	}
	require.Len(t, opts.Users, len(want))
	for _, u := range opts.Users {
		w, ok := want[u.Username]
		require.True(t, ok, u.Username)
		require.Equal(t, w.Password, u.Password, "%s: password from the environment", u.Username)
		require.Equal(t, privileges.Account, u.Account.Name)
		require.Equal(t, w.Publish.Allow, u.Permissions.Publish.Allow, "%s publish", u.Username)
		require.Equal(t, w.Subscribe.Allow, u.Permissions.Subscribe.Allow, "%s subscribe", u.Username)
		require.Empty(t, u.Permissions.Publish.Deny)
	}
	s := startNATSWith(t, func(o *server.Options) {
		*o = *opts
		o.JetStream, o.StoreDir, o.Host, o.Port, o.NoSigs, o.NoLog = true, t.TempDir(), "127.0.0.1", -1, true, true
	})
	checkStageAuth(t, s.ClientURL(), config.NATSConfig{User: userAdmin, Password: passwords[userAdmin]},
		config.NATSConfig{User: userScanner, Password: passwords[userScanner]}, names)
}

// runCLI runs one of kvcm-gc's commands as its command line would, in an environment free of
// KVCMGC_ variables, and returns its exit status, output and log.
func runCLI(t *testing.T, c *cli.Command, args ...string) (code int, stdout, stderr string, took time.Duration) {
	t.Helper()
	for _, k := range config.Keys() {
		t.Setenv(k.Env, "")
	}
	t.Setenv(config.FileEnv, "")
	var out, errOut testenv.Buffer
	start := time.Now()
	code = cli.RunCommand("kvcm-gc "+c.Name, c, args, &out, &errOut)
	// The log quotes its values: unquote them for the reader of a failure and the assertions.
	return code, out.String(), strings.ReplaceAll(errOut.String(), `\"`, `"`), time.Since(start)
}

// TestPermissionRefusalsAreFatal: a subject an identity may not use ends the work that needed
// it at once, with an error naming the subject and the identity, instead of a timeout or
// minutes of retries. ensure under an identity without $JS.API.STREAM.INFO exits 1; status
// shows the refusal in each part that needed a refused subject, reads the others, and exits
// 1; pause exits 1; a stage run under the wrong identity stops and its process exits 1.
func TestPermissionRefusalsAreFatal(t *testing.T) {
	l := newLeastPrivilegeEnv(t)
	ctx := context.Background()
	require.NoError(t, subjects.Ensure(ctx, l.js, l.names, l.options(nil).JetStream), "the admin creates the topology")
	// Timeouts far above what the test allows: a refusal must not wait for them. Each user
	// gets replies under its own inbox (else the refusal would be its inbox's subscription).
	as := func(user string, more ...string) []string {
		return append([]string{"--cluster", cluster, "--nats.url", l.nats.URL(), "--nats.user", user, "--nats.password", l.natsPW[user],
			"--nats.tls.ca_file", l.nats.CAFile(), "--nats.connect_timeout", "5s", "--jetstream.api_timeout", "1m",
			"--nats.inbox_prefix", l.names.InboxPrefix(strings.TrimPrefix(user, "kvcm-gc-"))}, more...)
	}
	const fast = 15 * time.Second
	refused := func(user, subject string) string {
		return fmt.Sprintf(`nats permissions violation: user %q may not publish to %q`, user, subject)
	}

	code, out, stderr, took := runCLI(t, cli.EnsureCommand(), as(userScanner)...)
	require.Equal(t, cli.ExitFailure, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Less(t, took, fast, "refused at once, not retried")
	require.Contains(t, stderr, refused(userScanner, "$JS.API.STREAM.INFO."+l.names.BatchesStream()))
	t.Logf("ensure as the scanner: exit %d after %v\n%s", code, took.Round(time.Millisecond), stderr)

	code, out, stderr, took = runCLI(t, cli.StatusCommand(), as(userScanner)...)
	require.Equal(t, cli.ExitFailure, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Less(t, took, fast)
	for _, s := range []string{l.names.BatchesStream(), l.names.DeletesStream(), l.names.EventsStream()} {
		require.Contains(t, out, refused(userScanner, "$JS.API.STREAM.INFO."+s), "the stream's part")
	}
	require.Contains(t, out, refused(userScanner, "$JS.API.CONSUMER.INFO."+l.names.SweepStream()+"."+l.names.SweeperConsumer()))
	// The scanner may read its backlog and its buckets: those parts are read.
	require.Regexp(t, `(?m)^prober\s+\S+/prober\s+0\s`, out)
	require.Regexp(t, `(?m)^deleter\s+\S+/deleter\s+0\s`, out)
	require.NotContains(t, out, "deadline exceeded")
	t.Logf("status as the scanner: exit %d after %v\n%s", code, took.Round(time.Millisecond), out)

	code, out, stderr, took = runCLI(t, cli.PauseCommand(), as(userScanner, "deleter")...)
	require.Equal(t, cli.ExitFailure, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Less(t, took, fast)
	require.Contains(t, stderr, refused(userScanner, "$JS.API.CONSUMER.PAUSE."+l.names.DeletesStream()+"."+l.names.DeleterConsumer()))
	c, err := l.js.Consumer(ctx, l.names.DeletesStream(), l.names.DeleterConsumer())
	require.NoError(t, err)
	require.False(t, c.CachedInfo().Paused)

	// round start writes the request, which the scanner may read but not write.
	code, out, stderr, took = runCLI(t, cli.RoundCommand(), append([]string{"start"}, as(userScanner)...)...)
	require.Equal(t, cli.ExitFailure, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Less(t, took, fast)
	require.Contains(t, stderr, fmt.Sprintf(`nats permissions violation: user %q may not publish to`, userScanner))
	state, err := l.js.KeyValue(ctx, l.names.StateBucket())
	require.NoError(t, err)
	_, err = state.Get(ctx, subjects.RoundStartKey)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "nothing was asked")
	code, out, stderr, _ = runCLI(t, cli.RoundCommand(), append([]string{"start"}, as(userAdmin)...)...)
	require.Equal(t, cli.ExitOK, code, "out:\n%s\nstderr:\n%s", out, stderr)

	// The operator's commands get their replies under the admin's inbox, which the scanner may
	// not read: run as the scanner with their own inbox, they are refused at the first request.
	code, out, stderr, took = runCLI(t, cli.StatusCommand(), slices.DeleteFunc(as(userScanner), func(a string) bool {
		return a == "--nats.inbox_prefix" || strings.HasPrefix(a, "_INBOX.")
	})...)
	require.Equal(t, cli.ExitFailure, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Less(t, took, fast)
	require.Contains(t, out, fmt.Sprintf(`nats permissions violation: user %q may not subscribe to "%s.`, userScanner, l.names.InboxPrefix(subjects.IdentityAdmin)))

	// The admin may do all of it.
	code, out, stderr, _ = runCLI(t, cli.StatusCommand(), as(userAdmin)...)
	require.Equal(t, cli.ExitOK, code, "out:\n%s\nstderr:\n%s", out, stderr)

	// A prober run as the deleter's user may not pull the prober's batches: it stops, and its
	// process exits naming what it was refused.
	code, out, stderr, took = runCLI(t, cli.StageCommand("prober", "the prober", app.Stages{Prober: true}),
		as(userDeleter, "--jetstream.skip_ensure", "--http.listen", "127.0.0.1:0", "--registry.uri", l.redis.URI(),
			"--registry.username", userProber, "--registry.password", l.redisPW[userProber])...)
	require.Equal(t, cli.ExitFailure, code, "out:\n%s\nstderr:\n%s", out, stderr)
	require.Less(t, took, 30*time.Second)
	require.Contains(t, stderr, "exiting on error")
	require.Regexp(t, `nats permissions violation: user "`+userDeleter+`" may not publish to "\$JS\.API\.CONSUMER\.[A-Z.]+`+
		l.names.BatchesStream()+`\.prober`, stderr)
	t.Logf("prober as the deleter: exit %d after %v", code, took.Round(time.Millisecond))
}
