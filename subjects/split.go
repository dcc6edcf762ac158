package subjects

import (
	"fmt"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// HeaderReserve is the part of a server's max payload kept for message headers
// (Nats-Msg-Id and a few more): the server counts headers and payload together.
const HeaderReserve = 512

// PayloadLimit returns the largest encoded message to pass to SplitBatch for a server whose
// max payload is maxPayload (nats.Conn.MaxPayload).
func PayloadLimit(maxPayload int64) int {
	return int(maxPayload) - HeaderReserve
}

// SplitBatch splits b's blocks into parts whose encodings are each at most maxBytes, setting
// Part/Parts (in the encoding b.V names). Blocks too large to fit alone are left out and returned in oversized.
//
// Parts keep the blocks' order and share the bytes of b's block entries. The split is greedy
// and deterministic, so re-splitting the same page after a crash gives the same parts and the
// same message ids. A page always gives at least one part, even with no block (an empty page,
// or one whose every block is oversized): the page's cursor progress is still published.
// BadKeys is carried by part 0 only, so that summing over parts counts each bad key once.
//
// A block is oversized when it does not fit beside the largest part header (the one with the
// most digits in Part and Parts), so a block within a few bytes of the limit may be reported
// oversized although it would fit in part 0. An error means that even a part with no block
// does not fit.
func SplitBatch(b Batch, maxBytes int) (parts []Batch, oversized []BlockEntry, err error) {
	if b.V == BatchSchemaVersion {
		enc, oversized, err := encodeBinaryParts(b, maxBytes)
		for _, p := range enc {
			parts = append(parts, p.Batch)
		}
		return parts, oversized, err
	}
	parts, _, oversized, err = splitBatch(b, maxBytes, nil)
	return parts, oversized, err
}

// EncodedBatch is one part of a split page with its encoding (what Encode gives for Batch).
type EncodedBatch struct {
	Batch Batch
	Data  []byte
}

// EncodeBatchParts is SplitBatch followed by Encode of every part, without encoding any block
// twice: the parts, their blocks and oversized are exactly SplitBatch's, and each Data is at
// most maxBytes. The Data of all parts share one allocation (each has its own capacity, so an
// append to one never writes into another).
//
// A batch of BatchSchemaVersion is encoded in the binary schema (batchbin.go), split by the
// same rule on its binary size.
func EncodeBatchParts(b Batch, maxBytes int) (parts []EncodedBatch, oversized []BlockEntry, err error) {
	if b.V == BatchSchemaVersion {
		return encodeBinaryParts(b, maxBytes)
	}
	var blocks encodedBlocks
	split, sizes, oversized, err := splitBatch(b, maxBytes, &blocks)
	if err != nil {
		return nil, nil, err
	}
	if len(split) == 1 && len(oversized) == 0 && len(blocks.parts) == 1 {
		// The page is one part, with every block: its encoding is what the split measured.
		data := append(blocks.data, "]}"...)
		if len(data) > maxBytes {
			return nil, nil, fmt.Errorf("split batch: part 0 encodes to %d bytes, more than the limit %d", len(data), maxBytes)
		}
		return []EncodedBatch{{Batch: split[0], Data: data[:len(data):len(data)]}}, nil, nil
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	buf := make([]byte, 0, total)
	parts = make([]EncodedBatch, len(split))
	for i := range split {
		start := len(buf)
		if i >= len(blocks.parts) {
			buf = split[i].appendJSON(buf) // a part with no block
		} else {
			// The header, then the blocks' encodings from the split's measuring pass.
			buf = split[i].appendHeader(buf)
			buf = append(buf, '[')
			for j, k := range blocks.parts[i] {
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = append(buf, blocks.data[blocks.ends[k]-blocks.sizes[k]:blocks.ends[k]]...)
			}
			buf = append(buf, "]}"...)
		}
		if n := len(buf) - start; n > maxBytes {
			// The split's arithmetic is wrong: refuse rather than publish what the server rejects.
			return nil, nil, fmt.Errorf("split batch: part %d encodes to %d bytes, more than the limit %d", i, n, maxBytes)
		}
		parts[i] = EncodedBatch{Batch: split[i], Data: buf[start:len(buf):len(buf)]}
	}
	return parts, oversized, nil
}

// encodedBlocks keeps what splitBatch's measuring pass encoded: block i of the page is
// data[ends[i]-sizes[i]:ends[i]], and parts[p] lists the blocks of part p by page index.
type encodedBlocks struct {
	data        []byte
	sizes, ends []int
	parts       [][]int
}

// splitBatch is SplitBatch; sizes holds each part's encoded length (an upper bound for a
// page without blocks).
// With keep set, the blocks' encodings are kept there for EncodeBatchParts.
func splitBatch(
	b Batch,
	maxBytes int,
	keep *encodedBlocks,
) (parts []Batch, sizes []int, oversized []BlockEntry, err error) {
	// A part is its header, which ends in "blocks":[], filled with the blocks' encodings and
	// a comma between two blocks. Headers differ only in the digits of Part and Parts and in
	// bad_keys (part 0 only).
	head := b
	head.Blocks = []BlockEntry{}
	head.Part, head.Parts = 0, 1
	enc := head.appendJSON(make([]byte, 0, 256))
	head0 := len(enc)
	head.BadKeys = 0
	headN := len(head.appendJSON(enc[:0]))
	header := func(part, parts int) int {
		h := headN
		if part == 0 {
			h = head0
		}
		return h + digits(part) - 1 + digits(parts) - 1
	}
	if header(0, 1) > maxBytes {
		return nil, nil, nil, fmt.Errorf("split batch: an empty part needs %d bytes, more than the limit %d",
			header(0, 1), maxBytes)
	}
	if len(b.Blocks) == 0 {
		b.Part, b.Parts = 0, 1
		return []Batch{b}, []int{head0 + 2}, nil, nil // "null" when b.Blocks is nil
	}

	blockSizes := make([]int, len(b.Blocks))
	if keep != nil {
		// Laid out as the encoding of a page that is one part: when it is, that is the
		// part's encoding once closed, and nothing is copied.
		keep.data = make([]byte, 0, b.sizeHint())
		one := b
		one.Part, one.Parts = 0, 1
		keep.data = append(one.appendHeader(keep.data), '[')
		keep.ends = make([]int, len(b.Blocks))
		for i := range b.Blocks {
			if i > 0 {
				keep.data = append(keep.data, ',')
			}
			n := len(keep.data)
			keep.data = b.Blocks[i].appendJSON(keep.data)
			blockSizes[i], keep.ends[i] = len(keep.data)-n, len(keep.data)
		}
		keep.sizes = blockSizes
	} else {
		for i := range b.Blocks {
			enc = b.Blocks[i].appendJSON(enc[:0])
			blockSizes[i] = len(enc)
		}
	}
	// Split assuming the number of parts has the digits of guess; when it turns out to have
	// more, the headers were underestimated and the split is redone with the larger count.
	// Guesses only grow, so this ends; a smaller count than guessed only wastes a few bytes.
	for guess := 1; ; {
		var starts []int    // index in kept of each part's first block
		var partSizes []int // encoded size of each part
		kept := make([]BlockEntry, 0, len(b.Blocks))
		keptIdx := make([]int, 0, len(b.Blocks)) // page index of each kept block
		oversized = oversized[:0]
		// No part index has more digits than guess, so this bounds every header.
		maxHeader := max(head0, headN) + 2*(digits(guess)-1)
		size := 0 // encoded size of the current part
		for i, blk := range b.Blocks {
			bs := blockSizes[i]
			if maxHeader+bs > maxBytes {
				oversized = append(oversized, blk)
				continue
			}
			if len(starts) == 0 || size+1+bs > maxBytes {
				starts = append(starts, len(kept))
				size = header(len(starts)-1, guess) + bs
				partSizes = append(partSizes, 0)
			} else {
				size += 1 + bs
			}
			partSizes[len(partSizes)-1] = size
			kept = append(kept, blk)
			keptIdx = append(keptIdx, i)
		}
		if len(starts) == 0 {
			b.Part, b.Parts, b.Blocks = 0, 1, []BlockEntry{}
			return []Batch{b}, []int{head0}, oversized, nil
		}
		if digits(len(starts)) > digits(guess) {
			guess = len(starts)
			continue
		}
		parts = make([]Batch, len(starts))
		sizes = partSizes
		if keep != nil {
			keep.parts = make([][]int, len(starts))
		}
		for i := range starts {
			start, end := partBounds(starts, i, len(kept))
			parts[i] = b.part(i, len(starts), kept[start:end:end])
			if keep != nil {
				keep.parts[i] = keptIdx[start:end:end]
			}
		}
		if len(oversized) == 0 {
			oversized = nil
		}
		return parts, sizes, oversized, nil
	}
}

// partBounds is the range of part i in the n kept blocks, given each part's first index.
func partBounds(starts []int, i, n int) (start, end int) {
	start, end = starts[i], n
	if i+1 < len(starts) {
		end = starts[i+1]
	}
	return start, end
}

// part is b as part i of n, holding blocks; only part 0 counts the page's bad keys.
func (b Batch) part(i, n int, blocks []BlockEntry) Batch {
	b.Blocks = blocks
	b.Part, b.Parts = i, n
	if i > 0 {
		b.BadKeys = 0
	}
	return b
}

// digits is the decimal length of n >= 0.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// LargestField names the field of b that holds the most bytes, and their number: `__uri__`
// (legacy, ambiguous) or `L#<id>` (location, ambiguous). It is what an oversized block's
// skip event names: the block is left out whole, and the field says where its bytes are.
func (b BlockEntry) LargestField() (name string, size int) {
	if len(b.URI) > 0 {
		name, size = kvcm.FieldURI, len(b.URI)
	}
	for _, l := range b.Locs {
		if n := len(l.V); n > size || name == "" {
			name, size = kvcm.LocationField(string(l.ID)), n
		}
	}
	return name, size
}
