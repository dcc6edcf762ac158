package prober

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// fakeBackend answers probes from a table; it records every call.
type fakeBackend struct {
	name    string
	typ     kvcm.StorageType
	missing map[string]bool // path -> missing
	unknown map[string]bool
	err     error // returned by MightExist
	short   bool  // return one result too few
	calls   [][]kvcm.DataURI
}

func (f *fakeBackend) Name() string            { return f.name }
func (f *fakeBackend) Type() kvcm.StorageType  { return f.typ }
func (f *fakeBackend) KeyCountPerFile() uint64 { return 1 }
func (f *fakeBackend) Delete(context.Context, kvcm.DataURI) error {
	return errors.New("not in a prober test")
}
func (f *fakeBackend) MightExist(_ context.Context, uris []kvcm.DataURI) ([]storage.Result, error) {
	f.calls = append(f.calls, uris)
	if f.err != nil {
		return nil, f.err
	}
	out := make([]storage.Result, 0, len(uris))
	for _, u := range uris {
		switch {
		case f.missing[u.Path]:
			out = append(out, storage.Missing)
		case f.unknown[u.Path]:
			out = append(out, storage.Unknown)
		default:
			out = append(out, storage.Present)
		}
	}
	if f.short {
		out = out[:len(out)-1]
	}
	return out, nil
}

type fakeSet map[string]storage.Backend

func (s fakeSet) Lookup(name string) (storage.Backend, bool) { b, ok := s[name]; return b, ok }

type fakeGuard struct {
	targets map[string]bool
	err     error
}

func (g fakeGuard) IsCopyTarget(_ context.Context, inst string, key int64, loc string) (bool, error) {
	return g.targets[fmt.Sprintf("%s/%d/%s", inst, key, loc)], g.err
}

var judgeNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func us(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

func loc(id string, status, typ int, extra string, uris ...string) string {
	specs := ""
	for i, u := range uris {
		if i > 0 {
			specs += ","
		}
		specs += fmt.Sprintf(`{"name":"tp%d","uri":%q}`, i, u)
	}
	return fmt.Sprintf(`%q:{"id":%q,"status":%d,"type":%d,"spec_size":%d,"location_specs":[%s]%s}`, id, id, status, typ, len(uris), specs, extra)
}

func block(locs ...string) subjects.RawText {
	s := "{"
	for i, l := range locs {
		if i > 0 {
			s += ","
		}
		s += l
	}
	return subjects.RawText(s + "}")
}

// lf is one location of the location layout, as "id\x00json" (see lfField).
func lf(id string, status, typ int, extra string, uris ...string) string {
	l := loc(id, status, typ, extra, uris...)
	return id + "\x00" + l[len(fmt.Sprintf("%q:", id)):]
}

func lfValue(l string) string { _, v, _ := strings.Cut(l, "\x00"); return v }

func lfField(l string) subjects.LocField {
	id, v, _ := strings.Cut(l, "\x00")
	return subjects.LocField{ID: subjects.RawText(id), V: subjects.RawText(v)}
}

// locBlock is a block of the location layout.
func locBlock(key int64, locs ...string) subjects.BlockEntry {
	b := subjects.BlockEntry{Key: key, Layout: subjects.LayoutLocation, Fields: []string{kvcm.FieldPrevKey}}
	for _, l := range locs {
		b.Locs = append(b.Locs, lfField(l))
	}
	return b
}

// ct is a create_time member d from judgeNow.
func ct(d time.Duration) string { return fmt.Sprintf(`,"create_time":%d`, judgeNow.Add(d).UnixMicro()) }

func TestJudgeRules(t *testing.T) {
	old := us(judgeNow.Add(-25 * time.Hour))
	nfsURI := func(p string) string { return "file://nfs_01/data/" + p + "?size=1024" }
	newNFS := func() *fakeBackend {
		return &fakeBackend{name: "nfs_01", typ: kvcm.TypeFile, missing: map[string]bool{"/data/gone": true, "/data/gone2": true},
			unknown: map[string]bool{"/data/unk": true}}
	}
	cases := []struct {
		name   string
		blocks []subjects.BlockEntry
		set    func(nfs *fakeBackend) fakeSet
		guard  guard.Guard
		want   []string // "key/location/reason"
		skips  map[string]int
	}{
		{name: "orphan writing past grace", blocks: []subjects.BlockEntry{{Key: -5, LRUTime: old, URI: block(loc("a", 2, 4, "", nfsURI("x")))}},
			want: []string{"-5/a/orphan_writing"}},
		{name: "writing exactly at grace is a candidate", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: us(judgeNow.Add(-24 * time.Hour)), URI: block(loc("a", 2, 4, ""))}},
			want: []string{"1/a/orphan_writing"}},
		{name: "writing just under grace kept", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: us(judgeNow.Add(-24*time.Hour + time.Second)), URI: block(loc("a", 2, 4, ""))}}},
		{name: "lru in the future kept", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: us(judgeNow.Add(time.Hour)), URI: block(loc("a", 2, 4, ""))}},
			skips: map[string]int{SkipAgeUnknown: 1}},
		{name: "lru missing kept", blocks: []subjects.BlockEntry{{Key: 1, URI: block(loc("a", 2, 4, ""))}}, skips: map[string]int{SkipAgeUnknown: 1}},
		{name: "lru garbage kept", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: "12abc", URI: block(loc("a", 2, 4, ""))}}, skips: map[string]int{SkipAgeUnknown: 1}},
		{name: "create_time wins over an old lru: young", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old,
			URI: block(loc("a", 2, 4, fmt.Sprintf(`,"create_time":%d`, judgeNow.Add(-time.Hour).UnixMicro())))}}},
		{name: "create_time in the future kept", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old,
			URI: block(loc("a", 2, 4, fmt.Sprintf(`,"create_time":%d`, judgeNow.Add(time.Hour).UnixMicro())))}}, skips: map[string]int{SkipAgeUnknown: 1}},
		// Legacy: the later of create_time and __lru_time__, the younger age.
		{name: "old create_time, recent lru kept", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: us(judgeNow),
			URI: block(loc("a", 2, 4, fmt.Sprintf(`,"create_time":%d`, judgeNow.Add(-30*time.Hour).UnixMicro())))}}},
		{name: "old create_time and old lru is a candidate", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old,
			URI: block(loc("a", 2, 4, fmt.Sprintf(`,"create_time":%d`, judgeNow.Add(-30*time.Hour).UnixMicro())))}}, want: []string{"1/a/orphan_writing"}},
		{name: "copy target kept", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old, URI: block(loc("a", 2, 4, ""))}},
			guard: fakeGuard{targets: map[string]bool{"inst1/1/a": true}}, skips: map[string]int{SkipCopyTarget: 1}},
		{name: "guard error keeps", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old, URI: block(loc("a", 2, 4, ""))}},
			guard: fakeGuard{err: errors.New("redis down")}, skips: map[string]int{SkipGuardError: 1}},
		{name: "inner id differs from key", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old, URI: subjects.RawText(`{"a":{"id":"b","status":2,"type":4,"spec_size":0,"location_specs":[]}}`)}},
			skips: map[string]int{SkipBadLocation: 1}},
		{name: "corrupt uri", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old, URI: subjects.RawText(`{"a":{"id":"a","status":2,`)}},
			skips: map[string]int{SkipCorruptURI: 1}},
		{name: "deleting never judged", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old, URI: block(loc("a", 4, 4, "", nfsURI("gone")))}}},
		{name: "serving missing", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", nfsURI("gone")))}},
			want: []string{"7/s/storage_missing"}},
		{name: "serving one of two specs missing", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", nfsURI("here"), nfsURI("gone")))}},
			want: []string{"7/s/storage_missing"}},
		{name: "serving present kept", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", nfsURI("here")))}}},
		{name: "serving unknown kept", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", nfsURI("unk")))}}},
		{name: "serving unknown type kept", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 200, "", nfsURI("gone")))}},
			skips: map[string]int{SkipExcludedType: 1}},
		// pace_ssd (9) is probed, but only against a storage registered as pace_ssd.
		{name: "serving pace_ssd on an nfs storage kept", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 9, "", nfsURI("gone")))}},
			skips: map[string]int{SkipStorageTypeMismatch: 1}},
		{name: "serving without specs kept", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, ""))}}, skips: map[string]int{SkipNoSpec: 1}},
		{name: "bad spec uri alone kept", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", "not a uri"))}},
			skips: map[string]int{SkipBadSpecURI: 1}},
		{name: "bad spec uri with a missing one is a candidate", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", "nope", nfsURI("gone")))}},
			want: []string{"7/s/storage_missing"}, skips: map[string]int{SkipBadSpecURI: 1}},
		{name: "storage not registered", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", "file://nfs_99/data/gone?size=1"))}},
			skips: map[string]int{SkipStorageNotFound: 1}},
		{name: "storage type mismatch", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 1, "", nfsURI("gone")))}},
			skips: map[string]int{SkipStorageTypeMismatch: 1}},
		{name: "probe error keeps", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", nfsURI("gone")))}},
			set: func(nfs *fakeBackend) fakeSet { nfs.err = errors.New("eio"); return fakeSet{"nfs_01": nfs} }, skips: map[string]int{SkipProbeError: 1}},
		{name: "probe shape mismatch keeps", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 4, "", nfsURI("gone")))}},
			set: func(nfs *fakeBackend) fakeSet { nfs.short = true; return fakeSet{"nfs_01": nfs} }, skips: map[string]int{SkipProbeShape: 1}},
		{name: "probe error on one storage, other storage goes on", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old,
			URI: block(loc("s", 3, 4, "", nfsURI("gone")), loc("t", 3, 1, "", "hf3fs://h1/data/gone?size=1"))}},
			set: func(nfs *fakeBackend) fakeSet {
				nfs.err = errors.New("eio")
				return fakeSet{"nfs_01": nfs, "h1": &fakeBackend{name: "h1", typ: kvcm.TypeHF3FS, missing: map[string]bool{"/data/gone": true}}}
			}, want: []string{"7/t/storage_missing"}, skips: map[string]int{SkipProbeError: 1}},
		{name: "duplicate block in a batch gives one target", blocks: []subjects.BlockEntry{
			{Key: 3, LRUTime: old, URI: block(loc("a", 2, 4, ""))}, {Key: 3, LRUTime: old, URI: block(loc("a", 2, 4, ""))}},
			want: []string{"3/a/orphan_writing"}},
		{name: "absent block ignored", blocks: []subjects.BlockEntry{{Key: 3, LRUTime: old}}},
		{name: "non-UTF-8 location id kept", blocks: []subjects.BlockEntry{{Key: 1, LRUTime: old, URI: subjects.RawText("{\"a\xff\":{\"id\":\"a\xff\",\"status\":2,\"type\":4,\"spec_size\":0,\"location_specs\":[]}}")}},
			skips: map[string]int{SkipBadLocation: 1}},
		{name: "type outside uint8 kept", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(loc("s", 3, 260, "", nfsURI("gone")))}},
			skips: map[string]int{SkipBadLocation: 1}},
		{name: "dummy, vineyard and event-report serving never storage-missing", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old,
			URI: block(loc("d", 3, 6, "", nfsURI("gone")), loc("v", 3, 7, "", nfsURI("gone")), loc("e", 3, 8, "", nfsURI("gone")))}},
			skips: map[string]int{SkipExcludedType: 3}},

		// The location layout: one field per location, ages from create_time only.
		{name: "location: orphan writing past grace and kvcm_gc's deferral", blocks: []subjects.BlockEntry{locBlock(-5, lf("a", 2, 4, ct(-31*time.Hour), nfsURI("x")))},
			want: []string{"-5/a/orphan_writing"}},
		{name: "location: orphan writing past grace left to KVCM's own GC", blocks: []subjects.BlockEntry{locBlock(-5, lf("a", 2, 4, ct(-25*time.Hour), nfsURI("x")))},
			skips: map[string]int{SkipLeftToKVCMGC: 1}},
		{name: "location: writing just under grace kept", blocks: []subjects.BlockEntry{locBlock(1, lf("a", 2, 4, ct(-24*time.Hour+time.Second)))}},
		{name: "location: create_time 0 is pre-create_time data, kept", blocks: []subjects.BlockEntry{locBlock(1, lf("a", 2, 4, `,"create_time":0`))},
			skips: map[string]int{SkipAgeUnknown: 1}},
		{name: "location: no create_time kept, whatever lru says", blocks: []subjects.BlockEntry{
			func() subjects.BlockEntry { b := locBlock(1, lf("a", 2, 4, "")); b.LRUTime = old; return b }()},
			skips: map[string]int{SkipAgeUnknown: 1}},
		{name: "location: create_time in the future kept", blocks: []subjects.BlockEntry{locBlock(1, lf("a", 2, 4, ct(time.Hour)))},
			skips: map[string]int{SkipAgeUnknown: 1}},
		{name: "location: serving missing", blocks: []subjects.BlockEntry{locBlock(7, lf("s", 3, 4, ct(-time.Hour), nfsURI("gone")), lf("t", 3, 4, ct(-time.Hour), nfsURI("here")))},
			want: []string{"7/s/storage_missing"}},
		{name: "location: tombstone never judged", blocks: []subjects.BlockEntry{{Key: 1, Layout: subjects.LayoutLocation,
			Locs: []subjects.LocField{{ID: subjects.RawText("t"), V: nil}}}}, skips: map[string]int{SkipTombstone: 1}},
		{name: "location: corrupt field kept, neighbour judged", blocks: []subjects.BlockEntry{{Key: 1, Layout: subjects.LayoutLocation,
			Locs: []subjects.LocField{{ID: subjects.RawText("c"), V: subjects.RawText(`{"id":"c",`)}, lfField(lf("a", 2, 4, ct(-48*time.Hour)))}}},
			want: []string{"1/a/orphan_writing"}, skips: map[string]int{SkipCorruptLocation: 1}},
		{name: "location: inner id differs from its field", blocks: []subjects.BlockEntry{{Key: 1, Layout: subjects.LayoutLocation,
			Locs: []subjects.LocField{{ID: subjects.RawText("x"), V: subjects.RawText(lfValue(lf("a", 2, 4, ct(-48*time.Hour))))}}}},
			skips: map[string]int{SkipBadLocation: 1}},
		{name: "location: deleting and new never judged", blocks: []subjects.BlockEntry{locBlock(1, lf("d", 4, 4, ct(-48*time.Hour), nfsURI("gone")), lf("n", 1, 4, ct(-48*time.Hour)))}},

		// KVCM's migration guards (#307): the guarded target and the source it names are
		// kept by every rule, in any state, valid or not; its other locations are judged.
		{name: "location: guarded copy target and its source kept", blocks: []subjects.BlockEntry{locBlock(1,
			lf("dst", 2, 9, ct(-48*time.Hour)+`,"migration_copy_guard":{"schema_version":1,"state":2,"operation_id":"op","source_location_id":"src"}`, nfsURI("gone")),
			lf("src", 3, 4, ct(-48*time.Hour), nfsURI("gone")),
			lf("o", 2, 4, ct(-48*time.Hour)))},
			want: []string{"1/o/orphan_writing"}, skips: map[string]int{pipeline.SkipMigrationGuard: 1, pipeline.SkipMigrationSource: 1}},
		{name: "location: quarantined guard of a future schema kept", blocks: []subjects.BlockEntry{locBlock(1,
			lf("dst", 2, 4, ct(-48*time.Hour)+`,"migration_copy_guard":{"schema_version":7,"state":4,"operation_id":"op","source_location_id":"src"}`),
			lf("src", 3, 4, ct(-48*time.Hour), nfsURI("gone")))},
			skips: map[string]int{pipeline.SkipMigrationGuard: 1, pipeline.SkipMigrationSource: 1}},
		{name: "location: a guard naming no source keeps the whole block", blocks: []subjects.BlockEntry{locBlock(1,
			lf("dst", 4, 4, ct(-48*time.Hour)+`,"migration_copy_guard":"broken"`),
			lf("a", 3, 4, ct(-48*time.Hour), nfsURI("gone")),
			lf("b", 2, 4, ct(-48*time.Hour)))},
			skips: map[string]int{pipeline.SkipMigrationGuard: 1, pipeline.SkipMigrationSource: 2}},
		{name: "location: a field that does not decode but names a guard keeps the block", blocks: []subjects.BlockEntry{{Key: 1, Layout: subjects.LayoutLocation,
			Locs: []subjects.LocField{{ID: subjects.RawText("c"), V: subjects.RawText(`{"id":"c","migration_copy_guard":{`)}, lfField(lf("a", 2, 4, ct(-48*time.Hour)))}}},
			skips: map[string]int{SkipCorruptLocation: 1, pipeline.SkipMigrationSource: 1}},
		{name: "location: field L# (empty id) that does not decode but names a guard keeps the block", blocks: []subjects.BlockEntry{{Key: 1, Layout: subjects.LayoutLocation,
			Locs: []subjects.LocField{{ID: subjects.RawText(""), V: subjects.RawText(`{"migration_copy_guard":{`)}, lfField(lf("a", 2, 4, ct(-48*time.Hour)))}}},
			skips: map[string]int{SkipCorruptLocation: 1, SkipCorruptURI: 0, pipeline.SkipMigrationSource: 1}},
		{name: "legacy: guarded target and its source kept", blocks: []subjects.BlockEntry{{Key: 7, LRUTime: old, URI: block(
			loc("dst", 2, 4, `,"migration_copy_guard":{"schema_version":1,"state":1,"operation_id":"op","source_location_id":"src"}`),
			loc("src", 3, 4, "", nfsURI("gone")), loc("o", 2, 4, ""))}},
			want: []string{"7/o/orphan_writing"}, skips: map[string]int{pipeline.SkipMigrationGuard: 1, pipeline.SkipMigrationSource: 1}},
		// KVMeta's locations: never judged, whatever their status and age.
		{name: "location: kvmeta location ids kept", blocks: []subjects.BlockEntry{locBlock(1,
			lf("kvmeta:v1:6b6579", 4, 4, ct(-48*time.Hour), nfsURI("gone")),
			lf("kvmeta:v1:6b657a", 2, 4, ct(-48*time.Hour)))},
			skips: map[string]int{SkipKVMeta: 2}},
		// Both layouts in one key: nothing in it is judged.
		{name: "ambiguous: nothing judged", blocks: []subjects.BlockEntry{{Key: 1, Layout: subjects.LayoutAmbiguous, LRUTime: old,
			URI:  block(loc("o", 2, 4, "", nfsURI("x"))),
			Locs: []subjects.LocField{lfField(lf("s", 3, 4, ct(-48*time.Hour), nfsURI("gone")))}}},
			skips: map[string]int{SkipAmbiguousLayout: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nfs := newNFS()
			set := fakeSet{"nfs_01": nfs}
			if tc.set != nil {
				set = tc.set(nfs)
			}
			g := tc.guard
			if g == nil {
				g = guard.None{}
			}
			cfg := DefaultConfig()
			v := Rules{Config: cfg, Storages: set, Guard: g}.Judge(context.Background(), subjects.Batch{Instance: "inst1", Blocks: tc.blocks}, judgeNow)
			if len(tc.want) > 0 {
				// A KVMeta instance's batch judges nothing, whatever it holds.
				kv := Rules{Config: cfg, Storages: set, Guard: g}.Judge(context.Background(), subjects.Batch{Instance: "__kv_meta_v1__61", Blocks: tc.blocks}, judgeNow)
				require.Empty(t, kv.Targets)
				require.NotZero(t, kv.Skips[SkipKVMeta])
			}
			var got []string
			for _, tg := range v.Targets {
				got = append(got, fmt.Sprintf("%d/%s/%s", tg.Key, tg.Location, tg.Reason))
			}
			require.Equal(t, tc.want, got)
			for r, n := range tc.skips {
				require.Equal(t, n, v.Skips[r], "skip %s (all: %v)", r, v.Skips)
			}
			// The expected bytes are the location's exact JSON value, in the layout it was read in.
			for _, tg := range v.Targets {
				for _, b := range tc.blocks {
					if b.Key != tg.Key {
						continue
					}
					if b.Layout == subjects.LayoutLocation {
						require.Equal(t, subjects.LayoutLocation, tg.Layout)
						var found bool
						for _, f := range b.Locs {
							if string(f.ID) == tg.Location {
								found = true
								require.Equal(t, string(f.V), string(tg.Expected))
							}
						}
						require.True(t, found)
						continue
					}
					require.Empty(t, tg.Layout, "legacy targets carry no layout (as older builds wrote them)")
					if blk, err := kvcm.DecodeBlock(b.URI); err == nil {
						l, ok := blk.Find(tg.Location)
						require.True(t, ok)
						require.Equal(t, string(l.Raw), string(tg.Expected))
					}
				}
			}
		})
	}
}

