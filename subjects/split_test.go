package subjects_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func encodedLen(t *testing.T, v any) int {
	t.Helper()
	enc, err := subjects.Encode(v)
	require.NoError(t, err)
	return len(enc)
}

// checkSplit verifies the SplitBatch contract for one input.
func checkSplit(t *testing.T, b subjects.Batch, maxBytes int, parts []subjects.Batch, oversized []subjects.BlockEntry) {
	t.Helper()
	require.NotEmpty(t, parts)
	var kept []subjects.BlockEntry
	for i, p := range parts {
		require.LessOrEqual(t, encodedLen(t, p), maxBytes, "part %d", i)
		require.Equal(t, i, p.Part)
		require.Equal(t, len(parts), p.Parts)
		require.NoError(t, p.Validate())
		if i == 0 {
			require.Equal(t, b.BadKeys, p.BadKeys)
		} else {
			require.Zero(t, p.BadKeys)
		}
		// Everything but the blocks and the part numbers is the page's.
		q := p
		q.Blocks, q.Part, q.Parts, q.BadKeys = b.Blocks, b.Part, b.Parts, b.BadKeys
		require.Equal(t, b, q)
		if len(parts) > 1 {
			require.NotEmpty(t, p.Blocks, "part %d of a multi-part page is empty", i)
		}
		kept = append(kept, p.Blocks...)
	}
	// Kept and oversized blocks are the input, each in its order; oversized ones do not fit
	// alone and kept ones all do.
	ki, oi := 0, 0
	for _, blk := range b.Blocks {
		single := b
		single.Blocks = []subjects.BlockEntry{blk}
		fits := encodedLen(t, single) <= maxBytes
		switch {
		case ki < len(kept) && kept[ki].Key == blk.Key && string(kept[ki].URI) == string(blk.URI):
			require.True(t, fits || encodedLen(t, single) <= maxBytes+8, "kept block %d does not fit", blk.Key)
			ki++
		case oi < len(oversized) && oversized[oi].Key == blk.Key:
			require.Greater(t, encodedLen(t, single)+16, maxBytes, "block %d reported oversized but fits", blk.Key)
			oi++
		default:
			t.Fatalf("block %d lost", blk.Key)
		}
	}
	require.Equal(t, len(kept), ki)
	require.Equal(t, len(oversized), oi)
	// EncodeBatchParts gives the same parts, each with its encoding.
	enc, encOversized, err := subjects.EncodeBatchParts(b, maxBytes)
	require.NoError(t, err)
	require.Equal(t, oversized, encOversized)
	require.Len(t, enc, len(parts))
	for i, p := range enc {
		require.Equal(t, parts[i], p.Batch, "part %d", i)
		want, err := subjects.Encode(parts[i])
		require.NoError(t, err)
		require.Equal(t, string(want), string(p.Data), "part %d", i)
		require.Equal(t, len(p.Data), cap(p.Data), "part %d shares capacity with the next", i)
	}
	// Greedy: a part is closed only when the next block would not fit in it.
	for i := 0; i+1 < len(parts); i++ {
		grown := parts[i]
		grown.Blocks = append(append([]subjects.BlockEntry{}, parts[i].Blocks...), parts[i+1].Blocks[0])
		require.Greater(t, encodedLen(t, grown)+16, maxBytes, "part %d closed early", i)
	}
}

func TestSplitBatch(t *testing.T) {
	b := sampleBatch(256)
	whole := encodedLen(t, b)
	for _, maxBytes := range []int{whole, whole + 1, whole - 1, whole / 2, whole / 7, 2000, 1200} {
		parts, oversized, err := subjects.SplitBatch(b, maxBytes)
		require.NoError(t, err, "max %d", maxBytes)
		require.Empty(t, oversized, "max %d", maxBytes)
		checkSplit(t, b, maxBytes, parts, oversized)
		if maxBytes >= whole {
			require.Len(t, parts, 1)
		}
	}
}

func TestSplitBatchOversized(t *testing.T) {
	b := sampleBatch(5)
	b.Blocks[1].URI = subjects.RawText(strings.Repeat("x", 5000))
	b.Blocks[3].URI = subjects.RawText(strings.Repeat("\xff", 5000)) // base64 grows it
	parts, oversized, err := subjects.SplitBatch(b, 2000)
	require.NoError(t, err)
	require.Len(t, oversized, 2)
	require.Equal(t, b.Blocks[1].Key, oversized[0].Key)
	require.Equal(t, b.Blocks[3].Key, oversized[1].Key)
	checkSplit(t, b, 2000, parts, oversized)

	// Every block oversized: one part without blocks still carries the page's progress.
	all := sampleBatch(2)
	for i := range all.Blocks {
		all.Blocks[i].URI = subjects.RawText(strings.Repeat("y", 3000))
	}
	parts, oversized, err = subjects.SplitBatch(all, 2000)
	require.NoError(t, err)
	require.Len(t, oversized, 2)
	require.Len(t, parts, 1)
	require.Empty(t, parts[0].Blocks)
	require.Equal(t, all.Next, parts[0].Next)
}

