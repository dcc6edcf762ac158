package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// Helpers for tests that run in both of KVCM's block layouts (DESIGN §2): the location layout
// of today's KVCM (one L#<id> field per location) and the legacy layout of KVCM f6aa2b2 (one
// __uri__ map beside __lru_time__).

// layouts are the two layouts a test runs in, by subtest name.
var layouts = []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy}

// forLayouts runs f as one subtest per layout.
func forLayouts(t *testing.T, f func(t *testing.T, layout kvcm.Layout)) {
	for _, l := range layouts {
		t.Run(l.String(), func(t *testing.T) { f(t, l) })
	}
}

// locationOf decodes location id from a block's fields: from field (L#<id>, location layout)
// or from __uri__ (field "" or __uri__). ok is false when it is not there or does not decode.
func locationOf(fields map[string]string, field, id string) (kvcm.Location, bool) {
	if field != "" && field != kvcm.FieldURI {
		v, ok := fields[field]
		if !ok || v == "" {
			return kvcm.Location{}, false
		}
		l, err := kvcm.DecodeLocation(id, []byte(v))
		return l, err == nil
	}
	u, ok := fields[kvcm.FieldURI]
	if !ok {
		return kvcm.Location{}, false
	}
	blk, err := kvcm.DecodeBlock([]byte(u))
	if err != nil {
		return kvcm.Location{}, false
	}
	l, ok := blk.Find(id)
	if !ok {
		return kvcm.Location{}, false
	}
	return *l, true
}

// seedLocation reads a seeded location's current bytes and status from Redis.
func seedLocation(t *testing.T, rdb redis.UniversalClient, l seed.Loc) (kvcm.Location, bool) {
	t.Helper()
	fields, err := rdb.HGetAll(context.Background(), kvcm.BlockKey(l.Instance, l.Key)).Result()
	require.NoError(t, err)
	return locationOf(fields, l.FieldName(), l.Location)
}

// finishWriteIn does what KVCM's FinishWriteCache does to one location, in the key's layout:
// status → SERVING, unconditionally; legacy, the whole __uri__ rewritten with a fresh
// __lru_time__; location layout, only its L# field (HMGET, then HSET). It returns the
// location's new bytes.
func finishWriteIn(t *testing.T, rdb redis.UniversalClient, inst string, key int64, field, id string) []byte {
	t.Helper()
	ctx := context.Background()
	k := kvcm.BlockKey(inst, key)
	if field != "" && field != kvcm.FieldURI {
		cur, err := rdb.HGet(ctx, k, field).Bytes()
		require.NoError(t, err)
		next, err := kvcm.LocationWithStatus(cur, kvcm.StatusServing)
		require.NoError(t, err)
		require.NoError(t, rdb.HSet(ctx, k, field, next).Err())
		return next
	}
	cur, err := rdb.HGet(ctx, k, kvcm.FieldURI).Bytes()
	require.NoError(t, err)
	blk, err := kvcm.DecodeBlock(cur)
	require.NoError(t, err)
	next, err := blk.WithStatus(id, kvcm.StatusServing)
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, k, kvcm.FieldURI, next, kvcm.FieldLRUTime, strconv.FormatInt(time.Now().UnixMicro(), 10)).Err())
	nb, err := kvcm.DecodeBlock(next)
	require.NoError(t, err)
	l, ok := nb.Find(id)
	require.True(t, ok)
	return l.Raw
}

// locJSON is one location as KVCM of layout writes it: location layout, create_time (µs)
// before location_specs; legacy, create_time after them when ct is not 0 (KVCM f6aa2b2 had
// none; a newer one appended it). specs are {"name":…,"uri":…} objects.
func locJSON(layout kvcm.Layout, id string, status kvcm.Status, typ kvcm.StorageType, ct int64, specs ...string) string {
	head := fmt.Sprintf(`{"id":%q,"status":%d,"type":%d,"spec_size":%d`, id, status, typ, len(specs))
	list := `"location_specs":[`
	for i, s := range specs {
		if i > 0 {
			list += ","
		}
		list += s
	}
	list += "]"
	switch {
	case layout == kvcm.LayoutLocation:
		return head + fmt.Sprintf(`,"create_time":%d,`, ct) + list + "}"
	case ct != 0:
		return head + "," + list + fmt.Sprintf(`,"create_time":%d}`, ct)
	default:
		return head + "," + list + "}"
	}
}

// fileSpec is a spec on the seed's file storage naming path.
func fileSpec(name, path string) string {
	return fmt.Sprintf(`{"name":%q,"uri":"file://%s%s?size=1024"}`, name, seed.StorageNFS, path)
}

