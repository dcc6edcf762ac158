package test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// TestAuditRangeWithKVCMWriters: KVCM-like writers add and remove locations (with sizes) while
// the scanner walks, and keep the persisted counters as KVCM does: counted in memory with each
// write, persisted every 200ms (DEL then HSET). Their changes go both ways, to blocks the walk
// has read and to blocks it has not, biased so that adds land behind the walk and removes
// ahead of it: the round a range from the start and end readings alone misses. Every
// audited round's range must hold the true drift.
//
// The truth. Each write changes the keyspace and KVCM's count together, under the lock each
// persist takes, so at every persist the persisted counters minus the keyspace are the drift
// the test set up before the writers started (phantom bytes and keys KVCM counts that no block
// holds): that is the drift any reading of the round holds. It is checked, not assumed: at
// every persist against the writers' own model of the keyspace, and at the end, writers
// stopped, against a recount of Redis made here (SCAN, HGETALL, the sizes parsed from the
// URIs), with none of kvcm-gc's code. kvcm-gc runs dry: nothing else writes.
//
// The range holds the truth when, between two readings, KVCM's changes to walked and unwalked
// blocks do not go opposite ways (pipeline/audit.go). The writers keep that by working in
// phases of one direction, and start the next phase only once the scanner has read the
// counters persisted after the last one's writes (its checkpoint shows the reading). A round
// in which the writers' persists did not come often enough for the persist gap the scanner
// waits is not KVCM-like: it is left out, and logged.
func TestAuditRangeWithKVCMWriters(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rdb := e.redis.Client()
	instances := []string{"inst0", "inst1"}
	// The registry of the two instances, from the seed; their blocks are the writers'.
	e.seed(seed.Spec{Layout: kvcm.LayoutLocation, Instances: instances, Blocks: 1, NoFiles: true, NoUpgraded: true})
	for _, pattern := range []string{"kvcache:instance_*:cache_*", "kvcache:instance_*:metadata"} {
		keys, err := rdb.Keys(ctx, pattern).Result()
		require.NoError(t, err)
		if len(keys) > 0 {
			require.NoError(t, rdb.Del(ctx, keys...).Err())
		}
	}
	// What KVCM counts that no block holds, by instance: keys and file bytes.
	drift := map[string][2]int64{"inst0": {3, 5 * 4096}, "inst1": {0, 1 << 20}}
	const persistEvery, persistGap = 200 * time.Millisecond, time.Second
	k := newKVCMEmu(t, rdb, instances, drift)
	for _, inst := range instances {
		for range 400 {
			k.add(inst, k.newBlock(), 1+k.rng.IntN(2))
		}
	}
	k.persist()

	o := e.options(prometheus.NewRegistry())
	o.DryRun = true
	// The fixed pace, for walks of seconds: pages of about 16 keys, 40ms apart.
	o.Scanner.Duty, o.Scanner.ScanInterval, o.Scanner.ScanBatchSize = 0, 40*time.Millisecond, 16
	o.Scanner.RoundPause = 300 * time.Millisecond
	o.Scanner.KVCMPersistGap = persistGap
	e.run(o, app.All)
	kv := e.stateKV()
	require.Eventually(t, func() bool { kv = e.stateKV(); return kv != nil }, time.Minute, 20*time.Millisecond)
	store := strings.TrimPrefix(e.redis.URI(), "redis://")
	ckpt := func() pipeline.Checkpoint {
		c, _, err := pipeline.ReadStoreCheckpoint(ctx, kv, store)
		if err != nil {
			return pipeline.Checkpoint{}
		}
		return c
	}

	wctx, stopWriters := context.WithCancel(ctx)
	writing := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { every(wctx, persistEvery, k.persist) })
	wg.Go(func() { k.phases(wctx, instances, ckpt) })

	// The rounds that started after the writers did, each as the checkpoint holds it once
	// ended.
	audits := map[uint64][]pipeline.AuditCount{}
	var stoppedAt time.Time
	require.Eventually(t, func() bool {
		c := ckpt()
		if c.LastRoundEndUs > 0 && c.LastRoundEndUs > writing.UnixMicro() && len(c.Audit) > 0 {
			round := c.Round
			if c.InRound {
				round--
			}
			if started := c.Audit[0].Start; started != nil && started.AtUs > writing.UnixMicro() {
				audits[round] = c.Audit
			}
		}
		return len(audits) >= 4
	}, 5*time.Minute, 20*time.Millisecond, "four rounds audited while the writers ran")
	stopWriters()
	wg.Wait()
	stoppedAt = time.Now()
	k.persist()

	// The truth, recounted here from Redis.
	recount := recountKVCM(t, rdb, instances)
	persisted := k.persisted()
	for _, inst := range instances {
		got := [2]int64{persisted[inst][0] - recount[inst][0], persisted[inst][1] - recount[inst][1]}
		require.Equal(t, drift[inst], got, "%s: persisted - recount, keys and bytes, the writers stopped", inst)
		t.Logf("%s: %d keys, %d bytes in Redis; persisted %d keys, %d bytes", inst, recount[inst][0], recount[inst][1],
			persisted[inst][0], persisted[inst][1])
	}
	t.Logf("writers: %d adds, %d removes (%d to blocks the walk had read, %d to blocks it had not), %d phases, %d persists",
		k.adds, k.removes, k.behind, k.ahead, k.nPhases, len(k.persists))
	require.Positive(t, k.adds)
	require.Positive(t, k.removes)
	require.Less(t, stoppedAt.Sub(writing), 5*time.Minute)

	var checked, endsMissed, bothWays int
	for _, round := range slices.Sorted(maps.Keys(audits)) {
		for _, a := range audits[round] {
			want, ok := drift[a.Instance]
			if !ok {
				continue
			}
			if gap := k.longestGap(a.Start.AtUs, a.End.AtUs); gap >= persistGap {
				t.Logf("round %d %s: the writers' persists were %s apart, more than the persist gap; left out", round, a.Instance, gap)
				continue
			}
			require.False(t, a.Early, "round %d %s", round, a.Instance)
			require.NotNil(t, a.Moves, "round %d %s", round, a.Instance)
			kd, ud := a.KeyDrift(), a.UsageDrift("file")
			require.True(t, kd.Ok && ud.Ok, "round %d %s: %+v %+v (%s / %s)", round, a.Instance, kd, ud, a.Start.Err, a.End.Err)
			t.Logf("round %d %s: %d readings; keys drift %d in [%d, %d] (moves +%d -%d); bytes drift %d in [%d, %d] (moves +%d -%d)",
				round, a.Instance, a.Moves.Readings, want[0], kd.Low, kd.High, a.Moves.KeysUp, a.Moves.KeysDown,
				want[1], ud.Low, ud.High, a.Moves.UsageUp["file"], a.Moves.UsageDown["file"])
			require.True(t, kd.Low <= want[0] && want[0] <= kd.High, "round %d %s: key drift %d outside %+v", round, a.Instance, want[0], kd)
			require.True(t, ud.Low <= want[1] && want[1] <= ud.High, "round %d %s: byte drift %d outside %+v", round, a.Instance, want[1], ud)
			checked++
			if a.Moves.UsageUp["file"] > 0 && a.Moves.UsageDown["file"] > 0 {
				bothWays++
			}
			// The range of before: the start and end readings alone.
			ends := a
			ends.Moves = nil
			if o := ends.UsageDrift("file"); want[1] < o.Low || want[1] > o.High {
				endsMissed++
			}
		}
	}
	t.Logf("%d round audits checked; %d with moves both ways; the start and end readings alone missed the drift in %d",
		checked, bothWays, endsMissed)
	require.GreaterOrEqual(t, checked, 3, "enough rounds kept")
	require.Positive(t, bothWays, "KVCM's counts moved both ways within a round")
	require.Positive(t, endsMissed, "the writers made the rounds the ends alone miss")

	// The writers stopped: a round that starts afterwards reads counters that do not move,
	// and its drift is exact, in status as in its JSON.
	require.Eventually(t, func() bool {
		c := ckpt()
		return len(c.Audit) > 0 && c.Audit[0].Start != nil && c.Audit[0].Start.AtUs > stoppedAt.UnixMicro() && c.LastRoundEndUs > 0
	}, 2*time.Minute, 20*time.Millisecond)
	st, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	shown := 0
	for _, c := range st.KVCMCounters {
		want, ok := drift[c.Instance]
		if !ok {
			continue
		}
		shown++
		require.Empty(t, c.Problem, c.Instance)
		require.Greater(t, c.Readings, 1, "%s: read at the walk's pages and after it", c.Instance)
		require.Equal(t, &ops.Drift{Low: want[0], High: want[0], Exact: true}, c.Keys.Drift, c.Instance)
		for _, u := range c.Usage {
			w := int64(0) // the other members KVCM persists are 0, as is their recount
			if u.StorageType == "file" {
				w = want[1]
			}
			require.Equal(t, &ops.Drift{Low: w, High: w, Exact: true}, u.Drift, "%s %s", c.Instance, u.StorageType)
		}
	}
	require.Equal(t, len(instances), shown)
	js, err := json.Marshal(st.KVCMCounters)
	require.NoError(t, err)
	require.Contains(t, string(js), `"readings":`)
}

