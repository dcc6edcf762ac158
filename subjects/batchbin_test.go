package subjects

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// oddBatches are batches whose every field holds one of oddStrings, in every block form.
func oddBatches() []Batch {
	var out []Batch
	for _, s := range oddStrings {
		for _, blocks := range [][]BlockEntry{nil, {
			{Key: -5, URI: RawText(s), LRUTime: s},
			{Key: 1 << 62, URI: RawText(`{"a":1}`)},
			{Key: -1 << 63, LRUTime: "1760000000000000"},
			{Key: 7, Layout: LayoutLocation, Locs: []LocField{{ID: RawText(s), V: RawText(`{"id":"x"}`)}, {ID: RawText("t")}},
				Fields: []string{"BP#prev_key", s}},
			{Key: 8, Layout: s, URI: RawText(s), LRUTime: s, Locs: []LocField{{ID: RawText("a"), V: RawText(s)}}},
			{Key: 9, Layout: LayoutAmbiguous, URI: RawText("{}"), Locs: []LocField{{ID: RawText("b"), V: RawText(s + s)}}},
		}} {
			for _, badKeys := range []int{0, len(s) + 1} {
				out = append(out, Batch{V: BatchSchemaVersion, Cluster: s, Instance: s + "i", Group: s, Store: s,
					Round: 1<<64 - 1, LeaseRev: 3, Cursor: 99, Next: 1, Part: 2, Parts: 3, ScannedAt: -1, BadKeys: badKeys,
					Blocks: blocks})
			}
		}
	}
	return out
}

// TestBinaryBatchRoundTrip: every field comes back byte for byte, invalid UTF-8 included
// (no base64 form is needed), compressed or not.
func TestBinaryBatchRoundTrip(t *testing.T) {
	for _, b := range oddBatches() {
		data, err := Encode(b)
		require.NoError(t, err)
		require.True(t, IsBinaryBatch(data))
		got, err := decodeBinaryBatch(data)
		require.NoError(t, err)
		b = emptyAsNil(b)
		require.Equal(t, b, got)

		// The same body stored uncompressed decodes alike.
		plain := append([]byte(batchMagic+"\x00"), b.binBody(nil, b.Blocks)...)
		got, err = decodeBinaryBatch(plain)
		require.NoError(t, err)
		require.Equal(t, b, got)
		// The split's arithmetic: exact block sizes, a header bound that holds.
		header := len(b.appendBinHeader(nil, len(b.Blocks)))
		require.Equal(t, len(plain)-batchPrefix, header+sumBlockSizes(b))
		require.LessOrEqual(t, header, b.binHeaderSize()+binaryMaxVarint)
	}
}

const binaryMaxVarint = 10

// emptyAsNil is b as the decoder gives it back: an empty byte string is absent (nil), as a
// schema 1 batch leaves an empty uri out.
func emptyAsNil(b Batch) Batch {
	b.Blocks = append([]BlockEntry(nil), b.Blocks...)
	for i := range b.Blocks {
		e := &b.Blocks[i]
		if len(e.URI) == 0 {
			e.URI = nil
		}
		e.Locs = append([]LocField(nil), e.Locs...)
		for j := range e.Locs {
			if len(e.Locs[j].ID) == 0 {
				e.Locs[j].ID = nil
			}
			if len(e.Locs[j].V) == 0 {
				e.Locs[j].V = nil
			}
		}
	}
	if len(b.Blocks) == 0 {
		b.Blocks = nil
	}
	return b
}

func sumBlockSizes(b Batch) int {
	n := 0
	for i := range b.Blocks {
		n += b.Blocks[i].binBlockSize()
	}
	return n
}

// TestBinaryBatchMatchesJSON: a batch decodes to the same blocks from either schema.
func TestBinaryBatchMatchesJSON(t *testing.T) {
	b := Batch{V: BatchSchemaVersion, Cluster: "c1", Instance: "inst0", Group: "g", Store: "s", Round: 4, Parts: 1,
		ScannedAt: 1_760_000_000_000_000, Blocks: []BlockEntry{
			{Key: -3, Layout: LayoutLegacy, URI: RawText(`{"a":{"status":2}}`), LRUTime: "17"},
			{Key: 5, Layout: LayoutLocation, Locs: []LocField{{ID: RawText("x"), V: RawText(`{"id":"x"}`)}}, Fields: []string{"BP#prev_key"}},
		}}
	bin, err := Encode(b)
	require.NoError(t, err)
	fromBin, err := DecodeBatch(bin)
	require.NoError(t, err)
	j := b
	j.V = SchemaVersion
	js, err := Encode(j)
	require.NoError(t, err)
	require.Equal(t, byte('{'), js[0])
	fromJSON, err := DecodeBatch(js)
	require.NoError(t, err)
	fromJSON.V = BatchSchemaVersion
	require.Equal(t, fromJSON, fromBin)
}