func TestJudgeChunksAndCap(t *testing.T) {
	nfs := &fakeBackend{name: "nfs_01", typ: kvcm.TypeFile, missing: map[string]bool{}}
	var blocks []subjects.BlockEntry
	for i := 0; i < 600; i++ {
		p := fmt.Sprintf("/data/f%d", i)
		if i%2 == 0 {
			nfs.missing[p] = true
		}
		blocks = append(blocks, subjects.BlockEntry{Key: int64(i), LRUTime: us(judgeNow), URI: block(loc("s", 3, 4, "", "file://nfs_01"+p+"?size=1"))})
	}
	cfg := DefaultConfig()
	cfg.MaxTargets = 100
	v := Rules{Config: cfg, Storages: fakeSet{"nfs_01": nfs}, Guard: guard.None{}}.Judge(context.Background(), subjects.Batch{Instance: "i", Blocks: blocks}, judgeNow)
	require.Len(t, nfs.calls, 2, "600 URIs → chunks of 512 and 88")
	require.Len(t, nfs.calls[0], 512)
	require.Len(t, nfs.calls[1], 88)
	require.Len(t, v.Targets, 100)
	require.Equal(t, 300, v.Candidates[subjects.ReasonStorageMissing])
	require.Equal(t, 200, v.Skips[SkipOverCap])
	require.Equal(t, int64(0), v.Targets[0].Key)
	require.Equal(t, int64(2), v.Targets[1].Key, "targets keep batch order")

	cfg.ProbeChunkSize = 7
	nfs.calls = nil
	Rules{Config: cfg, Storages: fakeSet{"nfs_01": nfs}, Guard: guard.None{}}.Judge(context.Background(), subjects.Batch{Instance: "i", Blocks: blocks[:20]}, judgeNow)
	require.Len(t, nfs.calls, 3)
	for _, c := range nfs.calls {
		require.LessOrEqual(t, len(c), 7)
	}
}

