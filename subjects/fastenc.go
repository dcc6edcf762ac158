package subjects

import (
	"strconv"

	"github.com/kvcm-gc/kvcm-gc/internal/jsonstr"
)

// A scan batch, the largest and most frequent message, is encoded by hand: encoding/json
// re-scans and compacts the output of every json.Marshaler, so each block's __uri__ was
// encoded by RawText and then walked again byte by byte, and SplitBatch encoded every block
// once more to measure it. The output is byte for byte what Encode writes through
// encoding/json; TestFastBatchEqualsEncodingJSON compares them. A field added to Batch or
// BlockEntry must be added here too (the test notices a forgotten one unless it is omitempty
// and left zero).

// appendJSON appends b as encoding/json (without HTML escaping) writes it.
func (b *Batch) appendJSON(dst []byte) []byte {
	dst = b.appendHeader(dst)
	if b.Blocks == nil {
		return append(dst, `null}`...)
	}
	dst = append(dst, '[')
	for i := range b.Blocks {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = b.Blocks[i].appendJSON(dst)
	}
	return append(dst, "]}"...)
}

// appendHeader appends every member of b up to and including `"blocks":`.
func (b *Batch) appendHeader(dst []byte) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(b.V), 10)
	dst = append(dst, `,"cluster":`...)
	dst = jsonstr.Append(dst, b.Cluster)
	dst = append(dst, `,"instance":`...)
	dst = jsonstr.Append(dst, b.Instance)
	dst = append(dst, `,"group":`...)
	dst = jsonstr.Append(dst, b.Group)
	dst = append(dst, `,"store":`...)
	dst = jsonstr.Append(dst, b.Store)
	dst = append(dst, `,"round":`...)
	dst = strconv.AppendUint(dst, b.Round, 10)
	dst = append(dst, `,"lease_rev":`...)
	dst = strconv.AppendUint(dst, b.LeaseRev, 10)
	dst = append(dst, `,"cursor":`...)
	dst = strconv.AppendUint(dst, b.Cursor, 10)
	dst = append(dst, `,"next":`...)
	dst = strconv.AppendUint(dst, b.Next, 10)
	dst = append(dst, `,"part":`...)
	dst = strconv.AppendInt(dst, int64(b.Part), 10)
	dst = append(dst, `,"parts":`...)
	dst = strconv.AppendInt(dst, int64(b.Parts), 10)
	dst = append(dst, `,"scanned_at_us":`...)
	dst = strconv.AppendInt(dst, b.ScannedAt, 10)
	if b.BadKeys != 0 {
		dst = append(dst, `,"bad_keys":`...)
		dst = strconv.AppendInt(dst, int64(b.BadKeys), 10)
	}
	return append(dst, `,"blocks":`...)
}

// sizeHint is a capacity that usually holds the whole encoding (quotes inside __uri__ values
// are escaped, hence the margin).
func (b *Batch) sizeHint() int {
	n := 256 + len(b.Cluster) + len(b.Instance) + len(b.Group) + len(b.Store)
	for i := range b.Blocks {
		e := &b.Blocks[i]
		n += len(e.URI)*5/4 + len(e.LRUTime) + 64
		for _, l := range e.Locs {
			n += (len(l.ID)+len(l.V))*5/4 + 16
		}
		for _, f := range e.Fields {
			n += len(f) + 3
		}
	}
	return n
}

// appendJSON appends e as encoding/json writes it.
func (e *BlockEntry) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"key":"`...)
	dst = strconv.AppendInt(dst, e.Key, 10)
	dst = append(dst, '"')
	if e.Layout != "" {
		dst = append(dst, `,"layout":`...)
		dst = jsonstr.Append(dst, e.Layout)
	}
	if len(e.URI) > 0 {
		dst = append(dst, `,"uri":`...)
		dst = e.URI.appendJSON(dst)
	}
	if e.LRUTime != "" {
		dst = append(dst, `,"lru":`...)
		dst = jsonstr.Append(dst, e.LRUTime)
	}
	if len(e.Locs) > 0 {
		dst = append(dst, `,"locs":[`...)
		for i := range e.Locs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = e.Locs[i].ID.appendJSON(dst)
			dst = append(dst, `,"v":`...)
			dst = e.Locs[i].V.appendJSON(dst)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(e.Fields) > 0 {
		dst = append(dst, `,"fields":[`...)
		for i, f := range e.Fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonstr.Append(dst, f)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}
