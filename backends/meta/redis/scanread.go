package redismeta

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// The scanner's read of a page, HGETALL of every key, is the hottest path against Redis: in the
// scanner's profile a fifth of its CPU went to go-redis building a []any of strings per reply,
// then each value was copied again into the entry. readPageRaw takes the replies' RESP bytes as
// they came (go-redis's raw reply, written into one buffer per page) and reads them with
// parseHGetAll, which accepts only what HGETALL answers: an array (RESP2) or a map (RESP3) of
// bulk strings, or an error line. The entries' values are slices of that buffer, with no room
// beyond them, so nothing is copied.
//
// Anything else makes the page go through the general decoder (readPageGeneral: go-redis's
// reply, then readEntry) with a fresh read, so the narrow path never guesses: a reply it does
// not know, a pipeline that failed (the raw pipeline is never retried by go-redis, the general
// one is, as often as retry_count says), a client other than a single-node one (whose pipeline
// answers in command order). FuzzParseHGetAll and TestRawReadEqualsGeneral compare both.

// pendingRead is a key of a page to read whole.
type pendingRead struct {
	key, instance string
	block         int64
}

// blockRead is one key of a page as read: its entry, whether it exists, or the server's
// error reply to its read (as readEntry reports them).
type blockRead struct {
	entry  meta.Entry
	exists bool
	err    error
}

// readPage reads the page's keys with one pipeline, and with it the SCAN of the next page
// when ahead is set (ahead.cmd then holds its reply, or is nil when it is not to be used). An
// error means the page could not be read at all. held is how long the reads held the server
// (meta.Bursts.Took): with timed, the server's own clock from the pipeline's first command to
// its last where it answers TIME, else the round trip of every pipeline sent (a raw read
// that fell back to the general decoder sent two).
func (s *Store) readPage(
	ctx context.Context,
	reads []pendingRead,
	ahead *scanAhead,
	timed bool,
) (out []blockRead, held time.Duration, err error) {
	if rc, ok := s.c.(*redis.Client); ok && !s.generalOnly {
		out, held, ok := s.readPageRaw(ctx, rc, reads, ahead, timed && !s.timeRefused.Load())
		if ok {
			return out, held, nil
		}
		s.rawFallbacks.Add(1)
		if ahead != nil {
			ahead.cmd = nil // its reply is not trusted either: the next page scans again
		}
		out, more, err := s.readPageGeneral(ctx, reads)
		return out, held + more, err
	}
	return s.readPageGeneral(ctx, reads)
}

// readPageGeneral is readPage through go-redis's decoder; held is its round trip.
func (s *Store) readPageGeneral(ctx context.Context, reads []pendingRead) ([]blockRead, time.Duration, error) {
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, len(reads))
	for i := range reads {
		cmds[i] = pipe.Do(ctx, "hgetall", reads[i].key)
	}
	sent := time.Now()
	err := execPipeline(ctx, pipe)
	held := time.Since(sent)
	if err != nil {
		return nil, held, err
	}
	out := make([]blockRead, len(reads))
	for i, r := range reads {
		out[i].entry = meta.Entry{Key: r.key, Instance: r.instance, BlockKey: r.block}
		out[i].exists, out[i].err = readEntry(cmds[i], &out[i].entry)
	}
	return out, held, nil
}

// readPageRaw is readPage through parseHGetAll; ok is false when the page must be read again
// through the general decoder. With timed, TIME goes first and last in the pipeline, and held
// is the server's time between them when both answered and it lies within the round trip
// (a proxy could answer them from two servers' clocks), else the round trip. A server that
// refuses TIME is not sent it again.
func (s *Store) readPageRaw(
	ctx context.Context,
	rc *redis.Client,
	reads []pendingRead,
	ahead *scanAhead,
	timed bool,
) (out []blockRead, held time.Duration, ok bool) {
	// Sized from the last page, per key: the buffer is allocated once, not grown to size.
	var buf bytes.Buffer
	buf.Grow(len(reads) * int(max(s.replyBytes.Load(), 256)) * 9 / 8)
	pipe := rc.Pipeline()
	var first, last *redis.TimeCmd
	if timed {
		first = pipe.Time(ctx)
	}
	cmds := make([]*redis.RawWriteToCmd, len(reads))
	for i := range reads {
		cmds[i] = redis.NewRawWriteToCmd(ctx, &buf, "hgetall", reads[i].key)
		_ = pipe.Process(ctx, cmds[i]) // queued; Exec sends it
	}
	if ahead != nil {
		ahead.cmd = pipe.Scan(ctx, ahead.cursor, kvcm.StoreScanPattern, int64(ahead.count))
	}
	if timed {
		last = pipe.Time(ctx)
	}
	sent := time.Now()
	_, err := pipe.Exec(ctx)
	held = time.Since(sent)
	if timed {
		held = serverHeld(first, last, held)
		var rerr redis.Error
		if t := cmp.Or(first.Err(), last.Err()); errors.As(t, &rerr) {
			s.timeRefused.Store(true) // a user without +time: the round trip from now on
		}
	}
	if err != nil {
		for _, c := range cmds {
			if c.Err() != nil {
				return nil, held, false // not answered: the general path reads (and retries)
			}
		}
		if timed && (first.Err() != nil || last.Err() != nil) {
			return nil, held, false
		}
		if ahead == nil || ahead.cmd.Err() == nil {
			return nil, held, false
		}
		ahead.cmd = nil // the page is read; only the next SCAN failed, and is sent again
	}
	data := buf.Bytes()
	s.replyBytes.Store(int64(len(data) / len(reads)))
	out = make([]blockRead, len(reads))
	at := 0
	for i, r := range reads {
		n := int(cmds[i].Val())
		if n < 0 || at+n > len(data) {
			return nil, held, false
		}
		reply := data[at : at+n : at+n]
		at += n
		b := &out[i]
		b.entry = meta.Entry{Key: r.key, Instance: r.instance, BlockKey: r.block}
		var parsed bool
		if b.exists, b.err, parsed = parseHGetAll(reply, &b.entry); !parsed {
			return nil, held, false
		}
	}
	if at != len(data) {
		return nil, held, false
	}
	return out, held, true
}

