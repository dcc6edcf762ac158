package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Rate is a count of operations over a duration.
type Rate struct {
	Ops int
	Dur time.Duration
}

// PerSec is the rate in operations per second.
func (r Rate) PerSec() float64 {
	if r.Dur <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Dur.Seconds()
}

// RawResults are the raw limits of the machine, measured on the same keyspace as kvcm-gc.
type RawResults struct {
	Layout kvcm.Layout
	// ScanBare: SCAN COUNT n over the whole database, each page read with one pipeline of
	// the layout's bare read: HMGET __uri__ __lru_time__ in the legacy layout (the two fields
	// a legacy block holds its locations and age in), HGETALL in the location layout (a
	// block's fields are named by its location ids, so only a whole read finds them). The
	// scanner's target is a ratio to it.
	ScanBare Rate
	// ScanAll (legacy layout): the same loop reading every block whole with HGETALL, as
	// kvcm-gc reads both layouts: what reading whole blocks costs over HMGET.
	ScanAll Rate
	// ScanStore: the same walk through kvcm-gc's own store (redismeta ScanStore: SCAN MATCH,
	// one pipelined HGETALL, every reply decoded into entries and routed to its instance):
	// the scanner's read without anything after it.
	ScanStore Rate
	// ScanMatch (legacy layout, Config.RawMatch): the bare loop per instance with a
	// per-instance MATCH pattern, the Redis work of the scanner's former walk (one per
	// instance; it now walks each store once).
	ScanMatch Rate
	// Read is pipelined HGETALL of the garbage blocks: the deleter reads each block of a
	// request whole before its CAS and again before its unlinks.
	Read Rate
	// CAS and CAD are pipelined EVALSHA of the deleter's scripts on scratch copies of the
	// garbage blocks, exactly the writes of a deletion: the CAS sets the garbage locations to
	// DELETING (one script per block holding every garbage location of it in the legacy
	// layout, one per L# field in the location layout), the CAD removes them. WriteLocs are
	// the garbage locations the writes covered.
	CAS, CAD  Rate
	WriteLocs int
	// ScriptsMatch is false when the server does not hold kvcm-gc's scripts once its store
	// opened (it loads them then): the raw writes would have measured a store that sends EVAL.
	ScriptsMatch bool
	// Stat is lstat(2) of data files by absolute path; StatRoot the same through os.Root
	// opened per 512 paths, as the stat probe does; StatDirRoot through an os.Root opened at
	// each file's directory (one fstatat per file). Unlink is unlink(2) of data files.
	Stat, StatRoot, StatDirRoot, Unlink Rate
	// Publish is synchronous JetStream publishing of messages the size of the scanner's
	// batches (ScanPerMsg keys each, as kvcm-gc encodes them in this layout), into a
	// file-backed stream: storing what the scanner read is as much part of its job as
	// reading it.
	Publish      Rate
	ScanPerMsg   int
	PublishBytes int
	// Sequential is the deleter's protocol issued by hand, one location after the other on
	// each of SeqWorkers goroutines, on scratch copies of the garbage blocks: HGETALL, CAS,
	// the location's unlinks, HGETALL, CAD, each waiting for the previous.
	Sequential Rate
	SeqWorkers int
	// Workers are the goroutines the file-system baselines use (one per core).
	Workers int
}

// read names the bare loop's read command.
func (r RawResults) read() string {
	if r.Layout == kvcm.LayoutLegacy {
		return "HMGET"
	}
	return "HGETALL"
}

// best runs measure reps times and keeps the fastest run: background load only ever slows a
// run down, so the fastest is the closest to the machine's limit.
func best(reps int, measure func() (Rate, error)) (Rate, error) {
	var b Rate
	for range max(reps, 1) {
		r, err := measure()
		if err != nil {
			return Rate{}, err
		}
		if b.Dur == 0 || r.PerSec() > b.PerSec() {
			b = r
		}
	}
	return b, nil
}

