package subjects

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestStreamFillOf(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name       string
		max        int64
		bytes      uint64
		first      uint64
		ackFloor   uint64
		consumer   bool
		discarding bool
		lost       uint64
	}{
		{"unlimited", -1, 50 * gib, 1, 0, true, false, 0},
		{"half full", gib, gib / 2, 1, 0, true, false, 0},
		{"within a message of the cap", gib, gib - 1<<20, 900, 899, true, true, 0},
		{"at the cap, the consumer behind the first message", gib, gib, 900, 100, true, true, 799},
		{"aged out, not discarding, nothing lost", gib, gib / 4, 900, 899, true, false, 0},
		{"a small cap: a twentieth of it", 1000, 951, 1, 0, false, true, 0},
		{"no consumer", gib, gib, 900, 0, false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cons *jetstream.ConsumerInfo
			if tc.consumer {
				cons = &jetstream.ConsumerInfo{AckFloor: jetstream.SequenceInfo{Stream: tc.ackFloor}}
			}
			f := StreamFillOf(jetstream.StreamConfig{MaxBytes: tc.max}, jetstream.StreamState{Bytes: tc.bytes, FirstSeq: tc.first}, cons)
			require.Equal(t, tc.discarding, f.Discarding)
			require.Equal(t, tc.lost, f.Lost)
		})
	}
}
