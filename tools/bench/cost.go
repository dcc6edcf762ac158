package bench

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// The cost phase measures what a walk costs Redis, the way Redis counts it (rediscpu.go): the
// main thread's CPU time per key SCAN returned and per page, for the page sizes (SCAN COUNT)
// and pipeline depths a walk can use, and split by what Redis spent it on (SCAN, HGETALL, and
// the rest: reading queries, writing replies, the event loop). The longest time one page
// holds Redis is its keys times the cost per key; a paced walk's share of Redis's time is its
// pages' cost over the time between them.
//
// Each measurement walks the first CostKeys keys of the keyspace's SCAN order (a hash order,
// so a sample spread over the whole keyspace, the same keys for every configuration), and
// the measurements are repeated in alternating order.

// Kinds of a cost measurement.
const (
	// CostWalk is kvcm-gc's own read of a store (redismeta ScanStoreBursts: SCAN MATCH, every
	// key of the page read whole with HGETALL in pipelines of Depth keys, the next page's
	// SCAN in the last pipeline).
	CostWalk = "walk"
	// CostScan is SCAN MATCH alone.
	CostScan = "scan"
	// CostRead is HGETALL alone, in pipelines of Depth keys, of the keys the walk returns.
	CostRead = "read"
)

// CostPoint is one configuration measured.
type CostPoint struct {
	Kind string
	// Count is SCAN's COUNT (walk, scan); Depth the keys per pipeline (walk, read; 0: a
	// page's keys, as one pipeline).
	Count, Depth int
}

func (p CostPoint) String() string {
	switch p.Kind {
	case CostScan:
		return fmt.Sprintf("SCAN alone, COUNT %d", p.Count)
	case CostRead:
		return fmt.Sprintf("HGETALL alone, pipelines of %d", p.Depth)
	}
	if p.Depth == 0 || p.Depth >= p.Count {
		return fmt.Sprintf("walk, pages of %d (one pipeline each)", p.Count)
	}
	return fmt.Sprintf("walk, pages of %d in pipelines of %d", p.Count, p.Depth)
}

// ParseCostPoints reads -cost-points: "walk:64", "walk:1024/64" (COUNT/depth), "scan:256",
// "read:64", comma-separated.
func ParseCostPoints(s string) ([]CostPoint, error) {
	return parseList(s, func(f string) (CostPoint, error) {
		kind, arg, ok := strings.Cut(f, ":")
		a, b, two := strings.Cut(arg, "/")
		x, err := strconv.Atoi(a)
		y := 0
		if err == nil && two {
			y, err = strconv.Atoi(b)
		}
		if !ok || err != nil || x <= 0 || y < 0 || (two && kind != CostWalk) {
			return CostPoint{}, fmt.Errorf("cost point %q: not walk:COUNT[/DEPTH], scan:COUNT or read:DEPTH", f)
		}
		switch kind {
		case CostWalk:
			return CostPoint{Kind: kind, Count: x, Depth: y}, nil
		case CostScan:
			return CostPoint{Kind: kind, Count: x}, nil
		case CostRead:
			return CostPoint{Kind: kind, Depth: x}, nil
		}
		return CostPoint{}, fmt.Errorf("cost point %q: kind %q is not walk, scan or read", f, kind)
	})
}

// CostRun is one measurement of a point.
type CostRun struct {
	Point CostPoint
	Rep   int
	// Keys are the keys SCAN returned (walk, scan) or read (read); Pages the SCAN pages, or
	// the pipelines of a read.
	Keys, Pages int
	Work        RedisWork
	// PageTimes are each page's time in the client, from its first command sent to its last
	// reply read (walk: the whole ScanStoreBursts call), sorted.
	PageTimes []time.Duration
}

// PerKey is Redis's main-thread CPU per key.
func (r CostRun) PerKey() time.Duration { return perN(r.Work.Main, r.Keys) }

// PerPage is Redis's main-thread CPU per page.
func (r CostRun) PerPage() time.Duration { return perN(r.Work.Main, r.Pages) }

// PageQuantile is the q-quantile of the page times.
func (r CostRun) PageQuantile(q float64) time.Duration {
	if len(r.PageTimes) == 0 {
		return 0
	}
	return r.PageTimes[min(len(r.PageTimes)-1, int(q*float64(len(r.PageTimes))))]
}

func perN(d time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return d / time.Duration(n)
}

