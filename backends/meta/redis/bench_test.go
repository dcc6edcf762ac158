package redismeta_test

import (
	"context"
	"fmt"
	"testing"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/conformance/metatest"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// BenchmarkScanPage measures one page of the maintenance scan (SCAN + pipelined HMGET) over
// an instance of 20k blocks with realistic __uri__ values, at the default scan_batch_size.
func BenchmarkScanPage(b *testing.B) {
	srv := testenv.StartRedis(b)
	ctx := context.Background()
	const blocks = 20000
	pipe := srv.Client().Pipeline()
	for i := range blocks {
		uri := metatest.URI(metatest.Location(fmt.Sprintf("%08d", i), kvcm.StatusServing, kvcm.TypeFile,
			fmt.Sprintf("file://nfs_01/tmp/nfs/inst/tp0/%x_3c1a9f0e77d2b4a1?blkid=%d&size=1048576", i, i%8)))
		pipe.HSet(ctx, kvcm.BlockKey("inst", int64(i)*7919-1<<40), metatest.Block(uri, ""))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	conn, err := redismeta.ParseURI(srv.URI())
	if err != nil {
		b.Fatal(err)
	}
	st, err := redismeta.OpenStore(ctx, conn, redismeta.StoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var cursor uint64
	keys := 0
	for b.Loop() {
		p, err := metatest.ScanInstance(ctx, st, "inst", cursor, 256)
		if err != nil {
			b.Fatal(err)
		}
		keys += len(p.Entries)
		cursor = p.Next
	}
	b.ReportMetric(float64(keys)/float64(b.N), "keys/op")
}
