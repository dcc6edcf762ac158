package test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/seed"
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