// CostCensus describes the keyspace as Redis holds it.
type CostCensus struct {
	// Keys in the database; Buckets the main hash table's size and Rehashing whether a
	// second table was in use (DEBUG HTSTATS; 0 when the server refuses DEBUG).
	Keys, Buckets int64
	Rehashing     bool
	// Encodings of a sample of block keys (OBJECT ENCODING), and their mean fields, bytes of
	// HGETALL reply (fields and values), memory (MEMORY USAGE) and key length.
	Sampled                               int
	Encodings                             map[string]int
	Fields, ReplyBytes, Memory, KeyLength float64
	// UsedMemory is Redis's used_memory.
	UsedMemory int64
}

// CostResults are the cost phase on one keyspace.
type CostResults struct {
	Layout kvcm.Layout
	Blocks int
	Census CostCensus
	// Rehashing are the runs of one repetition measured while Redis rehashed the keys' hash
	// table (a keyspace that just grew past a power of two), RehashTook how long the
	// rehashing went on after the first measurement began; Runs are measured once it was over.
	Rehashing  []CostRun
	RehashTook time.Duration
	Runs       []CostRun
}

// runsOf are the runs of point p.
func runsOf(runs []CostRun, p CostPoint) []CostRun {
	var out []CostRun
	for _, r := range runs {
		if r.Point == p {
			out = append(out, r)
		}
	}
	return out
}

// pointsOf are the points of runs, in order.
func pointsOf(runs []CostRun) []CostPoint {
	var out []CostPoint
	for _, r := range runs {
		if !slices.Contains(out, r.Point) {
			out = append(out, r.Point)
		}
	}
	return out
}

// PointRuns are the runs of point p once no rehashing went on.
func (c *CostResults) PointRuns(p CostPoint) []CostRun { return runsOf(c.Runs, p) }

// DefaultCostPoints are the cost phase's default configurations: pages of one pipeline from
// 16 to 1,024 keys, SCAN COUNT 256 read in pipelines of 64, SCAN and HGETALL alone.
func DefaultCostPoints() []CostPoint {
	return []CostPoint{
		{Kind: CostWalk, Count: 16}, {Kind: CostWalk, Count: 32}, {Kind: CostWalk, Count: 64}, {Kind: CostWalk, Count: 128},
		{Kind: CostWalk, Count: 256}, {Kind: CostWalk, Count: 1024}, {Kind: CostWalk, Count: 256, Depth: 64},
		{Kind: CostScan, Count: 256}, {Kind: CostRead, Depth: 64},
	}
}

// costTarget is a keyspace the cost phase measures: its store, the keys its read
// measurements read, and where its runs go.
type costTarget struct {
	k    *Keyspace
	st   *redismeta.Store
	keys []string
	res  *CostResults
}

// newCostTarget takes k's census and opens its store; the caller closes the store.
func (h *Harness) newCostTarget(ctx context.Context, k *Keyspace) (*costTarget, error) {
	t := &costTarget{k: k, res: &CostResults{Layout: k.Spec.Layout, Blocks: k.Counts.Blocks}}
	var err error
	if t.res.Census, err = costCensus(ctx, k); err != nil {
		return nil, err
	}
	if t.st, err = k.openStore(ctx, true); err != nil {
		return nil, err
	}
	// The read measurements read the keys a walk returns.
	if t.keys, err = scanKeys(ctx, k.rdb, 1024, h.costKeys()); err != nil {
		t.st.Close()
		return nil, err
	}
	return t, nil
}

func (h *Harness) costKeys() int {
	if h.cfg.CostKeys <= 0 {
		return 200_000
	}
	return h.cfg.CostKeys
}

func (h *Harness) costPoints() []CostPoint {
	if len(h.cfg.CostPoints) == 0 {
		return DefaultCostPoints()
	}
	return h.cfg.CostPoints
}

