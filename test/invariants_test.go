package test

// One test per safety invariant of DESIGN §8. Each can fail: it sets up the situation the
// invariant forbids and checks what Redis and the files hold afterwards. The invariants about
// the data (1, 2, 3, 5, 6 after a CAS, 8, and 9–11, which are about the layouts) run in both
// of KVCM's block layouts, one subtest each: the location layout of today's KVCM and the
// legacy layout of KVCM f6aa2b2. Those about the pipeline's machinery (4, 6's scanner
// failover, 7) read and write blocks no differently per layout and run in the legacy one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

func (e *env) seed(sp seed.Spec) (*seed.Manifest, seed.Snapshot) {
	e.t.Helper()
	ctx := context.Background()
	sp.Cluster, sp.Root, sp.MetaURI = cluster, e.root, e.redis.URI()
	if len(sp.Instances) == 0 {
		sp.Instances = []string{"inst1"}
	}
	m, err := seed.Generate(ctx, e.redis.Client(), sp)
	require.NoError(e.t, err)
	before, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(e.t, err)
	return m, before
}

func (e *env) verify(before seed.Snapshot, m *seed.Manifest) seed.Report {
	e.t.Helper()
	r, err := seed.Verify(context.Background(), e.redis.Client(), before, m, "*")
	require.NoError(e.t, err)
	require.True(e.t, r.OK(), "verification: %+v", r)
	return r
}

// waitConsumer waits until a consumer has nothing pending or unacknowledged.
func (e *env) waitConsumer(stream, consumer string, timeout time.Duration) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		c, err := e.js.Consumer(context.Background(), stream, consumer)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > 0
	}, timeout, 20*time.Millisecond)
}

func (e *env) waitRoundEnded(n uint64, timeout time.Duration) pipeline.Checkpoint {
	e.t.Helper()
	var ck pipeline.Checkpoint
	require.Eventually(e.t, func() bool {
		kv, err := e.js.KeyValue(context.Background(), e.names.StateBucket())
		if err != nil {
			return false
		}
		ck, _, err = scanner.ReadCheckpoint(context.Background(), kv)
		return err == nil && (ck.Round > n || (ck.Round == n && !ck.InRound))
	}, timeout, 20*time.Millisecond)
	return ck
}

// judgeOneRound runs the scanner and the prober for one round and stops them: the DELETES
// stream then holds the round's delete requests, not yet executed.
func (e *env) judgeOneRound(o app.Options) {
	e.t.Helper()
	stop := e.run(o, app.Stages{Scanner: true, Prober: true})
	e.waitRoundEnded(1, time.Minute)
	e.waitConsumer(e.names.BatchesStream(), e.names.ProberConsumer(), time.Minute)
	stop()
}

func (e *env) store() *redismeta.Store {
	e.t.Helper()
	conn, err := redismeta.ParseURI(e.redis.URI())
	require.NoError(e.t, err)
	s, err := redismeta.OpenStore(context.Background(), conn, redismeta.StoreOptions{})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

func firstGarbage(m *seed.Manifest, kind string, skip int) seed.Loc {
	for _, l := range m.Locations {
		if l.Kind == kind {
			if skip == 0 {
				return l
			}
			skip--
		}
	}
	panic("no location of kind " + kind)
}

// Invariant 1: a location is deleted only if its bytes at CAS time equal the bytes the
// prober judged. KVCM finishes one judged write and adds a location to another block after
// the prober ran; the first survives, the second block keeps the new location byte for byte.
func TestInvariant1ChangedAfterProbeSurvives(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		rdb := e.redis.Client()
		m, _ := e.seed(seed.Spec{Layout: layout, Blocks: 400, GarbageFraction: 0.3, Seed: 1})
		o := e.options(prometheus.NewRegistry())
		e.judgeOneRound(o)

		flipped := firstGarbage(m, seed.KindOrphanWriting, 0)
		flippedBytes := finishWriteIn(t, rdb, flipped.Instance, flipped.Key, flipped.FieldName(), flipped.Location)
		grown := firstGarbage(m, seed.KindOrphanWriting, 1)
		gk := kvcm.BlockKey(grown.Instance, grown.Key)
		// KVCM's BatchAddLocation on an existing key: legacy, the whole map rewritten with the
		// new location in front; location layout, one new L# field (no BP#prev_key: the key
		// exists).
		var newLoc string
		if layout == kvcm.LayoutLocation {
			newLoc = locJSON(layout, "zz9new00", kvcm.StatusWriting, kvcm.TypeFile, time.Now().UnixMicro())
			require.NoError(t, rdb.HSet(ctx, gk, kvcm.LocationField("zz9new00"), newLoc).Err())
		} else {
			cur, err := rdb.HGet(ctx, gk, kvcm.FieldURI).Bytes()
			require.NoError(t, err)
			newLoc = `{"id":"zz9new00","status":2,"type":4,"spec_size":0,"location_specs":[]}`
			require.NoError(t, rdb.HSet(ctx, gk, kvcm.FieldURI, append([]byte(`{"zz9new00":`+newLoc+`,`), cur[1:]...)).Err())
		}

		for i := range m.Locations {
			if m.Locations[i].Location == flipped.Location && m.Locations[i].Key == flipped.Key {
				m.Locations[i].Garbage = false
			}
		}
		before, err := seed.Take(ctx, rdb, "*")
		require.NoError(t, err)
		e.run(o, app.Stages{Deleter: true})
		e.waitConsumer(e.names.DeletesStream(), e.names.DeleterConsumer(), time.Minute)
		e.verify(before, m)

		got, ok := seedLocation(t, rdb, flipped)
		require.True(t, ok)
		require.Equal(t, string(flippedBytes), string(got.Raw), "the finished write is untouched")
		grew := seed.Loc{Instance: grown.Instance, Key: grown.Key, Location: "zz9new00", Field: fieldOf(layout, "zz9new00")}
		got, ok = seedLocation(t, rdb, grew)
		require.True(t, ok)
		require.Equal(t, newLoc, string(got.Raw), "the location added after the probe survives byte for byte")
		_, ok = seedLocation(t, rdb, grown)
		require.False(t, ok, "the judged orphan beside it goes")
		outcomes := map[string]int{}
		for _, ev := range e.events() {
			if ev.Kind == subjects.EventDelete {
				outcomes[ev.Outcome+"/"+ev.Reason]++
				if ev.Location == flipped.Location && *ev.Key == flipped.Key {
					require.Equal(t, subjects.OutcomeNoopMismatch, ev.Outcome)
				}
			}
		}
		t.Logf("delete outcomes by outcome/reason: %v", outcomes)
	})
}

// racingStore lets a KVCM-like writer change the block between the deleter's read (step 1)
// and its CAS (step 2).
type racingStore struct {
	meta.Store
	once   sync.Once
	mutate func()
}

func (r *racingStore) ReadBlocks(ctx context.Context, inst string, keys []int64) ([]meta.BlockRead, error) {
	b, err := r.Store.ReadBlocks(ctx, inst, keys)
	r.once.Do(r.mutate)
	return b, err
}

