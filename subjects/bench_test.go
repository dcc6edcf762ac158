package subjects_test

import (
	"testing"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// A scan page of 256 blocks (scan_batch_size) with a two-location __uri__ each.

func BenchmarkEncodeBatch(b *testing.B) {
	batch := sampleBatch(256)
	data, err := subjects.Encode(batch)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := subjects.Encode(batch); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBatch(b *testing.B) {
	data, err := subjects.Encode(sampleBatch(256))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := subjects.DecodeBatch(data); err != nil {
			b.Fatal(err)
		}
	}
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
// default max payload and encode every part.
func BenchmarkEncodeBatchParts(b *testing.B) {
	batch := sampleBatch(256)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := subjects.EncodeBatchParts(batch, subjects.PayloadLimit(1<<20)); err != nil {
			b.Fatal(err)
		}
	}
}
