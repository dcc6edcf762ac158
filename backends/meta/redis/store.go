package redismeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// The conditional writes are Lua scripts: each compares the one field it writes with the
// bytes the deleter judged, byte for byte (Lua strings are 8-bit clean and ~= compares bytes,
// so any difference, even a KVCM re-encoding that only reorders members, is a conflict; an
// absent field or key reads as false and is one too), then checks that the key is still in
// the layout the location was judged in, and only then writes. They never write another field
// than the one named, except the one field that keeps an emptied location-layout block in
// existence (DESIGN §8.5, §8.9, §8.10).
//
// layoutOK is the layout check shared by every script: a key judged in the legacy layout may
// hold no L# field, one judged in the location layout no __uri__, and neither may hold a field
// of KVCM's interim layout (__loc__<id>). HKEYS is O(fields); a block holds a handful.
const layoutOK = `
local function layout_ok(key, layout)
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 7) == '__loc__' then return false end
    if layout == 'legacy' then
      if string.sub(f, 1, 2) == 'L#' then return false end
    elseif f == '__uri__' then
      return false
    end
  end
  return true
end
`

// casLegacyScript: __uri__ becomes ARGV[2] only when it is ARGV[1] and the key holds no L#
// field. Only __uri__ is written: __lru_time__ stays KVCM's last-write time, and HSET on an
// existing key never creates other fields. Returns 1 written, 0 conflict, -1 layout changed.
var casLegacyScript = redis.NewScript(layoutOK + `
local cur = redis.call('HGET', KEYS[1], '__uri__')
if cur ~= ARGV[1] then return 0 end
if not layout_ok(KEYS[1], 'legacy') then return -1 end
if ARGV[2] == '' then return redis.error_reply('ERR kvcm-gc cas: empty new value') end
redis.call('HSET', KEYS[1], '__uri__', ARGV[2])
return 1
`)

// cadLegacyScript is casLegacyScript whose empty ARGV[2] means no location remains: with
// ARGV[3] 'keep', __uri__ becomes {} (KVCM reads "exists, no location", and its key count
// still counts the key); with 'delete' the key is deleted (returns 2), as KVCM itself
// deletes a block whose map empties. __lru_time__ stays: KVCM's reclaimer gives up a whole
// round on a sampled key without one.
var cadLegacyScript = redis.NewScript(layoutOK + `
local cur = redis.call('HGET', KEYS[1], '__uri__')
if cur ~= ARGV[1] then return 0 end
if not layout_ok(KEYS[1], 'legacy') then return -1 end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], '__uri__', ARGV[2])
  return 1
end
if ARGV[3] == 'delete' then
  redis.call('DEL', KEYS[1])
  return 2
end
redis.call('HSET', KEYS[1], '__uri__', '{}')
return 1
`)

// casLocationScript: field ARGV[1] (L#<id>) becomes ARGV[3] only when it is ARGV[2] and the
// key holds no __uri__.
var casLocationScript = redis.NewScript(layoutOK + `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur ~= ARGV[2] then return 0 end
if not layout_ok(KEYS[1], 'location') then return -1 end
if ARGV[3] == '' then return redis.error_reply('ERR kvcm-gc cas: empty new value') end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
`)

// cadLocationScript removes field ARGV[1] when it is ARGV[2] and the key holds no __uri__.
// With ARGV[3] 'keep' the key stays: when that field is its last, BP#prev_key = "" is written
// first, the field KVCM itself writes when it creates a key, so KVCM reads the block as
// "exists, no location" (never an empty L# value: KVCM decodes that as a live NEW location
// and would never write the block again). With 'delete' the key is deleted (returns 2) when
// no other location (a non-empty L# value) remains, as KVCM's own empty-key recycle does.
var cadLocationScript = redis.NewScript(layoutOK + `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur ~= ARGV[2] then return 0 end
if not layout_ok(KEYS[1], 'location') then return -1 end
if ARGV[3] == 'delete' then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if all[i] ~= ARGV[1] and string.sub(all[i], 1, 2) == 'L#' and all[i + 1] ~= '' then
      redis.call('HDEL', KEYS[1], ARGV[1])
      return 1
    end
  end
  redis.call('DEL', KEYS[1])
  return 2
end
if redis.call('HLEN', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'BP#prev_key', '')
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
`)