func TestInvariant1RaceBetweenReadAndCAS(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		rdb := e.redis.Client()
		m, _ := e.seed(seed.Spec{Layout: layout, Blocks: 50, GarbageFraction: 0.5, Seed: 2, NoFiles: true})
		l := firstGarbage(m, seed.KindOrphanWriting, 0)
		k := kvcm.BlockKey(l.Instance, l.Key)
		judged, ok := seedLocation(t, rdb, l)
		require.True(t, ok)

		var written map[string]string
		st := &racingStore{Store: e.store(), mutate: func() {
			finishWriteIn(t, rdb, l.Instance, l.Key, l.FieldName(), l.Location)
			written = rdb.HGetAll(ctx, k).Val()
		}}
		p := deleter.NewProtocol(deleter.DefaultConfig())
		res, err := p.DeleteAll(ctx, st, fakeNoStorage{}, l.Instance, []subjects.Target{{Key: l.Key, Location: l.Location,
			Layout: layout.String(), Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(judged.Raw)}})
		require.NoError(t, err)
		require.Equal(t, subjects.OutcomeNoopMismatch, res[0].Outcome, res[0].Detail)
		require.Equal(t, written, rdb.HGetAll(ctx, k).Val(), "the block as KVCM's FinishWrite left it")
	})
}

type fakeNoStorage struct{}

func (fakeNoStorage) Lookup(string) (storage.Backend, bool) { return nil, false }

// Invariant 2: WRITING younger than the grace, or of unknown or future age, is never
// deleted; a grace under one hour is refused at startup. Legacy, the age is the later of
// create_time and __lru_time__; location layout, create_time alone (0 or absent: unknown).
func TestInvariant2YoungAndFutureWritingKept(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		now := time.Now()
		c := e.redis.Client()
		us := func(d time.Duration) int64 { return now.Add(d).UnixMicro() }
		type block struct {
			ct   int64  // create_time; legacy: 0 for none
			lru  string // legacy only
			kept bool
		}
		var blocks map[int64]block
		if layout == kvcm.LayoutLocation {
			blocks = map[int64]block{
				1: {ct: us(-23 * time.Hour), kept: true}, // young
				2: {ct: us(time.Hour), kept: true},       // future
				3: {ct: 0, kept: true},                   // KVCM's data from before create_time
				4: {ct: us(-31 * time.Hour)},             // old: collected
				// Past the grace, inside kvcm_gc's deferral (on by default): KVCM's GC's.
				7: {ct: us(-30*time.Hour + time.Minute), kept: true},
			}
		} else {
			blocks = map[int64]block{
				1: {lru: strconv.FormatInt(us(-23*time.Hour), 10), kept: true},                       // young block
				2: {ct: us(time.Hour), lru: strconv.FormatInt(us(-48*time.Hour), 10), kept: true},    // future create_time
				3: {lru: "not-a-time", kept: true},                                                   // unknown
				5: {ct: us(-30 * time.Hour), lru: strconv.FormatInt(us(-time.Hour), 10), kept: true}, // old, in a block written an hour ago
				4: {ct: us(-25 * time.Hour), lru: strconv.FormatInt(us(-30*time.Hour), 10)},          // old: collected
			}
		}
		_, err := seed.Generate(ctx, c, seed.Spec{Cluster: cluster, Layout: layout, Instances: []string{"inst1"}, Blocks: 0, Root: e.root, MetaURI: e.redis.URI()})
		require.NoError(t, err)
		written := map[int64]map[string]string{}
		for k, b := range blocks {
			id := fmt.Sprintf("w%07d", k)
			fields := blockFields(layout, now, id, locJSON(layout, id, kvcm.StatusWriting, kvcm.TypeFile, b.ct))
			if layout == kvcm.LayoutLegacy {
				fields[3] = b.lru
			}
			require.NoError(t, c.HSet(ctx, kvcm.BlockKey("inst1", k), fields...).Err())
			written[k] = c.HGetAll(ctx, kvcm.BlockKey("inst1", k)).Val()
		}
		// A location-layout location without create_time at all: unknown age too.
		if layout == kvcm.LayoutLocation {
			v := `{"id":"w0000006","status":2,"type":4,"spec_size":0,"location_specs":[]}`
			require.NoError(t, c.HSet(ctx, kvcm.BlockKey("inst1", 6), kvcm.FieldPrevKey, "", "L#w0000006", v).Err())
			written[6], blocks[6] = c.HGetAll(ctx, kvcm.BlockKey("inst1", 6)).Val(), block{kept: true}
		}
		o := e.options(prometheus.NewRegistry())
		e.run(o, app.All)
		e.waitRoundDone(1, time.Minute)
		for k, b := range blocks {
			got := c.HGetAll(ctx, kvcm.BlockKey("inst1", k)).Val()
			if b.kept {
				require.Equal(t, written[k], got, "block %d", k)
				continue
			}
			// The old orphan is collected, so the rule is live; the key stays as KVCM reads
			// "exists, no location" (empty_block: keep).
			want := map[string]string{kvcm.FieldPrevKey: ""}
			if layout == kvcm.LayoutLegacy {
				want = map[string]string{kvcm.FieldURI: "{}", kvcm.FieldLRUTime: written[k][kvcm.FieldLRUTime]}
			}
			require.Equal(t, want, got, "block %d", k)
		}

		o.Prober.OrphanWritingGrace = 59 * time.Minute
		o.Reg = prometheus.NewRegistry()
		err = app.Run(ctx, e.nc, o, app.Stages{Prober: true})
		require.ErrorContains(t, err, "orphan_writing_grace")
	})
}

// Invariant 3: a SERVING location is deleted only on a definitive "missing". With KVCM's own
// probe ("none": always might exist) no SERVING location goes, even with its files removed.
func TestInvariant3NoDefinitiveMissingNoDelete(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		m, before := e.seed(seed.Spec{Layout: layout, Blocks: 300, GarbageFraction: 0.3, TrickyFraction: 0.2, Seed: 3})
		for i := range m.Locations {
			if m.Locations[i].Kind == seed.KindMissingServing {
				m.Locations[i].Garbage = false
			}
		}
		o := e.options(prometheus.NewRegistry())
		o.Storage.DefaultProbe = storage.ProbeNone
		e.run(o, app.All)
		e.waitRoundDone(1, time.Minute)
		r := e.verify(before, m)
		require.Positive(t, r.GarbageGone, "orphans still go")
		require.Positive(t, m.Counts[seed.KindMissingServing])
	})
}