// scanBare reads every key of the database: SCAN COUNT count, then one pipeline of the
// read of each key of the page (HMGET of the legacy fields, or HGETALL when whole).
func scanBare(ctx context.Context, rdb *redis.Client, count int, whole bool) (Rate, error) {
	return scanLoop(ctx, rdb, []string{""}, count, whole)
}

// scanLoop walks each pattern ("" for none) to cursor 0.
func scanLoop(ctx context.Context, rdb *redis.Client, patterns []string, count int, whole bool) (Rate, error) {
	started := time.Now()
	n := 0
	cmds := make([]redis.Cmder, 0, 2*count)
	for _, pat := range patterns {
		var cursor uint64
		for {
			// An empty pattern sends no MATCH.
			keys, next, err := rdb.Scan(ctx, cursor, pat, int64(count)).Result()
			cursor = next
			if err != nil {
				return Rate{}, fmt.Errorf("scan: %w", err)
			}
			if len(keys) > 0 {
				pipe := rdb.Pipeline()
				cmds = cmds[:0]
				for _, k := range keys {
					if whole {
						cmds = append(cmds, pipe.Do(ctx, "hgetall", k))
					} else {
						cmds = append(cmds, pipe.HMGet(ctx, k, kvcm.FieldURI, kvcm.FieldLRUTime))
					}
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return Rate{}, fmt.Errorf("read page: %w", err)
				}
				n += len(keys)
			}
			if cursor == 0 {
				break
			}
		}
	}
	return Rate{Ops: n, Dur: time.Since(started)}, nil
}

// scanStore walks the keyspace's store once through kvcm-gc's own ScanStore, the scanner's
// read; Ops counts the keys SCAN returned.
func scanStore(ctx context.Context, k *Keyspace, count int) (Rate, error) {
	st, err := k.openStore(ctx, true)
	if err != nil {
		return Rate{}, err
	}
	defer st.Close()
	owns := k.owns()
	started := time.Now()
	n := 0
	var cursor uint64
	for {
		page, err := st.ScanStore(ctx, cursor, count, owns)
		if err != nil {
			return Rate{}, err
		}
		n += len(page.Entries) + len(page.BadKeys) + page.Unowned + page.WrongDB
		if cursor = page.Next; cursor == 0 {
			return Rate{Ops: n, Dur: time.Since(started)}, nil
		}
	}
}

// pipelined runs n commands in pipelines of depth 256 and checks each reply.
func pipelined(ctx context.Context, rdb *redis.Client, n int, cmd func(p redis.Pipeliner, i int) redis.Cmder, check func(c redis.Cmder) error) (Rate, error) {
	const depth = 256
	started := time.Now()
	cmds := make([]redis.Cmder, 0, depth)
	for start := 0; start < n; start += depth {
		end := min(start+depth, n)
		pipe := rdb.Pipeline()
		cmds = cmds[:0]
		for i := start; i < end; i++ {
			cmds = append(cmds, cmd(pipe, i))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return Rate{}, err
		}
		for _, c := range cmds {
			if err := check(c); err != nil {
				return Rate{}, err
			}
		}
	}
	return Rate{Ops: n, Dur: time.Since(started)}, nil
}

// garbageBlock is a garbage block of the keyspace as the raw write baselines use it: a
// scratch copy of it (so the keyspace never changes), its garbage locations and the files
// a deletion of each would unlink.
type garbageBlock struct {
	key, scratch string
	ids          []string   // garbage location ids
	files        [][]string // per id: scratch links to unlink
	// fields are the block's fields as seeded, copied onto scratch before each run.
	fields []any
}

// scratchPrefix names the raw baselines' scratch keys: never a KVCM key, so no stage and no
// SCAN MATCH of kvcm-gc sees them; they exist only while a raw write loop runs.
const scratchPrefix = "kvcmbench:raw:"

