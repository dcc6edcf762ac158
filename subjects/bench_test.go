package subjects_test

import (
	"fmt"
	"testing"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// A scan page of 256 blocks (scan_batch_size) with a two-location __uri__ each.

func BenchmarkEncodeBatch(b *testing.B) { benchEncode(b, sampleBatch(256)) }

// benchEncode measures Encode of msg, counting its encoded size as the bytes of one op.
func benchEncode[T any](b *testing.B, msg T) {
	benchEncoded(b, msg, func([]byte) error {
		_, err := subjects.Encode(msg)
		return err
	})
}

// benchDecode measures decode of msg's encoding, counting its size as the bytes of one op.
func benchDecode[T any](b *testing.B, msg T, decode func([]byte) (T, error)) {
	benchEncoded(b, msg, func(data []byte) error {
		_, err := decode(data)
		return err
	})
}

// benchEncoded measures op on msg's encoding, counting its size as the bytes of one op.
func benchEncoded[T any](b *testing.B, msg T, op func(data []byte) error) {
	b.Helper()
	data, err := subjects.Encode(msg)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := op(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBatch(b *testing.B) {
	for _, l := range sampleLayouts() {
		b.Run(l.name, func(b *testing.B) {
			data, err := subjects.Encode(l.batch)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := subjects.DecodeBatch(data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data))/float64(len(l.batch.Blocks)), "bytes/block")
		})
	}
}

// sampleLayouts are a 256-block page of each layout in both batch schemas (JSON "v1" and the
// binary "v2").
func sampleLayouts() []struct {
	name  string
	batch subjects.Batch
} {
	var out []struct {
		name  string
		batch subjects.Batch
	}
	for _, v := range []int{subjects.SchemaVersion, subjects.BatchSchemaVersion} {
		for _, l := range []struct {
			name  string
			batch subjects.Batch
		}{{"legacy", sampleBatch(256)}, {"location", sampleLocationBatch(256)}} {
			l.batch.V = v
			l.name = fmt.Sprintf("%s-v%d", l.name, v)
			out = append(out, l)
		}
	}
	return out
}

func BenchmarkSplitBatch(b *testing.B) {
	batch := sampleBatch(256)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := subjects.SplitBatch(batch, 16<<10); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeBatchParts is the scanner's encoding of a page: split under the server's
// default max payload and encode every part, in both layouts.
func BenchmarkEncodeBatchParts(b *testing.B) {
	for _, l := range sampleLayouts() {
		b.Run(l.name, func(b *testing.B) {
			parts, _, err := subjects.EncodeBatchParts(l.batch, subjects.PayloadLimit(1<<20))
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, p := range parts {
				n += len(p.Data)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := subjects.EncodeBatchParts(l.batch, subjects.PayloadLimit(1<<20)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/float64(len(l.batch.Blocks)), "bytes/block")
		})
	}
}

// sampleLocationBatch is a page of today's layout: two L# fields per block, as KVCM writes
// them (create_time before location_specs), and a BP#prev_key.
func sampleLocationBatch(blocks int) subjects.Batch {
	b := sampleBatch(0)
	for i := range blocks {
		key := int64(i)*7919 - 1000
		b.Blocks = append(b.Blocks, subjects.BlockEntry{Key: key, Layout: subjects.LayoutLocation,
			Locs: []subjects.LocField{
				{ID: subjects.RawText("q0x7m2ab"), V: subjects.RawText(fmt.Sprintf(`{"id":"q0x7m2ab","status":3,"type":4,"spec_size":1,"create_time":1760000000000000,"location_specs":[`+
					`{"name":"tp0","uri":"file://nfs_01/tmp/nfs/inst0/tp0/%x_3c1a9f0e77d2b4a1?blkid=0&size=1024"}]}`, key))},
				{ID: subjects.RawText("k3j9x0cd"), V: subjects.RawText(fmt.Sprintf(`{"id":"k3j9x0cd","status":2,"type":1,"spec_size":1,"create_time":1760000000000000,"location_specs":[`+
					`{"name":"tp0","uri":"hf3fs://hf3fs_01/3fs/stage/kvcm/inst0/tp0/%x?size=1024"}]}`, key))},
			},
			Fields: []string{"BP#prev_key"}})
	}
	return b
}