func TestProberConfigValidate(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	c.OrphanWritingGrace = 59 * time.Minute
	require.ErrorContains(t, c.Validate(), "orphan_writing_grace")
	c = DefaultConfig()
	c.ProbeChunkSize = 513
	require.ErrorContains(t, c.Validate(), "probe_chunk_size")
	c.ProbeChunkSize = 0
	require.ErrorContains(t, c.Validate(), "probe_chunk_size")
}

// TestKeptReasonReadsRuleOnesAge: a young WRITING is kept with the age rule 1 judged it by, the
// LRU time in the legacy layout and the create time in the location layout.
func TestKeptReasonReadsRuleOnesAge(t *testing.T) {
	now := time.Now()
	loc := &kvcm.Location{Status: kvcm.StatusWriting, HasCreateTime: true, CreateTimeUs: now.Add(-2 * time.Hour).UnixMicro()}
	lru := strconv.FormatInt(now.Add(-time.Hour).UnixMicro(), 10)
	for layout, want := range map[string]time.Duration{subjects.LayoutLegacy: time.Hour, subjects.LayoutLocation: 2 * time.Hour} {
		reason, age, aged := KeptReason(loc, layout, lru, now)
		require.Equal(t, KeptWritingWithinGrace, reason, layout)
		require.True(t, aged, layout)
		require.Equal(t, want, age.Truncate(time.Second), layout)
		wa, ok := WritingAge(loc, layout, lru, now)
		require.Equal(t, age, wa, layout)
		require.Equal(t, aged, ok, layout)
	}
	_, _, aged := KeptReason(&kvcm.Location{Status: kvcm.StatusWriting}, subjects.LayoutLocation, lru, now)
	require.False(t, aged, "no create time: no age in the location layout")
	reason, _, _ := KeptReason(&kvcm.Location{Status: kvcm.StatusServing}, subjects.LayoutLegacy, "", now)
	require.Equal(t, KeptSpecsPresent, reason)
	reason, _, _ = KeptReason(&kvcm.Location{Status: kvcm.StatusDeleting}, subjects.LayoutLegacy, "", now)
	require.Equal(t, "status_deleting", reason)
}

