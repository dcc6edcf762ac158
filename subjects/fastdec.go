package subjects

import (
	"bytes"
	"math"
	"unicode/utf8"

	"github.com/kvcm-gc/kvcm-gc/internal/jsonstr"
)

// A batch is decoded by hand when it has the form Encode writes: encoding/json spent a fifth of
// the prober's CPU on it (reflection per member, a validating pre-scan of the whole message,
// and one allocation per __uri__). A delete request, the deleter's input, is decoded the same way.
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

// members records the members of one object seen so far, by a number per member, to refuse
// a repeated one (encoding/json would let the last win, or merge them).
type members uint32

func (m *members) first(n uint) bool {
	if *m&(1<<n) != 0 {
		return false
	}
	*m |= 1 << n
	return true
}

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
	var m members
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "v":
			return m.first(0) && d.int(&b.V)
		case "cluster":
			return m.first(1) && d.string(&b.Cluster)
		case "instance":
			return m.first(2) && d.string(&b.Instance)
		case "group":
			return m.first(3) && d.string(&b.Group)
		case "store":
			return m.first(4) && d.string(&b.Store)
		case "round":
			return m.first(5) && d.uint64(&b.Round)
		case "lease_rev":
			return m.first(6) && d.uint64(&b.LeaseRev)
		case "cursor":
			return m.first(7) && d.uint64(&b.Cursor)
		case "next":
			return m.first(8) && d.uint64(&b.Next)
		case "part":
			return m.first(9) && d.int(&b.Part)
		case "parts":
			return m.first(10) && d.int(&b.Parts)
		case "scanned_at_us":
			return m.first(11) && d.int64(&b.ScannedAt)
		case "bad_keys":
			return m.first(12) && d.int(&b.BadKeys)
		case "blocks":
			return m.first(13) && d.blocks(&b.Blocks)
		}
		return false
	})
}

func (d *fastDecoder) blocks(dst *[]BlockEntry) bool {
	// Each block holds at least `{"key":"0","uri":""}`: a bound, not a guess, for the capacity.
	return array(d, dst, func() int { return min(d.estimateBlocks(), (len(d.data)-d.i)/20+1) }, d.block)
}

// array decodes null or a JSON array into *dst, each element with elem. capacity, called after
// the '[', bounds the number of elements left.
func array[T any](d *fastDecoder, dst *[]T, capacity func() int, elem func(*T) bool) bool {
	if d.literal("null") {
		*dst = nil
		return true
	}
	if !d.consume('[') {
		return false
	}
	items := make([]T, 0, capacity())
	if d.peek() == ']' {
		d.i++
		*dst = items
		return true
	}
	for {
		var zero T
		items = append(items, zero)
		if !elem(&items[len(items)-1]) {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			*dst = items
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
	var m members
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "key":
			return m.first(0) && d.quotedInt64(&e.Key)
		case "uri":
			return m.first(1) && d.rawText(&e.URI)
		case "lru":
			return m.first(2) && d.string(&e.LRUTime)
		case "layout":
			return m.first(3) && d.string(&e.Layout, LayoutLegacy, LayoutLocation, LayoutAmbiguous)
		case "locs":
			return m.first(4) && array(d, &e.Locs, func() int { return 2 }, d.locField)
		case "fields":
			return m.first(5) && array(d, &e.Fields, func() int { return 2 }, func(f *string) bool { return d.string(f) })
		}
		return false
	})
}

func (d *fastDecoder) locField(l *LocField) bool {
	var m members
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "id":
			return m.first(0) && d.rawText(&l.ID)
		case "v":
			return m.first(1) && d.rawText(&l.V)
		}
		return false
	})
}

// quotedInt64 reads an int64 field tagged `json:",string"`: a quoted integer, with nothing else
// inside the quotes (encoding/json refuses even white space there).
func (d *fastDecoder) quotedInt64(dst *int64) bool {
	if !d.consume('"') || !d.int64(dst) || d.i == len(d.data) || d.data[d.i] != '"' {
		return false
	}
	d.i++
	return true
}