// Invariant 4: a batch or request whose subject names another instance than its body is
// terminated as poison, never judged or executed.
func TestInvariant4WrongInstanceIsPoison(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, before := e.seed(seed.Spec{Instances: []string{"inst1", "inst10"}, Blocks: 100, GarbageFraction: 0.5, Seed: 4, NoFiles: true})
	o := e.options(prometheus.NewRegistry())
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))

	// A real batch of inst10's garbage, published under inst1's subject.
	st := e.store()
	page, err := metatest.ScanInstance(ctx, st, "inst10", 0, 1000)
	require.NoError(t, err)
	b := subjects.Batch{V: subjects.SchemaVersion, Cluster: cluster, Instance: "inst10", Group: seed.GroupRedis, Store: "x", Round: 1, Parts: 1}
	for _, en := range page.Entries {
		b.Blocks = append(b.Blocks, subjects.BlockEntry{Key: en.BlockKey, URI: subjects.RawText(en.URI), LRUTime: en.LRUTime})
	}
	data, err := subjects.Encode(b)
	require.NoError(t, err)
	_, err = e.js.Publish(ctx, e.names.BatchSubject("inst1"), data)
	require.NoError(t, err)
	req := subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: cluster, Instance: "inst10", Store: "x", Source: subjects.Source{Stream: "s", Seq: 1},
		Targets: []subjects.Target{{Key: page.Entries[0].BlockKey, Location: "abcdefgh", Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(`{"id":"abcdefgh","status":2}`)}}}
	data, err = subjects.Encode(req)
	require.NoError(t, err)
	_, err = e.js.Publish(ctx, e.names.DeleteSubject("inst1"), data)
	require.NoError(t, err)

	e.run(o, app.Stages{Prober: true, Deleter: true})
	e.waitConsumer(e.names.BatchesStream(), e.names.ProberConsumer(), time.Minute)
	e.waitConsumer(e.names.DeletesStream(), e.names.DeleterConsumer(), time.Minute)
	poison := 0
	for _, ev := range e.events() {
		if ev.Kind == subjects.EventPoison {
			poison++
			require.Contains(t, ev.Reason, "inst10")
		}
		require.NotEqual(t, subjects.EventCandidate, ev.Kind)
		require.NotEqual(t, subjects.EventDelete, ev.Kind)
	}
	require.Equal(t, 2, poison)
	e.requireUnchanged(t, before)
}

// TestSameKeyAndLocationInTwoInstances (invariant 4): two instances holding the same block key
// with the same location id are two locations. Both orphan, each is deleted by a delete of
// its own, under its own instance, with its own files; where only one instance's is garbage,
// the other's stays byte for byte with its file.
func TestSameKeyAndLocationInTwoInstances(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		rdb := e.redis.Client()
		insts := []string{"inst1", "inst2"}
		_, err := seed.Generate(ctx, rdb, seed.Spec{Cluster: cluster, Layout: layout, Instances: insts, Blocks: 0, Root: e.root, MetaURI: e.redis.URI()})
		require.NoError(t, err)
		nfs := filepath.Join(e.root, "nfs") + "/"
		const both, one, id = int64(4_200_000_001), int64(4_200_000_002), "same0001"
		old := time.Now().Add(-48 * time.Hour)
		type loc struct {
			inst string
			key  int64
			json string
			file string
			gone bool
		}
		var locs []loc
		for _, b := range []struct {
			key    int64
			status map[string]kvcm.Status
		}{
			{both, map[string]kvcm.Status{"inst1": kvcm.StatusWriting, "inst2": kvcm.StatusWriting}},
			{one, map[string]kvcm.Status{"inst1": kvcm.StatusWriting, "inst2": kvcm.StatusServing}},
		} {
			for _, inst := range insts {
				f := writeFile(t, perBlockPath(nfs, inst, "tp0", b.key))
				l := loc{inst: inst, key: b.key, file: f, gone: b.status[inst] == kvcm.StatusWriting,
					json: locJSON(layout, id, b.status[inst], kvcm.TypeFile, old.UnixMicro(), fileSpec("tp0", f))}
				require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey(inst, b.key), blockFields(layout, old, id, l.json)...).Err())
				locs = append(locs, l)
			}
		}

		e.run(e.options(prometheus.NewRegistry()), app.All)
		e.waitRoundDone(1, time.Minute)

		deletes := map[string]int{} // instance/key -> deleted targets of id
		for _, ev := range e.events() {
			if ev.Kind != subjects.EventDelete || ev.Key == nil || ev.Location != id {
				continue
			}
			require.Equal(t, subjects.OutcomeDeleted, ev.Outcome, "%s/%d: %s", ev.Instance, *ev.Key, ev.Detail)
			deletes[fmt.Sprintf("%s/%d", ev.Instance, *ev.Key)]++
		}
		want := map[string]int{}
		for _, l := range locs {
			fields := rdb.HGetAll(ctx, kvcm.BlockKey(l.inst, l.key)).Val()
			got, ok := locationOf(fields, fieldOf(layout, id), id)
			what := fmt.Sprintf("%s/%d", l.inst, l.key)
			if !l.gone {
				require.True(t, ok, what)
				require.Equal(t, l.json, string(got.Raw), what)
				require.FileExists(t, l.file, what)
				continue
			}
			want[what] = 1
			require.False(t, ok, what)
			require.NoFileExists(t, l.file, what)
		}
		require.Equal(t, want, deletes, "one delete per instance's location, none across instances")
		require.Len(t, want, 3)
	})
}

// Invariant 5: the scanner (and the prober) run as a Redis user that may not write, and the
// whole round issues no write command; nothing but targets changes (checked byte for byte
// by the full-round test).
func TestInvariant5ScannerReadOnly(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		_, before := e.seed(seed.Spec{Layout: layout, Ambiguous: true, Blocks: 500, GarbageFraction: 0.2, TrickyFraction: 0.1, Seed: 5})
		e.redis.AddUser(t, "gc-reader", "pw", "~*", "+@read", "+ping", "+hello", "+client", "+select", "-@write", "-@scripting")
		o := e.options(prometheus.NewRegistry())
		o.Registry.Username, o.Registry.Password = "gc-reader", "pw"
		o.Meta.Username, o.Meta.Password = "gc-reader", "pw"
		writes := func() int64 {
			var n int64
			for cmd, calls := range e.redis.CommandStats(t) {
				switch cmd {
				case "hset", "hdel", "del", "set", "unlink", "evalsha", "eval", "hsetnx", "expire", "rename":
					n += calls
				}
			}
			return n
		}
		w0 := writes()
		e.run(o, app.Stages{Scanner: true, Prober: true})
		ck := e.waitRoundEnded(1, time.Minute)
		e.waitConsumer(e.names.BatchesStream(), e.names.ProberConsumer(), time.Minute)
		require.Equal(t, uint64(500), ck.LastRoundKeys)
		require.Equal(t, w0, writes(), "no write command during a scan and probe round")
		e.requireUnchanged(t, before)
		// The delete requests exist: the round found garbage without writing anything.
		s, err := e.js.Stream(ctx, e.names.DeletesStream())
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		require.Positive(t, info.State.Msgs)
	})
}