// kvcmEmu is KVCM's leader as far as its counters go: every write changes the keyspace and the
// in-memory count together, under mu, which a persist takes too.
type kvcmEmu struct {
	t   *testing.T
	rdb *redis.Client
	rng *rand.Rand

	mu sync.Mutex
	// model: instance → block → location id → bytes, what Redis holds.
	model map[string]map[int64]map[string]int64
	// mem: KVCM's count in memory, keys and file bytes.
	mem      map[string][2]int64
	drift    map[string][2]int64
	next     int64
	persists []persistRec
	last     map[string][2]int64 // what was persisted last

	adds, removes, behind, ahead, nPhases int
}

type persistRec struct{ at time.Time }

func newKVCMEmu(t *testing.T, rdb *redis.Client, instances []string, drift map[string][2]int64) *kvcmEmu {
	k := &kvcmEmu{t: t, rdb: rdb, rng: rand.New(rand.NewPCG(35, 1)), model: map[string]map[int64]map[string]int64{},
		mem: map[string][2]int64{}, drift: drift, next: 1000}
	for _, inst := range instances {
		k.model[inst] = map[int64]map[string]int64{}
		k.mem[inst] = drift[inst]
	}
	return k
}

func (k *kvcmEmu) newBlock() int64 {
	k.next++
	return k.next
}

