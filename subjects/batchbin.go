package subjects

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"
)

// Schema 2 of a scan batch is schema 1's fields in a binary encoding, compressed with S2. A
// batch is the largest and most frequent message (a page of 256 two-location blocks was about
// 229 kB of JSON): the JSON form quoted every location's JSON again (a fifth of the scanner's
// CPU), and BATCHES kept about 0.9 kB per scanned block for max_age. The binary form carries
// every byte string verbatim behind its length, so nothing is quoted or escaped and invalid
// UTF-8 needs no base64 form; S2 then removes what the locations of a page repeat (field
// names, storage URIs, spec names): about 0.12 kB per block. DecodeBatch reads both schemas.
//
// The message is the 4-byte magic "KVB\x02", a flags byte, then the body: S2's block format of
// the binary batch when flagCompressed is set, the binary batch itself otherwise (a body S2
// would not shrink). The binary batch, with uvarint lengths and counts, zig-zag varints for
// signed integers and uvarints for the unsigned ones:
//
//	cluster instance group store       length-prefixed bytes
//	round lease_rev cursor next        uvarint
//	part parts scanned_at_us bad_keys  varint
//	blocks                             count, then per block:
//	  key                              varint
//	  layout                           one byte: layoutCodes, or layoutOther then its bytes
//	  uri lru                          length-prefixed bytes (length 0: absent)
//	  locs                             count, then per location its id and value, each length-prefixed
//	  fields                           count, then each name length-prefixed
//
// Nothing may follow the last block. The JSON schema 1 (codec.go) stays readable, so batches
// of an older scanner still in BATCHES are judged; an older prober terminates a schema 2
// batch as poison (it is judged again the next round), so consumers are upgraded first.

// BatchSchemaVersion is the "v" of a batch in the binary encoding; Encode writes a Batch with
// this V in it, and the scanner publishes it.
const BatchSchemaVersion = 2

// batchMagic starts every schema 2 batch; a JSON message starts with '{' or white space.
const batchMagic = "KVB\x02"

const (
	flagCompressed = 1 << 0 // the body is S2's block format of the binary batch
	flagsKnown     = flagCompressed
)

// batchPrefix is the magic and the flags byte.
const batchPrefix = len(batchMagic) + 1

// maxBatchBody bounds the decoded body of a schema 2 batch: a message holds at most the
// server's max payload (64 MiB at most), and a body S2 compressed is no larger than that
// times what S2 gains at best on a batch. A message claiming more is refused unread.
const maxBatchBody = 256 << 20

// Layout codes of the binary encoding.
const (
	layoutNone byte = iota // "" (legacy, as schema 1 leaves it out)
	layoutCodeLegacy
	layoutCodeLocation
	layoutCodeAmbiguous
	layoutOther // any other string, written after the code
)

var layoutCodes = map[string]byte{"": layoutNone, LayoutLegacy: layoutCodeLegacy, LayoutLocation: layoutCodeLocation,
	LayoutAmbiguous: layoutCodeAmbiguous}

var layoutNames = [...]string{layoutNone: "", layoutCodeLegacy: LayoutLegacy, layoutCodeLocation: LayoutLocation,
	layoutCodeAmbiguous: LayoutAmbiguous}

// IsBinaryBatch reports whether data is a schema 2 batch (it may still be malformed).
func IsBinaryBatch(data []byte) bool { return bytes.HasPrefix(data, []byte(batchMagic)) }

// binHeaderMax bounds the encoded header of b beyond its four strings: every integer at its
// widest.
const binHeaderMax = 8 * binary.MaxVarintLen64

// binHeaderSize is an upper bound of b's encoded header, whatever Part, Parts and BadKeys.
func (b *Batch) binHeaderSize() int {
	n := binHeaderMax
	for _, s := range []string{b.Cluster, b.Instance, b.Group, b.Store} {
		n += uvarintLen(uint64(len(s))) + len(s)
	}
	return n
}