// blockFields are the fields KVCM of layout creates a block with: location layout,
// BP#prev_key "" and one L#<id> per location; legacy, __uri__ (the locations by id, in order)
// and __lru_time__ (µs). locs are pairs of id and JSON.
func blockFields(layout kvcm.Layout, lru time.Time, locs ...string) []any {
	if layout == kvcm.LayoutLocation {
		out := []any{kvcm.FieldPrevKey, ""}
		for i := 0; i < len(locs); i += 2 {
			out = append(out, kvcm.LocationField(locs[i]), locs[i+1])
		}
		return out
	}
	uri := "{"
	for i := 0; i < len(locs); i += 2 {
		if i > 0 {
			uri += ","
		}
		uri += strconv.Quote(locs[i]) + ":" + locs[i+1]
	}
	return []any{kvcm.FieldURI, uri + "}", kvcm.FieldLRUTime, strconv.FormatInt(lru.UnixMicro(), 10)}
}

// fieldOf is the field holding location id in layout.
func fieldOf(layout kvcm.Layout, id string) string {
	if layout == kvcm.LayoutLocation {
		return kvcm.LocationField(id)
	}
	return kvcm.FieldURI
}

// perBlockPath is KVCM's name of a block's data on a file storage, <root><instance>/<spec>/<hex
// block key>: the one name the deleter unlinks for a stuck DELETING (DESIGN §8.11).
func perBlockPath(root, inst, spec string, key int64) string {
	return root + inst + "/" + spec + "/" + strconv.FormatUint(uint64(key), 16)
}

// writeFile creates a data file (and its directories).
func writeFile(t *testing.T, path string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("kv"), 0o644))
	return path
}

// observed is the prober's first-sight store of DELETING locations (the OBSERVED bucket); the
// topology must exist.
func (e *env) observed(t *testing.T) prober.KVObserver {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), e.names.ObservedBucket())
	require.NoError(t, err)
	return prober.KVObserver{KV: kv, TTL: 48 * time.Hour}
}

// observeDeleting records a first sight of DELETING location id of block key with bytes raw,
// as the prober records one when it first sees them in round at first.
func (e *env) observeDeleting(t *testing.T, inst string, key int64, id string, raw []byte, first time.Time, round uint64) {
	t.Helper()
	o := prober.Observation{FirstUs: first.UnixMicro(), Round: round, Instance: inst, Key: key, Location: id}
	got, err := e.observed(t).Observe(context.Background(), inst, key, id, raw, o)
	require.NoError(t, err)
	require.Equal(t, o, got, "a first sight of %s/%d/%s was recorded already", inst, key, id)
}

// firstSight returns the recorded first sight of DELETING location id of block key (found by
// what the record names), with the bucket entry's key; ok is false when there is none.
func (e *env) firstSight(t *testing.T, inst string, key int64, id string) (prober.Observation, string, bool) {
	t.Helper()
	ctx := context.Background()
	kv := e.observed(t).KV
	lister, err := kv.ListKeys(ctx)
	require.NoError(t, err)
	var found []string
	for name := range lister.Keys() {
		found = append(found, name)
	}
	for _, name := range found {
		en, err := kv.Get(ctx, name)
		require.NoError(t, err)
		var o prober.Observation
		require.NoError(t, json.Unmarshal(en.Value(), &o))
		if o.Instance == inst && o.Key == key && o.Location == id {
			return o, name, true
		}
	}
	return prober.Observation{}, "", false
}

// backdateFirstSight moves the recorded first sight of a DELETING location back to first,
// keeping the round it was seen in: as if that round had been at first (rather than waiting
// out deleting_grace).
func (e *env) backdateFirstSight(t *testing.T, inst string, key int64, id string, first time.Time) prober.Observation {
	t.Helper()
	o, name, ok := e.firstSight(t, inst, key, id)
	require.True(t, ok, "no first sight of %s/%d/%s", inst, key, id)
	o.FirstUs = first.UnixMicro()
	val, err := json.Marshal(o)
	require.NoError(t, err)
	_, err = e.observed(t).KV.Put(context.Background(), name, val)
	require.NoError(t, err)
	return o
}

// skipRoundPause ends the round pause of every store now, while no scanner runs: the next
// scanner starts the next round at once, as it would once round_pause had passed.
func (e *env) skipRoundPause(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
	require.NoError(t, err)
	lister, err := kv.ListKeys(ctx, jetstream.MetaOnly())
	require.NoError(t, err)
	var keys []string
	for name := range lister.Keys() {
		keys = append(keys, name)
	}
	n := 0
	for _, name := range keys {
		if !strings.HasPrefix(name, strings.TrimSuffix(subjects.CheckpointFilter(), ">")) {
			continue
		}
		en, err := kv.Get(ctx, name)
		require.NoError(t, err)
		var ck pipeline.Checkpoint
		require.NoError(t, json.Unmarshal(en.Value(), &ck))
		require.False(t, ck.InRound, "store %s is in a round", ck.Store)
		ck.NextRoundUs = time.Now().UnixMicro()
		val, err := json.Marshal(ck)
		require.NoError(t, err)
		_, err = kv.Update(ctx, name, val, en.Revision())
		require.NoError(t, err)
		n++
	}
	require.Positive(t, n, "no checkpoint")
}