func blockKey(inst string, block int64) string {
	return "kvcache:instance_" + inst + ":cache_" + strconv.FormatInt(block, 10)
}

// add writes n locations to a block, as KVCM's BatchAddLocation: +1 key when the key did not
// exist, + the specs' sizes.
func (k *kvcmEmu) add(inst string, block int64, n int) {
	ctx := context.Background()
	k.mu.Lock()
	defer k.mu.Unlock()
	locs := k.model[inst][block]
	fresh := locs == nil
	if fresh {
		locs = map[string]int64{}
	}
	args := []any{}
	var bytes int64
	for range n {
		k.next++
		id := "loc" + strconv.FormatInt(k.next, 10)
		size := int64(1+k.rng.IntN(4)) * 4096
		v := fmt.Sprintf(`{"id":%q,"status":3,"type":4,"spec_size":1,"create_time":%d,"location_specs":[{"name":"tp0","uri":"file://nfs_01/kv/%s?size=%d"}]}`,
			id, time.Now().UnixMicro(), id, size)
		args = append(args, "L#"+id, v)
		locs[id] = size
		bytes += size
	}
	require.NoError(k.t, k.rdb.HSet(ctx, blockKey(inst, block), args...).Err())
	k.model[inst][block] = locs
	m := k.mem[inst]
	if fresh {
		m[0]++
	}
	m[1] += bytes
	k.mem[inst] = m
	k.adds++
}