// garbageBlocks reads up to limit garbage blocks of k (at most maxLocs garbage locations),
// with filesPer scratch files per location handed out from the keyspace's garbage files in
// the measured ratio (suffix: the scratch links' suffix; "" gives none).
func garbageBlocks(ctx context.Context, k *Keyspace, maxLocs int, suffix string) ([]garbageBlock, int, error) {
	var idx []int
	locs := 0
	for i := range k.blocks {
		if b := &k.blocks[i]; b.garbage > 0 && !b.skipped && locs < maxLocs {
			idx = append(idx, i)
			locs += int(b.garbage)
		}
	}
	out := make([]garbageBlock, 0, len(idx))
	fileIdx := 0
	per, acc := unlinkPerLocation(k), 0.0
	err := k.readBlocksAt(ctx, len(idx), func(j int) int { return idx[j] }, func(i int, v *blockView) error {
		b := &k.blocks[i]
		g := garbageBlock{key: k.BlockKey(i), scratch: scratchPrefix + strconv.Itoa(len(out))}
		for j := range b.nlocs {
			ml := &k.Manifest.Locations[int(b.first)+int(j)]
			if !ml.Garbage {
				continue
			}
			g.ids = append(g.ids, ml.Location)
			var fs []string
			for acc += per; suffix != "" && acc >= 1 && fileIdx < len(k.GarbageFiles); acc-- {
				fs = append(fs, k.GarbageFiles[fileIdx]+suffix)
				fileIdx++
			}
			g.files = append(g.files, fs)
		}
		for _, f := range v.pairs {
			g.fields = append(g.fields, f)
		}
		out = append(out, g)
		return nil
	})
	return out, locs, err
}