// Invariant 6: a deleter that dies after its CAS and before its CAD loses nothing: the
// request is redelivered, the next delivery resumes from its own DELETING, and nothing is
// left DELETING.
func TestInvariant6DeleterCrashAfterCAS(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		m, before := e.seed(seed.Spec{Layout: layout, Blocks: 300, GarbageFraction: 0.3, Seed: 6})
		o := e.options(prometheus.NewRegistry())
		e.judgeOneRound(o)

		// A deleter whose first delivery stops dead after step 2 (as a kill would): no CAD, no
		// ack, no nak.
		reg := prometheus.NewRegistry()
		metrics := pipeline.NewMetrics(reg)
		conn, err := redismeta.ParseURI(e.redis.URI())
		require.NoError(t, err)
		pool := redismeta.NewPool(redismeta.PoolOptions{Defaults: conn})
		t.Cleanup(func() { _ = pool.Close() })
		events, err := pipeline.NewEventLog(pipeline.EventLogConfig{Names: e.names}, pipeline.EventLogDeps{JS: e.js, Metrics: metrics})
		require.NoError(t, err)
		d, err := deleter.New(o.Deleter, deleter.Deps{Names: e.names, Stores: pool, StorageOptions: o.Storage,
			Metrics: deleter.NewMetrics(reg, metrics), Events: events})
		require.NoError(t, err)
		var crashed atomic.Bool
		crashedKeys := make(chan subjects.DeleteRequest, 1)
		handler := func(ctx context.Context, msg jetstream.Msg) error {
			if crashed.CompareAndSwap(false, true) {
				req, err := subjects.DecodeDeleteRequest(msg.Data())
				require.NoError(t, err)
				st, err := pool.Store(req.Store)
				require.NoError(t, err)
				// Steps 1–2 of the protocol (the CAS to DELETING) for every target, in the layout
				// it was judged in, then the crash.
				for _, tg := range req.Targets {
					require.NoError(t, casToDeleting(ctx, st, req.Instance, tg))
				}
				crashedKeys <- req
				runtime.Goexit()
			}
			return d.Handle(ctx, msg)
		}
		cons, err := e.js.Consumer(ctx, e.names.DeletesStream(), e.names.DeleterConsumer())
		require.NoError(t, err)
		c, err := pipeline.NewConsumer(pipeline.ConsumerConfig{Stage: pipeline.StageDeleter, Workers: 1},
			pipeline.ConsumerDeps{Consumer: cons, Handle: handler, Metrics: metrics})
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(cctx) }()
		t.Cleanup(func() { cancel(); <-done })

		req := <-crashedKeys
		// The crash left our DELETING behind.
		tg := req.Targets[0]
		require.Equal(t, layout == kvcm.LayoutLocation, tg.Layout == subjects.LayoutLocation, "judged in the key's layout")
		fields := e.redis.Client().HGetAll(ctx, kvcm.BlockKey(req.Instance, tg.Key)).Val()
		l, ok := locationOf(fields, fieldOf(layout, tg.Location), tg.Location)
		require.True(t, ok)
		require.Equal(t, kvcm.StatusDeleting, l.Status)

		// Redelivery after AckWait resumes and finishes.
		e.waitConsumer(e.names.DeletesStream(), e.names.DeleterConsumer(), time.Minute)
		r := e.verify(before, m)
		require.Zero(t, r.StrandedDeleting)
		resumed := 0
		for _, ev := range e.events() {
			if ev.Kind == subjects.EventDelete && ev.Outcome == subjects.OutcomeDeleted && strings.Contains(ev.Detail, "resumed from DELETING") {
				resumed++
			}
		}
		require.Equal(t, len(req.Targets), resumed, "every target of the crashed request resumed from DELETING")
	})
}

// casToDeleting is the deleter's steps 1–2 for one target, in the layout it was judged in:
// read the block, check the location holds the judged bytes, CAS it to DELETING (legacy: the
// whole __uri__; location layout: its L# field).
func casToDeleting(ctx context.Context, st meta.Store, inst string, tg subjects.Target) error {
	reads, err := st.ReadBlocks(ctx, inst, []int64{tg.Key})
	if err != nil {
		return err
	}
	en := reads[0].Entry
	w := meta.CondWrite{BlockKey: tg.Key, Layout: kvcm.LayoutLegacy}
	if tg.Layout == subjects.LayoutLocation {
		cur, ok := en.Location(tg.Location)
		if !ok || string(cur) != string(tg.Expected) {
			return fmt.Errorf("block %d location %s: not the judged bytes", tg.Key, tg.Location)
		}
		next, err := kvcm.LocationWithStatus(cur, kvcm.StatusDeleting)
		if err != nil {
			return err
		}
		w.Layout, w.Location, w.Expected, w.Next = kvcm.LayoutLocation, tg.Location, cur, next
	} else {
		blk, err := kvcm.DecodeBlock(en.URI)
		if err != nil {
			return err
		}
		if l, ok := blk.Find(tg.Location); !ok || string(l.Raw) != string(tg.Expected) {
			return fmt.Errorf("block %d location %s: not the judged bytes", tg.Key, tg.Location)
		}
		next, err := blk.WithStatus(tg.Location, kvcm.StatusDeleting)
		if err != nil {
			return err
		}
		w.Expected, w.Next = en.URI, next
	}
	errs, err := st.CASMany(ctx, inst, []meta.CondWrite{w})
	if err != nil {
		return err
	}
	return errs[0]
}