// remove deletes one location of a block, as KVCM's CAD: − its size, and the key (−1) when
// no location is left in it (KVCM's recycle).
func (k *kvcmEmu) remove(inst string, block int64) {
	ctx := context.Background()
	k.mu.Lock()
	defer k.mu.Unlock()
	locs := k.model[inst][block]
	if len(locs) == 0 {
		return
	}
	ids := slices.Sorted(maps.Keys(locs))
	id := ids[k.rng.IntN(len(ids))]
	key := blockKey(inst, block)
	m := k.mem[inst]
	m[1] -= locs[id]
	if len(locs) == 1 {
		require.NoError(k.t, k.rdb.Del(ctx, key).Err())
		delete(k.model[inst], block)
		m[0]--
	} else {
		require.NoError(k.t, k.rdb.HDel(ctx, key, "L#"+id).Err())
		delete(locs, id)
	}
	k.mem[inst] = m
	k.removes++
}

// persist writes the in-memory counts as KVCM's leader does (DEL then HSET, no MULTI),
// after checking them against the model: the drift is the one set up.
func (k *kvcmEmu) persist() {
	ctx := context.Background()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last = map[string][2]int64{}
	for inst, m := range k.mem {
		var keys, bytes int64
		for _, locs := range k.model[inst] {
			keys++
			for _, b := range locs {
				bytes += b
			}
		}
		require.Equal(k.t, k.drift[inst], [2]int64{m[0] - keys, m[1] - bytes}, "%s: KVCM's count minus the keyspace", inst)
		key := kvcm.MetadataKey(inst)
		usage := fmt.Sprintf(`{"unknown":0,"hf3fs":0,"mooncake":0,"pace":0,"file":%d,"vcns_hf3fs":0,"dummy":0}`, m[1])
		_, err := k.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, key)
			p.HSet(ctx, key, kvcm.FieldKeyCount, strconv.FormatInt(m[0], 10), kvcm.FieldStorageUsage, usage)
			return nil
		})
		require.NoError(k.t, err)
		k.last[inst] = m
	}
	k.persists = append(k.persists, persistRec{at: time.Now()})
}

func (k *kvcmEmu) persisted() map[string][2]int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// longestGap is the longest time between two persists (or from one to a bound) from fromUs to
// toUs.
func (k *kvcmEmu) longestGap(fromUs, toUs int64) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	prev := time.UnixMicro(fromUs)
	var gap time.Duration
	for _, p := range k.persists {
		if p.at.Before(prev) {
			continue
		}
		if p.at.After(time.UnixMicro(toUs)) {
			break
		}
		gap = max(gap, p.at.Sub(prev))
		prev = p.at
	}
	return max(gap, time.UnixMicro(toUs).Sub(prev))
}

