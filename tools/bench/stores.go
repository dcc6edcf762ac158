package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/tools/bench/stage"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/servers"
)

// storesCluster is the KVCM cluster of PhaseStores.
const storesCluster = "stores"

// storesDB is the database of each store in the location layout (the first store's holds the
// registry too); the keyspaces use keyspaceDB. The legacy
// layout allows no database but 0 (a KVCM of that layout ignores db=), so its stores take
// DB 0, the main keyspace's: the phase runs after every other phase of the layout.
const storesDB = 3

func storesDBOf(l kvcm.Layout) int {
	if l == kvcm.LayoutLegacy {
		return 0
	}
	return storesDB
}

// StoresResult is the scanner over two metadata stores, each on a redis-server of its own
// and holding half the main keyspace's blocks: one replica walking both, then two replicas
// dividing them, in the same run.
type StoresResult struct {
	Layout         kvcm.Layout
	BlocksPerStore int
	// Runs alternate one replica, then two, Config.StoresReps times.
	Runs []StoresRun
	// Paced is one replica, then two, with each store walk capped at PacedCap keys/s.
	PacedCap float64
	Paced    []StoresRun
}

// storesPacedCap is max_keys_per_second of the paced runs: well below what one walk reaches
// unpaced, so the figure is the pacing's, not the machine's.
const storesPacedCap = 20_000

// StoresRun is one round of every store by Replicas scanner processes.
type StoresRun struct {
	Replicas int
	// Keys read in the round, from the first store's start to the last store's end.
	Keys int
	Dur  time.Duration
	// Walked is how many stores each replica walked.
	Walked []int
	Usage  []Usage
}

// Rate is keys per second.
func (r StoresRun) Rate() float64 { return Rate{Ops: r.Keys, Dur: r.Dur}.PerSec() }

// runStores seeds the two stores (metadata only: no prober runs) and times one scanner round
// with one replica, then with two.
func (h *Harness) runStores(ctx context.Context, layout kvcm.Layout, p stage.Profile) (*StoresResult, error) {
	second, err := servers.StartRedis("")
	if err != nil {
		return nil, fmt.Errorf("start the second store: %w", err)
	}
	defer second.Close()
	// Both stores use the same database: the stages' store connections take their defaults,
	// database included, from the registry's URI.
	db := storesDBOf(layout)
	clients := make([]*redis.Client, 2)
	for i, srv := range []*servers.Redis{h.redis, second} {
		o := srv.Client().Options()
		o.DB = db
		clients[i] = redis.NewClient(o)
		defer clients[i].Close()
	}
	a, b := clients[0], clients[1]
	// The first store shares the harness's redis-server with the keyspaces: leave nothing there.
	defer func() { _ = a.FlushDB(context.WithoutCancel(ctx)).Err() }()

	per := max(h.cfg.Blocks/2, 1)
	instances := max(h.cfg.Instances/2, 1)
	res := &StoresResult{Layout: layout, BlocksPerStore: per}
	uris := []string{fmt.Sprintf("%s?db=%d", h.redis.URI(), db), fmt.Sprintf("%s?db=%d", second.URI(), db)}
	for i, rdb := range clients {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			return nil, fmt.Errorf("flush store %d: %w", i, err)
		}
		ids := make([]string, instances)
		for j := range ids {
			ids[j] = fmt.Sprintf("store%d-inst%d", i, j)
		}
		h.log.Info("seeding a store", "store", uris[i], "blocks", per)
		if _, err := seed.Generate(ctx, rdb, seed.Spec{Cluster: storesCluster, Layout: layout, Instances: ids, Blocks: max(per/instances, 1),
			LocationsPerBlock: h.cfg.Locations, GarbageFraction: h.cfg.Garbage, TrickyFraction: h.cfg.Tricky,
			Root: filepath.Join(h.workDir, "data-stores"), MetaURI: uris[i], Seed: h.cfg.Seed + uint64(i), NoFiles: true}); err != nil {
			return nil, fmt.Errorf("seed store %d: %w", i, err)
		}
	}
	// The registry is the first store's: give it the second store's group and instances.
	if err := adoptGroup(ctx, a, b, "group_second"); err != nil {
		return nil, err
	}
	k := &Keyspace{Spec: KeyspaceSpec{Cluster: storesCluster, Layout: layout}, URI: uris[0]}
	k.Counts.Blocks = 2 * per
	// Alternated: on a shared machine only runs next to each other compare.
	for range max(h.cfg.StoresReps, 1) {
		for _, replicas := range []int{1, 2} {
			r, err := h.storesRound(ctx, k, p, replicas)
			if err != nil {
				return res, err
			}
			res.Runs = append(res.Runs, r)
		}
	}
	// Paced: each store's walk has its own max_keys_per_second, so one replica walking two
	// stores reads twice the cap (the walks go on at once, not one after the other).
	paced := p
	paced.Name, paced.MaxKeysPerSecond = p.Name+", max_keys_per_second", storesPacedCap
	res.PacedCap = storesPacedCap
	for _, replicas := range []int{1, 2} {
		r, err := h.storesRound(ctx, k, paced, replicas)
		if err != nil {
			return res, err
		}
		res.Paced = append(res.Paced, r)
	}
	return res, nil
}