// TestKVCMGCDefers: with kvcm_gc, an orphan WRITING of the location layout is left to KVCM's
// own GC (whose delete lowers KVCM's counters) until kvcm_gc_grace + kvcm_gc_margin, counted as
// left_to_kvcm_gc; at exactly that age it is collected, 1 µs under it kept. A legacy orphan
// (f6aa2b2 has no GC) is not deferred; without kvcm_gc nothing is.
func TestKVCMGCDefers(t *testing.T) {
	judge := func(cfg Config, b subjects.BlockEntry) Verdict {
		return Rules{Config: cfg, Storages: fakeSet{}, Guard: guard.None{}}.Judge(context.Background(),
			subjects.Batch{Instance: "inst1", Blocks: []subjects.BlockEntry{b}}, judgeNow)
	}
	on := DefaultConfig()
	require.True(t, on.KVCMGC, "kvcm_gc is on by default, as in today's KVCM")
	on.KVCMGCGrace, on.KVCMGCMargin = 24*time.Hour, 6*time.Hour
	off := DefaultConfig()
	off.KVCMGC = false
	for _, tc := range []struct {
		name      string
		cfg       Config
		age       time.Duration
		collected bool
	}{
		{"on: past orphan_writing_grace, KVCM's", on, 25 * time.Hour, false},
		{"on: 1µs under grace + margin, KVCM's", on, 30*time.Hour - time.Microsecond, false},
		{"on: at grace + margin, collected", on, 30 * time.Hour, true},
		{"off: past orphan_writing_grace, collected", off, 25 * time.Hour, true},
		{"off: at exactly orphan_writing_grace, collected", off, 24 * time.Hour, true},
		{"off: 1µs under orphan_writing_grace, kept", off, 24*time.Hour - time.Microsecond, false},
	} {
		v := judge(tc.cfg, locBlock(-5, lf("a", 2, 4, ct(-tc.age), "file://nfs_01/r/x?size=1")))
		require.Equal(t, tc.collected, len(v.Targets) == 1, tc.name)
		deferred := tc.cfg.KVCMGC && !tc.collected
		require.Equal(t, deferred, v.Skips[SkipLeftToKVCMGC] == 1, tc.name)
	}
	// The legacy layout is not deferred.
	old := strconv.FormatInt(judgeNow.Add(-48*time.Hour).UnixMicro(), 10)
	v := judge(on, subjects.BlockEntry{Key: -5, LRUTime: old, URI: block(loc("a", 2, 4, "", "file://nfs_01/r/x?size=1"))})
	require.Len(t, v.Targets, 1)
	require.Zero(t, v.Skips[SkipLeftToKVCMGC])
}