// measureCost measures every point on every target, reps times: the targets alternate within
// each point (their order swapped every other repetition, as the points' order is), so that
// the figures of two keyspaces compared are taken at neighbouring moments of a shared
// machine. rehashing files the runs as measured while a target rehashed.
func (h *Harness) measureCost(ctx context.Context, targets []*costTarget, reps int, rehashing bool) error {
	for rep := 1; rep <= max(reps, 1); rep++ {
		order, ts := slices.Clone(h.costPoints()), slices.Clone(targets)
		if rep%2 == 0 {
			slices.Reverse(order)
			slices.Reverse(ts)
		}
		for _, p := range order {
			for _, t := range ts {
				r, err := costRun(ctx, t.k, t.st, p, t.keys, h.costKeys())
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				r.Rep = rep
				h.log.Info("cost", "layout", t.k.Spec.Layout, "blocks", t.k.Counts.Blocks, "point", p.String(), "rep", rep,
					"rehashing", rehashing, "keys", r.Keys, "redis_us_per_key", fmt.Sprintf("%.2f", float64(r.PerKey())/1e3),
					"redis_us_per_page", fmt.Sprintf("%.1f", float64(r.PerPage())/1e3), "page_p50", r.PageQuantile(0.5))
				if rehashing {
					t.res.Rehashing = append(t.res.Rehashing, r)
				} else {
					t.res.Runs = append(t.res.Runs, r)
				}
			}
		}
	}
	return nil
}

// cost runs the cost phase on k.
func (h *Harness) cost(ctx context.Context, k *Keyspace) (*CostResults, error) {
	t, err := h.newCostTarget(ctx, k)
	if err != nil {
		return nil, err
	}
	defer t.st.Close()
	return t.res, h.measureCost(ctx, []*costTarget{t}, h.cfg.CostReps, false)
}

// CostPair is the cost phase on a keyspace and on a copy of it grown CostGrow times, held
// by a redis-server of its own, measured alternately.
type CostPair struct {
	Small, Large *CostResults
}

// costGrown seeds small's keyspace again, metadata only, on a second redis-server, grows it
// Config.CostGrow times, and measures both alternately: once while the grown server rehashes
// its keys' hash table (right after growing), then Config.CostReps times once it is over.
// Each server holds one keyspace, so each one's cost is that of a Redis of that size.
func (h *Harness) costGrown(ctx context.Context, small *Keyspace) (*CostPair, error) {
	second, err := servers.StartRedis("", servers.WithRedisArgs("--enable-debug-command", "local"))
	if err != nil {
		return nil, fmt.Errorf("start the grown keyspace's redis-server: %w", err)
	}
	defer second.Close()
	sp := small.Spec
	sp.Cluster, sp.NoFiles, sp.Root = sp.Cluster+"-grown", true, filepath.Join(h.workDir, "data-"+sp.Layout.String()+"-grown")
	big, err := SeedKeyspace(ctx, second.Client(), second.URI(), sp, h.log)
	if err != nil {
		return nil, err
	}
	defer big.Close()
	h.log.Info("growing the cost keyspace", "blocks", big.Counts.Blocks, "factor", h.cfg.CostGrow)
	if err := big.Grow(ctx, h.cfg.CostGrow); err != nil {
		return nil, err
	}
	grown := time.Now()
	a, err := h.newCostTarget(ctx, small)
	if err != nil {
		return nil, err
	}
	defer a.st.Close()
	b, err := h.newCostTarget(ctx, big)
	if err != nil {
		return nil, err
	}
	defer b.st.Close()
	pair := &CostPair{Small: a.res, Large: b.res}
	targets := []*costTarget{a, b}
	if rehashing, err := isRehashing(ctx, big); err != nil {
		return pair, err
	} else if rehashing {
		// Every command on the keyspace moves a bucket too, and serverCron spends 1 ms of
		// every 100 ms on it: measured once as it is, then again once it is over.
		if err := h.measureCost(ctx, targets, 1, true); err != nil {
			return pair, err
		}
		if err := waitRehashed(ctx, big, 30*time.Minute); err != nil {
			return pair, err
		}
		b.res.RehashTook = time.Since(grown)
		h.log.Info("rehashing over", "after", b.res.RehashTook.Round(time.Second))
	}
	return pair, h.measureCost(ctx, targets, h.cfg.CostReps, false)
}

