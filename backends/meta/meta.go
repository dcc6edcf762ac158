// Package meta defines kvcm-gc's view of a KVCM metadata store: a side-effect-free
// maintenance scan, whole-block reads, and exact-bytes conditional writes in either of KVCM's
// two block layouts. Implementations live in subpackages (redis); metatest holds the
// conformance suite every implementation runs.
package meta

import (
	"context"
	"errors"
	"time"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

var (
	// ErrConflict: a conditional write found the field it writes different from the
	// expected bytes (or gone, or the key gone). Nothing was written.
	ErrConflict = errors.New("conditional write conflict")
	// ErrLayout: a conditional write found the key no longer in the layout it was judged in
	// (a legacy key that gained an L# field, a location-layout key that gained __uri__): it
	// is ambiguous now, and nothing was written (DESIGN §8.9).
	ErrLayout = errors.New("key layout changed since it was judged")
	// ErrDryRun: the store is in dry-run mode and refuses every write (DESIGN §8.8).
	ErrDryRun = errors.New("dry-run: write refused")
)

// Entry is one block read whole, by a maintenance scan or by ReadBlocks.
type Entry struct {
	Key      string // the full Redis key
	Instance string // the instance the key belongs to
	BlockKey int64
	// Layout is decided from the field names alone (kvcm.LayoutOf).
	Layout kvcm.Layout
	// URI is the raw __uri__ (legacy and ambiguous layouts); nil when the field is absent or
	// empty (an empty __uri__ is an absent block for KVCM).
	URI []byte
	// LRUTime is the raw __lru_time__; "" when absent.
	LRUTime string
	// Locations are the L# fields (location and ambiguous layouts) ordered by location id;
	// an empty Value is KVCM's tombstone, which nothing judges or writes.
	Locations []Field
	// Others are the names of the block's other fields (BP#prev_key, tier marks, a legacy
	// _prev_key_, …), sorted. Their values are not read into the entry: nothing judges them.
	Others []string
}

// Field is one location field of the location layout: L#<ID> holding Value.
type Field struct {
	ID    string
	Value []byte
}

// Location returns the value of location field L#id and whether the entry has that field.
func (e *Entry) Location(id string) ([]byte, bool) {
	for i := range e.Locations {
		if e.Locations[i].ID == id {
			return e.Locations[i].Value, true
		}
	}
	return nil, false
}

// Parts reads the entry's locations in either layout (kvcm.ReadParts).
func (e *Entry) Parts() kvcm.Parts { return kvcm.ReadParts(e.Layout, e.URI, e) }

// LocationFieldCount is the number of the entry's L# fields (kvcm.LocationFields).
func (e *Entry) LocationFieldCount() int { return len(e.Locations) }

// LocationFieldAt is the entry's i-th L# field (kvcm.LocationFields).
func (e *Entry) LocationFieldAt(i int) (string, []byte) {
	return e.Locations[i].ID, e.Locations[i].Value
}

// Page is the result of one maintenance scan call.
type Page struct {
	// Next is the cursor to pass to the next call; 0 when the walk of the store is done.
	Next uint64
	// Entries are the keys of this page that parsed, read whole, in SCAN order (a key that
	// vanished between SCAN and the read is left out).
	Entries []Entry
	// BadKeys are keys of accepted instances that are not canonical block keys, or not
	// hashes; skipped.
	BadKeys []string
	// Unowned counts the keys of the page that belong to no instance the caller accepted
	// (other instances, or not block keys); they are not read.
	Unowned int
	// UnownedKeys are those of them that are block keys of some instance (kvcm.KeyInstance):
	// other stores', skipped groups', or of instances no longer registered anywhere.
	UnownedKeys []string
	// WrongDB counts the keys in the legacy (or an ambiguous) layout read from a database
	// other than 0: a KVCM of the legacy layout ignores db= and always uses DB 0, so these
	// are nobody's live blocks (reading a copy would unlink files live in DB 0); left out.
	WrongDB int
}

// Scanner is the read-only maintenance scan.
type Scanner interface {
	// ScanStore issues one SCAN cursor MATCH kvcache:instance_* COUNT count over the whole
	// store and reads every key of the instances owns accepts (kvcm.OwnerOf) whole, with read
	// commands only: one walk reads the blocks of every instance the store holds. Next is 0
	// when the store is done. On error the caller keeps its cursor.
	ScanStore(ctx context.Context, cursor uint64, count int, owns func(instanceID string) bool) (Page, error)
}

// Bursts is how a paced walk reads a page's blocks: in bursts of at most Size keys (0: the
// whole page at once), Gate called before each round trip to the server with the keys it
// reads (0 for the page's SCAN sent alone: it waits for the walk's pace; its error fails the
// page, and the caller keeps its cursor), and Took, when set, after each round trip that Gate
// let go, answered or failed, with how long it held the server: its time on the server's own
// clock from its first command to its last where the store can tell (Redis: TIME before and
// after, in the same pipeline), else its round trip from the send to the last reply.
type Bursts struct {
	Size int
	Gate func(ctx context.Context, keys int) error
	Took func(keys int, held time.Duration)
}

// BurstScanner is a Scanner that can read a page in bursts: a page's reads hold the server
// for the whole burst, so shorter ones let other clients' requests in between.
type BurstScanner interface {
	// ScanStoreBursts is ScanStore with the page's blocks read as b says.
	ScanStoreBursts(
		ctx context.Context,
		cursor uint64,
		count int,
		owns func(instanceID string) bool,
		b Bursts,
	) (Page, error)
}

// Pinger is a store whose round-trip time can be probed with a command that does nothing
// (Redis PING): it waits in the server behind whatever else is queued there.
type Pinger interface {
	Ping(ctx context.Context) error
}

// BlockRead is one block read by ReadBlocks.
type BlockRead struct {
	// Entry is the block as a scan would read it; Layout none and no field when the key is
	// absent.
	Entry Entry
	// Exists is false when the key is absent.
	Exists bool
	// Err is a failure about this block alone (for Redis, a server reply such as WRONGTYPE or a
	// key-pattern NOPERM); Entry and Exists then mean nothing.
	Err error
}

// CondWrite is one conditional write, in the layout the location was judged in:
//   - kvcm.LayoutLegacy: the block's __uri__ becomes Next only if it is Expected byte for
//     byte and the key holds no L# field;
//   - kvcm.LayoutLocation: field L#<Location> becomes Next only if it is Expected byte for
//     byte and the key holds no __uri__.
//
// Nothing else of the key is ever written (a CAD may add the one field that keeps an empty
// block existing, see CADMany).
type CondWrite struct {
	BlockKey int64
	Layout   kvcm.Layout
	// Location is the location id of the field written (location layout only).
	Location string
	Expected []byte
	// Next is the new value. In a CAD: legacy, the new __uri__ (nil when no location remains);
	// location layout, always nil (the field is removed).
	Next []byte
}

// CADResult is the outcome of one CAD.
type CADResult struct {
	// Err is nil, ErrConflict, ErrLayout, ErrDryRun, or an error about that write alone.
	Err error
	// KeyDeleted is true when the CAD removed the block's last location and, with
	// EmptyBlockDelete, deleted the key: KVCM's in-memory key count, which nothing
	// recounts, now counts a key that is gone (kvcm-reference-current.md §5).
	KeyDeleted bool
}

// Errs returns the errors of CAD results.
func Errs(res []CADResult) []error {
	errs := make([]error, len(res))
	for i, r := range res {
		errs[i] = r.Err
	}
	return errs
}

// EmptyBlock is what a CAD does with a block whose last location it removes.
type EmptyBlock int

const (
	// EmptyBlockKeep leaves the key in a form KVCM reads as "exists, no location" (legacy:
	// __uri__ = {}; location layout: the key's other fields, or the minimal field KVCM
	// itself writes), so KVCM's key count stays equal to the keys in Redis (DESIGN §8.10).
	EmptyBlockKeep EmptyBlock = iota
	// EmptyBlockDelete deletes the key, as KVCM's own empty-key recycle does.
	EmptyBlockDelete
)

// Store is a metadata store: the scan plus the deleter's reads and conditional writes, each
// for many blocks of one instance in one round trip. A batch is not atomic: every item is its
// own read or its own conditional write (one Lua script for Redis), and items are independent
// of one another.
type Store interface {
	Scanner
	// ReadBlocks reads every block whole (one entry per key, in order, duplicates included).
	// A returned error means the batch as a whole got no answer (network, context); the
	// reads are then unknown.
	ReadBlocks(ctx context.Context, instanceID string, blockKeys []int64) ([]BlockRead, error)
	// CASMany runs every write (one error per write, in order): nil, ErrConflict, ErrLayout,
	// ErrDryRun (a dry-run store sends nothing), or an error about that write alone. A
	// returned error means the batch as a whole got no answer: each write may or may not
	// have been applied, and the caller must read again before it relies on either.
	CASMany(ctx context.Context, instanceID string, writes []CondWrite) ([]error, error)
	// CADMany runs every removal, with CASMany's errors. What happens to a block whose last
	// location goes is the store's EmptyBlock setting.
	CADMany(ctx context.Context, instanceID string, writes []CondWrite) ([]CADResult, error)
}
