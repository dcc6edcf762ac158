package prober_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// The prober's and the deleter's CPU work without I/O: what a stage costs beyond the Redis
// round trips and file-system calls the benchmark harness measures raw.

var benchNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// benchBatch is a scan page as the scanner publishes it: blocks of two locations in seed's
// layout; every tenth location is garbage (an old orphan WRITING, or a SERVING location whose
// second file is missing), the rest live SERVING with both files present.
func benchBatch(root string, blocks int) (subjects.Batch, map[string]bool) {
	lru := strconv.FormatInt(benchNow.Add(-26*time.Hour).UnixMicro(), 10)
	missing := map[string]bool{}
	b := subjects.Batch{V: subjects.SchemaVersion, Cluster: "c1", Instance: "inst0", Group: "g", Store: "s", Round: 1, Parts: 1}
	for i := range blocks {
		key := int64(i)*7919 + 1
		uri := "{"
		for j := range 2 {
			id := fmt.Sprintf("l%07d", 2*i+j)
			status := 3
			var specs string
			for s := range 2 {
				p := fmt.Sprintf("%s/inst0/tp%d/%x_%s", root, s, key, id)
				if s > 0 {
					specs += ","
				}
				specs += fmt.Sprintf(`{"name":"tp%d","uri":"file://nfs_01%s?size=1024"}`, s, p)
				if (2*i+j)%20 == 7 && s == 1 {
					missing[p] = true
				}
			}
			if (2*i+j)%20 == 17 {
				status = 2
			}
			if j > 0 {
				uri += ","
			}
			uri += fmt.Sprintf(`%q:{"id":%q,"status":%d,"type":4,"spec_size":2,"location_specs":[%s]}`, id, id, status, specs)
		}
		b.Blocks = append(b.Blocks, subjects.BlockEntry{Key: key, URI: subjects.RawText(uri + "}"), LRUTime: lru})
	}
	return b, missing
}

// tableBackend answers probes from a table, without I/O.
type tableBackend struct{ missing map[string]bool }

func (t tableBackend) Name() string            { return "nfs_01" }
func (t tableBackend) Type() kvcm.StorageType  { return kvcm.TypeFile }
func (t tableBackend) KeyCountPerFile() uint64 { return 1 }
func (t tableBackend) Delete(context.Context, kvcm.DataURI) error {
	return nil
}
func (t tableBackend) MightExist(_ context.Context, uris []kvcm.DataURI) ([]storage.Result, error) {
	out := make([]storage.Result, len(uris))
	for i, u := range uris {
		out[i] = storage.Present
		if t.missing[u.Path] {
			out[i] = storage.Missing
		}
	}
	return out, nil
}

type tableSet struct{ b storage.Backend }

func (s tableSet) Lookup(name string) (storage.Backend, bool) { return s.b, name == "nfs_01" }

// BenchmarkJudge is the rules over one 256-block page with a storage set that answers from
// memory: decoding, age and URI parsing, grouping, de-duplication.
func BenchmarkJudge(b *testing.B) {
	batch, missing := benchBatch("/data/nfs", 256)
	rules := prober.Rules{Config: prober.DefaultConfig(), Storages: tableSet{tableBackend{missing}}, Guard: guard.None{}}
	benchJudge(b, rules, batch)
}

// BenchmarkJudgeLocation is BenchmarkJudge over the same page in the location layout: each
// location a field of its own.
func BenchmarkJudgeLocation(b *testing.B) {
	batch, missing := benchBatch("/data/nfs", 256)
	for i := range batch.Blocks {
		be := &batch.Blocks[i]
		blk, err := kvcm.DecodeBlock(be.URI)
		if err != nil {
			b.Fatal(err)
		}
		be.Layout, be.URI, be.LRUTime = subjects.LayoutLocation, nil, ""
		for _, l := range blk.Locations {
			be.Locs = append(be.Locs, subjects.LocField{ID: subjects.RawText(l.ID), V: subjects.RawText(l.Raw)})
		}
	}
	rules := prober.Rules{Config: prober.DefaultConfig(), Storages: tableSet{tableBackend{missing}}, Guard: guard.None{}}
	benchJudge(b, rules, batch)
}

// benchJudge checks that rules judge every location of batch and find targets, then times
// the judging.
func benchJudge(b *testing.B, rules prober.Rules, batch subjects.Batch) {
	b.Helper()
	v := rules.Judge(context.Background(), batch, benchNow)
	if len(v.Targets) == 0 || v.Judged != 512 {
		b.Fatalf("judged %d, %d targets", v.Judged, len(v.Targets))
	}
	b.ReportMetric(float64(v.Judged), "locations/op")
	b.ReportAllocs()
	for b.Loop() {
		rules.Judge(context.Background(), batch, benchNow)
	}
}

