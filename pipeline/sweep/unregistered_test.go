package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestSweepUnregisteredInstances: with collect_unregistered_instances the sweep judges the
// files of an instance the registry no longer lists exactly when the scanner may collect its
// keys, by the store checkpoints in the STATE bucket and its own registry snapshot; each
// condition alone, a checkpoint or a registry that cannot be read, and an instance counted in
// two stores keep them as before (unknown_instance, the refusal in the detail).
func TestSweepUnregisteredInstances(t *testing.T) {
	ctx := context.Background()
	js := testenv.StartNATS(t).JetStream(t)
	names := subjects.Names{Prefix: "kvcmgc", Cluster: "c1"}
	require.NoError(t, subjects.Ensure(ctx, js, names, subjects.DefaultSettings()))
	state, err := js.KeyValue(ctx, names.StateBucket())
	require.NoError(t, err)
	now := time.UnixMicro(1_800_000_000_000_000)
	const grace = 7 * 24 * time.Hour
	const storeA, storeB = "10.0.0.1:6379", "10.0.0.2:6379"
	dir := t.TempDir()

	inst := func(id, group, store, spec string) meta.Instance {
		return meta.Instance{ID: id, Group: group, Store: store,
			Info: kvcm.InstanceInfo{InstanceID: id, LocationSpecs: []kvcm.LocationSpecInfo{{Name: spec}}}}
	}
	registry := func() *meta.Registry {
		return &meta.Registry{
			Instances: []meta.Instance{inst("live", "g", storeA, "tp0"), inst("a/b", "g", storeA, "c")},
			Groups:    map[string]kvcm.InstanceGroup{"g": {}, "g-gone": {}},
			Storages: map[string]kvcm.StorageConfig{
				"nfs": {Type: kvcm.TypeFile, TypeName: "file", Name: "nfs", RootPath: dir + "/nfs/", KeyCountPerFile: 1}},
		}
	}
	checkpoint := func(store string, ids ...string) pipeline.Checkpoint {
		c := pipeline.Checkpoint{Store: store, Round: 4, Seen: map[string]pipeline.SeenInstance{}}
		for _, id := range ids {
			c.Seen[id] = pipeline.SeenInstance{Group: "g-gone", LastRegisteredUs: now.Add(-grace - time.Hour).UnixMicro()}
			c.Unregistered = append(c.Unregistered, pipeline.UnregisteredCount{Instance: id, Keys: 3, FirstSeenUs: now.Add(-grace).UnixMicro()})
		}
		return c
	}
	type setup struct {
		reg    *meta.Registry
		cks    map[string]pipeline.Checkpoint
		raw    map[string]string // checkpoint values written as they are
		off    bool
		failed bool // the registry read after a good one fails
	}
	put := func(s setup) {
		keys, err := state.ListKeys(ctx)
		require.NoError(t, err)
		for k := range keys.Keys() {
			require.NoError(t, state.Purge(ctx, k))
		}
		for store, c := range s.cks {
			b, err := json.Marshal(c)
			require.NoError(t, err)
			_, err = state.Put(ctx, subjects.CheckpointKey(store), b)
			require.NoError(t, err)
		}
		for store, v := range s.raw {
			_, err := state.Put(ctx, subjects.CheckpointKey(store), []byte(v))
			require.NoError(t, err)
		}
	}
	resolve := func(s setup, object string) (Name, string, string) {
		t.Helper()
		put(s)
		cfg := DefaultConfig()
		cfg.CollectUnregistered, cfg.UnregisteredGrace = !s.off, grace
		u, err := newUnregReader(cfg, pipeline.StageSweeper, state, NewMetrics(prometheus.NewRegistry()), nil)
		require.NoError(t, err)
		if u != nil {
			u.log = pipeline.OrDiscard(nil)
		}
		c := viewCache{unreg: u}
		r := &metatest.Registry{Reg: s.reg}
		cv, err := c.get(ctx, r, storage.Options{}, time.Minute, now)
		require.NoError(t, err)
		if s.failed {
			r.Err = errors.New("NOPERM this user has no permissions to access one of the keys")
			cv, err = c.get(ctx, r, storage.Options{}, time.Minute, now.Add(2*time.Minute))
			require.NoError(t, err)
			require.True(t, cv.stale)
		}
		return cv.view.ResolveName(object)
	}
	base := func() setup {
		return setup{reg: registry(), cks: map[string]pipeline.Checkpoint{storeA: checkpoint(storeA, "gone", "a")}}
	}

	n, reason, _ := resolve(base(), "gone/tp0/1f")
	require.Empty(t, reason, "every condition holds")
	require.Equal(t, Name{Instance: meta.Instance{ID: "gone", Group: "g-gone", Store: storeA}, Spec: "tp0", Key: 0x1f}, n)
	_, reason, _ = resolve(base(), "gone/some/other/spec/2")
	require.Empty(t, reason, "its specs are no longer known: any spec name reads")
	_, reason, _ = resolve(base(), "a/b/c/1")
	require.Equal(t, KeptAmbiguousName, reason, "a reading of a collectable instance and one of a registered instance")

	for _, tc := range []struct {
		name   string
		edit   func(*setup)
		reason string // the file's kept reason
		detail string // the refusal it names, if any
	}{
		{"opt-in off", func(s *setup) { s.off = true }, KeptUnknownInstance, ""},
		{"never seen registered", func(s *setup) {
			c := s.cks[storeA]
			delete(c.Seen, "gone")
		}, KeptUnknownInstance, pipeline.UnregNeverRegistered},
		{"absent for less than the grace", func(s *setup) {
			c := s.cks[storeA]
			c.Seen["gone"] = pipeline.SeenInstance{Group: "g-gone", LastRegisteredUs: now.Add(-grace + time.Minute).UnixMicro()}
		}, KeptUnknownInstance, pipeline.UnregWithinGrace},
		{"not counted by the store's last round", func(s *setup) {
			c := s.cks[storeA]
			c.Unregistered = c.Unregistered[1:]
			c.Seen["a"] = c.Seen["gone"] // "a" stays counted: its store's checkpoint is read
			s.cks[storeA] = c
		}, KeptUnknownInstance, ""},
		{"registry partial", func(s *setup) {
			s.reg.Skipped = append(s.reg.Skipped, meta.Skip{Instance: "bad", Reason: "bad instance info json"})
		}, KeptUnknownInstance, pipeline.UnregRegistryPartial},
		{"registered again, in a skipped group", func(s *setup) {
			s.reg.Skipped = append(s.reg.Skipped, meta.Skip{Instance: "gone", Group: "gl", Reason: "local meta store"})
			s.reg.SkippedGroups = map[string]string{"gl": "local meta store"}
		}, KeptGroupSkipped, ""},
		{"its group gone", func(s *setup) { delete(s.reg.Groups, "g-gone") }, KeptUnknownInstance, pipeline.UnregGroupAbsent},
		{"no other instance of its store", func(s *setup) {
			for i := range s.reg.Instances {
				s.reg.Instances[i].Store = storeB
			}
		}, KeptUnknownInstance, ""},
		{"counted in two stores", func(s *setup) {
			s.reg.Instances = append(s.reg.Instances, inst("live-b", "g", storeB, "tp0"))
			s.cks[storeB] = checkpoint(storeB, "gone")
		}, KeptUnknownInstance, pipeline.UnregSeveralStores},
		{"a checkpoint that does not decode", func(s *setup) {
			delete(s.cks, storeA)
			s.raw = map[string]string{storeA: "{not json"}
		}, KeptUnknownInstance, ""},
		{"registry read failed", func(s *setup) { s.failed = true }, KeptUnknownInstance, ""},
	} {
		s := base()
		tc.edit(&s)
		_, reason, detail := resolve(s, "gone/tp0/1f")
		require.Equal(t, tc.reason, reason, tc.name)
		if tc.detail != "" {
			require.Contains(t, detail, tc.detail, tc.name)
		}
	}

	// A configuration that collects needs the STATE bucket.
	cfg := DefaultConfig()
	cfg.CollectUnregistered, cfg.UnregisteredGrace = true, grace
	_, err = NewSweeper(cfg, SweeperDeps{Registry: &metatest.Registry{Reg: registry()}, Stores: oneStore{}})
	require.ErrorContains(t, err, "state bucket")
}
