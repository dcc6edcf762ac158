package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
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
	// ScanMatch: the same per instance with the scanner's MATCH pattern, the Redis work the
	// scanner does.
	ScanMatch Rate
	// HGet, CAS and CAD are pipelined HGET __uri__ and EVALSHA of the deleter's scripts; the
	// scripts write back the value they compare with, so the keyspace is unchanged.
	HGet, CAS, CAD Rate
	// ScriptsMatch is false when the server does not hold the copies of the scripts after
	// kvcm-gc loaded its own: the copies have drifted.
	ScriptsMatch bool
	// Stat is lstat(2) of data files by absolute path; StatRoot the same through os.Root
	// opened per 512 paths, as the stat probe does. Unlink is unlink(2) of data files.
	Stat, StatRoot, Unlink Rate
	// Workers are the goroutines the file-system baselines use (one per core).
	Workers int
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
		r, err := pipelined(ctx, k.rdb, keys, func(p redis.Pipeliner, i int) redis.Cmder {
			return p.EvalSha(ctx, h, []string{keys[i]}, vals[i], vals[i])
		}, one)
		if err != nil {
			return fmt.Errorf("raw evalsha: %w", err)
		}
		*s.out = r
	}
	return nil
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
	res.Stat, err = parallel(sample, workers, func(_ int, paths []string) error {
		var st syscall.Stat_t
		for _, p := range paths {
			if err := syscall.Lstat(p, &st); err != nil {
				return fmt.Errorf("lstat %s: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	rootDir := filepath.Join(k.Spec.Root, "nfs")
	res.StatRoot, err = parallel(sample, workers, func(_ int, paths []string) error {
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

// scanPatterns are the scanner's MATCH patterns of the keyspace's instances.
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
