package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func TestParseRedisCounters(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\nused_cpu_sys_main_thread:0.5\r\nused_cpu_user_main_thread:1.25\r\n\r\n" +
		"# Commandstats\r\ncmdstat_hgetall:calls=10,usec=40,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_scan:calls=2,usec=9,usec_per_call=4.50,rejected_calls=0,failed_calls=0\r\n"
	c, err := parseRedisCounters(info)
	require.NoError(t, err)
	require.Equal(t, 1750*time.Millisecond, c.main, "the main thread's user and system time, not the process's")
	require.Equal(t, cmdStat{Calls: 10, Usec: 40}, c.cmds["hgetall"])
	require.Equal(t, cmdStat{Calls: 2, Usec: 9}, c.cmds["scan"])

	_, err = parseRedisCounters("# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n")
	require.ErrorContains(t, err, "main_thread", "a server without the main thread's counters is not read as idle")
	_, err = parseRedisCounters("used_cpu_sys_main_thread:x\r\nused_cpu_user_main_thread:1\r\n")
	require.Error(t, err)

	later := c
	later.at = c.at.Add(2 * time.Second)
	later.main += 500 * time.Millisecond
	later.cmds = map[string]cmdStat{"hgetall": {Calls: 15, Usec: 60}, "scan": {Calls: 2, Usec: 9}}
	w := later.since(c)
	require.InDelta(t, 0.25, w.Share(), 1e-9)
	require.Equal(t, cmdStat{Calls: 5, Usec: 20}, w.Cmd("hgetall"))
	require.Zero(t, w.Cmd("scan").Calls, "a command not called meanwhile")
}

func TestParseHTStats(t *testing.T) {
	idle := "[Dictionary HT]\nHash table 0 stats (main hash table):\n table size: 1048576\n number of elements: 1005026\n" +
		"[Expires HT]\nHash table 0 stats (main hash table):\nNo stats available for empty dictionaries\n"
	b, r := parseHTStats(idle)
	require.Equal(t, int64(1048576), b)
	require.False(t, r)
	rehashing := "[Dictionary HT]\nHash table 0 stats (main hash table):\n table size: 8388608\n number of elements: 4000000\n" +
		"Hash table 1 stats (rehashing target):\n table size: 16777216\n number of elements: 5045026\n" +
		"[Expires HT]\nHash table 0 stats (main hash table):\n table size: 4\n"
	b, r = parseHTStats(rehashing)
	require.Equal(t, int64(8388608), b)
	require.True(t, r)
	expiresRehashing := "[Dictionary HT]\nHash table 0 stats (main hash table):\n table size: 4\n" +
		"[Expires HT]\nHash table 0 stats (main hash table):\n table size: 4\nHash table 1 stats (rehashing target):\n table size: 8\n"
	_, r = parseHTStats(expiresRehashing)
	require.False(t, r, "the expires table is not the keys'")
}

func TestParseCostPoints(t *testing.T) {
	p, err := ParseCostPoints("walk:64, walk:1024/64,scan:256,read:16")
	require.NoError(t, err)
	require.Equal(t, []CostPoint{{Kind: CostWalk, Count: 64}, {Kind: CostWalk, Count: 1024, Depth: 64},
		{Kind: CostScan, Count: 256}, {Kind: CostRead, Depth: 16}}, p)
	for _, bad := range []string{"walk", "walk:0", "scan:256/64", "read:x", "hscan:5", "walk:64/-1"} {
		_, err := ParseCostPoints(bad)
		require.Error(t, err, bad)
	}
}