// binBlockSize is the exact encoded size of e.
func (e *BlockEntry) binBlockSize() int {
	n := varintLen(e.Key) + 1
	if _, ok := layoutCodes[e.Layout]; !ok {
		n += uvarintLen(uint64(len(e.Layout))) + len(e.Layout)
	}
	n += uvarintLen(uint64(len(e.URI))) + len(e.URI) + uvarintLen(uint64(len(e.LRUTime))) + len(e.LRUTime)
	n += uvarintLen(uint64(len(e.Locs)))
	for i := range e.Locs {
		l := &e.Locs[i]
		n += uvarintLen(uint64(len(l.ID))) + len(l.ID) + uvarintLen(uint64(len(l.V))) + len(l.V)
	}
	n += uvarintLen(uint64(len(e.Fields)))
	for _, f := range e.Fields {
		n += uvarintLen(uint64(len(f))) + len(f)
	}
	return n
}

func (b *Batch) appendBinHeader(dst []byte, blocks int) []byte {
	for _, s := range []string{b.Cluster, b.Instance, b.Group, b.Store} {
		dst = appendBytes(dst, s)
	}
	for _, u := range []uint64{b.Round, b.LeaseRev, b.Cursor, b.Next} {
		dst = binary.AppendUvarint(dst, u)
	}
	for _, v := range []int64{int64(b.Part), int64(b.Parts), b.ScannedAt, int64(b.BadKeys)} {
		dst = binary.AppendVarint(dst, v)
	}
	return binary.AppendUvarint(dst, uint64(blocks))
}

func (e *BlockEntry) appendBin(dst []byte) []byte {
	dst = binary.AppendVarint(dst, e.Key)
	if c, ok := layoutCodes[e.Layout]; ok {
		dst = append(dst, c)
	} else {
		dst = appendBytes(append(dst, layoutOther), e.Layout)
	}
	dst = appendBytes(dst, e.URI)
	dst = appendBytes(dst, e.LRUTime)
	dst = binary.AppendUvarint(dst, uint64(len(e.Locs)))
	for i := range e.Locs {
		dst = appendBytes(dst, e.Locs[i].ID)
		dst = appendBytes(dst, e.Locs[i].V)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Fields)))
	for _, f := range e.Fields {
		dst = appendBytes(dst, f)
	}
	return dst
}

func appendBytes[T ~string | ~[]byte](dst []byte, s T) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// binBody is the uncompressed binary batch of b with the given blocks.
func (b *Batch) binBody(dst []byte, blocks []BlockEntry) []byte {
	dst = b.appendBinHeader(dst, len(blocks))
	for i := range blocks {
		dst = blocks[i].appendBin(dst)
	}
	return dst
}

// sealBatch makes the message of a binary body: the prefix, then the body S2-compressed
// unless that would not make it smaller. scratch, when large enough, receives the
// compression (its contents are overwritten).
func sealBatch(body, scratch []byte) []byte {
	if n := s2.MaxEncodedLen(len(body)); n > 0 && cap(scratch) < n {
		scratch = make([]byte, n)
	}
	flags, payload := byte(0), body
	if c := s2.Encode(scratch[:cap(scratch)], body); len(c) < len(body) {
		flags, payload = flagCompressed, c
	}
	out := make([]byte, 0, batchPrefix+len(payload))
	out = append(append(out, batchMagic...), flags)
	return append(out, payload...)
}

// encodeBinary is Encode of a schema 2 batch.
func (b *Batch) encodeBinary() []byte {
	size := b.binHeaderSize()
	for i := range b.Blocks {
		size += b.Blocks[i].binBlockSize()
	}
	return sealBatch(b.binBody(make([]byte, 0, size), b.Blocks), nil)
}