// TestJudgeSpecsAcrossStorages: one SERVING location whose two specs live on two storages of
// its type, one probe failing and one answering a definitive missing. The missing spec decides
// (DESIGN §5.2: one missing spec makes the whole location a candidate; the error only makes
// its own spec unknown), as upstream's GC decides it; the failed probe is counted. With the
// missing storage's answer unknown instead, nothing is left to decide on and it is kept.
func TestJudgeSpecsAcrossStorages(t *testing.T) {
	nfsA := func() *fakeBackend {
		return &fakeBackend{name: "nfs_a", typ: kvcm.TypeFile, err: errors.New("eio")}
	}
	for _, tc := range []struct {
		name  string
		b     *fakeBackend
		want  []string
		probe int
	}{
		{"b missing", &fakeBackend{name: "nfs_b", typ: kvcm.TypeFile, missing: map[string]bool{"/d/x": true}}, []string{"7/s/storage_missing"}, 1},
		{"b unknown", &fakeBackend{name: "nfs_b", typ: kvcm.TypeFile, unknown: map[string]bool{"/d/x": true}}, nil, 1},
		{"b present", &fakeBackend{name: "nfs_b", typ: kvcm.TypeFile}, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := nfsA()
			blk := locBlock(7, lf("s", 3, 4, ct(-time.Hour), "file://nfs_a/d/x?size=1024", "file://nfs_b/d/x?size=1024"))
			v := Rules{Config: DefaultConfig(), Storages: fakeSet{"nfs_a": a, "nfs_b": tc.b}, Guard: guard.None{}}.Judge(context.Background(),
				subjects.Batch{Instance: "inst1", Blocks: []subjects.BlockEntry{blk}}, judgeNow)
			var got []string
			for _, tg := range v.Targets {
				got = append(got, fmt.Sprintf("%d/%s/%s", tg.Key, tg.Location, tg.Reason))
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.probe, v.Skips[SkipProbeError], "the failed probe is counted: %v", v.Skips)
			// Each storage was asked once, for its own spec only.
			require.Len(t, a.calls, 1)
			require.Len(t, tc.b.calls, 1)
			require.Equal(t, "/d/x", a.calls[0][0].Path)
			require.Len(t, tc.b.calls[0], 1)
		})
	}
}

