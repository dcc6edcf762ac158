package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
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

// casLua and cadLua are byte-for-byte copies of the deleter's compare-and-swap and
// compare-and-delete scripts (package redismeta keeps them unexported). Raw checks that the
// server's script cache holds them after redismeta loaded its own, so a drift is reported.
const casLua = `
local cur = redis.call('HGET', KEYS[1], '__uri__')
if cur ~= ARGV[1] then return 0 end
if ARGV[2] == '' then return redis.error_reply('ERR kvcm-gc cas: empty new value') end
redis.call('HSET', KEYS[1], '__uri__', ARGV[2])
return 1
`

const cadLua = `
local cur = redis.call('HGET', KEYS[1], '__uri__')
if cur ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], '__uri__', ARGV[2])
end
return 1
`

// RawResults are the raw limits of the machine, measured on the same keyspace as kvcm-gc.
type RawResults struct {
	// ScanBare: SCAN COUNT n over the whole database, each page read with a pipelined HMGET.
	ScanBare Rate
	// ScanMatch: the same per instance with a per-instance MATCH pattern, the Redis work of the
	// scanner's former walk (one per instance; it now walks each store once). ScanMatchWide
	// uses COUNT n × instances, so that a page of one instance holds about n keys again.
	ScanMatch, ScanMatchWide Rate
	// HGet, CAS and CAD are pipelined HGET __uri__ and EVALSHA of the deleter's scripts; the
	// scripts write back the value they compare with, so the keyspace is unchanged.
	HGet, CAS, CAD Rate
	// ScriptsMatch is false when the server does not hold the copies of the scripts after
	// kvcm-gc loaded its own: the copies have drifted.
	ScriptsMatch bool
	// Stat is lstat(2) of data files by absolute path; StatRoot the same through os.Root
	// opened per 512 paths, as the stat probe does; StatDirRoot through an os.Root opened at
	// each file's directory (one fstatat per file). Unlink is unlink(2) of data files.
	Stat, StatRoot, StatDirRoot, Unlink Rate
	// Publish is synchronous JetStream publishing of messages the size of the scanner's
	// batches (ScanPerMsg keys each), into a file-backed stream: storing what the scanner
	// read is as much part of its job as reading it.
	Publish      Rate
	ScanPerMsg   int
	PublishBytes int
	// Sequential is the deleter's protocol issued by hand, one location after the other on
	// each of SeqWorkers goroutines: HGET, CAS, the location's unlinks, HGET, CAD, each
	// waiting for the previous (the scripts write back what they read).
	Sequential Rate
	SeqWorkers int
	// Workers are the goroutines the file-system baselines use (one per core).
	Workers int
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

// scanBare reads every key of the database: SCAN COUNT count, then one pipelined HMGET of
// the page's keys.
func scanBare(ctx context.Context, rdb *redis.Client, count int) (Rate, error) {
	return scanLoop(ctx, rdb, []string{""}, count)
}

// scanLoop walks each pattern ("" for none) to cursor 0.
func scanLoop(ctx context.Context, rdb *redis.Client, patterns []string, count int) (Rate, error) {
	started := time.Now()
	n := 0
	cmds := make([]*redis.SliceCmd, 0, 2*count)
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
					cmds = append(cmds, pipe.HMGet(ctx, k, "__uri__", "__lru_time__"))
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return Rate{}, fmt.Errorf("hmget: %w", err)
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

// pipelined runs one command per key in pipelines of depth 256 and checks each reply.
func pipelined(ctx context.Context, rdb *redis.Client, keys []string, cmd func(p redis.Pipeliner, i int) redis.Cmder, check func(c redis.Cmder) error) (Rate, error) {
	const depth = 256
	started := time.Now()
	cmds := make([]redis.Cmder, 0, depth)
	for start := 0; start < len(keys); start += depth {
		end := min(start+depth, len(keys))
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
	return Rate{Ops: len(keys), Dur: time.Since(started)}, nil
}

func sha(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// measureRedisWrites times pipelined HGET and EVALSHA of the CAS and CAD scripts on the
// keyspace's garbage blocks (at most limit), writing back the bytes read.
func measureRedisWrites(ctx context.Context, k *Keyspace, limit int, res *RawResults) error {
	var keys []string
	for i := range k.blocks {
		if k.blocks[i].garbage > 0 && len(keys) < limit {
			keys = append(keys, k.BlockKey(i))
		}
	}
	vals := make([]string, len(keys))
	r, err := pipelined(ctx, k.rdb, keys, func(p redis.Pipeliner, i int) redis.Cmder { return p.HGet(ctx, keys[i], "__uri__") },
		func(c redis.Cmder) error { return c.Err() })
	if err != nil {
		return fmt.Errorf("raw hget: %w", err)
	}
	res.HGet = r
	for start := 0; start < len(keys); start += 1000 {
		end := min(start+1000, len(keys))
		pipe := k.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, end-start)
		for i := start; i < end; i++ {
			cmds[i-start] = pipe.HGet(ctx, keys[i], "__uri__")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("read blocks for raw cas: %w", err)
		}
		for i, c := range cmds {
			vals[start+i] = c.Val()
		}
	}

	// kvcm-gc loads its scripts when it opens a store; the copies must then be cached already.
	conn, err := redismeta.ParseURI(k.URI)
	if err != nil {
		return err
	}
	store, err := redismeta.OpenStore(ctx, conn, redismeta.StoreOptions{})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	_ = store.Close()
	exists, err := k.rdb.ScriptExists(ctx, sha(casLua), sha(cadLua)).Result()
	if err != nil {
		return fmt.Errorf("script exists: %w", err)
	}
	res.ScriptsMatch = len(exists) == 2 && exists[0] && exists[1]
	for _, src := range []string{casLua, cadLua} {
		if err := k.rdb.ScriptLoad(ctx, src).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	one := func(c redis.Cmder) error {
		n, err := c.(*redis.Cmd).Int()
		if err != nil {
			return err
		}
		if n != 1 {
			return errors.New("raw script: compare failed on an unchanged value")
		}
		return nil
	}
	for _, s := range []struct {
		src string
		out *Rate
	}{{casLua, &res.CAS}, {cadLua, &res.CAD}} {
		h := sha(s.src)
		r, err := best(rawReps, func() (Rate, error) {
			return pipelined(ctx, k.rdb, keys, func(p redis.Pipeliner, i int) redis.Cmder {
				return p.EvalSha(ctx, h, []string{keys[i]}, vals[i], vals[i])
			}, one)
		})
		if err != nil {
			return fmt.Errorf("raw evalsha: %w", err)
		}
		*s.out = r
	}
	return nil
}

// rawReps is how many times each cheap raw measurement is repeated.
const rawReps = 3

// measureSequential issues the deleter's protocol location by location for the garbage
// locations (at most limit), on workers goroutines, unlinking scratch links made next to
// the garbage files so the keyspace's own files stay.
func measureSequential(ctx context.Context, k *Keyspace, workers, limit int, res *RawResults) error {
	type loc struct {
		key   string
		files []string
	}
	var locs []loc
	fileIdx := 0
	// GarbageFiles lists the files of garbage locations in keyspace order; hand them out in
	// the measured per-location ratio.
	per := unlinkPerLocation(k)
	acc := 0.0
	for i := range k.blocks {
		b := &k.blocks[i]
		for range b.garbage {
			if len(locs) == limit {
				break
			}
			l := loc{key: k.BlockKey(i)}
			for acc += per; acc >= 1 && fileIdx < len(k.GarbageFiles); acc-- {
				l.files = append(l.files, k.GarbageFiles[fileIdx]+".seq")
				fileIdx++
			}
			locs = append(locs, l)
		}
	}
	var scratch []string
	for _, l := range locs {
		scratch = append(scratch, l.files...)
	}
	if err := linkAll(k.Spec.Root, scratch); err != nil {
		return err
	}
	cas, cad := sha(casLua), sha(cadLua)
	res.SeqWorkers = workers
	started := time.Now()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(locs); i += workers {
				l := locs[i]
				for _, h := range []string{cas, cad} {
					cur, err := k.rdb.HGet(ctx, l.key, "__uri__").Result()
					if err == nil {
						err = k.rdb.EvalSha(ctx, h, []string{l.key}, cur, cur).Err()
					}
					if err != nil {
						errs[w] = fmt.Errorf("sequential protocol on %s: %w", l.key, err)
						return
					}
					if h == cas {
						for _, f := range l.files {
							if err := syscall.Unlink(f); err != nil {
								errs[w] = fmt.Errorf("unlink %s: %w", f, err)
								return
							}
						}
					}
				}
			}
		})
	}
	wg.Wait()
	res.Sequential = Rate{Ops: len(locs), Dur: time.Since(started)}
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
// operations cost anything: one CAS, the location's unlinks and one CAD each, back to back.
func composedDeleteRate(r RawResults, unlinks float64) float64 {
	cas, cad, ul := r.CAS.PerSec(), r.CAD.PerSec(), r.Unlink.PerSec()
	if cas == 0 || cad == 0 || ul == 0 {
		return 0
	}
	return 1 / (1/cas + unlinks/ul + 1/cad)
}

// samplePage is a message like the scanner's: count blocks of the keyspace encoded as a
// batch. Only its size matters to the raw publish baseline.
func samplePage(ctx context.Context, k *Keyspace, count int) ([]byte, error) {
	b := subjects.Batch{V: subjects.SchemaVersion, Cluster: k.Spec.Cluster, Instance: k.Instances[0], Group: "g", Store: "s",
		Round: 1, LeaseRev: 1, Parts: 1, ScannedAt: time.Now().UnixMicro()}
	errEnough := errors.New("enough blocks")
	err := k.readBlocks(ctx, func(i int, uri string) error {
		if uri != "" {
			b.Blocks = append(b.Blocks, subjects.BlockEntry{Key: k.blocks[i].key, URI: subjects.RawText(uri), LRUTime: "1760000000000000"})
		}
		if len(b.Blocks) == count {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	return subjects.Encode(b)
}
