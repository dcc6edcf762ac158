package deleter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// BenchmarkDeleteRequest is one delete request of the prober's default size (256 targets,
// two per block, each with a file) through the whole protocol against a real Redis and a
// directory: the deleter's cost per request, round trips included. Its sub-benchmarks split the
// same 256 targets into requests of n: what the prober's gathering (gather.go) saves when a scan
// page holds only a few garbage locations of an instance.
func BenchmarkDeleteRequest(b *testing.B) {
	for _, n := range []int{256, 64, 12} {
		b.Run(fmt.Sprintf("targets=%d", n), func(b *testing.B) { benchDeleteRequest(b, n) })
	}
}

func benchDeleteRequest(b *testing.B, perRequest int) {
	f := newDeleterFixture(b, false)
	const blocks = 128
	var targets []subjects.Target
	uris := map[int64]string{}
	var files []string
	for k := range int64(blocks) {
		var locs [2]string
		for j, id := range []string{"a", "b"} {
			p := filepath.Join(f.root, fmt.Sprintf("%d%s", k, id))
			files = append(files, p)
			locs[j] = fmt.Sprintf(`{"id":%q,"status":2,"type":4,"spec_size":1,"location_specs":[{"name":"tp0","uri":"file://nfs%s?size=1"}]}`, id, p)
			targets = append(targets, target(k, id, locs[j]))
		}
		uris[k] = fmt.Sprintf(`{"a":%s,"b":%s,"live":{"id":"live","status":3,"type":4,"spec_size":0,"location_specs":[]}}`, locs[0], locs[1])
	}
	ctx := context.Background()
	p := NewProtocol(DefaultConfig())
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for k, u := range uris {
			if err := f.r.Client().HSet(ctx, kvcm.BlockKey("i", k), "__uri__", u, "__lru_time__", "1").Err(); err != nil {
				b.Fatal(err)
			}
		}
		for _, p := range files {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		for chunk := range slices.Chunk(targets, perRequest) {
			for _, r := range runBenchRequest(ctx, b, p, f, chunk) {
				if r.Outcome != subjects.OutcomeDeleted {
					b.Fatalf("%+v", r)
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(targets)), "ns/location")
}

func runBenchRequest(ctx context.Context, b *testing.B, p Protocol, f *deleterFixture, targets []subjects.Target) []TargetResult {
	res, err := p.DeleteAll(ctx, f.store, f.set, "i", targets)
	if err != nil {
		b.Fatal(err)
	}
	return res
}
