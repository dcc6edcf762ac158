package redismeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Field names of a KVCM block hash (kvcm-reference.md §1).
const (
	fieldURI     = "__uri__"
	fieldLRUTime = "__lru_time__"
)

// casScript sets __uri__ to ARGV[2] only when it equals ARGV[1] byte for byte. Lua strings
// are 8-bit clean and ~= compares bytes, so any difference (including a KVCM re-encoding that
// only reorders locations) is a conflict; an absent field or key reads as false and is one
// too. Only __uri__ is written: __lru_time__ stays KVCM's last-write time (DESIGN §8.5), and
// HSET on an existing key never creates other fields. An empty new value is refused here as
// well as in Go, because an empty __uri__ would leave a key KVCM reads as absent.
var casScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], '__uri__')
if cur ~= ARGV[1] then return 0 end
if ARGV[2] == '' then return redis.error_reply('ERR kvcm-gc cas: empty new value') end
redis.call('HSET', KEYS[1], '__uri__', ARGV[2])
return 1
`)

// cadScript is casScript whose empty ARGV[2] deletes the whole key: the last location is
// gone, and KVCM itself DELs a block with no location (BatchCADLocationStatus).
var cadScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], '__uri__')
if cur ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], '__uri__', ARGV[2])
end
return 1
`)

// errEmptyExpected: a conditional write needs the bytes it read; an empty expected value
// would match a present-but-empty field, which KVCM treats as an absent block.
var errEmptyExpected = errors.New("empty expected __uri__")

// StoreOptions configure a Store.
type StoreOptions struct {
	// DryRun makes CAS and CAD return meta.ErrDryRun without sending anything (DESIGN §8.8):
	// dry-run is enforced here, at the bottom, so no caller can write by mistake.
	DryRun bool
	// Logger receives debug lines about script loading; nil discards.
	Logger *slog.Logger
	DB     int // the database the connection selects (ConnOptions.DB); Pool sets it
}

// Store is a meta.Store on one KVCM metadata Redis.
type Store struct {
	c      redis.UniversalClient
	dryRun bool
	log    *slog.Logger
}

var _ meta.Store = (*Store)(nil)

// NewStore wraps c, which it owns from now on (Close closes it). Unless in dry-run it loads
// the CAS/CAD scripts with SCRIPT LOAD, best effort: a user without +script or a server that
// is down does not fail here, since every call falls back from EVALSHA to EVAL on NOSCRIPT.
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
	return &Store{c: c, dryRun: o.DryRun, log: orDiscard(o.Logger)}
}

// OpenStore builds a client for conn and a Store on it.
func OpenStore(ctx context.Context, conn ConnOptions, o StoreOptions) (*Store, error) {
	c, err := NewClient(conn)
	if err != nil {
		return nil, err
	}
	return NewStore(ctx, c, o), nil
}

// LoadScripts sends SCRIPT LOAD for the CAS and CAD scripts.
func (s *Store) LoadScripts(ctx context.Context) error {
	return errors.Join(casScript.Load(ctx, s.c).Err(), cadScript.Load(ctx, s.c).Err())
}

// Close closes the client.
func (s *Store) Close() error { return s.c.Close() }

// ScanPage implements meta.Scanner: one SCAN page of the instance's block keys and one
// pipelined HMGET __uri__ __lru_time__ for the keys it returned. Keys that do not parse as
// canonical block keys of this instance (other instances whose id extends the pattern, junk
// like "cache_05") and keys that are not hashes (HMGET answers WRONGTYPE) are returned in
// BadKeys and never read further. A SCAN failure or a network failure of the
// pipeline returns the error, and the caller keeps its cursor.
func (s *Store) ScanPage(ctx context.Context, instanceID string, cursor uint64, count int) (meta.Page, error) {
	return s.scan(ctx, fmt.Sprintf("instance %q", instanceID), kvcm.ScanPattern(instanceID), cursor, count,
		func(string) (string, bool) { return instanceID, true })
}

// ScanStore implements meta.Scanner: one SCAN page of every instance's block keys and one
// pipelined HMGET for the keys of the instances owns accepts. A key owned by an accepted
// instance that is not a canonical block key, or not a hash, is a bad key as in ScanPage;
// keys owned by no accepted instance are counted in Unowned and not read.
func (s *Store) ScanStore(ctx context.Context, cursor uint64, count int, owns func(instanceID string) bool) (meta.Page, error) {
	return s.scan(ctx, "store", kvcm.StoreScanPattern, cursor, count,
		func(key string) (string, bool) { return kvcm.OwnerOf(key, owns) })
}