func TestSplitBatchEmpty(t *testing.T) {
	for _, blocks := range [][]subjects.BlockEntry{nil, {}} {
		b := sampleBatch(0)
		b.Blocks = blocks
		b.Part, b.Parts = 3, 9 // reset by the split
		parts, oversized, err := subjects.SplitBatch(b, 1000)
		require.NoError(t, err)
		require.Empty(t, oversized)
		require.Len(t, parts, 1)
		require.Equal(t, 0, parts[0].Part)
		require.Equal(t, 1, parts[0].Parts)
		require.Empty(t, parts[0].Blocks)
		checkSplit(t, b, 1000, parts, oversized)
	}
}

func TestSplitBatchTooSmall(t *testing.T) {
	_, _, err := subjects.SplitBatch(sampleBatch(3), 100)
	require.ErrorContains(t, err, "an empty part needs")
	_, _, err = subjects.SplitBatch(sampleBatch(0), 0)
	require.Error(t, err)
	_, _, err = subjects.EncodeBatchParts(sampleBatch(3), 100)
	require.ErrorContains(t, err, "an empty part needs")
}

// TestSplitBatchRandom splits random pages at random limits.
func TestSplitBatchRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	charset := []byte("ab\"\\&\x00\xc3\xa9")
	for range 200 {
		b := sampleBatch(0)
		b.BadKeys = rng.IntN(3)
		for i := range rng.IntN(40) {
			uri := make([]byte, rng.IntN(600))
			for j := range uri {
				uri[j] = charset[rng.IntN(len(charset))]
			}
			if rng.IntN(10) == 0 {
				uri = append(uri, 0xff)
			}
			b.Blocks = append(b.Blocks, subjects.BlockEntry{Key: int64(i) - 20, URI: uri})
		}
		maxBytes := 400 + rng.IntN(3000)
		parts, oversized, err := subjects.SplitBatch(b, maxBytes)
		require.NoError(t, err)
		checkSplit(t, b, maxBytes, parts, oversized)
	}
}

// TestSplitBatchPublish publishes every part of a large page, with its message id, to a
// server with a small max payload, where the unsplit page is refused.
func TestSplitBatchPublish(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartNATS(t, testenv.WithNATSMaxPayload(32<<10))
	nc := srv.Conn(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	n := mustNames(t, "kvcmgc", "c1")
	require.NoError(t, subjects.Ensure(ctx, js, n, subjects.DefaultSettings()))

	b := sampleBatch(256)
	b.Blocks[7].URI = subjects.RawText(strings.Repeat("z", 40<<10))
	whole, err := subjects.Encode(b)
	require.NoError(t, err)
	require.Greater(t, len(whole), int(nc.MaxPayload()))
	_, err = js.Publish(ctx, n.BatchSubject(b.Instance), whole)
	require.ErrorIs(t, err, nats.ErrMaxPayload)

	parts, oversized, err := subjects.SplitBatch(b, subjects.PayloadLimit(nc.MaxPayload()))
	require.NoError(t, err)
	require.Len(t, oversized, 1)
	require.Greater(t, len(parts), 1)
	for _, p := range parts {
		data, err := subjects.Encode(p)
		require.NoError(t, err)
		ack, err := js.Publish(ctx, n.BatchSubject(p.Instance), data, jetstream.WithMsgID(subjects.BatchMsgID(p)))
		require.NoError(t, err)
		require.False(t, ack.Duplicate)
	}
	st, err := js.Stream(ctx, n.BatchesStream())
	require.NoError(t, err)
	require.Equal(t, uint64(len(parts)), st.CachedInfo().State.Msgs)

	// Read back: the parts reassemble the page.
	c, err := js.Consumer(ctx, n.BatchesStream(), n.ProberConsumer())
	require.NoError(t, err)
	msgs, err := c.FetchNoWait(len(parts))
	require.NoError(t, err)
	var blocks []subjects.BlockEntry
	for m := range msgs.Messages() {
		p, err := subjects.DecodeBatch(m.Data())
		require.NoError(t, err)
		blocks = append(blocks, p.Blocks...)
		require.NoError(t, m.Ack())
	}
	require.NoError(t, msgs.Error())
	require.Len(t, blocks, 255)
}

// LargestField names where an oversized block's bytes are: __uri__ in the legacy layout, the
// L# field in the location layout, the larger of them in an ambiguous block.
func TestBlockEntryLargestField(t *testing.T) {
	big := subjects.RawText(strings.Repeat("x", 10<<20))
	tests := []struct {
		name  string
		entry subjects.BlockEntry
		field string
		size  int
	}{
		{"legacy", subjects.BlockEntry{Layout: subjects.LayoutLegacy, URI: big}, "__uri__", 10 << 20},
		{"location", subjects.BlockEntry{Layout: subjects.LayoutLocation, Locs: []subjects.LocField{
			{ID: subjects.RawText("small"), V: subjects.RawText("{}")}, {ID: subjects.RawText("big"), V: big}}}, "L#big", 10 << 20},
		{"ambiguous", subjects.BlockEntry{Layout: subjects.LayoutAmbiguous, URI: subjects.RawText("{}"),
			Locs: []subjects.LocField{{ID: subjects.RawText("a"), V: big}}}, "L#a", 10 << 20},
		{"a tombstone only", subjects.BlockEntry{Layout: subjects.LayoutLocation, Locs: []subjects.LocField{{ID: subjects.RawText("t")}}}, "L#t", 0},
		{"nothing", subjects.BlockEntry{}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, size := tt.entry.LargestField()
			require.Equal(t, tt.field, name)
			require.Equal(t, tt.size, size)
		})
	}
}