// TestJudgeNoProbeForUnregisteredOrMismatch: a spec on a storage the registry does not list,
// and a spec whose storage is of another type than its location, are never probed (no
// MightExist call carries them) and keep their locations; a storage-missing location of the
// same batch, on a healthy storage, is still collected.
func TestJudgeNoProbeForUnregisteredOrMismatch(t *testing.T) {
	nfs := &fakeBackend{name: "nfs_01", typ: kvcm.TypeFile, missing: map[string]bool{"/d/gone": true, "/d/gone2": true, "/d/gone3": true}}
	hf := &fakeBackend{name: "hf_01", typ: kvcm.TypeHF3FS, missing: map[string]bool{"/d/gone": true}}
	blocks := []subjects.BlockEntry{
		locBlock(1, lf("u", 3, 4, ct(-time.Hour), "file://nfs_99/d/gone?size=1")),  // unregistered storage
		locBlock(2, lf("m", 3, 1, ct(-time.Hour), "file://nfs_01/d/gone2?size=1")), // hf3fs location on a file storage
		locBlock(3, lf("h", 3, 4, ct(-time.Hour), "hf3fs://hf_01/d/gone?size=1")),  // file location on an hf3fs storage
		locBlock(4, lf("ok", 3, 4, ct(-time.Hour), "file://nfs_01/d/gone3?size=1")),
	}
	v := Rules{Config: DefaultConfig(), Storages: fakeSet{"nfs_01": nfs, "hf_01": hf}, Guard: guard.None{}}.Judge(context.Background(),
		subjects.Batch{Instance: "inst1", Blocks: blocks}, judgeNow)
	require.Len(t, v.Targets, 1)
	require.Equal(t, int64(4), v.Targets[0].Key)
	require.Equal(t, "ok", v.Targets[0].Location)
	require.Equal(t, subjects.ReasonStorageMissing, v.Targets[0].Reason)
	require.Equal(t, 1, v.Skips[SkipStorageNotFound], "%v", v.Skips)
	require.Equal(t, 2, v.Skips[SkipStorageTypeMismatch], "%v", v.Skips)
	require.Empty(t, hf.calls, "no probe for a spec of another type")
	require.Len(t, nfs.calls, 1)
	require.Len(t, nfs.calls[0], 1, "only the healthy location's spec is probed")
	require.Equal(t, "/d/gone3", nfs.calls[0][0].Path)
}
