package subjects

import "fmt"

// HeaderReserve is the part of a server's max payload kept for message headers
// (Nats-Msg-Id and a few more): the server counts headers and payload together.
const HeaderReserve = 512

// PayloadLimit returns the largest encoded message to pass to SplitBatch for a server whose
// max payload is maxPayload (nats.Conn.MaxPayload).
func PayloadLimit(maxPayload int64) int {
	return int(maxPayload) - HeaderReserve
}

// SplitBatch splits b's blocks into parts whose encodings are each at most maxBytes, setting
// Part/Parts. Blocks too large to fit alone are left out and returned in oversized.
//
// Parts keep the blocks' order and share the bytes of b's block entries. The split is greedy and
// deterministic, so re-splitting the same page after a crash gives the same parts and the same
// message ids. A page always gives at least one part, even with no block (an empty page, or one
// whose every block is oversized): the page's cursor progress is still published. BadKeys is
// carried by part 0 only, so that summing over parts counts each bad key once.
//
// Each part's header is sized as if Part and Parts had the most digits they can have, so a
// part may be a few bytes smaller than it could be; maxBytes is never exceeded. An error means
// that even a part with no block does not fit.
func SplitBatch(b Batch, maxBytes int) (parts []Batch, oversized []BlockEntry, err error) {
	n := max(len(b.Blocks), 1)
	head := b
	head.Blocks = []BlockEntry{}
	head.Part, head.Parts = n-1, n
	enc, err := Encode(head)
	if err != nil {
		return nil, nil, fmt.Errorf("split batch: %w", err)
	}
	// A part is its header with "blocks":[] filled: each block's encoding plus a comma
	// between two blocks.
	headSize := len(enc)
	if headSize > maxBytes {
		return nil, nil, fmt.Errorf("split batch: an empty part needs %d bytes, more than the limit %d", headSize, maxBytes)
	}
	if len(b.Blocks) == 0 {
		b.Part, b.Parts = 0, 1
		return []Batch{b}, nil, nil
	}

	var (
		kept   = make([]BlockEntry, 0, len(b.Blocks))
		starts []int // index in kept of each part's first block
		size   int   // encoded size of the current part
	)
	for _, blk := range b.Blocks {
		enc, err := Encode(blk)
		if err != nil {
			return nil, nil, fmt.Errorf("split batch: block %d: %w", blk.Key, err)
		}
		bs := len(enc)
		if headSize+bs > maxBytes {
			oversized = append(oversized, blk)
			continue
		}
		if len(starts) == 0 || size+1+bs > maxBytes {
			starts = append(starts, len(kept))
			size = headSize + bs
		} else {
			size += 1 + bs
		}
		kept = append(kept, blk)
	}
	if len(starts) == 0 {
		b.Part, b.Parts, b.Blocks = 0, 1, []BlockEntry{}
		return []Batch{b}, oversized, nil
	}
	parts = make([]Batch, len(starts))
	for i, start := range starts {
		end := len(kept)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		p := b
		p.Blocks = kept[start:end:end]
		p.Part, p.Parts = i, len(starts)
		if i > 0 {
			p.BadKeys = 0
		}
		parts[i] = p
	}
	return parts, oversized, nil
}
