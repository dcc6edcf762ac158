package test

// Poison input: messages that can never be processed, injected into each stream ahead of a
// full round, and metadata KVCM itself could not use, in Redis. Each is terminated (JetStream
// Term, a poison event naming its stream sequence, kvcm_gc_messages_total{result="term"}) or
// skipped with a counted reason; the valid messages behind the poison are processed in the
// same run, and nothing but garbage is deleted.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/faults"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// poisonMsg is one message injected into a stream.
type poisonMsg struct {
	name    string
	subject string
	data    []byte
	seq     uint64 // stream sequence, once published
}

// oddBlocks writes blocks KVCM could not use, or would use in surprising ways, into Redis
// and returns the expectation for each location it wrote, the files that must survive, and
// how many of each skip reason the round must count at least.
type oddBlocks struct {
	t       *testing.T
	e       *env
	nfsRoot string
	next    int64
	locs    []faults.Loc
	present []string
	skips   map[string]int
	badKeys int
}

const poisonInst = "inst1"

func (o *oddBlocks) key() int64 { o.next++; return 7_000_000_000 + o.next }

func (o *oddBlocks) old() string {
	return strconv.FormatInt(time.Now().Add(-72*time.Hour).UnixMicro(), 10)
}

// block writes one block with the given __uri__ and __lru_time__.
func (o *oddBlocks) block(uri, lru string) string {
	k := kvcm.BlockKey(poisonInst, o.key())
	require.NoError(o.t, o.e.redis.Client().HSet(context.Background(), k, "__uri__", uri, "__lru_time__", lru).Err())
	return k
}

// corrupt writes a block whose __uri__ does not decode: kept, counted as corrupt_uri.
func (o *oddBlocks) corrupt(uri string) {
	o.block(uri, o.old())
	o.skips[prober.SkipCorruptURI]++
}

// serving writes a SERVING file location on nfs_01 whose spec names path (below the
// storage root unless absolute) and returns its key. exists creates the file.
func (o *oddBlocks) serving(fate faults.Fate, exists bool, paths ...string) string {
	id := fmt.Sprintf("odd%05d", o.next)
	var specs []string
	var files []string
	for i, p := range paths {
		full := p
		if !strings.HasPrefix(p, "/") {
			full = o.nfsRoot + p
		}
		u, err := json.Marshal("file://" + seed.StorageNFS + full + "?size=1024")
		require.NoError(o.t, err)
		specs = append(specs, fmt.Sprintf(`{"name":"tp%d","uri":%s}`, i, u))
		if exists {
			require.NoError(o.t, os.MkdirAll(filepath.Dir(full), 0o755))
			require.NoError(o.t, os.WriteFile(full, []byte("kv"), 0o644))
			files = append(files, full)
		}
	}
	uri := fmt.Sprintf(`{%q:{"id":%q,"status":3,"type":4,"spec_size":%d,"location_specs":[%s]}}`, id, id, len(specs), strings.Join(specs, ","))
	k := o.block(uri, o.old())
	o.locs = append(o.locs, faults.Loc{Key: k, ID: id, Fate: fate, Files: files})
	return k
}