// encodeBinaryParts is EncodeBatchParts for a schema 2 batch: parts whose sealed message is
// at most maxBytes, every part's body bounded as if S2 did not shrink it at all (S2 is then
// not used), so the bound holds whatever the blocks hold.
func encodeBinaryParts(b Batch, maxBytes int) (parts []EncodedBatch, oversized []BlockEntry, err error) {
	limit := maxBytes - batchPrefix
	head := b.binHeaderSize() + binary.MaxVarintLen64 // the header and the block count
	if head > limit {
		return nil, nil, fmt.Errorf("split batch: an empty part needs %d bytes, more than the limit %d",
			head+batchPrefix, maxBytes)
	}
	var starts []int
	kept := b.Blocks // the page's blocks, until one of them is oversized
	size := 0
	for i := range b.Blocks {
		e := &b.Blocks[i]
		n := e.binBlockSize()
		if head+n > limit {
			if len(oversized) == 0 {
				kept = slices.Clip(b.Blocks[:i])
			}
			oversized = append(oversized, *e)
			continue
		}
		if len(oversized) > 0 {
			kept = append(kept, *e)
		}
		at := i - len(oversized) // the block's index in kept
		if len(starts) == 0 || size+n > limit {
			starts = append(starts, at)
			size = head
		}
		size += n
	}
	if len(oversized) == 0 {
		kept = b.Blocks
	}
	if len(starts) == 0 {
		starts = []int{0} // a page with no block still publishes its cursor progress
	}
	// The body and the compression are scratch space (only each part's message is kept),
	// reused across pages: a page's worth of garbage less for every page scanned.
	bufs := binBufs.Get().(*binBuffers)
	defer binBufs.Put(bufs)
	body, scratch := bufs.body, bufs.scratch
	defer func() { bufs.body, bufs.scratch = body[:0], scratch }()
	parts = make([]EncodedBatch, len(starts))
	for i := range starts {
		start, end := partBounds(starts, i, len(kept))
		blocks := kept[start:end:end]
		if len(kept) == 0 {
			blocks = []BlockEntry{}
		}
		p := b.part(i, len(starts), blocks)
		body = p.binBody(body[:0], p.Blocks)
		if n := s2.MaxEncodedLen(len(body)); cap(scratch) < n {
			scratch = make([]byte, n)
		}
		data := sealBatch(body, scratch)
		if len(data) > maxBytes {
			// The bound's arithmetic is wrong: refuse rather than publish what the server rejects.
			return nil, nil, fmt.Errorf("split batch: part %d encodes to %d bytes, more than the limit %d",
				i, len(data), maxBytes)
		}
		parts[i] = EncodedBatch{Batch: p, Data: data}
	}
	return parts, oversized, nil
}

// binBuffers are the scratch space of encodeBinaryParts.
type binBuffers struct{ body, scratch []byte }

var binBufs = sync.Pool{New: func() any { return new(binBuffers) }}

// errBinary is the one failure of a malformed schema 2 batch; decodeBinaryBatch wraps it with
// what was being read.
var errBinary = errors.New("malformed")

// decodeBinaryBatch decodes a schema 2 batch (data starts with batchMagic). The byte strings
// of the result share the decoded body, which nothing else holds; each has its length as its
// capacity, so an append to one never writes into the next.
func decodeBinaryBatch(data []byte) (Batch, error) {
	fail := func(what string, err error) (Batch, error) {
		return Batch{}, fmt.Errorf("%w: decode batch (schema %d): %s: %w", ErrPoison, BatchSchemaVersion, what, err)
	}
	if len(data) < batchPrefix {
		return fail("prefix", errBinary)
	}
	flags, body := data[len(batchMagic)], data[batchPrefix:]
	if flags&^flagsKnown != 0 {
		return fail("flags", fmt.Errorf("unknown flags %#x", flags))
	}
	if flags&flagCompressed != 0 {
		n, err := s2.DecodedLen(body)
		if err != nil {
			return fail("compressed body", err)
		}
		if n > maxBatchBody {
			return fail("compressed body", fmt.Errorf("decodes to %d bytes, more than %d", n, maxBatchBody))
		}
		if body, err = s2.Decode(make([]byte, n), body); err != nil {
			return fail("compressed body", err)
		}
	} else {
		body = bytes.Clone(body) // the result must not share the caller's buffer
	}
	r := binReader{data: body}
	b := Batch{V: BatchSchemaVersion}
	b.Cluster, b.Instance, b.Group, b.Store = r.str(), r.str(), r.str(), r.str()
	b.Round, b.LeaseRev, b.Cursor, b.Next = r.uvarint(), r.uvarint(), r.uvarint(), r.uvarint()
	b.Part, b.Parts, b.ScannedAt, b.BadKeys = r.int(), r.int(), r.varint(), r.int()
	// Every block takes at least 5 bytes (key, layout, three counts or lengths): a count
	// beyond what is left is refused before anything is allocated for it.
	nb := r.count(5)
	if r.err != nil {
		return fail("header", r.err)
	}
	if nb > 0 {
		b.Blocks = make([]BlockEntry, nb)
	}
	var locs []LocField // one array for the locations of every block, while it lasts
	for i := range b.Blocks {
		e := &b.Blocks[i]
		e.Key = r.varint()
		switch c := r.byte(); {
		case c == layoutOther:
			e.Layout = r.str()
		case int(c) < len(layoutNames):
			e.Layout = layoutNames[c]
		default:
			r.fail(fmt.Errorf("unknown layout code %d", c))
		}
		e.URI = RawText(r.bytes())
		e.LRUTime = r.str()
		if n := r.count(2); n > 0 {
			if cap(locs)-len(locs) < n {
				locs = make([]LocField, 0, max(n, min(r.left()/8+1, 2*len(b.Blocks)))) // at least 8 bytes per location left
			}
			start := len(locs)
			for range n {
				locs = append(locs, LocField{ID: RawText(r.bytes()), V: RawText(r.bytes())})
			}
			e.Locs = locs[start:len(locs):len(locs)]
		}
		if n := r.count(1); n > 0 {
			e.Fields = make([]string, n)
			for j := range e.Fields {
				e.Fields[j] = r.field()
			}
		}
		if r.err != nil {
			return fail(fmt.Sprintf("block %d", i), r.err)
		}
	}
	if r.left() != 0 {
		return fail("end", fmt.Errorf("%d bytes after the last block", r.left()))
	}
	return b, nil
}