// Invariant 6, scanner side: the store's holder dies mid-round (its connection cut, lease not
// released); the other scanner takes over after the lease TTL and resumes from the checkpoint.
// What the invariant says, whatever the deleter removes meanwhile: every key of the round is
// batched; the new holder starts from the dead one's checkpoint (same round, its count); no
// page is published by both but the one page the dead holder had not recorded; batches are
// fenced (the lease revision never goes back in stream order). The duplicate window is short,
// so a page published twice stays visible in the stream instead of being dropped.
func TestInvariant6ScannerFailoverResumes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := e.seed(seed.Spec{Instances: []string{"inst1", "inst2"}, Blocks: 1500, GarbageFraction: 0.1, Seed: 7})
	o := e.options(prometheus.NewRegistry())
	o.Scanner.ScanInterval = 15 * time.Millisecond
	o.Scanner.ScanBatchSize = 32
	o.JetStream.Duplicates = 100 * time.Millisecond
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
	e.run(o, app.Stages{Prober: true, Deleter: true})

	// Every checkpoint written, in order (a watch misses none of the dead holder's: the
	// next holder writes only a lease TTL after the last of them).
	store := strings.TrimPrefix(e.redis.URI(), "redis://")
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(t, err)
	w, err := kv.Watch(ctx, subjects.CheckpointKey(store), jetstream.UpdatesOnly())
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	var mu sync.Mutex
	var written []pipeline.Checkpoint
	go func() {
		for en := range w.Updates() {
			if en == nil || en.Operation() != jetstream.KeyValuePut {
				continue
			}
			var c pipeline.Checkpoint
			if json.Unmarshal(en.Value(), &c) == nil {
				mu.Lock()
				written = append(written, c)
				mu.Unlock()
			}
		}
	}()

	nc1, err := nats.Connect(e.srv.ClientURL())
	require.NoError(t, err)
	o1 := o
	o1.Scanner.Holder = "scanner-a"
	o1.Reg = prometheus.NewRegistry()
	ctx1, cancel1 := context.WithCancel(ctx)
	done1 := make(chan struct{})
	go func() { defer close(done1); _ = app.Run(ctx1, nc1, o1, app.Stages{Scanner: true}) }()
	t.Cleanup(func() { cancel1(); <-done1 })

	require.Eventually(t, func() bool {
		ck, _, err := scanner.ReadCheckpoint(ctx, kv)
		return err == nil && ck.KeysScanned > 600
	}, time.Minute, 5*time.Millisecond)
	o2 := o
	o2.Scanner.Holder = "scanner-b"
	e.run(o2, app.Stages{Scanner: true})
	nc1.Close() // the holder is gone without releasing its lease

	ck := e.waitRoundEnded(1, time.Minute)
	require.Equal(t, "scanner-b", ck.Holder)

	// The new holder went on from the dead one's last checkpoint.
	mu.Lock()
	var lastA, firstB *pipeline.Checkpoint
	for i := range written {
		switch c := &written[i]; c.Holder {
		case "scanner-a":
			require.Nil(t, firstB, "scanner-a wrote after scanner-b took over")
			lastA = c
		case "scanner-b":
			if firstB == nil {
				firstB = c
			}
		}
	}
	mu.Unlock()
	require.NotNil(t, lastA)
	require.NotNil(t, firstB)
	require.True(t, lastA.InRound, "killed mid-round")
	require.Equal(t, lastA.Round, firstB.Round, "resumed, not a new round")
	require.GreaterOrEqual(t, firstB.KeysScanned, lastA.KeysScanned, "resumed from the checkpoint, not restarted")

	// Fencing, and no page published twice but the one after the dead holder's checkpoint
	// (read by it, not recorded, read again by the new holder).
	pages := readPages(t, e.js, e.names)[store]
	require.NotEmpty(t, pages)
	times := map[string]int{}
	for i, p := range pages {
		if i > 0 {
			require.GreaterOrEqual(t, p.LeaseRev, pages[i-1].LeaseRev, "batch %d", i)
		}
		times[fmt.Sprintf("%d/%d/%s/%d", p.Round, p.Cursor, p.Instance, p.Part)]++
	}
	for id, n := range times {
		if n > 1 {
			require.Equal(t, 2, n, "page %s", id)
			require.True(t, strings.HasPrefix(id, fmt.Sprintf("%d/%d/", lastA.Round, lastA.Cursor)),
				"page %s published again, past the checkpoint (round %d, cursor %d)", id, lastA.Round, lastA.Cursor)
		}
	}

	// Every key of the round is batched.
	got := map[string]bool{}
	for _, p := range pages {
		if p.Round == 1 {
			for _, k := range p.keys {
				got[k] = true
			}
		}
	}
	for k, fields := range before {
		for _, inst := range []string{"inst1", "inst2"} {
			if b, err := kvcm.ParseBlockKey(inst, k); err == nil && fields["__uri__"] != "" {
				require.True(t, got[fmt.Sprintf("%s/%d", inst, b)], "%s never batched", k)
			}
		}
	}

	e.waitConsumer(e.names.BatchesStream(), e.names.ProberConsumer(), time.Minute)
	e.waitConsumer(e.names.DeletesStream(), e.names.DeleterConsumer(), time.Minute)
	e.verify(before, m)
}

// Invariant 7: deletes in flight never exceed max_inflight_delete_requests across all
// deleter replicas, a full window stops scanning, and an error path does not spin.
func TestInvariant7InflightCap(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, before := e.seed(seed.Spec{Blocks: 400, GarbageFraction: 0.3, Seed: 8})
	o := e.options(prometheus.NewRegistry())
	o.Scanner.ScanBatchSize = 8 // many small requests: a burst
	o.Prober.MaxTargets = 16    // two locations per block: no candidate is left over the cap
	e.judgeOneRound(o)

	o.Deleter.DeleteDelay = 150 * time.Millisecond
	o.DeleterWorkers = 4
	var maxAck, maxDeleting atomic.Int64
	pollCtx, pollStop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for pollCtx.Err() == nil {
			if c, err := e.js.Consumer(ctx, e.names.DeletesStream(), e.names.DeleterConsumer()); err == nil {
				if info, err := c.Info(ctx); err == nil && int64(info.NumAckPending) > maxAck.Load() {
					maxAck.Store(int64(info.NumAckPending))
				}
			}
			// One MULTI/EXEC: a snapshot of every garbage block at one instant, so a request
			// that ends during the reads is not counted with the one that starts after it.
			garbage := m.Garbage()
			cmds := make([]*redis.StringCmd, len(garbage))
			_, err := e.redis.Client().TxPipelined(ctx, func(p redis.Pipeliner) error {
				for i, l := range garbage {
					cmds[i] = p.HGet(ctx, kvcm.BlockKey(l.Instance, l.Key), "__uri__")
				}
				return nil
			})
			if err == nil || errors.Is(err, redis.Nil) { // a deleted block reads as redis.Nil; other errors: no sample
				n := int64(0)
				for i, l := range garbage {
					if strings.Contains(cmds[i].Val(), fmt.Sprintf(`"%s":{"id":"%s","status":4`, l.Location, l.Location)) {
						n++
					}
				}
				if n > maxDeleting.Load() {
					maxDeleting.Store(n)
				}
			}
			time.Sleep(10 * time.Millisecond) // a sampling period, not a wait for a condition
		}
	}()
	for i := 0; i < 3; i++ { // three deleter replicas with four workers each
		nc, err := nats.Connect(e.srv.ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		ctxR, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		oi := o
		oi.Reg = prometheus.NewRegistry()
		go func() { defer close(done); _ = app.Run(ctxR, nc, oi, app.Stages{Deleter: true}) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	e.waitConsumer(e.names.DeletesStream(), e.names.DeleterConsumer(), 2*time.Minute)
	pollStop()
	wg.Wait()
	e.verify(before, m)
	cap := int64(o.JetStream.DeleterMaxAckPending)
	require.LessOrEqual(t, maxAck.Load(), cap)
	require.Equal(t, cap, maxAck.Load(), "the burst fills the window")
	// Each request carries up to MaxTargets targets, all DELETING during its delete_delay.
	require.LessOrEqual(t, maxDeleting.Load(), cap*int64(o.Prober.MaxTargets), "locations in DELETING at once")
	require.Positive(t, maxDeleting.Load())
	t.Logf("max ack pending %d, max DELETING at once %d, cap %d", maxAck.Load(), maxDeleting.Load(), cap)
}

// TestInvariant7FullWindowStopsScanning: while the DELETES window is full no page is scanned,
// at the fixed pace and at the duty (the default): a held walk looks again every
// max(pipeline.IdleWait, scan_interval), whatever its pace, so both count a skip a tick.
func TestInvariant7FullWindowStopsScanning(t *testing.T) {
	for _, duty := range []float64{0, scanner.DefaultDuty} {
		t.Run(fmt.Sprintf("duty %g", duty), func(t *testing.T) {
			e := newEnv(t)
			e.seed(seed.Spec{Blocks: 2000, GarbageFraction: 0.5, Seed: 9, NoFiles: true})
			reg := prometheus.NewRegistry()
			o := e.options(reg)
			o.Scanner.ScanBatchSize = 16
			o.Scanner.HighWater = 5
			o.Scanner.Duty = duty
			// A walk capped to about 20 pages a second: at the duty alone, an idle machine walks
			// the 2,000 keys in a fraction of a second, and the round ends before the prober has
			// filled the window; the cap keeps pages coming while the backlog grows.
			o.Scanner.MaxKeysPerSecond = 320
			e.run(o, app.Stages{Scanner: true, Prober: true}) // no deleter: the DELETES backlog only grows
			require.Eventually(t, func() bool { return metricValue(t, reg, "kvcm_gc_backpressure_skips_total") > 20 }, time.Minute, 20*time.Millisecond)
			k1 := metricValue(t, reg, "kvcm_gc_scanned_keys_total")
			skips1 := metricValue(t, reg, "kvcm_gc_backpressure_skips_total")
			require.Eventually(t, func() bool { return metricValue(t, reg, "kvcm_gc_backpressure_skips_total") > skips1+20 }, time.Minute, 20*time.Millisecond)
			require.Equal(t, k1, metricValue(t, reg, "kvcm_gc_scanned_keys_total"), "no page scanned while the window is full")
			require.Less(t, k1, float64(2000))
		})
	}
}

func TestInvariant7ErrorsDoNotSpin(t *testing.T) {
	e := newEnv(t)
	e.seed(seed.Spec{Blocks: 10, Seed: 10, NoFiles: true})
	reg := prometheus.NewRegistry()
	o := e.options(reg)
	o.Scanner.ScanInterval = 50 * time.Millisecond
	e.redis.Stop()
	e.run(o, app.Stages{Scanner: true})
	start := time.Now()
	require.Eventually(t, func() bool { return metricValue(t, reg, "kvcm_gc_operation_errors_total") >= 5 }, time.Minute, 20*time.Millisecond)
	time.Sleep(time.Second) // observe the error rate over a fixed window
	elapsed := time.Since(start)
	errs := metricValue(t, reg, "kvcm_gc_operation_errors_total")
	require.LessOrEqual(t, errs, elapsed.Seconds()/0.05+5, "at most one failed tick per scan_interval")
}

// Invariant 8: a dry-run round writes nothing — Redis and the files stay byte-identical —
// and emits a "would delete" event for every garbage location.
func TestInvariant8DryRun(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		m, before := e.seed(seed.Spec{Layout: layout, Blocks: 500, GarbageFraction: 0.2, TrickyFraction: 0.1, Seed: 11})
		e.dryRound(t, e.options(prometheus.NewRegistry()), before)
		for _, l := range m.Locations {
			for _, f := range l.Files {
				require.FileExists(t, f)
			}
		}
		would := 0
		for _, ev := range e.events() {
			if ev.Kind == subjects.EventDelete {
				require.Equal(t, subjects.OutcomeWouldDelete, ev.Outcome)
				require.True(t, ev.DryRun)
				would++
			}
		}
		require.Equal(t, len(m.Garbage()), would)
	})
}