func (o *oddBlocks) write() {
	t, ctx, c := o.t, context.Background(), o.e.redis.Client()
	// __uri__ that does not decode.
	for _, uri := range []string{
		`{"a":`,
		`not json at all`,
		`[]`,
		`{"a":5}`,
		"\xff\xfe\x00binary",
		`{"a":{"id":"a","status":2,"type":4,"spec_size":0,"location_specs":[]}`,
		`{"a":{"id":"a","status":2,"type":4,"spec_size":0,"location_specs":[]}}trailing`,
		strings.Repeat("[", 20000),
		`{"a":{"id":"a","status":2},"a":{"id":"a","status":2}}`,
	} {
		o.corrupt(uri)
	}
	// Locations that do not make sense: kept, counted as bad_location.
	for _, loc := range []string{
		`"a":{"id":"b","status":2,"type":4,"spec_size":0,"location_specs":[]}`,
		`"a":{"id":"a","status":"2","type":4,"spec_size":0,"location_specs":[]}`,
		`"a":{"id":"a","status":2,"type":-1,"spec_size":0,"location_specs":[]}`,
		`"a":{"id":"a","status":2,"type":4,"spec_size":0,"location_specs":{}}`,
	} {
		o.block("{"+loc+"}", o.old())
		o.skips[prober.SkipBadLocation]++
	}
	// Orphan-looking WRITING locations whose age cannot be known: kept, counted as
	// age_unknown. A time in the future is clock skew, not age.
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	for _, lru := range []string{"abc", "", "1e6", "-5", "0", "99999999999999999999999", " 123", "0123", future} {
		o.block(`{"w":{"id":"w","status":2,"type":4,"spec_size":0,"location_specs":[]}}`, lru)
		o.skips[prober.SkipAgeUnknown]++
	}
	// Keys of the wrong shape under the instance's pattern: never read further.
	prefix := kvcm.KeyPrefix(poisonInst)
	for _, suffix := range []string{"", "abc", "01", "+1", "-0", "9223372036854775808", "1 ", "1:x", "0x10", "１"} {
		require.NoError(t, c.HSet(ctx, prefix+suffix, "__uri__", `{"w":{"id":"w","status":2,"type":4,"spec_size":0,"location_specs":[]}}`, "__lru_time__", "1").Err())
		o.badKeys++
	}
	require.NoError(t, c.Set(ctx, prefix+"777", "a string, not a hash", 0).Err())
	require.NoError(t, c.RPush(ctx, prefix+"778", "a", "list").Err())
	o.badKeys += 2

	// Storage URIs with odd characters. No percent-decoding: "a%41b" is that very name, so
	// with the file present the location is live even though "aAb" does not exist.
	long := strings.Repeat(strings.Repeat("d", 200)+"/", 15) + "f"
	for _, name := range []string{"a b", "a%41b", "ключ-键-🔑", `q"uo\te`, "new\nline", "tab\there", "semi;colon&amp", long} {
		p := poisonInst + "/odd/" + name
		o.serving(faults.Keep, true, p)
		o.serving(faults.Go, false, p+".missing")
	}
	// Paths that leave the storage root are never probed nor unlinked: alone, such a spec
	// keeps its location; next to a missing spec, the location goes but the file outside
	// the root stays.
	outside := filepath.Join(filepath.Dir(filepath.Clean(o.nfsRoot)), "outside", "sentinel")
	require.NoError(t, os.MkdirAll(filepath.Dir(outside), 0o755))
	require.NoError(t, os.WriteFile(outside, []byte("must stay"), 0o644))
	o.present = append(o.present, outside)
	escape := poisonInst + "/../../outside/sentinel"
	o.serving(faults.Keep, false, escape)
	o.serving(faults.Keep, false, outside) // absolute, outside the root
	o.serving(faults.Go, false, poisonInst+"/odd/gone", escape)
	o.serving(faults.Keep, false, poisonInst+"/odd/%2e%2e/%2e%2e/outside/sentinel/nope/..")
}