// BenchmarkJudgeStatProbe is BenchmarkJudge with the file storage's stat probe over real
// files: what the prober spends per page, minus the message handling.
func BenchmarkJudgeStatProbe(b *testing.B) {
	root := b.TempDir()
	batch, missing := benchBatch(filepath.Join(root, "nfs"), 256)
	for i := range batch.Blocks {
		blk, err := kvcm.DecodeBlock(batch.Blocks[i].URI)
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range blk.Locations {
			for _, s := range l.Specs {
				u, err := kvcm.ParseDataURI(s.URI)
				if err != nil {
					b.Fatal(err)
				}
				if missing[u.Path] {
					continue
				}
				if err := os.MkdirAll(filepath.Dir(u.Path), 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(u.Path, nil, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	set, err := storage.NewSet(map[string]kvcm.StorageConfig{"nfs_01": {Type: kvcm.TypeFile, TypeName: "file", Available: true,
		Name: "nfs_01", RootPath: filepath.Join(root, "nfs") + "/", KeyCountPerFile: 1}}, storage.Options{DefaultProbe: storage.ProbeStat})
	if err != nil {
		b.Fatal(err)
	}
	rules := prober.Rules{Config: prober.DefaultConfig(), Storages: set, Guard: guard.None{}}
	benchJudge(b, rules, batch)
}

// memStore is a meta.Store in memory, legacy layout only: the deleter's protocol without
// Redis.
type memStore struct {
	mu sync.Mutex
	m  map[int64][]byte
}

func (s *memStore) ScanStore(context.Context, uint64, int, func(string) bool) (meta.Page, error) {
	return meta.Page{}, nil
}

func (s *memStore) ReadBlocks(_ context.Context, inst string, keys []int64) ([]meta.BlockRead, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]meta.BlockRead, len(keys))
	for i, k := range keys {
		out[i].Entry = meta.Entry{Instance: inst, BlockKey: k}
		if v, ok := s.m[k]; ok {
			out[i].Exists, out[i].Entry.Layout, out[i].Entry.URI = true, kvcm.LayoutLegacy, v
		}
	}
	return out, nil
}

func (s *memStore) swap(key int64, expected, next []byte) error {
	if string(s.m[key]) != string(expected) {
		return meta.ErrConflict
	}
	if len(next) == 0 {
		delete(s.m, key)
	} else {
		s.m[key] = next
	}
	return nil
}

func (s *memStore) CASMany(_ context.Context, _ string, ws []meta.CondWrite) ([]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(ws))
	for i, w := range ws {
		errs[i] = s.swap(w.BlockKey, w.Expected, w.Next)
	}
	return errs, nil
}

func (s *memStore) CADMany(_ context.Context, _ string, ws []meta.CondWrite) ([]meta.CADResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := make([]meta.CADResult, len(ws))
	for i, w := range ws {
		res[i].Err = s.swap(w.BlockKey, w.Expected, w.Next)
	}
	return res, nil
}

// BenchmarkDeleteProtocol is the deleter's protocol for one target (check, CAS to DELETING,
// physical delete, CAD) against an in-memory store and storage: its CPU cost per location.
func BenchmarkDeleteProtocol(b *testing.B) {
	batch, missing := benchBatch("/data/nfs", 256)
	set := tableSet{tableBackend{missing}}
	v := prober.Rules{Config: prober.DefaultConfig(), Storages: set, Guard: guard.None{}}.Judge(context.Background(), batch, benchNow)
	seeded := map[int64][]byte{}
	for _, be := range batch.Blocks {
		seeded[be.Key] = be.URI
	}
	proto := deleter.NewProtocol(deleter.DefaultConfig())
	store := &memStore{m: map[int64][]byte{}}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t := v.Targets[i%len(v.Targets)]
		if i%len(v.Targets) == 0 {
			b.StopTimer()
			for k, val := range seeded {
				store.m[k] = val
			}
			b.StartTimer()
		}
		i++
		res, err := proto.DeleteAll(ctx, store, set, "inst0", []subjects.Target{t})
		if err != nil || res[0].Outcome != subjects.OutcomeDeleted {
			b.Fatalf("target %d/%s: %v %+v", t.Key, t.Location, err, res)
		}
	}
}