// scan is one SCAN page with pattern, then one pipelined HMGET of the keys owner assigns to
// an instance.
func (s *Store) scan(ctx context.Context, what, pattern string, cursor uint64, count int, owner func(key string) (string, bool)) (meta.Page, error) {
	if count <= 0 {
		return meta.Page{}, fmt.Errorf("scan %s: count %d is not positive", what, count)
	}
	keys, next, err := s.c.Scan(ctx, cursor, pattern, int64(count)).Result()
	if err != nil {
		return meta.Page{}, fmt.Errorf("scan %s: %w", what, err)
	}
	page := meta.Page{Next: next}
	type pending struct {
		key, instance string
		block         int64
		cmd           *redis.SliceCmd
	}
	reads := make([]pending, 0, len(keys))
	for _, k := range keys {
		inst, ok := owner(k)
		if !ok {
			page.Unowned++
			continue
		}
		block, err := kvcm.ParseBlockKey(inst, k)
		if err != nil {
			page.BadKeys = append(page.BadKeys, k)
			continue
		}
		reads = append(reads, pending{key: k, instance: inst, block: block})
	}
	if len(reads) == 0 {
		return page, nil
	}
	pipe := s.c.Pipeline()
	for i := range reads {
		reads[i].cmd = pipe.HMGet(ctx, reads[i].key, fieldURI, fieldLRUTime)
	}
	if err := execPipeline(ctx, pipe); err != nil {
		return meta.Page{}, fmt.Errorf("read blocks of %s: %w", what, err)
	}
	page.Entries = make([]meta.Entry, 0, len(reads))
	for _, r := range reads {
		vals, err := r.cmd.Result()
		if err != nil {
			// Only WRONGTYPE is about this key alone. Anything else (network, auth, NOPERM,
			// OOM, …) would hit every key alike and must fail the page, not empty it into
			// BadKeys.
			if isWrongType(err) {
				page.BadKeys = append(page.BadKeys, r.key)
				continue
			}
			return meta.Page{}, fmt.Errorf("read blocks of %s: %w", what, err)
		}
		e := meta.Entry{Key: r.key, Instance: r.instance, BlockKey: r.block}
		if len(vals) == 2 {
			if v, ok := vals[0].(string); ok && v != "" {
				e.URI = []byte(v)
			}
			if v, ok := vals[1].(string); ok {
				e.LRUTime = v
			}
		}
		page.Entries = append(page.Entries, e)
	}
	return page, nil
}

// GetURI implements meta.Store with one HGET.
func (s *Store) GetURI(ctx context.Context, instanceID string, blockKey int64) ([]byte, bool, error) {
	key := kvcm.BlockKey(instanceID, blockKey)
	v, err := s.c.HGet(ctx, key, fieldURI).Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("get __uri__ of %q: %w", key, err)
	}
	if v == "" {
		return nil, false, nil
	}
	return []byte(v), true, nil
}

// CAS implements meta.Store: __uri__ becomes next only if it is byte-for-byte expected.
func (s *Store) CAS(ctx context.Context, instanceID string, blockKey int64, expected, next []byte) error {
	key := kvcm.BlockKey(instanceID, blockKey)
	if len(next) == 0 {
		return fmt.Errorf("cas %q: empty new __uri__ (use CAD to delete)", key)
	}
	return s.run(ctx, "cas", casScript, key, expected, next)
}

// CAD implements meta.Store: like CAS, but an empty next deletes the key.
func (s *Store) CAD(ctx context.Context, instanceID string, blockKey int64, expected, next []byte) error {
	return s.run(ctx, "cad", cadScript, kvcm.BlockKey(instanceID, blockKey), expected, next)
}

func (s *Store) run(ctx context.Context, op string, script *redis.Script, key string, expected, next []byte) error {
	if s.dryRun {
		return fmt.Errorf("%s %q: %w", op, key, meta.ErrDryRun)
	}
	if len(expected) == 0 {
		return fmt.Errorf("%s %q: %w", op, key, errEmptyExpected)
	}
	// Run is EVALSHA with an EVAL fallback on NOSCRIPT (a restarted or flushed script cache).
	n, err := script.Run(ctx, s.c, []string{key}, expected, next).Int()
	if err != nil {
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	if n != 1 {
		return fmt.Errorf("%s %q: %w", op, key, meta.ErrConflict)
	}
	return nil
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