// phases runs the writers: a phase of one direction (add or remove) for a few hundred
// milliseconds, then a persist, and the next phase only once the scanner has read counters
// persisted after it. Adds go mostly to blocks the walk has read, removes mostly to blocks it
// has not (the round's position from the checkpoint's cursor: the keys a SCAN from it still
// returns are ahead), a few the other way.
func (k *kvcmEmu) phases(ctx context.Context, instances []string, ckpt func() pipeline.Checkpoint) {
	dir := 1
	for ctx.Err() == nil {
		k.nPhases++
		c := ckpt()
		for _, inst := range instances {
			ahead, behind := k.split(ctx, inst, c)
			if ctx.Err() != nil {
				return
			}
			for range 5 + k.rng.IntN(10) {
				toBehind := k.rng.IntN(10) < 8
				if dir < 0 {
					toBehind = !toBehind
				}
				pool := ahead
				if toBehind {
					pool = behind
				}
				var block int64
				if len(pool) > 0 && (dir < 0 || k.rng.IntN(5) > 0) {
					block = pool[k.rng.IntN(len(pool))] // else a new block: a key more
				}
				switch {
				case dir > 0 && block == 0:
					k.add(inst, k.newBlock(), 1)
				case dir > 0:
					k.add(inst, block, 1)
				case block != 0:
					k.remove(inst, block)
				}
				if block != 0 && toBehind {
					k.behind++
				} else if block != 0 {
					k.ahead++
				}
			}
		}
		k.persist()
		persisted := time.Now()
		// One way between two readings: wait for a reading of what was just persisted.
		for ctx.Err() == nil && lastReading(ckpt(), instances) <= persisted.UnixMicro() {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		dir = -dir
	}
}

// split returns an instance's blocks ahead of the walk (a SCAN from the checkpoint's cursor
// still returns them) and behind it; between rounds, all are ahead.
func (k *kvcmEmu) split(ctx context.Context, inst string, c pipeline.Checkpoint) (ahead, behind []int64) {
	k.mu.Lock()
	all := slices.Sorted(maps.Keys(k.model[inst]))
	k.mu.Unlock()
	if !c.InRound || c.Cursor == 0 {
		return all, nil
	}
	seen := map[int64]bool{}
	prefix := "kvcache:instance_" + inst + ":cache_"
	for cur := c.Cursor; ; {
		keys, next, err := k.rdb.Scan(ctx, cur, prefix+"*", 200).Result()
		if err != nil {
			return all, nil
		}
		for _, key := range keys {
			if b, err := strconv.ParseInt(strings.TrimPrefix(key, prefix), 10, 64); err == nil {
				seen[b] = true
			}
		}
		if cur = next; cur == 0 {
			break
		}
	}
	for _, b := range all {
		if seen[b] {
			ahead = append(ahead, b)
		} else {
			behind = append(behind, b)
		}
	}
	return ahead, behind
}

// lastReading is the time of the latest reading of the persisted counters the store's
// checkpoint holds for instances, in the round running or the last one ended.
func lastReading(c pipeline.Checkpoint, instances []string) int64 {
	var at int64
	for _, as := range [][]pipeline.AuditCount{c.AuditRound, c.Audit} {
		for _, a := range as {
			if !slices.Contains(instances, a.Instance) {
				continue
			}
			for _, p := range []*pipeline.PersistedCounters{a.Start, a.Last, a.End} {
				if p != nil {
					at = max(at, p.AtUs)
				}
			}
		}
	}
	return at
}

// recountKVCM counts each instance's block keys and the file bytes of their locations, as
// KVCM counts them, straight from Redis: every key kvcache:instance_<id>:cache_<int64>, and
// the size= of each location's spec URIs.
func recountKVCM(t *testing.T, rdb *redis.Client, instances []string) map[string][2]int64 {
	ctx := context.Background()
	out := map[string][2]int64{}
	for _, inst := range instances {
		prefix := "kvcache:instance_" + inst + ":cache_"
		var c [2]int64
		iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			n, err := strconv.ParseInt(strings.TrimPrefix(key, prefix), 10, 64)
			require.NoError(t, err, key)
			require.Equal(t, key, prefix+strconv.FormatInt(n, 10))
			c[0]++
			fields, err := rdb.HGetAll(ctx, key).Result()
			require.NoError(t, err)
			for f, v := range fields {
				require.True(t, strings.HasPrefix(f, "L#"), "%s: field %s", key, f)
				var loc struct {
					Type  int `json:"type"`
					Specs []struct {
						URI string `json:"uri"`
					} `json:"location_specs"`
				}
				require.NoError(t, json.Unmarshal([]byte(v), &loc), "%s %s", key, f)
				require.Equal(t, 4, loc.Type, "file")
				for _, s := range loc.Specs {
					u, err := url.Parse(s.URI)
					require.NoError(t, err)
					size, err := strconv.ParseInt(u.Query().Get("size"), 10, 64)
					require.NoError(t, err, s.URI)
					c[1] += size
				}
			}
		}
		require.NoError(t, iter.Err())
		out[inst] = c
	}
	return out
}