// Ratios are the two-replica rate over the one-replica rate of each alternation.
func (s StoresResult) Ratios() []float64 {
	var out []float64
	for i := 0; i+1 < len(s.Runs); i += 2 {
		if one := s.Runs[i].Rate(); one > 0 {
			out = append(out, s.Runs[i+1].Rate()/one)
		}
	}
	return out
}

// adoptGroup copies src's redis group and its instances into dst's registry as group name.
func adoptGroup(ctx context.Context, dst, src *redis.Client, name string) error {
	p := "kvcache_registry:" + storesCluster + ":"
	group, err := src.HGet(ctx, p+"instance_group", seed.GroupRedis).Result()
	if err != nil {
		return fmt.Errorf("read the second store's group: %w", err)
	}
	ids, err := src.HKeys(ctx, p+"instance").Result()
	if err != nil {
		return fmt.Errorf("read the second store's instances: %w", err)
	}
	pipe := dst.Pipeline()
	pipe.HSet(ctx, p+"instance_group", name, strings.Replace(group, `"name":"`+seed.GroupRedis+`"`, `"name":"`+name+`"`, 1))
	for _, id := range ids {
		info, err := src.HGet(ctx, p+id, id).Result()
		if err != nil {
			return fmt.Errorf("read instance %s: %w", id, err)
		}
		if !strings.Contains(info, `"`+seed.GroupRedis+`"`) {
			continue // not of the redis group (the seed's local instance)
		}
		pipe.HSet(ctx, p+id, id, strings.ReplaceAll(info, `"`+seed.GroupRedis+`"`, `"`+name+`"`))
		pipe.HSet(ctx, p+"instance", id, id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("register the second store: %w", err)
	}
	return nil
}

// storesRound starts replicas scanner processes at once and waits for round 1 of every store.
func (h *Harness) storesRound(ctx context.Context, k *Keyspace, p stage.Profile, replicas int) (StoresRun, error) {
	res := StoresRun{Replicas: replicas}
	h.storesSeq++
	phase := fmt.Sprintf("stores-%d-%d", h.storesSeq, replicas)
	r, err := h.newRun(ctx, phase, k, p)
	if err != nil {
		return res, err
	}
	defer r.close(context.WithoutCancel(ctx))
	h.log.Info("scanner replicas over two stores", "replicas", replicas)
	var names []string
	for i := range replicas {
		name := fmt.Sprintf("%s-%d", stage.Scanner, i)
		if err := r.startAs(name, stage.Scanner); err != nil {
			return res, err
		}
		names = append(names, name)
	}
	var ck pipeline.Checkpoint
	timeout := 2*time.Minute + time.Duration(k.Counts.Blocks)*500*time.Microsecond
	if err := r.until(ctx, timeout, "the round of both stores", func() (bool, error) {
		var err error
		ck, err = r.checkpoint(ctx)
		return err == nil && ck.Stores == 2 && roundDone(ck), nil
	}); err != nil {
		return res, err
	}
	res.Keys = int(ck.LastRoundKeys)
	res.Dur = time.Duration(ck.LastRoundEndUs-ck.RoundStartedUs) * time.Microsecond
	lease, err := h.js.KeyValue(ctx, r.names.LeaseBucket())
	if err != nil {
		return res, fmt.Errorf("open lease bucket: %w", err)
	}
	leases, err := pipeline.ReadLeases(ctx, lease)
	if err != nil {
		return res, err
	}
	walked := map[string]int{}
	for _, l := range leases {
		walked[l.Record.Holder]++
	}
	for _, n := range walked {
		res.Walked = append(res.Walked, n)
	}
	for _, name := range names {
		sr, err := r.stop(name)
		if err != nil {
			return res, err
		}
		res.Usage = append(res.Usage, sr.Usage)
	}
	return res, nil
}
