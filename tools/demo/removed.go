package demo

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// A removed instance: KVCM's RemoveInstance deleted its registry entry and its trim failed, so
// its keys stay under an instance the registry does not list. The demo seeds removedBlocks of
// them (2 locations each, 1 KiB a spec URI), which the round counts and leaves byte for byte
// (collect_unregistered_instances is off); the report shows the count.
const (
	RemovedInstance = "inst-removed"
	removedBlocks   = 40
)

// seedRemoved writes the removed instance's keys in the keyspace's layout.
func seedRemoved(ctx context.Context, rdb *redis.Client, layout kvcm.Layout) error {
	loc := func(id string, key int) string {
		return fmt.Sprintf(`{"id":%q,"status":3,"type":4,"spec_size":1,"create_time":1700000000000000,"location_specs":[`+
			`{"name":"tp0","uri":"file://nfs_01/removed/%s/tp0/%x_%s?size=1024"}]}`, id, RemovedInstance, key, id)
	}
	pipe := rdb.Pipeline()
	for i := range removedBlocks {
		k := kvcm.BlockKey(RemovedInstance, int64(1000+i))
		a, b := loc("r0", i), loc("r1", i)
		if layout == kvcm.LayoutLegacy {
			pipe.HSet(ctx, k, kvcm.FieldURI, `{"r0":`+a+`,"r1":`+b+`}`, kvcm.FieldLRUTime, "1700000000000000")
			continue
		}
		pipe.HSet(ctx, k, kvcm.FieldPrevKey, "", kvcm.LocationField("r0"), a, kvcm.LocationField("r1"), b)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("seed the removed instance: %w", err)
	}
	return nil
}

// removedLine is the report's line of the removed instance, from the round's gauges.
func (r Report) removedLine() string {
	if len(r.Unregistered) == 0 {
		return "none counted"
	}
	var parts []string
	for _, u := range r.Unregistered {
		parts = append(parts, fmt.Sprintf("%s: %.0f keys, %.0f locations, %s", u.instance, u.keys, u.locations, humanBytes(u.bytes)))
	}
	return strings.Join(parts, "; ") + " (counted, left alone)"
}

// unregisteredRow is one unregistered instance of the round's gauges.
type unregisteredRow struct {
	instance               string
	keys, locations, bytes float64
}

func unregisteredRows(g gathered) []unregisteredRow {
	keys := g.by("kvcm_gc_unregistered_instance_keys", "kvcm_instance")
	locs := g.by("kvcm_gc_unregistered_instance_locations", "kvcm_instance")
	bytes := g.by("kvcm_gc_unregistered_instance_bytes", "kvcm_instance")
	var out []unregisteredRow
	for _, id := range slices.Sorted(maps.Keys(keys)) {
		out = append(out, unregisteredRow{instance: id, keys: keys[id], locations: locs[id], bytes: bytes[id]})
	}
	return out
}

// removedIntact counts the removed instance's keys of before that are byte-identical now.
func removedIntact(ctx context.Context, rdb *redis.Client, before seed.Snapshot) (intact, total int, err error) {
	now, err := seed.Take(ctx, rdb, kvcm.KeyPrefix(RemovedInstance)+"*")
	if err != nil {
		return 0, 0, err
	}
	for k, v := range before {
		if !strings.HasPrefix(k, kvcm.KeyPrefix(RemovedInstance)) {
			continue
		}
		total++
		if maps.Equal(v, now[k]) {
			intact++
		}
	}
	return intact, total, nil
}

// eventReportIntact counts the keys of before holding the EventReport location with the id
// of '#' and ':' (seed.EventReportID), and those whose field is byte-identical now.
func eventReportIntact(ctx context.Context, rdb *redis.Client, before seed.Snapshot) (intact, total int, err error) {
	field := kvcm.LocationField(seed.EventReportID)
	for k, v := range before {
		want, ok := v[field]
		if !ok {
			continue
		}
		total++
		got, err := rdb.HGet(ctx, k, field).Result()
		if err != nil && err != redis.Nil {
			return 0, 0, err
		}
		if err == nil && got == want {
			intact++
		}
	}
	return intact, total, nil
}
