package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// TestPhantomBytesAndAudit: on a seeded keyspace whose persisted counters match it, kvcm-gc
// deletes the garbage; the bytes KVCM's usage still counts of what went (recounted here from
// the seeded values, by instance and slot) are exactly kvcm_gc_phantom_bytes_total and the
// STATE bucket's share, and a round audited after the deletes shows exactly that drift, as
// a range of one value (no KVCM writes meanwhile). Legacy locations were never in a persisted
// usage: no phantom bytes there. Key counts do not drift (empty_block: keep).
func TestPhantomBytesAndAudit(t *testing.T) {
	for _, layout := range []kvcm.Layout{kvcm.LayoutLocation, kvcm.LayoutLegacy} {
		t.Run(layout.String(), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			instances := []string{"inst0", "inst1"}
			m, before := e.seed(seed.Spec{Layout: layout, Blocks: 120, Seed: 2, GarbageFraction: 0.3, Instances: instances})
			pr := prometheus.NewRegistry()
			o := e.options(pr)
			o.Scanner.RoundPause = 100 * time.Millisecond
			e.run(o, app.All)
			t.Cleanup(func() { e.verify(before, m) })

			// What went: every location of the seed no longer in Redis, once the garbage is gone.
			// The keyspace is read after the garbage is seen gone, not before: a delete that
			// landed between the two reads would leave it out.
			require.Eventually(t, func() bool {
				r, err := seed.Verify(ctx, e.redis.Client(), before, m, "*")
				require.NoError(t, err)
				return r.GarbageLocations > 0 && r.GarbageGone == r.GarbageLocations
			}, 2*time.Minute, 100*time.Millisecond)
			now, err := seed.Take(ctx, e.redis.Client(), "kvcache:instance_*")
			require.NoError(t, err)
			want, _ := wentBytes(before, now)
			t.Logf("phantom bytes of what went, by instance and slot: %v", want)

			kv, err := e.js.KeyValue(ctx, e.names.StateBucket())
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				for _, inst := range instances {
					got := map[string]uint64{}
					if en, err := kv.Get(ctx, deleter.DeletedKeysKey(inst)); err == nil {
						var c deleter.DeletedKeys
						require.NoError(t, json.Unmarshal(en.Value(), &c))
						got = c.Bytes
						if got == nil {
							got = map[string]uint64{}
						}
					}
					w := want[inst]
					if w == nil {
						w = map[string]uint64{}
					}
					if fmt.Sprint(got) != fmt.Sprint(w) {
						t.Logf("%s: STATE %v, want %v", inst, got, w)
						return false
					}
					for slot, b := range w {
						if metricLabeled(t, pr, "kvcm_gc_phantom_bytes_total", map[string]string{"kvcm_instance": inst, "storage_type": slot}) != float64(b) {
							return false
						}
					}
				}
				return true
			}, 30*time.Second, 50*time.Millisecond, "STATE and the metric hold the bytes of what went")
			if layout == kvcm.LayoutLegacy {
				require.Empty(t, want, "legacy locations were never in a persisted usage")
				require.Zero(t, metricValue(t, pr, "kvcm_gc_phantom_bytes_total"))
			}

			// A round that started after the deletes audits exactly that drift.
			store := strings.TrimPrefix(e.redis.URI(), "redis://")
			after := time.Now()
			var c pipeline.Checkpoint
			require.Eventually(t, func() bool {
				c, _, err = pipeline.ReadStoreCheckpoint(ctx, kv, store)
				require.NoError(t, err)
				return c.LastRoundEndUs > 0 && c.RoundStartedUs > after.UnixMicro() && !c.InRound && len(c.Audit) == len(instances)
			}, time.Minute, 20*time.Millisecond)
			for _, a := range c.Audit {
				require.NotNil(t, a.Start, a.Instance)
				require.NotNil(t, a.Start.Keys, "%s: %s", a.Instance, a.Start.Err)
				require.Equal(t, pipeline.DriftRange{Ok: true}, a.KeyDrift(), "%s: keys stay counted and stay in Redis", a.Instance)
				if layout == kvcm.LayoutLegacy {
					continue
				}
				for _, slot := range a.Slots() {
					d := a.UsageDrift(slot)
					require.True(t, d.Exact(), "%s %s: nothing written during the round: %+v", a.Instance, slot, d)
					require.Equal(t, int64(want[a.Instance][slot]), d.Low, "%s %s", a.Instance, slot)
				}
				for slot, b := range want[a.Instance] {
					require.Equal(t, float64(b), metricLabeled(t, pr, "kvcm_gc_kvcm_usage_drift_bytes",
						map[string]string{"kvcm_instance": a.Instance, "storage_type": slot, "bound": "high"}))
				}
			}
			checkCountersShown(t, e, instances, want, layout)
		})
	}
}

