package subjects

import (
	"bytes"
	"math"
)

// A batch is decoded by hand when it has the form Encode writes: encoding/json spent a fifth of
// the prober's CPU on it (reflection per member, a validating pre-scan of the whole message,
// and one allocation per __uri__).
//
// decodeBatchFast is deliberately narrow. It accepts only a strict subset of what
// encoding/json accepts: a JSON object whose members are Batch's own names spelled exactly,
// each at most once, with values of the expected JSON type (integers without fraction or
// exponent, strings, a block array or null for "blocks", and in each block only "key", "uri"
// as a string and "lru"). Anything else (an unknown or differently cased member, a repeated
// member, null for a scalar, a __uri__ in its base64 form, a string that encoding/json would
// alter such as invalid UTF-8, a number out of range, a syntax error) makes it give up, and
// DecodeBatch then decodes with encoding/json, so the result is always encoding/json's.
// For what it accepts the value is the one encoding/json gives: TestDecodeBatchFastCorpus and
// FuzzDecodeBatchFast compare the two.

// Bits of the Batch members seen, to refuse a repeated member.
const (
	bV = 1 << iota
	bCluster
	bInstance
	bGroup
	bStore
	bRound
	bLeaseRev
	bCursor
	bNext
	bPart
	bParts
	bScannedAt
	bBadKeys
	bBlocks
)

// fastDecoder reads one message. Every method reports false when the input leaves the
// accepted form; the position is then meaningless.
type fastDecoder struct {
	data []byte
	i    int
	// arena holds the decoded __uri__ bytes of all blocks: one allocation instead of one per
	// block. A decoded string is never longer than its literal, so len(data) always suffices
	// and the slices handed out never move.
	arena []byte
	// scratch is reused to unquote the other strings.
	scratch []byte
}

func decodeBatchFast(data []byte) (Batch, bool) {
	d := fastDecoder{data: data}
	var b Batch
	if !d.batch(&b) {
		return Batch{}, false
	}
	d.ws()
	return b, d.i == len(d.data)
}

func (d *fastDecoder) ws() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// consume skips white space and then c.
func (d *fastDecoder) consume(c byte) bool {
	d.ws()
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

// peek skips white space and returns the next byte (0 at the end).
func (d *fastDecoder) peek() byte {
	d.ws()
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

// object reads an object, calling member for each member name (without quotes) with the
// position at its value. Names with escapes are refused.
func (d *fastDecoder) object(member func(name []byte) bool) bool {
	if !d.consume('{') {
		return false
	}
	if d.peek() == '}' {
		d.i++
		return true
	}
	for {
		if !d.consume('"') {
			return false
		}
		start := d.i
		for d.i < len(d.data) && d.data[d.i] != '"' {
			if c := d.data[d.i]; c == '\\' || c < 0x20 {
				return false
			}
			d.i++
		}
		if d.i == len(d.data) {
			return false
		}
		name := d.data[start:d.i]
		d.i++
		if !d.consume(':') {
			return false
		}
		d.ws()
		if !member(name) {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

func (d *fastDecoder) batch(b *Batch) bool {
	seen := 0
	once := func(bit int) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "v":
			return once(bV) && d.int(&b.V)
		case "cluster":
			return once(bCluster) && d.string(&b.Cluster)
		case "instance":
			return once(bInstance) && d.string(&b.Instance)
		case "group":
			return once(bGroup) && d.string(&b.Group)
		case "store":
			return once(bStore) && d.string(&b.Store)
		case "round":
			return once(bRound) && d.uint64(&b.Round)
		case "lease_rev":
			return once(bLeaseRev) && d.uint64(&b.LeaseRev)
		case "cursor":
			return once(bCursor) && d.uint64(&b.Cursor)
		case "next":
			return once(bNext) && d.uint64(&b.Next)
		case "part":
			return once(bPart) && d.int(&b.Part)
		case "parts":
			return once(bParts) && d.int(&b.Parts)
		case "scanned_at_us":
			return once(bScannedAt) && d.int64(&b.ScannedAt)
		case "bad_keys":
			return once(bBadKeys) && d.int(&b.BadKeys)
		case "blocks":
			return once(bBlocks) && d.blocks(&b.Blocks)
		}
		return false
	})
}

func (d *fastDecoder) blocks(dst *[]BlockEntry) bool {
	if d.literal("null") {
		*dst = nil
		return true
	}
	if !d.consume('[') {
		return false
	}
	// Each block holds at least `{"key":"0","uri":""}`: a bound, not a guess, for the capacity.
	blocks := make([]BlockEntry, 0, min(d.estimateBlocks(), (len(d.data)-d.i)/20+1))
	if d.peek() == ']' {
		d.i++
		*dst = blocks
		return true
	}
	for {
		blocks = append(blocks, BlockEntry{})
		if !d.block(&blocks[len(blocks)-1]) {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			*dst = blocks
			return true
		default:
			return false
		}
	}
}

// estimateBlocks counts the `{"key":` that start the remaining blocks as Encode writes them
// (a __uri__ cannot hold that text unescaped).
func (d *fastDecoder) estimateBlocks() int {
	return bytes.Count(d.data[d.i:], []byte(`{"key":`))
}

func (d *fastDecoder) block(e *BlockEntry) bool {
	if d.arena == nil {
		d.arena = make([]byte, 0, len(d.data))
	}
	seen := 0
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "key":
			if seen&1 != 0 {
				return false
			}
			seen |= 1
			// `json:",string"`: a quoted integer, with nothing else inside the quotes (encoding/json
			// refuses even white space there).
			if !d.consume('"') || !d.int64(&e.Key) || d.i == len(d.data) || d.data[d.i] != '"' {
				return false
			}
			d.i++
			return true
		case "uri":
			if seen&2 != 0 {
				return false
			}
			seen |= 2
			start := len(d.arena)
			out, ok := d.unquote(d.arena)
			if !ok {
				return false
			}
			d.arena = out
			e.URI = RawText(d.arena[start:len(d.arena):len(d.arena)])
			return true
		case "lru":
			if seen&4 != 0 {
				return false
			}
			seen |= 4
			return d.string(&e.LRUTime)
		}
		return false
	})
}