// dryRound runs every stage with o as a dry run until round 1 is done and requires every byte
// of Redis to be as before.
func (e *env) dryRound(t *testing.T, o app.Options, before seed.Snapshot) {
	t.Helper()
	o.DryRun = true
	e.run(o, app.All)
	e.waitRoundDone(1, time.Minute)
	e.requireUnchanged(t, before)
}

// requireUnchanged requires every byte of Redis to be as before.
func (e *env) requireUnchanged(t *testing.T, before seed.Snapshot) {
	t.Helper()
	after, err := seed.Take(context.Background(), e.redis.Client(), "*")
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// Invariant 9: a key is judged and written only in the layout it was read in; a key holding
// both layouts (a block written before and after an upgrade) is judged by nothing and written
// by nothing. A real round over a keyspace with such keys leaves each byte for byte and
// reports it (a skip event naming the key); a key that turns ambiguous after the prober
// judged it, or between the deleter's read and its CAS, is not written either.
func TestInvariant9AmbiguousNeverWritten(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		rdb := e.redis.Client()
		m, _ := e.seed(seed.Spec{Layout: layout, Ambiguous: true, Blocks: 400, GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 91})
		require.NotEmpty(t, m.Ambiguous)
		reg := prometheus.NewRegistry()
		o := e.options(reg)
		e.judgeOneRound(o)

		// After the probe, the other KVCM version writes two judged blocks: today's KVCM adds
		// an L# field to a legacy key (it reads no L# field, sees the key exist: no
		// BP#prev_key), or KVCM f6aa2b2 writes __uri__ and __lru_time__ into a location-layout
		// key. Both are ambiguous now.
		turned := map[string]bool{}
		for _, l := range []seed.Loc{firstGarbage(m, seed.KindOrphanWriting, 0), firstGarbage(m, seed.KindMissingServing, 0)} {
			k := kvcm.BlockKey(l.Instance, l.Key)
			if layout == kvcm.LayoutLegacy {
				require.NoError(t, rdb.HSet(ctx, k, kvcm.LocationField("upgr0000"),
					locJSON(kvcm.LayoutLocation, "upgr0000", kvcm.StatusWriting, kvcm.TypeFile, time.Now().UnixMicro())).Err())
			} else {
				require.NoError(t, rdb.HSet(ctx, k, kvcm.FieldURI, `{"down0000":`+locJSON(kvcm.LayoutLegacy, "down0000", kvcm.StatusWriting, kvcm.TypeFile, 0)+`}`,
					kvcm.FieldLRUTime, strconv.FormatInt(time.Now().UnixMicro(), 10)).Err())
			}
			turned[k] = true
		}
		for i := range m.Locations {
			if turned[kvcm.BlockKey(m.Locations[i].Instance, m.Locations[i].Key)] {
				m.Locations[i].Garbage = false
			}
		}
		before, err := seed.Take(ctx, rdb, "*")
		require.NoError(t, err)
		e.run(o, app.Stages{Deleter: true})
		e.waitConsumer(e.names.DeletesStream(), e.names.DeleterConsumer(), time.Minute)
		r := e.verify(before, m)
		require.Equal(t, r.AmbiguousKeys, r.AmbiguousIntact)
		require.Equal(t, len(m.Ambiguous)+len(turned), r.AmbiguousKeys, "the seeded upgraded keys and the two turned ambiguous")
		require.Positive(t, r.GarbageGone, "the rest is collected")

		reported := map[string]bool{}
		for _, ev := range e.events() {
			switch {
			case ev.Kind == subjects.EventSkip && ev.Reason == prober.SkipAmbiguousLayout:
				require.NotNil(t, ev.Key)
				reported[kvcm.BlockKey(ev.Instance, *ev.Key)] = true
			case ev.Kind == subjects.EventDelete && turned[kvcm.BlockKey(ev.Instance, *ev.Key)]:
				require.Equal(t, subjects.OutcomeNoopMismatch, ev.Outcome, ev.Detail)
				require.Contains(t, ev.Detail, "layout")
			}
		}
		for _, k := range m.Ambiguous {
			require.True(t, reported[k], "ambiguous key %s not reported", k)
		}
		require.GreaterOrEqual(t, metricLabeled(t, reg, "kvcm_gc_prober_skips_total", map[string]string{"reason": prober.SkipAmbiguousLayout}),
			float64(len(m.Ambiguous)))

		// The last moment: the key turns ambiguous between the deleter's read and its CAS.
		key := int64(9_900_000_001)
		k := kvcm.BlockKey("inst1", key)
		orphan := locJSON(layout, "late0000", kvcm.StatusWriting, kvcm.TypeFile, time.Now().Add(-48*time.Hour).UnixMicro())
		require.NoError(t, rdb.HSet(ctx, k, blockFields(layout, time.Now().Add(-48*time.Hour), "late0000", orphan)...).Err())
		var ambiguous map[string]string
		st := &racingStore{Store: e.store(), mutate: func() {
			if layout == kvcm.LayoutLegacy {
				rdb.HSet(ctx, k, kvcm.LocationField("upgr0001"), locJSON(kvcm.LayoutLocation, "upgr0001", kvcm.StatusWriting, kvcm.TypeFile, time.Now().UnixMicro()))
			} else {
				rdb.HSet(ctx, k, kvcm.FieldURI, "{}", kvcm.FieldLRUTime, strconv.FormatInt(time.Now().UnixMicro(), 10))
			}
			ambiguous = rdb.HGetAll(ctx, k).Val()
		}}
		res, err := deleter.NewProtocol(deleter.DefaultConfig()).DeleteAll(ctx, st, fakeNoStorage{}, "inst1",
			[]subjects.Target{{Key: key, Location: "late0000", Layout: layout.String(), Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(orphan)}})
		require.NoError(t, err)
		require.Equal(t, subjects.OutcomeNoopMismatch, res[0].Outcome, res[0].Detail)
		require.Contains(t, res[0].Detail, "layout")
		require.Equal(t, ambiguous, rdb.HGetAll(ctx, k).Val(), "the CAS script refused the key in its new layout")
	})
}

