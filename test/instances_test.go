package test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

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