// copyScratch writes every block's fields onto its scratch key, replacing what was there.
func copyScratch(ctx context.Context, rdb *redis.Client, blocks []garbageBlock) error {
	for start := 0; start < len(blocks); start += 500 {
		pipe := rdb.Pipeline()
		for _, g := range blocks[start:min(start+500, len(blocks))] {
			pipe.Del(ctx, g.scratch)
			pipe.HSet(ctx, g.scratch, g.fields...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("copy scratch blocks: %w", err)
		}
	}
	return nil
}

// dropScratch deletes the scratch keys.
func dropScratch(ctx context.Context, rdb *redis.Client, blocks []garbageBlock) {
	for start := 0; start < len(blocks); start += 500 {
		pipe := rdb.Pipeline()
		for _, g := range blocks[start:min(start+500, len(blocks))] {
			pipe.Unlink(ctx, g.scratch)
		}
		_, _ = pipe.Exec(ctx)
	}
}

// condWrite is one EVALSHA of a raw write loop.
type condWrite struct {
	key  string
	args []any
}

// deletionWrites are the CAS and CAD writes a deletion of every garbage location makes on
// the blocks' scratch copies, each write's expected value being what the one before left:
// legacy, one CAS of the block's __uri__ with every garbage location set to DELETING and
// one CAD removing them (the deleter's cell is the block); location, one CAS and one CAD
// per L# field. The CAD's empty-block mode is keep, kvcm-gc's default.
func deletionWrites(layout kvcm.Layout, blocks []garbageBlock) (cas, cad []condWrite, err error) {
	for _, g := range blocks {
		v := blockView{pairs: make([]string, len(g.fields))}
		for i, f := range g.fields {
			v.pairs[i] = f.(string)
		}
		if layout == kvcm.LayoutLegacy {
			uri, _ := v.field(kvcm.FieldURI)
			cur := []byte(uri)
			for _, id := range g.ids {
				b, err := kvcm.DecodeBlock(cur)
				if err != nil {
					return nil, nil, fmt.Errorf("raw cas %s: %w", g.key, err)
				}
				if cur, err = b.WithStatus(id, kvcm.StatusDeleting); err != nil {
					return nil, nil, fmt.Errorf("raw cas %s: %w", g.key, err)
				}
			}
			cas = append(cas, condWrite{g.scratch, []any{uri, string(cur)}})
			marked := cur
			for _, id := range g.ids {
				b, err := kvcm.DecodeBlock(cur)
				if err != nil {
					return nil, nil, fmt.Errorf("raw cad %s: %w", g.key, err)
				}
				out, empty, err := b.Without(id)
				if err != nil {
					return nil, nil, fmt.Errorf("raw cad %s: %w", g.key, err)
				}
				if cur = out; empty {
					cur = nil
				}
			}
			cad = append(cad, condWrite{g.scratch, []any{string(marked), string(cur), "keep"}})
			continue
		}
		for _, id := range g.ids {
			field := kvcm.LocationField(id)
			raw, _ := v.field(field)
			del, err := kvcm.LocationWithStatus([]byte(raw), kvcm.StatusDeleting)
			if err != nil {
				return nil, nil, fmt.Errorf("raw cas %s %s: %w", g.key, field, err)
			}
			cas = append(cas, condWrite{g.scratch, []any{field, raw, string(del)}})
			cad = append(cad, condWrite{g.scratch, []any{field, string(del), "keep"}})
		}
	}
	return cas, cad, nil
}

// openStore opens kvcm-gc's store on the keyspace's database.
func (k *Keyspace) openStore(ctx context.Context, dryRun bool) (*redismeta.Store, error) {
	conn, err := redismeta.ParseURI(k.URI)
	if err != nil {
		return nil, err
	}
	st, err := redismeta.OpenStore(ctx, conn, redismeta.StoreOptions{DryRun: dryRun})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return st, nil
}

// owns accepts the keyspace's collected instances.
func (k *Keyspace) owns() func(string) bool {
	set := map[string]bool{}
	for _, id := range k.Instances {
		set[id] = true
	}
	return func(id string) bool { return set[id] }
}

// scriptResult checks a script's reply: 1 written (2: key deleted).
func scriptResult(c redis.Cmder) error {
	n, err := c.(*redis.Cmd).Int()
	if err != nil {
		return err
	}
	if n != 1 && n != 2 {
		return fmt.Errorf("raw script: returned %d on the bytes it was given", n)
	}
	return nil
}

// measureRedisWrites times pipelined HGETALL of the garbage blocks and pipelined EVALSHA of
// the deleter's CAS and CAD scripts on scratch copies of at most limit of their garbage
// locations (copied afresh before each repetition).
func measureRedisWrites(ctx context.Context, k *Keyspace, limit int, res *RawResults) error {
	blocks, nlocs, err := garbageBlocks(ctx, k, limit, "")
	if err != nil {
		return err
	}
	res.WriteLocs = nlocs
	keys := make([]string, len(blocks))
	for i, g := range blocks {
		keys[i] = g.key
	}
	if res.Read, err = best(2, func() (Rate, error) {
		return pipelined(ctx, k.rdb, len(keys), func(p redis.Pipeliner, i int) redis.Cmder { return p.Do(ctx, "hgetall", keys[i]) },
			func(c redis.Cmder) error { return c.Err() })
	}); err != nil {
		return fmt.Errorf("raw hgetall: %w", err)
	}

	// kvcm-gc loads its scripts when it opens a store; the copies must then be cached already.
	st, err := k.openStore(ctx, false)
	if err != nil {
		return err
	}
	_ = st.Close()
	scripts := redismeta.AllScripts()
	shas := make([]string, len(scripts))
	for i, sc := range scripts {
		shas[i] = sc.Hash()
	}
	exists, err := k.rdb.ScriptExists(ctx, shas...).Result()
	if err != nil {
		return fmt.Errorf("script exists: %w", err)
	}
	res.ScriptsMatch = len(exists) == len(shas) && !slices.Contains(exists, false)
	for _, sc := range scripts {
		if err := sc.Load(ctx, k.rdb).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	cas, cad, err := deletionWrites(k.Spec.Layout, blocks)
	if err != nil {
		return err
	}
	casScript, cadScript := redismeta.Scripts(k.Spec.Layout)
	defer dropScratch(context.WithoutCancel(ctx), k.rdb, blocks)
	run := func(sc *redis.Script, ws []condWrite) (Rate, error) {
		h := sc.Hash()
		return pipelined(ctx, k.rdb, len(ws), func(p redis.Pipeliner, i int) redis.Cmder {
			return p.EvalSha(ctx, h, []string{ws[i].key}, ws[i].args...)
		}, scriptResult)
	}
	for rep := range rawWriteReps {
		if err := copyScratch(ctx, k.rdb, blocks); err != nil {
			return err
		}
		c, err := run(casScript, cas)
		if err != nil {
			return fmt.Errorf("raw cas: %w", err)
		}
		d, err := run(cadScript, cad)
		if err != nil {
			return fmt.Errorf("raw cad: %w", err)
		}
		if rep == 0 || c.PerSec() > res.CAS.PerSec() {
			res.CAS = c
		}
		if rep == 0 || d.PerSec() > res.CAD.PerSec() {
			res.CAD = d
		}
	}
	return nil
}

// rawWriteReps is how many times the raw write loops run (on fresh scratch copies).
const rawWriteReps = 2

// measureSequential issues the deleter's protocol location by location for the garbage
// locations (at most limit), on workers goroutines (a block's locations on one of them, in
// order), on scratch copies of the blocks, unlinking scratch links made next to the garbage
// files so the keyspace's own files stay.
func measureSequential(ctx context.Context, k *Keyspace, workers, limit int, res *RawResults) error {
	blocks, nlocs, err := garbageBlocks(ctx, k, limit, ".seq")
	if err != nil {
		return err
	}
	var scratch []string
	for _, g := range blocks {
		for _, fs := range g.files {
			scratch = append(scratch, fs...)
		}
	}
	if err := linkAll(k.Spec.Root, scratch); err != nil {
		return err
	}
	if err := copyScratch(ctx, k.rdb, blocks); err != nil {
		return err
	}
	defer dropScratch(context.WithoutCancel(ctx), k.rdb, blocks)
	casScript, cadScript := redismeta.Scripts(k.Spec.Layout)
	cas, cad := casScript.Hash(), cadScript.Hash()
	legacy := k.Spec.Layout == kvcm.LayoutLegacy
	// one location: read, CAS to DELETING, unlinks, read again, CAD.
	one := func(g *garbageBlock, j int) error {
		id := g.ids[j]
		for step := range 2 {
			pairs, err := hashPairs(k.rdb.Do(ctx, "hgetall", g.scratch))
			if err != nil {
				return err
			}
			v := blockView{pairs: pairs}
			var args []any
			if legacy {
				uri, _ := v.field(kvcm.FieldURI)
				b, err := kvcm.DecodeBlock([]byte(uri))
				if err != nil {
					return err
				}
				var next []byte
				if step == 0 {
					next, err = b.WithStatus(id, kvcm.StatusDeleting)
				} else {
					var empty bool
					if next, empty, err = b.Without(id); empty {
						next = nil
					}
				}
				if err != nil {
					return err
				}
				args = []any{uri, string(next), "keep"}
				if step == 0 {
					args = args[:2]
				}
			} else {
				field := kvcm.LocationField(id)
				raw, _ := v.field(field)
				if step == 0 {
					del, err := kvcm.LocationWithStatus([]byte(raw), kvcm.StatusDeleting)
					if err != nil {
						return err
					}
					args = []any{field, raw, string(del)}
				} else {
					args = []any{field, raw, "keep"}
				}
			}
			h := cas
			if step == 1 {
				h = cad
			}
			c := k.rdb.EvalSha(ctx, h, []string{g.scratch}, args...)
			if err := scriptResult(c); err != nil {
				return err
			}
			if step == 0 {
				for _, f := range g.files[j] {
					if err := syscall.Unlink(f); err != nil {
						return fmt.Errorf("unlink %s: %w", f, err)
					}
				}
			}
		}
		return nil
	}
	res.SeqWorkers = workers
	started := time.Now()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(blocks); i += workers {
				for j := range blocks[i].ids {
					if err := one(&blocks[i], j); err != nil {
						errs[w] = fmt.Errorf("sequential protocol on %s: %w", blocks[i].key, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	res.Sequential = Rate{Ops: nlocs, Dur: time.Since(started)}
	return errors.Join(errs...)
}

// parallel runs fn over items with workers goroutines and times it.
func parallel(items []string, workers int, fn func(w int, items []string) error) (Rate, error) {
	started := time.Now()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	per := (len(items) + workers - 1) / workers
	for w := range workers {
		lo, hi := min(w*per, len(items)), min((w+1)*per, len(items))
		wg.Go(func() { errs[w] = fn(w, items[lo:hi]) })
	}
	wg.Wait()
	return Rate{Ops: len(items), Dur: time.Since(started)}, errors.Join(errs...)
}

// measureFiles times lstat of the stat sample (plainly and as the probe does, through an
// os.Root) and unlink of scratch links made next to the garbage files (at most limit).
func measureFiles(k *Keyspace, workers, limit int, res *RawResults) error {
	res.Workers = workers
	sample := k.StatSample
	var err error
	res.Stat, err = best(2, func() (Rate, error) {
		return parallel(sample, workers, func(_ int, paths []string) error {
			var st syscall.Stat_t
			for _, p := range paths {
				if err := syscall.Lstat(p, &st); err != nil {
					return fmt.Errorf("lstat %s: %w", p, err)
				}
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	rootDir := filepath.Join(k.Spec.Root, "nfs")
	res.StatDirRoot, err = best(2, func() (Rate, error) {
		return parallel(sample, workers, func(_ int, paths []string) error {
			for start := 0; start < len(paths); start += 512 {
				if err := statDirRoots(rootDir, paths[start:min(start+512, len(paths))]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	res.StatRoot, err = best(2, func() (Rate, error) {
		return parallel(sample, workers, func(_ int, paths []string) error {
			for start := 0; start < len(paths); start += 512 {
				root, err := os.OpenRoot(rootDir)
				if err != nil {
					return fmt.Errorf("open root: %w", err)
				}
				for _, p := range paths[start:min(start+512, len(paths))] {
					rel, ok := strings.CutPrefix(p, rootDir+"/")
					if !ok {
						_ = root.Close()
						return fmt.Errorf("%s not under %s", p, rootDir)
					}
					if _, err := root.Lstat(rel); err != nil {
						_ = root.Close()
						return fmt.Errorf("lstat %s: %w", p, err)
					}
				}
				_ = root.Close()
			}
			return nil
		})
	})
	if err != nil {
		return err
	}

	scratch := make([]string, 0, min(limit, len(k.GarbageFiles)))
	for _, p := range k.GarbageFiles {
		if len(scratch) == limit {
			break
		}
		scratch = append(scratch, p+".raw")
	}
	if err := linkAll(k.Spec.Root, scratch); err != nil {
		return err
	}
	res.Unlink, err = parallel(scratch, workers, func(_ int, paths []string) error {
		for _, p := range paths {
			if err := syscall.Unlink(p); err != nil {
				return fmt.Errorf("unlink %s: %w", p, err)
			}
		}
		return nil
	})
	return err
}

// statDirRoots lstats paths (under rootDir) through an os.Root opened at each directory.
func statDirRoots(rootDir string, paths []string) error {
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return fmt.Errorf("open root: %w", err)
	}
	defer root.Close()
	dirs := map[string]*os.Root{}
	defer func() {
		for _, d := range dirs {
			_ = d.Close()
		}
	}()
	for _, p := range paths {
		rel, ok := strings.CutPrefix(p, rootDir+"/")
		if !ok {
			return fmt.Errorf("%s not under %s", p, rootDir)
		}
		dir, base := filepath.Split(rel)
		d := dirs[dir]
		if d == nil {
			if d, err = root.OpenRoot(dir); err != nil {
				return fmt.Errorf("open %s: %w", dir, err)
			}
			dirs[dir] = d
		}
		if _, err := d.Lstat(base); err != nil {
			return fmt.Errorf("lstat %s: %w", p, err)
		}
	}
	return nil
}

// measurePublish publishes copies of payload synchronously, n times, into a scratch stream.
func measurePublish(ctx context.Context, js jetstream.JetStream, payload []byte, n int) (Rate, error) {
	const name = "KVCMBENCH_RAW"
	_ = js.DeleteStream(ctx, name)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"kvcmbench.raw.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		return Rate{}, fmt.Errorf("create raw stream: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	started := time.Now()
	for i := range n {
		if _, err := js.Publish(ctx, "kvcmbench.raw.batch", payload, jetstream.WithMsgID(strconv.Itoa(i))); err != nil {
			return Rate{}, fmt.Errorf("raw publish: %w", err)
		}
	}
	return Rate{Ops: n, Dur: time.Since(started)}, nil
}

// scanPatterns are the per-instance MATCH patterns of the keyspace's instances.
func scanPatterns(k *Keyspace) []string {
	var out []string
	for _, id := range k.Instances {
		out = append(out, kvcm.ScanPattern(id))
	}
	return out
}

// unlinkPerLocation is how many files the deleter unlinks per garbage location on average.
func unlinkPerLocation(k *Keyspace) float64 {
	if k.Counts.Garbage == 0 {
		return 0
	}
	return float64(k.Counts.GarbageFiles) / float64(k.Counts.Garbage)
}

// composedDeleteRate is the rate of fully deleting locations if nothing but the raw
// operations cost anything: the CAS, the location's unlinks and the CAD of each, back to back
// (the writes' time shared among the locations they covered).
func composedDeleteRate(r RawResults, unlinks float64) float64 {
	ul := r.Unlink.PerSec()
	if r.WriteLocs == 0 || r.CAS.Dur == 0 || r.CAD.Dur == 0 || ul == 0 {
		return 0
	}
	per := (r.CAS.Dur+r.CAD.Dur).Seconds()/float64(r.WriteLocs) + unlinks/ul
	return 1 / per
}

// fullDeleteRate is composedDeleteRate with the deleter's two reads of each block (before
// its CAS and before its unlinks), shared among the block's garbage locations.
func fullDeleteRate(r RawResults, unlinks float64) float64 {
	c := composedDeleteRate(r, unlinks)
	if c == 0 || r.Read.Ops == 0 || r.WriteLocs == 0 {
		return 0
	}
	reads := 2 * r.Read.Dur.Seconds() / float64(r.WriteLocs)
	return 1 / (1/c + reads)
}

// samplePage is a message like the scanner's: count blocks of the keyspace, read through
// kvcm-gc's store and encoded as a batch in their layout. Only its size matters to the raw
// publish baseline.
func samplePage(ctx context.Context, k *Keyspace, count int) ([]byte, error) {
	b := subjects.Batch{V: subjects.BatchSchemaVersion, Cluster: k.Spec.Cluster, Instance: k.Instances[0], Group: "g", Store: "s",
		Round: 1, LeaseRev: 1, Parts: 1, ScannedAt: time.Now().UnixMicro()}
	st, err := k.openStore(ctx, true)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	owns := k.owns()
	var cursor uint64
	for len(b.Blocks) < count {
		page, err := st.ScanStore(ctx, cursor, count, owns)
		if err != nil {
			return nil, err
		}
		for i := range page.Entries {
			if be, ok := scanner.BlockEntry(&page.Entries[i]); ok && len(b.Blocks) < count {
				b.Blocks = append(b.Blocks, be)
			}
		}
		if cursor = page.Next; cursor == 0 {
			break
		}
	}
	return subjects.Encode(b)
}