// TestCostRun: every measurement counts what Redis did for it, and each kind sends the
// commands it says: Redis's own command counts match the keys and pages measured.
func TestCostRun(t *testing.T) {
	srv := testenv.StartRedis(t, servers.WithRedisArgs("--enable-debug-command", "local"))
	ctx := context.Background()
	k := seedMetadataKeyspace(t, srv, kvcm.LayoutLocation, 2000)
	h := &Harness{cfg: Config{CostKeys: 1500, CostReps: 2, CostPoints: []CostPoint{{Kind: CostWalk, Count: 64},
		{Kind: CostWalk, Count: 256, Depth: 32}, {Kind: CostScan, Count: 128}, {Kind: CostRead, Depth: 50}}}, log: slog.New(slog.DiscardHandler)}
	res, err := h.cost(ctx, k)
	require.NoError(t, err)
	require.Len(t, res.Runs, 8, "every point, twice")
	c := res.Census
	require.GreaterOrEqual(t, c.Keys, int64(k.Counts.Blocks+k.Counts.SkippedBlocks), "the block keys and the registry's")
	require.Equal(t, costCensusSample, c.Sampled)
	require.Equal(t, map[string]int{"hashtable": costCensusSample}, c.Encodings, "locations' JSON exceeds hash-max-listpack-value")
	require.Positive(t, c.Buckets, "DEBUG HTSTATS read from the loopback")
	require.InDelta(t, 3, c.Fields, 1, "two locations and BP#prev_key")
	for _, r := range res.Runs {
		require.GreaterOrEqual(t, r.Keys, 1500, r.Point.String())
		require.Positive(t, r.Work.Main, r.Point.String())
		require.Len(t, r.PageTimes, r.Pages, r.Point.String())
		switch r.Point.Kind {
		case CostRead:
			require.Equal(t, int64(r.Keys), r.Work.Cmd("hgetall").Calls)
			require.Equal(t, (r.Keys+49)/50, r.Pages)
			require.Zero(t, r.Work.Cmd("scan").Calls)
		case CostScan:
			require.Equal(t, int64(r.Pages), r.Work.Cmd("scan").Calls)
			require.Zero(t, r.Work.Cmd("hgetall").Calls)
		case CostWalk:
			// The cached group's keys are walked, not read; the next page's SCAN goes with
			// each page's reads (one more than the pages at most).
			require.LessOrEqual(t, r.Work.Cmd("hgetall").Calls, int64(r.Keys))
			require.Greater(t, r.Work.Cmd("hgetall").Calls, int64(r.Keys)*9/10)
			require.InDelta(t, r.Pages, r.Work.Cmd("scan").Calls, 1)
		}
	}
	var b strings.Builder
	costReport(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, res)
	require.Contains(t, b.String(), "walk, pages of 256 in pipelines of 32")
	require.NotContains(t, b.String(), "%!")
}

// TestCostGrown: the grown keyspace is a copy of the main one on a redis-server of its own,
// the main one untouched, both measured at every point.
func TestCostGrown(t *testing.T) {
	srv := testenv.StartRedis(t, servers.WithRedisArgs("--enable-debug-command", "local"))
	ctx := context.Background()
	k := seedMetadataKeyspace(t, srv, kvcm.LayoutLegacy, 600)
	before, err := k.rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	h := &Harness{cfg: Config{CostKeys: 500, CostReps: 1, CostGrow: 3, CostPoints: []CostPoint{{Kind: CostWalk, Count: 64}, {Kind: CostRead, Depth: 16}}},
		log: slog.New(slog.DiscardHandler), workDir: t.TempDir()}
	pair, err := h.costGrown(ctx, k)
	require.NoError(t, err)
	after, err := k.rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Equal(t, before, after, "the main keyspace is not grown")
	require.Equal(t, 600, pair.Small.Blocks)
	require.Equal(t, 1800, pair.Large.Blocks)
	require.GreaterOrEqual(t, pair.Large.Census.Keys, int64(1800), "the copies are on the second server")
	require.Len(t, pair.Small.Runs, 2)
	require.Len(t, pair.Large.Runs, 2)
	var b strings.Builder
	costPairReport(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, pair)
	require.Contains(t, b.String(), "600 and 1,800 blocks")
	require.NotContains(t, b.String(), "%!")
}