// literal consumes the literal word if it comes next.
func (d *fastDecoder) literal(word string) bool {
	if d.peek() != word[0] || len(d.data)-d.i < len(word) || string(d.data[d.i:d.i+len(word)]) != word {
		return false
	}
	d.i += len(word)
	return true
}

// string reads a string value exactly as encoding/json would, or refuses it: unquote refuses
// exactly the strings encoding/json would alter (a lone surrogate escape, invalid UTF-8), as
// FuzzRawText holds it to.
func (d *fastDecoder) string(dst *string) bool {
	out, ok := d.unquote(d.scratch[:0])
	if !ok {
		return false
	}
	d.scratch = out
	*dst = string(out)
	return true
}

// unquote appends the content of the string literal that comes next to dst.
func (d *fastDecoder) unquote(dst []byte) ([]byte, bool) {
	if !d.consume('"') {
		return nil, false
	}
	rest := d.data[d.i:]
	out, n, err := unquote(dst, rest)
	if err != nil || n == len(rest) {
		return nil, false // refused, or no closing quote
	}
	d.i += n + 1
	return out, true
}

// digits reads -?(0|[1-9][0-9]*) at the position and returns the magnitude; ok is false on
// overflow of uint64 or when no integer comes next. A fraction or exponent that follows is left
// for the caller, which then finds no ',' or '}' and refuses.
func (d *fastDecoder) digits() (neg bool, mag uint64, ok bool) {
	if d.i < len(d.data) && d.data[d.i] == '-' {
		neg = true
		d.i++
	}
	start := d.i
	for d.i < len(d.data) {
		c := d.data[d.i]
		if c < '0' || c > '9' {
			break
		}
		v := uint64(c - '0')
		if mag > (math.MaxUint64-v)/10 {
			return false, 0, false
		}
		mag = mag*10 + v
		d.i++
	}
	n := d.i - start
	if n == 0 || n > 1 && d.data[start] == '0' {
		return false, 0, false // not a JSON number, or a leading zero
	}
	return neg, mag, true
}

func (d *fastDecoder) uint64(dst *uint64) bool {
	neg, mag, ok := d.digits()
	if !ok || neg {
		return false // encoding/json refuses "-0" for an unsigned field too
	}
	*dst = mag
	return true
}

func (d *fastDecoder) int64(dst *int64) bool {
	neg, mag, ok := d.digits()
	switch {
	case !ok:
		return false
	case !neg && mag <= math.MaxInt64:
		*dst = int64(mag)
	case neg && mag <= 1<<63:
		*dst = int64(-mag) // -(1<<63) wraps to itself, which is MinInt64
	default:
		return false
	}
	return true
}

func (d *fastDecoder) int(dst *int) bool {
	var v int64
	if !d.int64(&v) || v < math.MinInt || v > math.MaxInt {
		return false
	}
	*dst = int(v)
	return true
}