// checkCountersShown: status and report show each instance's audit (read back after the
// round above, so the checkpoint may be a later round's: every round audits the same quiet
// keyspace) with the drift exact and all of it explained by kvcm-gc's deletes, in JSON and
// in text.
func checkCountersShown(t *testing.T, e *env, instances []string, want map[string]map[string]uint64, layout kvcm.Layout) {
	t.Helper()
	ctx := context.Background()
	st, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	rep, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{})
	require.NoError(t, err)
	one, err := ops.Report(ctx, e.js, e.names, ops.ReportQuery{Instance: instances[1]})
	require.NoError(t, err)
	require.Len(t, one.Counters, 1)
	require.Equal(t, instances[1], one.Counters[0].Instance)
	for _, cs := range [][]ops.InstanceCounters{st.KVCMCounters, rep.Counters} {
		require.Len(t, cs, len(instances))
		for i, c := range cs {
			require.Equal(t, instances[i], c.Instance)
			require.NotNil(t, c.Keys.Persisted)
			require.Equal(t, &ops.Drift{Exact: true}, c.Keys.Drift, "%s: keys", c.Instance)
			if layout == kvcm.LayoutLegacy {
				require.Contains(t, c.Problem, "absent", "a legacy KVCM keeps no usage")
				continue
			}
			require.Empty(t, c.Problem)
			w := want[c.Instance]
			for _, u := range c.Usage {
				require.NotNil(t, u.Persisted, "%s %s", c.Instance, u.StorageType)
				require.Equal(t, *u.Persisted-u.Recount, w[u.StorageType], "%s %s: persisted - recount", c.Instance, u.StorageType)
				d := int64(w[u.StorageType])
				require.Equal(t, &ops.Drift{Low: d, High: d, Exact: true}, u.Drift, "%s %s", c.Instance, u.StorageType)
				require.Equal(t, w[u.StorageType], u.KvcmGC, "%s %s: kvcm-gc's share", c.Instance, u.StorageType)
				require.Equal(t, &ops.Drift{Exact: true}, u.Other, "%s %s: nothing else drifted", c.Instance, u.StorageType)
			}
		}
	}
	var text strings.Builder
	require.NoError(t, st.WriteTable(&text))
	require.NoError(t, rep.WriteTable(&text))
	t.Log(text.String())
	require.Equal(t, 2, strings.Count(text.String(), "KVCM COUNTERS"))
	for inst, slots := range want {
		for slot, b := range slots {
			// instance, store, counter, persisted, recount, then the drift: exact, one value.
			require.Regexp(t, inst+` +\S+ +`+slot+` bytes +\d+ B +\d+ B +`+fmt.Sprint(b)+` B +`+fmt.Sprint(b)+` B +0 B`, text.String())
		}
	}
	js, err := json.Marshal(st)
	require.NoError(t, err)
	require.Contains(t, string(js), `"kvcm_counters":[{"store":`)
}

// wentBytes is what KVCM's usage still counts of the location-layout locations of before that
// now lacks, by instance and slot (kvcm.UsageOf).
func wentBytes(before, now seed.Snapshot) (map[string]map[string]uint64, int) {
	out := map[string]map[string]uint64{}
	gone := 0
	for key, fields := range before {
		inst, _, ok := kvcm.KeyInstance(key)
		if !ok {
			continue
		}
		for f, v := range fields {
			id, isLoc := kvcm.LocationID(f)
			if _, still := now[key][f]; !isLoc || v == "" || still && now[key][f] != "" {
				continue
			}
			if _, uri := fields[kvcm.FieldURI]; uri {
				continue // an ambiguous key: never written
			}
			gone++
			loc, _ := kvcm.DecodeLocation(id, []byte(v))
			u := kvcm.UsageOf(&loc)
			if out[inst] == nil {
				out[inst] = map[string]uint64{}
			}
			out[inst][u.Slot.String()] += u.Bytes
		}
		if u, ok := fields[kvcm.FieldURI]; ok && u != now[key][kvcm.FieldURI] {
			gone++ // a legacy location went: nothing counted
		}
	}
	for inst, m := range out {
		for s, b := range m {
			if b == 0 {
				delete(m, s)
			}
		}
		if len(m) == 0 {
			delete(out, inst)
		}
	}
	return out, gone
}
