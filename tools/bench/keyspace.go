package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// KeyspaceSpec describes one synthetic deployment.
type KeyspaceSpec struct {
	Cluster string
	// Layout is the block layout seeded: kvcm.LayoutLocation (today's KVCM, one field
	// L#<id> per location) or kvcm.LayoutLegacy (KVCM f6aa2b2, one __uri__ map).
	Layout    kvcm.Layout
	DB        int // Redis database holding it (0 for the legacy layout: see keyspaceDB)
	Instances int
	Blocks    int // in total, spread evenly over the instances
	Locations int // per block
	Garbage   float64
	Tricky    float64
	Seed      uint64
	Root      string // data files of the deployment's storages
	// NoFiles seeds the metadata only: no data file is linked and no block is read back, so
	// the keyspace cannot be verified (Verify), and its storage roots are empty directories.
	// With the stat probe off, nothing of kvcm-gc looks for a file but the deleter, whose
	// unlinks of files that do not exist succeed.
	NoFiles bool
}

// Keyspace is a seeded deployment: the metadata in Redis, and the data files the stat probe
// must find, so that exactly the manifest's garbage is collected.
//
// The metadata is written by seed.Generate without files: seed creates one small file per
// location spec, and the default keyspace has about 3.9 million specs whose files must exist
// (every live SERVING location is stat-probed, and one whose files are missing is garbage).
// Creating that many files is slower than the whole benchmark and exceeds the inode budget of
// small file systems, so the keyspace instead makes every data file a hard link to one of a
// few empty inodes. A link costs a directory entry, not an inode, and is several times cheaper
// to make than a file; to lstat and unlink, which is all kvcm-gc does with a data file, a link
// is a file like any other. The raw stat and unlink baselines use the same kind of links.
type Keyspace struct {
	Spec     KeyspaceSpec
	URI      string // the Redis URI selecting DB, as the registry lists it
	rdb      *redis.Client
	Manifest *seed.Manifest
	// Instances are the collected instances (of the redis group); names are every instance
	// holding blocks of the manifest, the skipped groups' included (the location layout's
	// cached group), indexed by blockInfo.inst.
	Instances []string
	names     []string

	blocks []blockInfo
	// locHash[i] is the hash of Manifest.Locations[i]'s exact bytes as seeded.
	locHash []uint64
	seedH   maphash.Seed

	// saved are the garbage blocks as Snapshot read them.
	saved []savedBlock

	// GarbageFiles are the existing, unshared data files of garbage locations: what the
	// deleter unlinks.
	GarbageFiles []string
	// StatSample is a sample of existing data files of SERVING locations, for the raw stat
	// baseline.
	StatSample []string
	Counts     KeyspaceCounts
}

// KeyspaceCounts summarise a keyspace.
type KeyspaceCounts struct {
	// Blocks and Locations are the collected instances'; SkippedBlocks those of groups
	// kvcm-gc must skip (the location layout's cached group), which sit in the same database
	// and are walked, never read, by the scanner.
	Blocks, SkippedBlocks, Locations, Garbage int
	// GarbageBlocks is the number of blocks with at least one garbage location.
	GarbageBlocks int
	// Files are the data files (links) that exist; SharedFiles are those of shared storages.
	Files, SharedFiles int
	// StatSpecs are the spec URIs the stat probe looks at (SERVING locations on a file storage).
	StatSpecs int
	// DeleteSpecs are the unshared spec URIs of garbage locations (the deleter's Delete calls);
	// GarbageFiles of them exist.
	DeleteSpecs, GarbageFiles int
	// Seed and Files are how long seeding and linking took.
	SeedTime, FilesTime time.Duration
}

type blockInfo struct {
	inst    uint16
	nlocs   uint16
	garbage uint16 // garbage locations in the block
	first   int32  // index of the block's first location in Manifest.Locations
	key     int64
	hash    uint64 // hash of the seeded block: every field and value
	skipped bool   // of a skipped group: never collected, never probed
}

// statSampleMax bounds the raw stat baseline's sample.
const statSampleMax = 200_000