// Invariant 10: kvcm-gc never makes KVCM's key count worse than it would be without kvcm-gc.
// With empty_block: keep (the default) a key that loses its last location stays in a form
// KVCM reads as "exists, no location" — legacy, __uri__ = {} beside the untouched
// __lru_time__; location layout, its other fields, or BP#prev_key = "" where none would
// remain — and no key is deleted. With delete, every such key is gone and counted
// (kvcm_gc_deleted_keys_total{kvcm_instance}, deleted_keys.<instance> in the state bucket).
func TestInvariant10EmptyBlock(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		for _, mode := range []meta.EmptyBlock{meta.EmptyBlockKeep, meta.EmptyBlockDelete} {
			name, verifyMode := seed.EmptyKeep, seed.EmptyKeep
			if mode == meta.EmptyBlockDelete {
				name, verifyMode = seed.EmptyDelete, seed.EmptyDelete
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				ctx := context.Background()
				rdb := e.redis.Client()
				m, before := e.seed(seed.Spec{Layout: layout, Instances: []string{"inst1", "inst2"}, Blocks: 200,
					GarbageFraction: 0.5, TrickyFraction: 0.1, Seed: 101})
				reg := prometheus.NewRegistry()
				o := e.options(reg)
				o.EmptyBlock = mode
				e.run(o, app.All)
				e.waitRoundDone(1, time.Minute)
				r, err := seed.VerifyWith(ctx, rdb, before, m, seed.VerifyOptions{EmptyBlock: verifyMode})
				require.NoError(t, err)
				require.True(t, r.OK(), "verification: %+v", r)
				require.Positive(t, r.EmptyKeys)

				// The keys that lost every location, by the manifest.
				all, garbage := map[string]int{}, map[string]int{}
				for _, l := range m.Locations {
					k := kvcm.BlockKey(l.Instance, l.Key)
					all[k]++
					if l.Garbage {
						garbage[k]++
					}
				}
				deleted := metricValue(t, reg, "kvcm_gc_deleted_keys_total")
				emptied := 0
				for k, n := range garbage {
					if n != all[k] {
						continue
					}
					emptied++
					got := rdb.HGetAll(ctx, k).Val()
					if mode == meta.EmptyBlockDelete {
						require.Empty(t, got, "%s: deleted (empty_block: delete)", k)
						continue
					}
					// What KVCM itself reads as "exists, no location".
					require.NotEmpty(t, got, "%s: kept", k)
					if layout == kvcm.LayoutLegacy {
						require.Equal(t, "{}", got[kvcm.FieldURI], k)
						require.Equal(t, before[k][kvcm.FieldLRUTime], got[kvcm.FieldLRUTime], "%s: __lru_time__ untouched", k)
						continue
					}
					for f, v := range got {
						_, isLoc := kvcm.LocationID(f)
						require.False(t, isLoc && v != "", "%s: a location left in %s", k, f)
						if want, ok := before[k][f]; ok {
							require.Equal(t, want, v, "%s: field %s", k, f)
						} else {
							require.Equal(t, map[string]string{kvcm.FieldPrevKey: ""}, got, "%s: only BP#prev_key = \"\" added, where no field would remain", k)
						}
					}
				}
				require.Equal(t, r.EmptyKeys, emptied)
				if mode == meta.EmptyBlockKeep {
					require.Zero(t, deleted, "no key deleted")
					require.Equal(t, r.EmptyKeys, r.EmptyKept)
					return
				}
				require.Equal(t, float64(r.EmptyKeys), deleted, "every deleted key counted")
				require.Equal(t, r.EmptyKeys, r.EmptyDeleted)
				kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
				require.NoError(t, err)
				var sum uint64
				byInstance := map[string]float64{}
				for _, inst := range m.Instances {
					en, err := kv.Get(ctx, deleter.DeletedKeysKey(inst))
					if errors.Is(err, jetstream.ErrKeyNotFound) {
						continue
					}
					require.NoError(t, err)
					var c deleter.DeletedKeys
					require.NoError(t, json.Unmarshal(en.Value(), &c))
					sum += c.Keys
					byInstance[inst] = float64(c.Keys)
				}
				require.Equal(t, uint64(r.EmptyKeys), sum, "deleted_keys in the state bucket")
				// The label is kvcm_instance: Prometheus's own target label is instance.
				require.Equal(t, byInstance, metricByLabel(t, reg, "kvcm_gc_deleted_keys_total", "kvcm_instance"))
			})
		}
	})
}