var allScripts = []*redis.Script{casLegacyScript, cadLegacyScript, casLocationScript, cadLocationScript}

// Scripts returns the conditional-write scripts of a layout: cas moves a location (legacy: the
// whole __uri__) to the bytes given when it holds the bytes expected, cad removes it. Their
// arguments are the ones Store sends (see script); a harness that measures the writes
// without a Store (bench) runs these very scripts.
func Scripts(l kvcm.Layout) (cas, cad *redis.Script) {
	if l == kvcm.LayoutLegacy {
		return casLegacyScript, cadLegacyScript
	}
	return casLocationScript, cadLocationScript
}

// AllScripts returns every conditional-write script a Store loads.
func AllScripts() []*redis.Script { return slices.Clone(allScripts) }

// StoreOptions configure a Store.
type StoreOptions struct {
	// DryRun makes CASMany and CADMany refuse every write with meta.ErrDryRun without
	// sending anything (DESIGN §8.8): dry-run is enforced here, at the bottom, so no caller
	// can write by mistake.
	DryRun bool
	// DB is the database the client selected. A KVCM of the legacy layout always uses DB 0
	// (it ignores db=), so in any other database a legacy key is nobody's live block: the
	// scan leaves such keys out and the writes refuse them.
	DB int
	// EmptyBlock is what a CAD does with a block whose last location it removes.
	EmptyBlock meta.EmptyBlock
	// Logger receives debug lines about script loading; nil discards.
	Logger *slog.Logger
}

// Store is a meta.Store on one KVCM metadata Redis.
type Store struct {
	c          redis.UniversalClient
	dryRun     bool
	db         int
	emptyBlock meta.EmptyBlock
	log        *slog.Logger
	// generalOnly reads pages through go-redis's decoder only, noScanAhead sends each page's
	// SCAN on its own (tests compare the paths; scanread.go).
	generalOnly, noScanAhead bool
	rawFallbacks             atomic.Int64 // pages the raw reader handed to the general decoder
	// timeRefused: the server refused TIME (a user without +time); a paced read's time on
	// the server is its round trip from then on.
	timeRefused atomic.Bool
	replyBytes  atomic.Int64 // bytes of a key's HGETALL reply on the last page
	aheadMu     sync.Mutex
	ahead       aheadPage
}

var (
	_ meta.Store          = (*Store)(nil)
	_ meta.MetadataWriter = (*Store)(nil)
)

// NewStore wraps c, which it owns from now on (Close closes it). Unless in dry-run it loads
// the scripts with SCRIPT LOAD, best effort: a user without +script or a server that is down
// does not fail here, since every call falls back from EVALSHA to EVAL on NOSCRIPT.
func NewStore(ctx context.Context, c redis.UniversalClient, o StoreOptions) *Store {
	s := newStore(c, o)
	if !s.dryRun {
		if err := s.LoadScripts(ctx); err != nil {
			s.log.DebugContext(ctx, "script load failed, falling back to eval", "err", err)
		}
	}
	return s
}

func newStore(c redis.UniversalClient, o StoreOptions) *Store {
	return &Store{c: c, dryRun: o.DryRun, db: o.DB, emptyBlock: o.EmptyBlock, log: orDiscard(o.Logger)}
}

// OpenStore builds a client for conn and a Store on it.
func OpenStore(ctx context.Context, conn ConnOptions, o StoreOptions) (*Store, error) {
	c, err := NewClient(conn)
	if err != nil {
		return nil, err
	}
	o.DB = conn.DB
	return NewStore(ctx, c, o), nil
}

// LoadScripts sends SCRIPT LOAD for the conditional-write scripts.
func (s *Store) LoadScripts(ctx context.Context) error {
	var errs []error
	for _, sc := range allScripts {
		errs = append(errs, sc.Load(ctx, s.c).Err())
	}
	return errors.Join(errs...)
}

// Close closes the client.
func (s *Store) Close() error { return s.c.Close() }