// rawText reads a RawText in its string form into the arena.
func (d *fastDecoder) rawText(dst *RawText) bool {
	if d.arena == nil {
		d.arena = make([]byte, 0, len(d.data))
	}
	start := len(d.arena)
	out, ok := d.unquote(d.arena)
	if !ok {
		return false
	}
	d.arena = out
	*dst = RawText(d.arena[start:len(d.arena):len(d.arena)])
	return true
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
//
// A value equal to one of known is that string, not a copy: no allocation for the usual ones.
func (d *fastDecoder) string(dst *string, known ...string) bool {
	out, ok := d.unquote(d.scratch[:0])
	if !ok {
		return false
	}
	d.scratch = out
	for _, k := range known {
		if string(out) == k {
			*dst = k
			return true
		}
	}
	*dst = string(out)
	return true
}

// unquote appends the content of the string literal that comes next to dst.
func (d *fastDecoder) unquote(dst []byte) ([]byte, bool) {
	if !d.consume('"') {
		return nil, false
	}
	rest := d.data[d.i:]
	out, n, err := jsonstr.Unquote(dst, rest, jsonstr.Strict)
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

// decodeDeleteRequestFast is decodeBatchFast for a delete request, as narrow: its members,
// those of "source", of each target and of each storage spelled exactly, each at most once;
// "targets" and "storages" may be null; a storage name is a string without escapes and not
// repeated. Anything else goes to encoding/json.
func decodeDeleteRequestFast(data []byte) (DeleteRequest, bool) {
	d := fastDecoder{data: data}
	var r DeleteRequest
	if !d.deleteRequest(&r) {
		return DeleteRequest{}, false
	}
	d.ws()
	return r, d.i == len(d.data)
}

func (d *fastDecoder) deleteRequest(r *DeleteRequest) bool {
	var m members
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "v":
			return m.first(0) && d.int(&r.V)
		case "cluster":
			return m.first(1) && d.string(&r.Cluster)
		case "instance":
			return m.first(2) && d.string(&r.Instance)
		case "group":
			return m.first(3) && d.string(&r.Group)
		case "store":
			return m.first(4) && d.string(&r.Store)
		case "round":
			return m.first(5) && d.uint64(&r.Round)
		case "source":
			return m.first(6) && d.source(&r.Source)
		case "judged_at_us":
			return m.first(7) && d.int64(&r.JudgedAt)
		case "targets":
			return m.first(8) && d.targets(&r.Targets)
		case "storages":
			return m.first(9) && d.storages(&r.Storages)
		case "sources":
			return m.first(10) && array(d, &r.Sources, func() int { return 4 }, d.source)
		}
		return false
	})
}

func (d *fastDecoder) source(s *Source) bool {
	var m members
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "stream":
			return m.first(0) && d.string(&s.Stream)
		case "seq":
			return m.first(1) && d.uint64(&s.Seq)
		case "msg_id":
			return m.first(2) && d.string(&s.MsgID)
		}
		return false
	})
}

func (d *fastDecoder) targets(dst *[]Target) bool {
	// Each target holds at least `{"key":"0","location":"","reason":"","expected":""}`.
	return array(d, dst, func() int {
		return min(bytes.Count(d.data[d.i:], []byte(`{"key":`)), (len(d.data)-d.i)/50+1)
	}, d.target)
}

func (d *fastDecoder) target(t *Target) bool {
	var m members
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "key":
			return m.first(0) && d.quotedInt64(&t.Key)
		case "location":
			return m.first(1) && d.string(&t.Location)
		case "reason":
			return m.first(2) &&
				d.string(&t.Reason, ReasonOrphanWriting, ReasonStorageMissing, ReasonStuckDeleting, ReasonUnregisteredInstance)
		case "expected":
			return m.first(3) && d.rawText(&t.Expected)
		case "layout":
			return m.first(4) && d.string(&t.Layout, LayoutLegacy, LayoutLocation)
		}
		return false
	})
}

func (d *fastDecoder) storages(dst *map[string]StorageInfo) bool {
	if d.literal("null") {
		*dst = nil
		return true
	}
	out := map[string]StorageInfo{}
	if !d.object(func(name []byte) bool {
		// encoding/json would replace invalid UTF-8 in a name; a repeated name would merge.
		if !utf8.Valid(name) {
			return false
		}
		if _, dup := out[string(name)]; dup {
			return false
		}
		var si StorageInfo
		if !d.storageInfo(&si) {
			return false
		}
		out[string(name)] = si
		return true
	}) {
		return false
	}
	*dst = out
	return true
}

func (d *fastDecoder) storageInfo(si *StorageInfo) bool {
	var m members
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "type":
			return m.first(0) && d.string(&si.Type)
		case "root_path":
			return m.first(1) && d.string(&si.RootPath)
		case "mountpoint":
			return m.first(2) && d.string(&si.Mountpoint)
		case "root_dir":
			return m.first(3) && d.string(&si.RootDir)
		case "key_count_per_file":
			return m.first(4) && d.uint64(&si.KeyCountPerFile)
		}
		return false
	})
}