// binReader reads the binary batch; the first failure sticks and every later read gives zero.
type binReader struct {
	data []byte
	i    int
	err  error
}

func (r *binReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.i = len(r.data)
}

func (r *binReader) left() int { return len(r.data) - r.i }

func (r *binReader) uvarint() uint64 { return readVarint(r, "uvarint", binary.Uvarint) }
func (r *binReader) varint() int64   { return readVarint(r, "varint", binary.Varint) }

// readVarint reads one number with decode (binary.Uvarint or binary.Varint), what naming its
// encoding in the error.
func readVarint[T uint64 | int64](r *binReader, what string, decode func([]byte) (T, int)) T {
	v, n := decode(r.data[r.i:])
	if n <= 0 {
		r.fail(fmt.Errorf("%w %s at %d", errBinary, what, r.i))
		return 0
	}
	r.i += n
	return v
}

func (r *binReader) int() int {
	v := r.varint()
	if v < math.MinInt || v > math.MaxInt {
		r.fail(fmt.Errorf("integer %d out of range", v))
		return 0
	}
	return int(v)
}

func (r *binReader) byte() byte {
	if r.i >= len(r.data) {
		r.fail(fmt.Errorf("%w: truncated", errBinary))
		return 0
	}
	c := r.data[r.i]
	r.i++
	return c
}

// count reads a count of items each taking at least min bytes.
func (r *binReader) count(min int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(r.left()/min) {
		r.fail(fmt.Errorf("count %d exceeds what %d bytes can hold", n, r.left()))
		return 0
	}
	return int(n)
}

// bytes reads a length-prefixed byte string: nil when empty, else a slice of the body with
// no room beyond it.
func (r *binReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(r.left()) {
		r.fail(fmt.Errorf("length %d exceeds the %d bytes left", n, r.left()))
		return nil
	}
	if n == 0 {
		return nil
	}
	end := r.i + int(n)
	b := r.data[r.i:end:end]
	r.i = end
	return b
}

func (r *binReader) str() string { return string(r.bytes()) }

// field reads a field name; the one nearly every location-layout block has is not copied.
func (r *binReader) field() string {
	b := r.bytes()
	if string(b) == fieldPrevKey {
		return fieldPrevKey
	}
	return string(b)
}

// fieldPrevKey is KVCM's BP#prev_key field, beside the locations of nearly every block.
const fieldPrevKey = "BP#prev_key"

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}

// BatchJSON is b in the JSON form of schema 1 whatever its V, for people to read (a schema 2
// message is binary): the same members, the same exact bytes.
func BatchJSON(b Batch) []byte { return b.appendJSON(make([]byte, 0, b.sizeHint())) }