// ScanStore implements meta.Scanner: one SCAN page of every instance's block keys and one
// pipelined HGETALL of the keys of the instances owns accepts. A key owned by an accepted
// instance that is not a canonical block key (other instances whose id extends another's,
// junk like "cache_05") or not a hash (HGETALL answers WRONGTYPE) is returned in BadKeys and
// never read further; keys owned by no accepted instance are counted in Unowned and not read.
// A SCAN failure or a network failure of the pipeline returns the error, and the caller keeps
// its cursor. Read commands only: SCAN and HGETALL never write, and KVCM's Redis backends
// never write read-time fields either.
func (s *Store) ScanStore(
	ctx context.Context,
	cursor uint64,
	count int,
	owns func(instanceID string) bool,
) (meta.Page, error) {
	return s.ScanStoreBursts(ctx, cursor, count, owns, meta.Bursts{})
}

// ScanStoreBursts implements meta.BurstScanner: ScanStore with the page's HGETALLs sent as one
// pipeline per burst of b.Size keys, b.Gate waited for before each (the next page's SCAN goes
// with the last burst).
func (s *Store) ScanStoreBursts(
	ctx context.Context,
	cursor uint64,
	count int,
	owns func(instanceID string) bool,
	b meta.Bursts,
) (meta.Page, error) {
	if count <= 0 {
		return meta.Page{}, fmt.Errorf("scan store: count %d is not positive", count)
	}
	keys, next, ok := s.takeAhead(cursor, count)
	if !ok {
		if b.Gate != nil {
			if err := b.Gate(ctx, 0); err != nil {
				return meta.Page{}, err
			}
		}
		sent := time.Now()
		var err error
		keys, next, err = s.c.Scan(ctx, cursor, kvcm.StoreScanPattern, int64(count)).Result()
		if b.Took != nil {
			b.Took(0, time.Since(sent))
		}
		if err != nil {
			return meta.Page{}, fmt.Errorf("scan store: %w", err)
		}
	}
	page := meta.Page{Next: next}
	reads := make([]pendingRead, 0, len(keys))
	for _, k := range keys {
		inst, ok := kvcm.OwnerOf(k, owns)
		if !ok {
			page.Unowned++
			if _, _, block := kvcm.KeyInstance(k); block {
				page.UnownedKeys = append(page.UnownedKeys, k)
			}
			continue
		}
		block, err := kvcm.ParseBlockKey(inst, k)
		if err != nil {
			page.BadKeys = append(page.BadKeys, k)
			continue
		}
		reads = append(reads, pendingRead{key: k, instance: inst, block: block})
	}
	if len(reads) == 0 {
		return page, nil
	}
	var ahead *scanAhead
	if next != 0 && !s.noScanAhead {
		ahead = &scanAhead{cursor: next, count: count}
	}
	got, err := s.readBursts(ctx, reads, ahead, b)
	if err != nil {
		return meta.Page{}, fmt.Errorf("read blocks of store: %w", err)
	}
	page.Entries = make([]meta.Entry, 0, len(reads))
	for i := range got {
		r := &got[i]
		if r.err != nil {
			// Only WRONGTYPE is about this key alone. Anything else (network, auth, NOPERM,
			// OOM, …) would hit every key alike and must fail the page, not empty it into
			// BadKeys.
			if isWrongType(r.err) {
				page.BadKeys = append(page.BadKeys, r.entry.Key)
				continue
			}
			return meta.Page{}, fmt.Errorf("read blocks of store: %w", r.err)
		}
		switch {
		case !r.exists:
			// Deleted between SCAN and HGETALL.
		case s.wrongDB(r.entry.Layout):
			page.WrongDB++
		default:
			page.Entries = append(page.Entries, r.entry)
		}
	}
	if ahead != nil && ahead.cmd != nil {
		if k, n, err := ahead.cmd.Result(); err == nil {
			s.putAhead(next, count, k, n)
		}
	}
	return page, nil
}