func TestPoison(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, err := seed.Generate(ctx, e.redis.Client(), seed.Spec{Cluster: cluster, Instances: []string{"inst1", "inst2"}, Blocks: 150,
		GarbageFraction: 0.3, TrickyFraction: 0.1, Seed: 31, Root: e.root, MetaURI: e.redis.URI()})
	require.NoError(t, err)
	odd := &oddBlocks{t: t, e: e, nfsRoot: filepath.Join(e.root, "nfs") + "/", skips: map[string]int{}}
	odd.write()
	before, err := faults.TakeSnapshot(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	// empty_block: keep (the default): a block whose only location is garbage (most odd
	// blocks) stays with __uri__ = {}, as KVCM reads "exists, no location"; it used to be
	// deleted.
	expect := faults.Expect{Before: before, Locs: append(faults.FromManifest(m), odd.locs...), Present: odd.present}

	reg := prometheus.NewRegistry()
	o := e.options(reg)
	require.NoError(t, subjects.Ensure(ctx, e.js, e.names, o.JetStream))

	// Real bytes to build poison from: inst2's first page, and a delete request for one of
	// inst2's garbage locations with its exact bytes.
	page, err := metatest.ScanInstance(ctx, e.store(), "inst2", 0, 1000)
	require.NoError(t, err)
	valid := subjects.Batch{V: subjects.SchemaVersion, Cluster: cluster, Instance: "inst2", Group: seed.GroupRedis, Store: e.redis.Addr(), Round: 1, Parts: 1}
	for _, en := range page.Entries {
		valid.Blocks = append(valid.Blocks, subjects.BlockEntry{Key: en.BlockKey, URI: subjects.RawText(en.URI), LRUTime: en.LRUTime})
	}
	var target subjects.Target
	for _, l := range m.Garbage() {
		if l.Instance == "inst2" && l.Kind == seed.KindOrphanWriting {
			blk, err := kvcm.DecodeBlock([]byte(before[kvcm.BlockKey(l.Instance, l.Key)].Fields["__uri__"]))
			require.NoError(t, err)
			loc, ok := blk.Find(l.Location)
			require.True(t, ok)
			target = subjects.Target{Key: l.Key, Location: l.Location, Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(loc.Raw)}
			break
		}
	}
	require.NotEmpty(t, target.Location)
	validReq := subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: cluster, Instance: "inst2", Store: e.redis.Addr(),
		Source: subjects.Source{Stream: "poison", Seq: 1}, Targets: []subjects.Target{target}}
	enc := func(v any) []byte {
		data, err := subjects.Encode(v)
		require.NoError(t, err)
		return data
	}
	with := func(v any, change func(map[string]any)) []byte {
		var mm map[string]any
		require.NoError(t, json.Unmarshal(enc(v), &mm))
		change(mm)
		data, err := json.Marshal(mm)
		require.NoError(t, err)
		return data
	}
	batchSubj, deleteSubj := e.names.BatchSubject("inst1"), e.names.DeleteSubject("inst1")
	badTokenBatch := strings.TrimSuffix(e.names.BatchSubject("x"), "x") + "%zz"
	badTokenDelete := strings.TrimSuffix(e.names.DeleteSubject("x"), "x") + "%zz"
	nested := []byte(`{"v":1,"blocks":` + strings.Repeat("[", 100_000))
	// Just under the server's max payload, with a bad escape at its very end.
	oversized := []byte(`{"v":1,"cluster":"c1","instance":"inst1","parts":1,"x":"` + strings.Repeat("a", 1000*1024) + `\q"}`)
	valid1 := valid
	valid1.Instance = "inst1"
	poisonBatches := []*poisonMsg{
		{name: "binary", subject: batchSubj, data: []byte("\x00\xffgarbage")},
		{name: "empty", subject: batchSubj, data: nil},
		{name: "truncated", subject: batchSubj, data: enc(valid1)[:len(enc(valid1))/2]},
		{name: "nested", subject: batchSubj, data: nested},
		{name: "oversized", subject: batchSubj, data: oversized},
		{name: "json array", subject: batchSubj, data: []byte(`[1,2,3]`)},
		{name: "trailing data", subject: batchSubj, data: append(enc(valid1), []byte(`{}`)...)},
		{name: "version 2", subject: batchSubj, data: with(valid1, func(m map[string]any) { m["v"] = 2 })},
		{name: "version missing", subject: batchSubj, data: with(valid1, func(m map[string]any) { delete(m, "v") })},
		{name: "version string", subject: batchSubj, data: with(valid1, func(m map[string]any) { m["v"] = "1" })},
		{name: "wrong instance", subject: batchSubj, data: enc(valid)},
		{name: "wrong cluster", subject: e.names.BatchSubject("inst2"), data: with(valid, func(m map[string]any) { m["cluster"] = "c2" })},
		{name: "bad subject token", subject: badTokenBatch, data: enc(valid1)},
		{name: "no parts", subject: batchSubj, data: with(valid1, func(m map[string]any) { m["parts"] = 0 })},
		{name: "key not a number", subject: batchSubj, data: []byte(`{"v":1,"cluster":"c1","instance":"inst1","parts":1,"blocks":[{"key":"abc","uri":"{}"}]}`)},
	}
	poisonDeletes := []*poisonMsg{
		{name: "binary", subject: deleteSubj, data: []byte("\x00\xffgarbage")},
		{name: "truncated", subject: deleteSubj, data: enc(validReq)[:len(enc(validReq))/2]},
		{name: "nested", subject: deleteSubj, data: nested},
		{name: "oversized", subject: deleteSubj, data: oversized},
		{name: "version 2", subject: e.names.DeleteSubject("inst2"), data: with(validReq, func(m map[string]any) { m["v"] = 2 })},
		{name: "wrong instance", subject: deleteSubj, data: enc(validReq)},
		{name: "wrong cluster", subject: e.names.DeleteSubject("inst2"), data: with(validReq, func(m map[string]any) { m["cluster"] = "c2" })},
		{name: "bad subject token", subject: badTokenDelete, data: enc(validReq)},
		{name: "no targets", subject: e.names.DeleteSubject("inst2"), data: with(validReq, func(m map[string]any) { m["targets"] = []any{} })},
		{name: "no source", subject: e.names.DeleteSubject("inst2"), data: with(validReq, func(m map[string]any) { m["source"] = map[string]any{} })},
		{name: "unknown reason", subject: e.names.DeleteSubject("inst2"), data: with(validReq, func(m map[string]any) {
			m["targets"].([]any)[0].(map[string]any)["reason"] = "because"
		})},
		{name: "empty expected", subject: e.names.DeleteSubject("inst2"), data: with(validReq, func(m map[string]any) {
			m["targets"].([]any)[0].(map[string]any)["expected"] = ""
		})},
		{name: "repeated target", subject: e.names.DeleteSubject("inst2"), data: with(validReq, func(m map[string]any) {
			m["targets"] = append(m["targets"].([]any), m["targets"].([]any)[0])
		})},
	}
	// Not poison, but not to be acted upon either: they decode, and the deleter finds nothing
	// that matches (a live location's bytes altered, a block that does not exist, expected
	// bytes that are no location).
	live := m.Locations[0]
	for _, l := range m.Locations {
		if !l.Garbage && l.Instance == "inst2" {
			live = l
			break
		}
	}
	liveBlk, err := kvcm.DecodeBlock([]byte(before[kvcm.BlockKey(live.Instance, live.Key)].Fields["__uri__"]))
	require.NoError(t, err)
	liveLoc, _ := liveBlk.Find(live.Location)
	altered := strings.Replace(string(liveLoc.Raw), `"type":`, `"x":1,"type":`, 1)
	harmless := []subjects.DeleteRequest{validReq, validReq, validReq}
	harmless[0].Targets = []subjects.Target{{Key: live.Key, Location: live.Location, Reason: subjects.ReasonStorageMissing, Expected: subjects.RawText(altered)}}
	harmless[1].Targets = []subjects.Target{{Key: 12345, Location: "nothere1", Reason: subjects.ReasonOrphanWriting, Expected: target.Expected}}
	harmless[2].Targets = []subjects.Target{{Key: live.Key, Location: live.Location, Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(`[1,2]`)}}
	for i := range harmless {
		harmless[i].Source.Seq = uint64(100 + i)
	}

	// Terminations are announced by the server: collect the advisories.
	terminated := map[string]map[uint64]bool{}
	var tmu sync.Mutex
	sub, err := e.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>", func(msg *nats.Msg) {
		var adv struct {
			Stream string `json:"stream"`
			Seq    uint64 `json:"stream_seq"`
		}
		if json.Unmarshal(msg.Data, &adv) == nil {
			tmu.Lock()
			if terminated[adv.Stream] == nil {
				terminated[adv.Stream] = map[uint64]bool{}
			}
			terminated[adv.Stream][adv.Seq] = true
			tmu.Unlock()
		}
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()

	publish := func(ps []*poisonMsg) {
		for _, p := range ps {
			ack, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: p.subject, Data: p.data})
			require.NoError(t, err, p.name)
			p.seq = ack.Sequence
		}
	}
	publish(poisonBatches)
	publish(poisonDeletes)
	harmlessSeqs := map[uint64]bool{}
	for _, r := range harmless {
		ack, err := e.js.Publish(ctx, e.names.DeleteSubject("inst2"), enc(r))
		require.NoError(t, err)
		harmlessSeqs[ack.Sequence] = true
	}
	// Garbage in the audit trail: the readers skip it.
	for subj, data := range map[string]string{
		e.names.EventSubject(subjects.EventPoison, "inst1"):     "not json",
		e.names.EventSubject(subjects.EventRound, ""):           `{"v":9}`,
		e.names.EventSubject(subjects.EventDeadLetter, "inst2"): string(nested),
		e.names.EventSubject("x.y", "inst1"):                    `{"v":1}`,
	} {
		_, err := e.js.Publish(ctx, subj, []byte(data))
		require.NoError(t, err)
	}

	// The valid work behind the poison: a whole round, in the same run.
	e.run(o, app.All)
	e.waitRoundDone(1, 2*time.Minute)

	r, err := expect.Check(ctx, e.redis.Client())
	require.NoError(t, err)
	require.True(t, r.OK(), "after the round: %+v", r)
	require.Equal(t, r.Garbage, r.GarbageGone)
	require.Positive(t, r.Garbage)

	require.Equal(t, float64(len(poisonBatches)), metricLabeled(t, reg, "kvcm_gc_messages_total", map[string]string{"stage": "prober", "result": "term"}))
	require.Equal(t, float64(len(poisonDeletes)), metricLabeled(t, reg, "kvcm_gc_messages_total", map[string]string{"stage": "deleter", "result": "term"}))
	for reason, n := range odd.skips {
		require.GreaterOrEqual(t, metricLabeled(t, reg, "kvcm_gc_prober_skips_total", map[string]string{"reason": reason}), float64(n), reason)
	}
	require.GreaterOrEqual(t, metricValue(t, reg, "kvcm_gc_scan_bad_keys_total"), float64(odd.badKeys))
	require.Zero(t, metricLabeled(t, reg, "kvcm_gc_messages_total", map[string]string{"result": "nak"}), "nothing was retried")

	evs, undecodable := readEventsCounting(t, e.js, e.names)
	require.Equal(t, 4, undecodable, "the garbage we stored in EVENTS, and nothing else")
	poisonBySource := map[subjects.Source]subjects.Event{}
	for _, ev := range eventsOf(evs, subjects.EventPoison) {
		require.NotNil(t, ev.Source)
		poisonBySource[subjects.Source{Stream: ev.Source.Stream, Seq: ev.Source.Seq}] = ev
	}
	require.Len(t, poisonBySource, len(poisonBatches)+len(poisonDeletes))
	require.Eventually(t, func() bool {
		tmu.Lock()
		defer tmu.Unlock()
		return len(terminated[e.names.BatchesStream()]) == len(poisonBatches) && len(terminated[e.names.DeletesStream()]) == len(poisonDeletes)
	}, 10*time.Second, 10*time.Millisecond, "every poison message was terminated")
	for stream, ps := range map[string][]*poisonMsg{e.names.BatchesStream(): poisonBatches, e.names.DeletesStream(): poisonDeletes} {
		for _, p := range ps {
			ev, ok := poisonBySource[subjects.Source{Stream: stream, Seq: p.seq}]
			require.True(t, ok, "poison event for %s %q (seq %d)", stream, p.name, p.seq)
			require.NotEmpty(t, ev.Reason, p.name)
			tmu.Lock()
			require.True(t, terminated[stream][p.seq], "%s %q terminated", stream, p.name)
			tmu.Unlock()
		}
	}
	require.Empty(t, eventsOf(evs, subjects.EventDeadLetter))
	wrongInst := poisonDeletes[5]
	require.Equal(t, "wrong instance", wrongInst.name)
	outcomes := map[string]int{}
	for _, ev := range eventsOf(evs, subjects.EventDelete) {
		require.False(t, ev.Source.Stream == e.names.DeletesStream() && ev.Source.Seq == wrongInst.seq,
			"the request on another instance's subject was not executed")
		if ev.Source.Stream == e.names.DeletesStream() && harmlessSeqs[ev.Source.Seq] {
			outcomes[ev.Outcome]++
		}
	}
	require.Equal(t, map[string]int{subjects.OutcomeNoopMismatch: 2, subjects.OutcomeNoopGone: 1}, outcomes,
		"the requests that decode but match nothing ran and did nothing")
	wrongBatch := poisonBatches[10]
	require.Equal(t, "wrong instance", wrongBatch.name)
	for _, ev := range eventsOf(evs, subjects.EventCandidate) {
		require.False(t, ev.Source != nil && ev.Source.Stream == e.names.BatchesStream() && ev.Source.Seq == wrongBatch.seq,
			"the batch on another instance's subject was not judged")
	}

	// The operators' readers take the garbage in their stride.
	dls, err := ops.DLQList(ctx, e.js, e.names, time.Time{})
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, d := range dls {
		kinds[d.Kind]++
	}
	require.Equal(t, len(poisonBatches)+len(poisonDeletes), kinds[subjects.EventPoison])
	require.Equal(t, 2, kinds["undecodable_event"], "the two garbage messages under poison and deadletter subjects: %v", kinds)
	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, rep.WriteTable(&out))

	// Nothing is pending anywhere, so nothing queued behind the poison was left waiting.
	for _, sc := range [][2]string{{e.names.BatchesStream(), e.names.ProberConsumer()}, {e.names.DeletesStream(), e.names.DeleterConsumer()}} {
		c, err := e.js.Consumer(ctx, sc[0], sc[1])
		require.NoError(t, err)
		info, err := c.Info(ctx)
		require.NoError(t, err)
		require.Zero(t, info.NumPending+uint64(info.NumAckPending), sc[1])
		require.Zero(t, info.NumRedelivered, sc[1])
	}
	t.Logf("poison: %d batches, %d delete requests terminated; garbage %d/%d gone, live %d/%d intact; skips %v; bad keys %d",
		len(poisonBatches), len(poisonDeletes), r.GarbageGone, r.Garbage, r.LiveIntact, r.Live, odd.skips, odd.badKeys)
}