// serverHeld is the server's time from first's TIME to last's when both answered and it lies
// within the round trip rt, else rt.
func serverHeld(first, last *redis.TimeCmd, rt time.Duration) time.Duration {
	if first.Err() != nil || last.Err() != nil {
		return rt
	}
	if d := last.Val().Sub(first.Val()); d >= 0 && d <= rt {
		return d
	}
	return rt
}

// parseHGetAll reads one raw HGETALL reply into e as readEntry does. parsed is false for any
// reply it does not accept (the general decoder then reads the page); an error line is
// returned as rerr, a redis.Error like go-redis's own.
func parseHGetAll(reply []byte, e *meta.Entry) (exists bool, rerr error, parsed bool) {
	line, rest, ok := respLine(reply)
	if !ok || len(line) == 0 {
		return false, nil, false
	}
	var pairs int
	switch line[0] {
	case '-':
		if len(rest) != 0 {
			return false, nil, false
		}
		return false, replyError(string(line[1:])), true
	case '*':
		n, ok := respLen(line[1:])
		if !ok || n%2 != 0 {
			return false, nil, false
		}
		pairs = n / 2
	case '%':
		n, ok := respLen(line[1:])
		if !ok {
			return false, nil, false
		}
		pairs = n
	default:
		return false, nil, false
	}
	if pairs == 0 {
		return false, nil, len(rest) == 0
	}
	if pairs > len(rest)/8 { // a pair takes at least "$0\r\n\r\n" twice
		return false, nil, false
	}
	hasURI, interim := false, false
	for range pairs {
		var name, val []byte
		if name, rest, ok = respBulk(rest); !ok {
			return false, nil, false
		}
		if val, rest, ok = respBulk(rest); !ok {
			return false, nil, false
		}
		switch {
		case string(name) == kvcm.FieldURI:
			hasURI = true
			if len(val) > 0 {
				e.URI = val
			}
		case string(name) == kvcm.FieldLRUTime:
			e.LRUTime = string(val)
		case bytes.HasPrefix(name, []byte(kvcm.LocationFieldPrefix)):
			if e.Locations == nil {
				e.Locations = make([]meta.Field, 0, pairs)
			}
			e.Locations = append(e.Locations, meta.Field{ID: string(name[len(kvcm.LocationFieldPrefix):]), Value: val})
		default:
			interim = interim || bytes.HasPrefix(name, []byte(kvcm.InterimLocationPrefix))
			e.Others = append(e.Others, otherField(name))
		}
	}
	if len(rest) != 0 {
		return false, nil, false
	}
	e.Layout = kvcm.LayoutOf(hasURI, len(e.Locations), interim)
	if len(e.Locations) > 1 {
		slices.SortFunc(e.Locations, func(a, b meta.Field) int { return strings.Compare(a.ID, b.ID) })
	}
	slices.Sort(e.Others)
	return true, nil, true
}

// otherField is the name of a field that is neither a location nor __uri__/__lru_time__; the
// one beside nearly every location-layout block is not copied.
func otherField(name []byte) string {
	if string(name) == prevKeyField {
		return prevKeyField
	}
	return string(name)
}

// prevKeyField is KVCM's BP#prev_key.
const prevKeyField = "BP#prev_key"

// respLine splits a "\r\n"-terminated line off b.
func respLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\r')
	if i < 0 || i+1 >= len(b) || b[i+1] != '\n' {
		return nil, nil, false
	}
	return b[:i], b[i+2:], true
}

// respLen reads the decimal length of a header line: digits only, no sign, no leading zero
// (the form Redis writes).
func respLen(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// respBulk reads one bulk string "$<n>\r\n<n bytes>\r\n"; the bytes are returned with their
// length as their capacity.
func respBulk(b []byte) (val, rest []byte, ok bool) {
	line, rest, ok := respLine(b)
	if !ok || len(line) < 2 || line[0] != '$' {
		return nil, nil, false
	}
	n, ok := respLen(line[1:])
	if !ok || n+2 > len(rest) || rest[n] != '\r' || rest[n+1] != '\n' {
		return nil, nil, false
	}
	return rest[:n:n], rest[n+2:], true
}

// replyError is an error reply as go-redis gives it: a redis.Error (isReply, isWrongType).
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it as the server's answer (redis.Error).
func (e replyError) RedisError() {}

var _ redis.Error = replyError("")

// scanAhead is the SCAN of the next page, sent with the current page's reads: one round trip
// per page instead of two. A cursor is valid for as long as one likes (SCAN keeps no state in
// the server), and the keys a page's SCAN returns are read by HGETALL when the page is read,
// so a SCAN sent a page early returns what SCAN guarantees, and each block is read as it is
// then.
type scanAhead struct {
	cursor uint64
	count  int
	cmd    *redis.ScanCmd
}