// readBursts is readPage in bursts as b says.
func (s *Store) readBursts(
	ctx context.Context,
	reads []pendingRead,
	ahead *scanAhead,
	b meta.Bursts,
) ([]blockRead, error) {
	size := b.Size
	if size <= 0 || size > len(reads) {
		size = len(reads)
	}
	var out []blockRead
	for at := 0; at < len(reads); at += size {
		burst := reads[at:min(at+size, len(reads))]
		if b.Gate != nil {
			if err := b.Gate(ctx, len(burst)); err != nil {
				return nil, err
			}
		}
		var a *scanAhead
		if at+size >= len(reads) {
			a = ahead // with the last burst
		}
		got, held, err := s.readPage(ctx, burst, a, b.Took != nil)
		if b.Took != nil {
			b.Took(len(burst), held)
		}
		if err != nil {
			return nil, err
		}
		if out == nil {
			if len(burst) == len(reads) {
				return got, nil
			}
			out = make([]blockRead, 0, len(reads))
		}
		out = append(out, got...)
	}
	return out, nil
}

// Ping implements meta.Pinger.
func (s *Store) Ping(ctx context.Context) error { return s.c.Ping(ctx).Err() }

// takeAhead returns the keys and next cursor of the SCAN at cursor with count when the last
// page's pipeline sent it (scanAhead), and forgets it either way.
func (s *Store) takeAhead(cursor uint64, count int) (keys []string, next uint64, ok bool) {
	s.aheadMu.Lock()
	defer s.aheadMu.Unlock()
	a := s.ahead
	s.ahead = aheadPage{}
	if !a.set || a.cursor != cursor || a.count != count {
		return nil, 0, false
	}
	return a.keys, a.next, true
}

func (s *Store) putAhead(cursor uint64, count int, keys []string, next uint64) {
	s.aheadMu.Lock()
	s.ahead = aheadPage{set: true, cursor: cursor, count: count, keys: keys, next: next}
	s.aheadMu.Unlock()
}

// aheadPage is the reply of a SCAN sent a page early.
type aheadPage struct {
	set          bool
	cursor, next uint64
	count        int
	keys         []string
}

// wrongDB reports whether a key of this layout cannot be a live KVCM block in this store's
// database: a KVCM of the legacy layout ignores db= and always uses DB 0.
func (s *Store) wrongDB(l kvcm.Layout) bool {
	return s.db != 0 && (l == kvcm.LayoutLegacy || l == kvcm.LayoutAmbiguous)
}

// readEntry fills e from the reply of HGETALL; exists is false for an absent key (no field).
func readEntry(cmd *redis.Cmd, e *meta.Entry) (exists bool, err error) {
	v, err := cmd.Result()
	if err != nil {
		return false, err
	}
	pairs, ok := v.([]any)
	if !ok || len(pairs)%2 != 0 {
		return false, fmt.Errorf("hgetall %q: unexpected reply %T", e.Key, v)
	}
	if len(pairs) == 0 {
		return false, nil
	}
	hasURI, interim := false, false
	for i := 0; i < len(pairs); i += 2 {
		name, ok1 := pairs[i].(string)
		val, ok2 := pairs[i+1].(string)
		if !ok1 || !ok2 {
			return false, fmt.Errorf("hgetall %q: unexpected field reply", e.Key)
		}
		switch {
		case name == kvcm.FieldURI:
			hasURI = true
			if val != "" {
				e.URI = []byte(val)
			}
		case name == kvcm.FieldLRUTime:
			e.LRUTime = val
		case strings.HasPrefix(name, kvcm.LocationFieldPrefix):
			e.Locations = append(e.Locations, meta.Field{ID: name[len(kvcm.LocationFieldPrefix):], Value: []byte(val)})
		default:
			interim = interim || strings.HasPrefix(name, kvcm.InterimLocationPrefix)
			e.Others = append(e.Others, name)
		}
	}
	e.Layout = kvcm.LayoutOf(hasURI, len(e.Locations), interim)
	if len(e.Locations) > 1 {
		slices.SortFunc(e.Locations, func(a, b meta.Field) int { return strings.Compare(a.ID, b.ID) })
	}
	slices.Sort(e.Others)
	return true, nil
}

func isWrongType(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE")
}

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