// TestBinaryBatchParts: every part is within the limit, the parts hold the page's blocks in
// order with the page's header, bad_keys only in part 0, blocks too large alone left out; and
// the split is deterministic (the same page gives the same message ids after a crash).
func TestBinaryBatchParts(t *testing.T) {
	b := Batch{V: BatchSchemaVersion, Cluster: "c1", Instance: "inst0", Group: "g", Store: "s", Round: 4, Cursor: 8, Next: 9,
		ScannedAt: 1, BadKeys: 3}
	for i := range 300 {
		e := BlockEntry{Key: int64(i), Layout: LayoutLocation, Locs: []LocField{{ID: RawText(fmt.Sprintf("l%d", i)),
			V: RawText(bytes.Repeat([]byte{byte('a' + i%26)}, 100+i*7))}}}
		if i == 150 {
			e.Locs[0].V = make([]byte, 5000) // alone over the limit
		}
		b.Blocks = append(b.Blocks, e)
	}
	const limit = 4096
	parts, oversized, err := EncodeBatchParts(b, limit)
	require.NoError(t, err)
	require.Len(t, oversized, 1)
	require.Equal(t, int64(150), oversized[0].Key)
	require.Greater(t, len(parts), 10)
	var keys []int64
	for i, p := range parts {
		require.LessOrEqual(t, len(p.Data), limit, "part %d", i)
		got, err := DecodeBatch(p.Data)
		require.NoError(t, err)
		require.Equal(t, p.Batch, got)
		require.Equal(t, i, got.Part)
		require.Equal(t, len(parts), got.Parts)
		require.Equal(t, b.Cursor, got.Cursor)
		if i == 0 {
			require.Equal(t, 3, got.BadKeys)
		} else {
			require.Zero(t, got.BadKeys)
		}
		for _, e := range got.Blocks {
			keys = append(keys, e.Key)
		}
	}
	require.Len(t, keys, 299)
	for i := 1; i < len(keys); i++ {
		require.Less(t, keys[i-1], keys[i])
	}
	again, _, err := EncodeBatchParts(b, limit)
	require.NoError(t, err)
	for i := range parts {
		require.Equal(t, parts[i].Data, again[i].Data)
		require.Equal(t, BatchMsgID(parts[i].Batch), BatchMsgID(again[i].Batch))
	}
	split, _, err := SplitBatch(b, limit)
	require.NoError(t, err)
	require.Len(t, split, len(parts))

	// A page of no block is one part; a limit that holds no header is an error.
	empty := b
	empty.Blocks = nil
	parts, oversized, err = EncodeBatchParts(empty, limit)
	require.NoError(t, err)
	require.Empty(t, oversized)
	require.Len(t, parts, 1)
	_, _, err = EncodeBatchParts(b, 40)
	require.Error(t, err)
}

// TestBinaryBatchRefused: a malformed schema 2 batch is poison with a reason, never a panic or
// a guess.
func TestBinaryBatchRefused(t *testing.T) {
	good, err := Encode(Batch{V: BatchSchemaVersion, Cluster: "c", Instance: "i", Parts: 1,
		Blocks: []BlockEntry{{Key: 1, Layout: LayoutLocation, Locs: []LocField{{ID: RawText("a"), V: RawText("{}")}}}}})
	require.NoError(t, err)
	body := (&Batch{V: BatchSchemaVersion, Cluster: "c", Instance: "i", Parts: 1}).binBody(nil, nil)
	for name, data := range map[string][]byte{
		"prefix only":       []byte(batchMagic),
		"unknown flag":      append([]byte(batchMagic+"\x02"), body...),
		"corrupt s2":        append([]byte(batchMagic+"\x01"), 0xff, 0xff, 0xff),
		"truncated":         append([]byte(batchMagic+"\x00"), body[:len(body)-1]...),
		"trailing":          append(append([]byte(batchMagic+"\x00"), body...), 0),
		"huge count":        append(append([]byte(batchMagic+"\x00"), body[:len(body)-1]...), 0xff, 0xff, 0x7f),
		"invalid batch":     append([]byte(batchMagic+"\x00"), (&Batch{V: BatchSchemaVersion, Parts: 0}).binBody(nil, nil)...),
		"truncated message": good[:len(good)-2],
	} {
		_, err := DecodeBatch(data)
		require.Error(t, err, name)
		require.True(t, errors.Is(err, ErrPoison), "%s: %v", name, err)
	}
}

// FuzzDecodeBinaryBatch: the binary decoder never panics, refuses only with ErrPoison, and
// what it accepts encodes back to a message that decodes to the same batch.
func FuzzDecodeBinaryBatch(f *testing.F) {
	for i, b := range oddBatches() {
		if i%5 != 0 {
			continue
		}
		data, err := Encode(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(append([]byte(batchMagic+"\x00"), b.binBody(nil, b.Blocks)...))
	}
	f.Add([]byte(batchMagic + "\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !IsBinaryBatch(data) {
			data = append([]byte(batchMagic+"\x00"), data...)
		}
		b, err := DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, ErrPoison) {
				t.Fatalf("error does not wrap ErrPoison: %v", err)
			}
			return
		}
		enc, err := Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeBatch(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		require.Equal(t, b, again)
	})
}