// costRun measures one point over the first limit keys of the SCAN order.
func costRun(ctx context.Context, k *Keyspace, st meta.BurstScanner, p CostPoint, keys []string, limit int) (CostRun, error) {
	res := CostRun{Point: p}
	m, err := startRedisMeter(ctx, k.rdb)
	if err != nil {
		return res, err
	}
	switch p.Kind {
	case CostWalk:
		owns := k.owns()
		var cursor uint64
		for res.Keys < limit {
			t0 := time.Now()
			page, err := st.ScanStoreBursts(ctx, cursor, p.Count, owns, meta.Bursts{Size: p.Depth})
			if err != nil {
				return res, err
			}
			res.PageTimes = append(res.PageTimes, time.Since(t0))
			res.Pages++
			res.Keys += len(page.Entries) + len(page.BadKeys) + page.Unowned + page.WrongDB
			if cursor = page.Next; cursor == 0 {
				break
			}
		}
	case CostScan:
		var cursor uint64
		for res.Keys < limit {
			t0 := time.Now()
			got, next, err := k.rdb.Scan(ctx, cursor, kvcm.StoreScanPattern, int64(p.Count)).Result()
			if err != nil {
				return res, fmt.Errorf("scan: %w", err)
			}
			res.PageTimes = append(res.PageTimes, time.Since(t0))
			res.Pages++
			res.Keys += len(got)
			if cursor = next; cursor == 0 {
				break
			}
		}
	case CostRead:
		for at := 0; at < len(keys); at += p.Depth {
			batch := keys[at:min(at+p.Depth, len(keys))]
			t0 := time.Now()
			pipe := k.rdb.Pipeline()
			for _, key := range batch {
				pipe.Do(ctx, "hgetall", key)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return res, fmt.Errorf("read: %w", err)
			}
			res.PageTimes = append(res.PageTimes, time.Since(t0))
			res.Pages++
			res.Keys += len(batch)
		}
	}
	if res.Work, err = m.work(ctx); err != nil {
		return res, err
	}
	// The meter's own INFO is one command among thousands; it is left in.
	slices.Sort(res.PageTimes)
	return res, nil
}