// Invariant 11: data is unlinked only where no location of the block, in any status, names it
// at the moment of the unlink, and for a stuck DELETING only where the name cannot have been
// reused: KVCM's per-block file name <root><instance>/<spec>/<hex block key>. Everywhere else
// only the metadata goes, and the data left is counted by reason.
func TestInvariant11DataNamedElsewhereStays(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout kvcm.Layout) {
		e := newEnv(t)
		ctx := context.Background()
		rdb := e.redis.Client()
		now := time.Now()
		_, err := seed.Generate(ctx, rdb, seed.Spec{Cluster: cluster, Layout: layout, Instances: []string{"inst1"}, Blocks: 0, Root: e.root, MetaURI: e.redis.URI()})
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		o := e.options(reg)
		o.Prober.CollectDeleting, o.Prober.DeletingGrace = true, 2*time.Hour
		require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))
		nfs, shared := filepath.Join(e.root, "nfs")+"/", filepath.Join(e.root, "shared")+"/"
		old, young, stuck := now.Add(-30*time.Hour), now.Add(-30*time.Minute), now.Add(-3*time.Hour)

		type loc struct {
			id     string
			json   string
			goes   bool
			files  []string // that must stay
			unlink []string // that must go
		}
		type block struct {
			key  int64
			lru  time.Time
			locs []loc
		}
		key := func(i int) int64 { return int64(9_800_000_000 + i) }
		f := func(i int, suffix string) string {
			return writeFile(t, perBlockPath(nfs, "inst1", "tp0", key(i))+suffix)
		}
		spec := func(path string) string { return fileSpec("tp0", path) }
		var blocks []block
		// Orphan WRITING whose file a SERVING location of the block names.
		f1 := f(1, "")
		blocks = append(blocks, block{key(1), old, []loc{
			{id: "orph0001", json: locJSON(layout, "orph0001", kvcm.StatusWriting, kvcm.TypeFile, old.UnixMicro(), spec(f1)), goes: true, files: []string{f1}},
			{id: "serv0001", json: locJSON(layout, "serv0001", kvcm.StatusServing, kvcm.TypeFile, young.UnixMicro(), spec(f1)), files: []string{f1}},
		}})
		// Storage-missing SERVING whose present spec a young WRITING of the block names.
		f2, f3 := f(2, ""), perBlockPath(nfs, "inst1", "tp1", key(2))
		blocks = append(blocks, block{key(2), young, []loc{
			{id: "miss0002", json: locJSON(layout, "miss0002", kvcm.StatusServing, kvcm.TypeFile, old.UnixMicro(), spec(f2), fileSpec("tp1", f3)), goes: true, files: []string{f2}},
			{id: "writ0002", json: locJSON(layout, "writ0002", kvcm.StatusWriting, kvcm.TypeFile, young.UnixMicro(), spec(f2)), files: []string{f2}},
		}})
		// An orphan whose file nothing else names: unlinked (the rule is live).
		f4 := f(3, "")
		blocks = append(blocks, block{key(3), old, []loc{
			{id: "orph0003", json: locJSON(layout, "orph0003", kvcm.StatusWriting, kvcm.TypeFile, old.UnixMicro(), spec(f4)), goes: true, unlink: []string{f4}},
		}})
		// Stuck DELETING: a per-block name goes with the metadata, nothing else does.
		deleting := func(i int, typ kvcm.StorageType, specs ...string) string {
			return locJSON(layout, fmt.Sprintf("dele%04d", i), kvcm.StatusDeleting, typ, old.UnixMicro(), specs...)
		}
		f5, f6, f7 := f(4, ""), f(5, "_other"), f(6, "")
		f8 := writeFile(t, shared+"inst1/tp0/"+strconv.FormatUint(uint64(key(7)), 16)+"_s")
		f9 := writeFile(t, perBlockPath(nfs, "inst1", "tp0", key(9)+1000)) // another block's name
		blocks = append(blocks,
			block{key(4), stuck, []loc{{id: "dele0004", json: deleting(4, kvcm.TypeFile, spec(f5)), goes: true, unlink: []string{f5}}}},
			block{key(5), stuck, []loc{{id: "dele0005", json: deleting(5, kvcm.TypeFile, spec(f6)), goes: true, files: []string{f6}}}},
			block{key(6), stuck, []loc{
				{id: "dele0006", json: deleting(6, kvcm.TypeFile, spec(f7)), goes: true, files: []string{f7}},
				{id: "serv0006", json: locJSON(layout, "serv0006", kvcm.StatusServing, kvcm.TypeFile, young.UnixMicro(), spec(f7)), files: []string{f7}},
			}},
			block{key(7), stuck, []loc{{id: "dele0007", json: deleting(7, kvcm.TypeFile,
				fmt.Sprintf(`{"name":"tp0","uri":"file://%s%s?blkid=1&size=1024"}`, seed.StorageShared, f8)), goes: true, files: []string{f8}}}},
			block{key(8), stuck, []loc{{id: "dele0008", json: deleting(8, kvcm.TypeMooncake,
				fmt.Sprintf(`{"name":"tp0","uri":"mooncake://%s/?key=inst1/tp0/%x&size=1024"}`, seed.StorageMooncake, uint64(key(8)))), goes: true}}},
			block{key(9), stuck, []loc{{id: "dele0009", json: deleting(9, kvcm.TypeFile, spec(f9)), goes: true, files: []string{f9}}}},
		)
		for _, b := range blocks {
			var pairs []string
			for _, l := range b.locs {
				pairs = append(pairs, l.id, l.json)
			}
			require.NoError(t, rdb.HSet(ctx, kvcm.BlockKey("inst1", b.key), blockFields(layout, b.lru, pairs...)...).Err())
			if layout == kvcm.LayoutLocation {
				for _, l := range b.locs {
					if strings.HasPrefix(l.id, "dele") { // DELETING for three hours, as the prober saw it
						e.observeDeleting(t, "inst1", b.key, l.id, []byte(l.json), stuck, 0)
					}
				}
			}
		}

		e.run(o, app.All)
		e.waitRoundDone(1, time.Minute)
		for _, b := range blocks {
			fields := rdb.HGetAll(ctx, kvcm.BlockKey("inst1", b.key)).Val()
			for _, l := range b.locs {
				got, there := locationOf(fields, fieldOf(layout, l.id), l.id)
				if l.goes {
					require.False(t, there, "%s goes", l.id)
				} else {
					require.True(t, there, "%s stays", l.id)
					require.Equal(t, l.json, string(got.Raw), "%s byte for byte", l.id)
				}
				for _, p := range l.files {
					require.FileExists(t, p, "%s: data another location names, or whose name may have been reused", l.id)
				}
				for _, p := range l.unlink {
					require.NoFileExists(t, p, "%s: its data", l.id)
				}
			}
		}
		// The data left, by reason: at least each one above (a redelivered request may count
		// again), and no other reason.
		want := map[string]float64{deleter.DataLeftNotPerBlock: 2, deleter.DataLeftReferenced: 1, deleter.DataLeftShared: 1,
			deleter.DataLeftReusable: 1}
		left := metricByLabel(t, reg, "kvcm_gc_stuck_deleting_data_left_total", "reason")
		for reason, n := range want {
			require.GreaterOrEqual(t, left[reason], n, "data left for %s", reason)
		}
		for reason, n := range left {
			require.True(t, want[reason] > 0 || n == 0, "data left for %s", reason)
		}
		require.GreaterOrEqual(t, metricLabeled(t, reg, "kvcm_gc_physical_delete_skips_total", map[string]string{"reason": deleter.PhysSkipReferenced}), 3.0)
	})
}