// SeedKeyspace writes the deployment into its database (flushed first) and links its files.
func SeedKeyspace(ctx context.Context, r *redis.Client, baseURI string, sp KeyspaceSpec, log *slog.Logger) (*Keyspace, error) {
	k := &Keyspace{Spec: sp, URI: fmt.Sprintf("%s?db=%d", baseURI, sp.DB), seedH: maphash.MakeSeed()}
	opts := *r.Options()
	opts.DB = sp.DB
	k.rdb = redis.NewClient(&opts)
	for i := range sp.Instances {
		k.Instances = append(k.Instances, "inst"+strconv.Itoa(i))
	}
	// ASYNC: the database is empty at once and Redis frees the former keyspace in a thread of
	// its own. A synchronous FLUSHDB of a million-block keyspace can outlast the client's read
	// timeout (3 s) while the machine also removes the last layout's data files.
	if err := k.rdb.FlushDBAsync(ctx).Err(); err != nil {
		return nil, fmt.Errorf("flush db %d: %w", sp.DB, err)
	}
	if err := os.RemoveAll(sp.Root); err != nil {
		return nil, fmt.Errorf("clear data root: %w", err)
	}
	started := time.Now()
	last := time.Now()
	m, err := seed.Generate(ctx, k.rdb, seed.Spec{
		Cluster: sp.Cluster, Layout: sp.Layout, Instances: k.Instances, Blocks: max(sp.Blocks/sp.Instances, 1),
		LocationsPerBlock: sp.Locations, GarbageFraction: sp.Garbage, TrickyFraction: sp.Tricky,
		Root: sp.Root, MetaURI: k.URI, Seed: sp.Seed, NoFiles: true,
		Progress: func(done, total int) {
			if time.Since(last) > 10*time.Second {
				last = time.Now()
				log.Info("seeding", "cluster", sp.Cluster, "blocks", done, "of", total)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("seed %s: %w", sp.Cluster, err)
	}
	k.Manifest = m
	k.Counts.SeedTime = time.Since(started)
	k.index()
	if sp.NoFiles {
		// seed's storage roots (root_path of its registry): the deleter opens them.
		for _, d := range []string{"nfs", "shared"} {
			if err := os.MkdirAll(filepath.Join(sp.Root, d), 0o755); err != nil {
				return nil, fmt.Errorf("create storage root: %w", err)
			}
		}
		log.Info("keyspace ready, metadata only", "cluster", sp.Cluster, "layout", sp.Layout, "blocks", k.Counts.Blocks,
			"locations", k.Counts.Locations, "garbage", k.Counts.Garbage, "seed", k.Counts.SeedTime.Round(time.Millisecond))
		return k, nil
	}
	started = time.Now()
	if err := k.linkFiles(ctx); err != nil {
		return nil, err
	}
	k.Counts.FilesTime = time.Since(started)
	log.Info("keyspace ready", "cluster", sp.Cluster, "layout", sp.Layout, "blocks", k.Counts.Blocks, "locations", k.Counts.Locations,
		"garbage", k.Counts.Garbage, "files", k.Counts.Files, "seed", k.Counts.SeedTime.Round(time.Millisecond),
		"link", k.Counts.FilesTime.Round(time.Millisecond))
	return k, nil
}

// Close closes the keyspace's client.
func (k *Keyspace) Close() error { return k.rdb.Close() }

// index groups the manifest's locations by block (seed writes them block by block).
func (k *Keyspace) index() {
	inst := map[string]uint16{}
	for _, l := range k.Manifest.Locations {
		if _, ok := inst[l.Instance]; !ok {
			inst[l.Instance] = uint16(len(k.names))
			k.names = append(k.names, l.Instance)
		}
	}
	locs := k.Manifest.Locations
	for i := 0; i < len(locs); {
		j := i
		b := blockInfo{inst: inst[locs[i].Instance], key: locs[i].Key, first: int32(i), skipped: locs[i].Kind == seed.KindCachedStore}
		for ; j < len(locs) && locs[j].Instance == locs[i].Instance && locs[j].Key == locs[i].Key; j++ {
			if locs[j].Garbage {
				b.garbage++
			}
		}
		b.nlocs = uint16(j - i)
		k.blocks = append(k.blocks, b)
		if b.garbage > 0 {
			k.Counts.GarbageBlocks++
		}
		if b.skipped {
			k.Counts.SkippedBlocks++
		} else {
			k.Counts.Blocks++
			k.Counts.Locations += int(b.nlocs)
		}
		k.Counts.Garbage += int(b.garbage)
		i = j
	}
	k.locHash = make([]uint64, len(locs))
}

// BlockKey returns the Redis key of block i.
func (k *Keyspace) BlockKey(i int) string {
	return kvcm.BlockKey(k.names[k.blocks[i].inst], k.blocks[i].key)
}

// collectedKeys are the keys of the collected instances' blocks (what KVCM serves and
// kvcm-gc judges).
func (k *Keyspace) collectedKeys() []string {
	out := make([]string, 0, k.Counts.Blocks)
	for i := range k.blocks {
		if !k.blocks[i].skipped {
			out = append(out, k.BlockKey(i))
		}
	}
	return out
}

// blockView is one block as HGETALL returned it, in either layout.
type blockView struct {
	// pairs are field, value, field, value, …
	pairs []string
	// uri is the decoded __uri__ (legacy and ambiguous keys), decoded on first use.
	uri     *kvcm.Block
	uriErr  error
	decoded bool
}

// field returns the value of a field.
func (v *blockView) field(name string) (string, bool) {
	for i := 0; i+1 < len(v.pairs); i += 2 {
		if v.pairs[i] == name {
			return v.pairs[i+1], true
		}
	}
	return "", false
}

// legacyBlock decodes __uri__ once; nil when absent or empty.
func (v *blockView) legacyBlock() (*kvcm.Block, error) {
	if !v.decoded {
		v.decoded = true
		if raw, ok := v.field(kvcm.FieldURI); ok && raw != "" {
			v.uri, v.uriErr = kvcm.DecodeBlock([]byte(raw))
		}
	}
	return v.uri, v.uriErr
}

// location finds the seeded location l in the block, in the field seed wrote it to:
// __uri__ (legacy layout) or L#<id> (location layout; an empty value is a tombstone, no
// location). ok is false when it is not there.
func (v *blockView) location(l *seed.Loc) (loc kvcm.Location, ok bool, err error) {
	if l.FieldName() == kvcm.FieldURI {
		b, err := v.legacyBlock()
		if b == nil || err != nil {
			return kvcm.Location{}, false, err
		}
		p, ok := b.Find(l.Location)
		if !ok {
			return kvcm.Location{}, false, nil
		}
		return *p, true, nil
	}
	raw, ok := v.field(l.FieldName())
	if !ok || raw == "" {
		return kvcm.Location{}, false, nil
	}
	loc, err = kvcm.DecodeLocation(l.Location, []byte(raw))
	return loc, err == nil, err
}

// hash is a hash of every field and value, independent of the order HGETALL returns them in.
func (k *Keyspace) blockHash(v *blockView) uint64 {
	idx := make([]int, 0, len(v.pairs)/2)
	for i := 0; i+1 < len(v.pairs); i += 2 {
		idx = append(idx, i)
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(v.pairs[a], v.pairs[b]) })
	var h maphash.Hash
	h.SetSeed(k.seedH)
	for _, i := range idx {
		h.WriteString(v.pairs[i])
		h.WriteByte(0)
		h.WriteString(v.pairs[i+1])
		h.WriteByte(1)
	}
	return h.Sum64()
}

// readBlocks calls fn for every block with its fields as they are now (none when the key is
// gone), reading with pipelined HGETALL.
func (k *Keyspace) readBlocks(ctx context.Context, fn func(i int, v *blockView) error) error {
	return k.readBlocksAt(ctx, len(k.blocks), func(j int) int { return j }, fn)
}

// readBlocksAt is readBlocks for the n blocks at(0), …, at(n-1).
func (k *Keyspace) readBlocksAt(ctx context.Context, n int, at func(j int) int, fn func(i int, v *blockView) error) error {
	const chunk = 1000
	cmds := make([]*redis.Cmd, chunk)
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		pipe := k.rdb.Pipeline()
		for j := start; j < end; j++ {
			cmds[j-start] = pipe.Do(ctx, "hgetall", k.BlockKey(at(j)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("read blocks: %w", err)
		}
		for j := start; j < end; j++ {
			i := at(j)
			v, err := hashPairs(cmds[j-start])
			if err != nil {
				return fmt.Errorf("read block %s: %w", k.BlockKey(i), err)
			}
			if err := fn(i, &blockView{pairs: v}); err != nil {
				return err
			}
		}
	}
	return nil
}

// hashPairs is the reply of HGETALL sent with Do: field, value, … (RESP2 and RESP3 alike).
func hashPairs(c *redis.Cmd) ([]string, error) {
	v, err := c.Result()
	if err != nil {
		return nil, err
	}
	switch r := v.(type) {
	case []any:
		out := make([]string, len(r))
		for i, x := range r {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("hgetall: unexpected element %T", x)
			}
			out[i] = s
		}
		return out, nil
	case map[any]any:
		out := make([]string, 0, 2*len(r))
		for f, x := range r {
			fs, ok1 := f.(string)
			xs, ok2 := x.(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("hgetall: unexpected element %T", x)
			}
			out = append(out, fs, xs)
		}
		return out, nil
	}
	return nil, fmt.Errorf("hgetall: unexpected reply %T", v)
}

// specExists mirrors seed's layout: which spec files of a location of a given kind exist.
// A mismatch would not go unnoticed: a live location whose file is missing is collected, and
// Verify reports it.
func specExists(kind string, spec int) bool {
	switch kind {
	case seed.KindMissingServing:
		return spec == 0 // one spec present, one missing: still garbage
	case seed.KindUnknownType, seed.KindMooncake:
		return false
	}
	return true
}

// linkFiles reads every block back, records the hashes Verify compares with, and links the
// data files that exist in seed's layout. The skipped groups' locations get no files: nothing
// of kvcm-gc looks at them (and a collection of one is caught by Verify all the same).
func (k *Keyspace) linkFiles(ctx context.Context) error {
	var files []string
	locs := k.Manifest.Locations
	// Sample every statStep-th live SERVING file, so the sample spreads over the keyspace.
	statStep, statSeen := max(1, 2*len(locs)/statSampleMax), 0
	err := k.readBlocks(ctx, func(i int, v *blockView) error {
		b := &k.blocks[i]
		b.hash = k.blockHash(v)
		for j := range b.nlocs {
			li := int(b.first) + int(j)
			ml := &locs[li]
			l, ok, err := v.location(ml)
			if err != nil {
				return fmt.Errorf("decode seeded block %s: %w", k.BlockKey(i), err)
			}
			if !ok {
				return fmt.Errorf("seeded block %s lacks location %s", k.BlockKey(i), ml.Location)
			}
			k.locHash[li] = k.hash(string(l.Raw))
			if b.skipped {
				continue
			}
			for s, spec := range l.Specs {
				u, err := kvcm.ParseDataURI(spec.URI)
				if err != nil || u.Scheme != "file" {
					continue
				}
				shared := u.Host == seed.StorageShared
				if l.Status == kvcm.StatusServing && l.Type == kvcm.TypeFile {
					k.Counts.StatSpecs++
				}
				if ml.Garbage && !shared {
					k.Counts.DeleteSpecs++
				}
				if !specExists(ml.Kind, s) {
					continue
				}
				files = append(files, u.Path)
				if shared {
					k.Counts.SharedFiles++
				}
				switch {
				case ml.Garbage && !shared:
					k.GarbageFiles = append(k.GarbageFiles, u.Path)
				case !ml.Garbage && l.Status == kvcm.StatusServing:
					if statSeen++; statSeen%statStep == 0 && len(k.StatSample) < statSampleMax {
						k.StatSample = append(k.StatSample, u.Path)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	k.Counts.Files = len(files)
	k.Counts.GarbageFiles = len(k.GarbageFiles)
	return linkAll(k.Spec.Root, files)
}

// RelinkGarbage recreates the garbage files a collection removed.
func (k *Keyspace) RelinkGarbage() error { return linkAll(k.Spec.Root, k.GarbageFiles) }

func (k *Keyspace) hash(s string) uint64 { return maphash.String(k.seedH, s) }

// maxLinks stays under ext4's 65000 links per inode.
const maxLinks = 60_000

// linkAll makes every path a hard link to an empty file under root/.inodes, creating parent
// directories; a path that exists already is left alone. Two workers keep both cores busy
// (the file system's directory locks, not the CPU, are the limit beyond that).
func linkAll(root string, paths []string) error {
	srcDir := filepath.Join(root, ".inodes")
	if err := os.MkdirAll(srcDir, 0o755); err != nil {
		return fmt.Errorf("create inode directory: %w", err)
	}
	var dirs sync.Map
	var mu sync.Mutex
	nextSrc := 0
	newSrc := func() (string, error) {
		mu.Lock()
		n := nextSrc
		nextSrc++
		mu.Unlock()
		p := filepath.Join(srcDir, fmt.Sprintf("%d-%d", time.Now().UnixNano(), n))
		f, err := os.Create(p)
		if err != nil {
			return "", fmt.Errorf("create link source: %w", err)
		}
		return p, f.Close()
	}
	const workers = 2
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			src, links := "", maxLinks
			for i := w; i < len(paths); i += workers {
				p := paths[i]
				if links >= maxLinks {
					var err error
					if src, err = newSrc(); err != nil {
						errs[w] = err
						return
					}
					links = 0
				}
				dir := filepath.Dir(p)
				if _, ok := dirs.Load(dir); !ok {
					if err := os.MkdirAll(dir, 0o755); err != nil {
						errs[w] = fmt.Errorf("create data directory: %w", err)
						return
					}
					dirs.Store(dir, true)
				}
				err := os.Link(src, p)
				switch {
				case err == nil:
					links++
				case errors.Is(err, syscall.EEXIST):
				case errors.Is(err, syscall.EMLINK):
					links = maxLinks // a file system with a lower limit: next source
					i -= workers
				default:
					errs[w] = fmt.Errorf("link data file: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Grow makes a metadata-only keyspace factor times as large: factor-1 copies of every seeded
// block, the skipped groups' included, each under a key of the same instance (the block key
// with bits 59–62 set to the copy's number), made by Redis itself (COPY). The copies have the
// seeded blocks' shape exactly: their fields, encodings, garbage and sizes. Snapshot, Restore
// and Verify know the seeded blocks only: grow after the last Restore.
func (k *Keyspace) Grow(ctx context.Context, factor int) error {
	if !k.Spec.NoFiles {
		return errors.New("grow: only a metadata-only keyspace can grow (its copies have no data files)")
	}
	if factor <= 1 {
		return nil
	}
	if factor > 16 {
		return fmt.Errorf("grow: factor %d: at most 16 (four bits of the block key)", factor)
	}
	const chunk = 1000
	// Two pipelines at a time keep Redis busy while the client writes the next one.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2)
	for from := 0; from < len(k.blocks); from += chunk {
		to := min(from+chunk, len(k.blocks))
		g.Go(func() error {
			pipe := k.rdb.Pipeline()
			cmds := make([]*redis.IntCmd, 0, (to-from)*(factor-1))
			for i := from; i < to; i++ {
				b := &k.blocks[i]
				src := k.BlockKey(i)
				for c := 1; c < factor; c++ {
					dst := kvcm.BlockKey(k.names[b.inst], b.key^int64(c)<<59)
					cmds = append(cmds, pipe.Copy(gctx, src, dst, k.Spec.DB, false))
				}
			}
			if _, err := pipe.Exec(gctx); err != nil {
				return fmt.Errorf("copy blocks: %w", err)
			}
			for _, c := range cmds {
				if c.Val() != 1 {
					return fmt.Errorf("copy blocks: %v exists already", c.Args()[2])
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	c := &k.Counts
	c.Blocks, c.SkippedBlocks, c.Locations, c.Garbage, c.GarbageBlocks = factor*c.Blocks, factor*c.SkippedBlocks,
		factor*c.Locations, factor*c.Garbage, factor*c.GarbageBlocks
	return nil
}

// Snapshot records the fields of every block holding garbage, the only blocks a collection
// may change (Verify checks that no other one did), to restore them after a destructive run.
func (k *Keyspace) Snapshot(ctx context.Context) error {
	var idx []int
	for i := range k.blocks {
		if k.blocks[i].garbage > 0 {
			idx = append(idx, i)
		}
	}
	k.saved = make([]savedBlock, 0, len(idx))
	return k.readBlocksAt(ctx, len(idx), func(j int) int { return idx[j] }, func(i int, v *blockView) error {
		fields := make([]any, len(v.pairs))
		for j, f := range v.pairs {
			fields[j] = f
		}
		k.saved = append(k.saved, savedBlock{key: k.BlockKey(i), fields: fields})
		return nil
	})
}

// savedBlock is a block's key and fields as Snapshot read them.
type savedBlock struct {
	key    string
	fields []any
}

// Restore writes the blocks Snapshot recorded back as they were and relinks the garbage files.
func (k *Keyspace) Restore(ctx context.Context) error {
	if k.saved == nil {
		return errors.New("restore: no snapshot")
	}
	for start := 0; start < len(k.saved); start += 500 {
		pipe := k.rdb.Pipeline()
		for _, b := range k.saved[start:min(start+500, len(k.saved))] {
			pipe.Del(ctx, b.key)
			pipe.HSet(ctx, b.key, b.fields...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("restore snapshot: %w", err)
		}
	}
	return k.RelinkGarbage()
}

// Verification is what a collection left behind.
type Verification struct {
	GarbageLeft   int // garbage locations still present (DELETING included)
	LiveChanged   int // live locations missing or not byte-identical
	BlocksChanged int // blocks without garbage whose fields changed
	FilesLeft     int // garbage files still present
	LiveFilesGone int // sampled live files missing
	Problems      []string
}

// OK reports whether exactly the garbage is gone.
func (v Verification) OK() bool {
	return v.GarbageLeft == 0 && v.LiveChanged == 0 && v.BlocksChanged == 0 && v.FilesLeft == 0 && v.LiveFilesGone == 0
}

func (v *Verification) problem(format string, a ...any) {
	if len(v.Problems) < 10 {
		v.Problems = append(v.Problems, fmt.Sprintf(format, a...))
	}
}

// errNotVerifiable: a metadata-only keyspace was not read back after seeding (NoFiles).
var errNotVerifiable = errors.New("verify: a metadata-only keyspace has no seeded hashes to compare with")

// Verify checks that every garbage location and its unshared files are gone and every live
// location is byte-for-byte as seeded.
func (k *Keyspace) Verify(ctx context.Context) (Verification, error) {
	if k.Spec.NoFiles {
		return Verification{}, errNotVerifiable
	}
	var v Verification
	locs := k.Manifest.Locations
	err := k.readBlocks(ctx, func(i int, bv *blockView) error {
		b := &k.blocks[i]
		if b.garbage == 0 {
			if k.blockHash(bv) != b.hash {
				v.BlocksChanged++
				v.problem("block %s changed", k.BlockKey(i))
			}
			return nil
		}
		for j := range b.nlocs {
			li := int(b.first) + int(j)
			l, ok, err := bv.location(&locs[li])
			if err != nil {
				v.BlocksChanged++
				v.problem("block %s no longer decodes: %v", k.BlockKey(i), err)
				return nil
			}
			switch {
			case locs[li].Garbage && ok:
				v.GarbageLeft++
				v.problem("garbage %s/%s left (status %d)", k.BlockKey(i), locs[li].Location, l.Status)
			case !locs[li].Garbage && (!ok || k.hash(string(l.Raw)) != k.locHash[li]):
				v.LiveChanged++
				v.problem("live %s/%s changed or gone", k.BlockKey(i), locs[li].Location)
			}
		}
		return nil
	})
	if err != nil {
		return v, err
	}
	for _, p := range k.GarbageFiles {
		if _, err := os.Lstat(p); err == nil {
			v.FilesLeft++
			v.problem("garbage file %s left", p)
		}
	}
	for i := 0; i < len(k.StatSample); i += 10 {
		if _, err := os.Lstat(k.StatSample[i]); err != nil {
			v.LiveFilesGone++
			v.problem("live file %s: %v", k.StatSample[i], err)
		}
	}
	return v, nil
}