// scanKeys returns the first limit keys of the keyspace's SCAN order (MATCH of every block
// key).
func scanKeys(ctx context.Context, rdb *redis.Client, count, limit int) ([]string, error) {
	var out []string
	var cursor uint64
	for len(out) < limit {
		got, next, err := rdb.Scan(ctx, cursor, kvcm.StoreScanPattern, int64(count)).Result()
		if err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		out = append(out, got...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	return out[:min(len(out), limit)], nil
}

// htstats reads DEBUG HTSTATS of k's database with a client that waits for it: on a large
// table the command walks every bucket, for seconds.
func htstats(ctx context.Context, k *Keyspace) (string, error) {
	o := *k.rdb.Options()
	o.ReadTimeout, o.PoolSize = 5*time.Minute, 1
	c := redis.NewClient(&o)
	defer c.Close()
	s, err := c.Do(ctx, "debug", "htstats", k.Spec.DB).Text()
	if err != nil {
		return "", fmt.Errorf("debug htstats: %w", err)
	}
	return s, nil
}

// isRehashing reports whether the keys' hash table of k's database is being rehashed.
func isRehashing(ctx context.Context, k *Keyspace) (bool, error) {
	s, err := htstats(ctx, k)
	if err != nil {
		return false, err
	}
	_, rehashing := parseHTStats(s)
	return rehashing, nil
}

// waitRehashed waits until the keys' hash table of k's database is not being rehashed. Redis
// rehashes in the background for 1 ms of every serverCron run (hz times a second, 10 by
// default: a table of 16M buckets takes minutes); the wait raises hz to its most meanwhile,
// and puts it back.
func waitRehashed(ctx context.Context, k *Keyspace, limit time.Duration) error {
	if rehashing, err := isRehashing(ctx, k); err != nil || !rehashing {
		return err
	}
	if hz, err := k.rdb.ConfigGet(ctx, "hz").Result(); err == nil && hz["hz"] != "" {
		if err := k.rdb.ConfigSet(ctx, "hz", "500").Err(); err == nil {
			defer k.rdb.ConfigSet(context.WithoutCancel(ctx), "hz", hz["hz"])
		}
	}
	deadline := time.Now().Add(limit)
	for {
		rehashing, err := isRehashing(ctx, k)
		if err != nil || !rehashing {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the keys' hash table still rehashing after %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// costCensusSample is how many keys the census looks at.
const costCensusSample = 2000

// costCensus describes k as Redis holds it.
func costCensus(ctx context.Context, k *Keyspace) (CostCensus, error) {
	c := CostCensus{Encodings: map[string]int{}}
	rdb := k.rdb
	var err error
	if c.Keys, err = rdb.DBSize(ctx).Result(); err != nil {
		return c, fmt.Errorf("dbsize: %w", err)
	}
	c.UsedMemory = redisUsedMemory(ctx, rdb)
	if s, err := htstats(ctx, k); err == nil {
		c.Buckets, c.Rehashing = parseHTStats(s)
	}
	keys, err := scanKeys(ctx, rdb, 1024, costCensusSample)
	if err != nil {
		return c, err
	}
	pipe := rdb.Pipeline()
	enc := make([]*redis.StringCmd, len(keys))
	all := make([]*redis.Cmd, len(keys))
	mem := make([]*redis.IntCmd, len(keys))
	for i, key := range keys {
		enc[i] = pipe.ObjectEncoding(ctx, key)
		all[i] = pipe.Do(ctx, "hgetall", key)
		mem[i] = pipe.MemoryUsage(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return c, fmt.Errorf("census: %w", err)
	}
	for i, key := range keys {
		pairs, err := hashPairs(all[i])
		if err != nil {
			return c, fmt.Errorf("census: %w", err)
		}
		c.Sampled++
		c.Encodings[enc[i].Val()]++
		c.Fields += float64(len(pairs) / 2)
		for _, p := range pairs {
			c.ReplyBytes += float64(len(p))
		}
		c.Memory += float64(mem[i].Val())
		c.KeyLength += float64(len(key))
	}
	if n := float64(c.Sampled); n > 0 {
		c.Fields, c.ReplyBytes, c.Memory, c.KeyLength = c.Fields/n, c.ReplyBytes/n, c.Memory/n, c.KeyLength/n
	}
	return c, nil
}

// parseHTStats reads the main hash table's size from DEBUG HTSTATS, and whether it is being
// rehashed (a second table is listed).
func parseHTStats(s string) (buckets int64, rehashing bool) {
	tables := 0
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[Expires HT]") {
			break // the keys' hash table comes first
		}
		if strings.HasPrefix(line, "Hash table ") && strings.Contains(line, "stats") {
			tables++
		}
		if v, ok := strings.CutPrefix(line, "table size: "); ok && tables == 1 {
			buckets, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return buckets, tables > 1
}

// redisUsedMemory is Redis's used_memory, in bytes (0 when it cannot be read).
func redisUsedMemory(ctx context.Context, rdb *redis.Client) int64 {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// usPer is a duration in microseconds with two decimals.
func usPer(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e3) }

// costReport is the cost phase's section of one keyspace.
func costReport(w func(string, ...any), c *CostResults) {
	if c == nil || len(c.Runs) == 0 {
		return
	}
	ce := c.Census
	w("### What a walk costs Redis, %s layout, %s blocks\n\n", c.Layout, num(float64(c.Blocks)))
	encs := make([]string, 0, len(ce.Encodings))
	for _, e := range slices.Sorted(maps.Keys(ce.Encodings)) {
		encs = append(encs, fmt.Sprintf("%s %d", e, ce.Encodings[e]))
	}
	table := "not read (DEBUG refused)"
	if ce.Buckets > 0 {
		table = fmt.Sprintf("%s buckets, %.2f keys per bucket", num(float64(ce.Buckets)), float64(ce.Keys)/float64(ce.Buckets))
		if ce.Rehashing {
			table += ", rehashing"
		}
	}
	w("The keyspace as Redis holds it: %s keys, used_memory %s; the keys' hash table %s. A sample of %d block keys: encodings %s; %.1f fields, %.0f bytes of fields and values (HGETALL's reply), %.0f bytes of memory (MEMORY USAGE) and a %.0f-byte key on average.\n\n",
		num(float64(ce.Keys)), mb(ce.UsedMemory), table, ce.Sampled, strings.Join(encs, ", "), ce.Fields, ce.ReplyBytes, ce.Memory, ce.KeyLength)
	w("Redis's main-thread CPU (INFO cpu, used_cpu_user_main_thread + used_cpu_sys_main_thread: every command, reading the queries, writing the replies, the event loop) over the first %s keys of the SCAN order, each repetition's figure in order. INFO commandstats' execution times are left out: Redis measures them on the wall clock, so on a shared machine they hold the time its thread waited for a core. The page time is the client's, from the first command sent to the last reply read (a shared machine's, noisy). A pipeline holds Redis for about its CPU: the longest a serving request waits behind one.\n\n",
		num(float64(c.Runs[0].Keys)))
	for _, set := range []struct {
		runs []CostRun
		what string
	}{{c.Rehashing, "while Redis rehashed the keys' hash table (right after it grew)"}, {c.Runs, ""}} {
		if len(set.runs) == 0 {
			continue
		}
		if set.what != "" {
			w("**%s**", set.what)
			if c.RehashTook > 0 {
				w("; the rehashing ended %s after the keyspace was ready", c.RehashTook.Round(time.Second))
			}
			w(":\n\n")
		} else if len(c.Rehashing) > 0 {
			w("**Once the rehashing was over:**\n\n")
		}
		w("| configuration | Redis CPU per key (µs) | Redis CPU per page (µs) | page time p50 / p99 (client) |\n|---|---|---|---|\n")
		for _, p := range pointsOf(set.runs) {
			runs := runsOf(set.runs, p)
			var perKey, perPage []string
			for _, r := range runs {
				perKey = append(perKey, usPer(r.PerKey()))
				perPage = append(perPage, fmt.Sprintf("%.0f", float64(r.PerPage())/1e3))
			}
			last := runs[len(runs)-1]
			w("| %s | %s | %s | %s / %s |\n", p, strings.Join(perKey, ", "), strings.Join(perPage, ", "), us(last.PageQuantile(0.5)), us(last.PageQuantile(0.99)))
		}
		w("\n")
	}
}

// meanPerKey is the mean CPU per key of runs.
func meanPerKey(runs []CostRun) time.Duration {
	var sum time.Duration
	for _, r := range runs {
		sum += r.PerKey()
	}
	return perN(sum, len(runs))
}

// perKeyList is each run's CPU per key, in µs.
func perKeyList(runs []CostRun) string {
	var out []string
	for _, r := range runs {
		out = append(out, usPer(r.PerKey()))
	}
	return strings.Join(out, ", ")
}

// costPairReport compares a keyspace with one several times as large, measured alternately.
func costPairReport(w func(string, ...any), p *CostPair) {
	a, b := p.Small, p.Large
	if a == nil || b == nil || len(b.Runs)+len(b.Rehashing) == 0 {
		return
	}
	w("### What a walk costs Redis at %s and %s blocks, %s layout\n\n", num(float64(a.Blocks)), num(float64(b.Blocks)), a.Layout)
	for _, c := range []*CostResults{a, b} {
		ce := c.Census
		table := "not read"
		if ce.Buckets > 0 {
			table = fmt.Sprintf("%s buckets, %.2f keys per bucket", num(float64(ce.Buckets)), float64(ce.Keys)/float64(ce.Buckets))
			if ce.Rehashing {
				table += ", being rehashed into a table twice as large"
			}
		}
		if c.RehashTook > 0 {
			table += fmt.Sprintf(" (the rehashing ended %s after the growth)", c.RehashTook.Round(time.Second))
		}
		w("- %s blocks: %s keys, used_memory %s, the keys' hash table %s.\n", num(float64(c.Blocks)), num(float64(ce.Keys)), mb(ce.UsedMemory), table)
	}
	w("\nEach keyspace in a redis-server of its own (the larger made of the smaller's blocks and copies of them), every configuration measured on both at neighbouring moments, in alternating order. Redis's main-thread CPU per key over the first %s keys of each one's SCAN order, each repetition's figure.\n\n",
		num(float64(h0(a.Runs, b.Runs))))
	for _, set := range []struct {
		small, large []CostRun
		what         string
	}{{a.Rehashing, b.Rehashing, "while the larger one rehashed its keys' hash table, right after it grew"}, {a.Runs, b.Runs, "once the rehashing was over"}} {
		if len(set.large) == 0 {
			continue
		}
		w("**%s**:\n\n| configuration | µs per key, %s blocks | µs per key, %s blocks | larger / smaller (means) |\n|---|---|---|---|\n",
			set.what, num(float64(a.Blocks)), num(float64(b.Blocks)))
		for _, pt := range pointsOf(set.large) {
			sa, sb := runsOf(set.small, pt), runsOf(set.large, pt)
			ratio := "–"
			if ma := meanPerKey(sa); ma > 0 {
				ratio = fmt.Sprintf("%.2f", float64(meanPerKey(sb))/float64(ma))
			}
			w("| %s | %s | %s | %s |\n", pt, perKeyList(sa), perKeyList(sb), ratio)
		}
		w("\n")
	}
}

// h0 is the keys of the first run of either list.
func h0(a, b []CostRun) int {
	for _, rs := range [][]CostRun{a, b} {
		if len(rs) > 0 {
			return rs[0].Keys
		}
	}
	return 0
}
