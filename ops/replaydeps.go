package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/guard/redisguard"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// ReplaySetup is the part of a kvcm-gc configuration a replay needs: the same connections and
// prober settings as the pipeline, so "now" is decided as the pipeline would decide it. The
// fields mirror app.Options.
type ReplaySetup struct {
	Cluster        string
	Registry       redismeta.ConnOptions
	Meta           redismeta.ConnOptions
	MetaURIs       map[string]string
	GroupStoreURIs map[string]string
	Storage        storage.Options
	Prober         pipeline.ProberConfig
	// Guard is "none" or "redis" (hashes under GuardKeyPrefix on GuardConn), as in app.Options.
	Guard          string
	GuardConn      redismeta.ConnOptions
	GuardKeyPrefix string
	Logger         *slog.Logger
}

// OpenReplayDeps connects what a replay consults, all of it unable to write: metadata stores
// and storages are opened in dry-run (the Redis writer and the storage deleter refuse every
// write, DESIGN §8.8), and blocks are read with HMGET. It reads the registry once, for the
// storage table and the metadata store addresses. Close the result with its Close.
func OpenReplayDeps(ctx context.Context, s ReplaySetup) (*ReplayDeps, error) {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := s.Prober.Validate(); err != nil {
		return nil, fmt.Errorf("replay: prober settings: %w", err)
	}
	pool := redismeta.NewPool(redismeta.PoolOptions{Defaults: s.Meta, URIs: s.MetaURIs,
		Store: redismeta.StoreOptions{DryRun: true}, Logger: log})
	var closers []func() error
	closeAll := func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	}
	closers = append(closers, pool.Close)
	reg, err := redismeta.OpenRegistryReader(s.Registry, redismeta.RegistryOptions{Cluster: s.Cluster,
		GroupStoreURIs: s.GroupStoreURIs, Learn: pool.Learn, Logger: log})
	if err != nil {
		_ = closeAll()
		return nil, fmt.Errorf("replay: open registry: %w", err)
	}
	closers = append(closers, reg.Close)
	snap, err := reg.ReadRegistry(ctx)
	if err != nil {
		_ = closeAll()
		return nil, fmt.Errorf("replay: read registry: %w", err)
	}
	so := s.Storage
	so.DryRun = true
	set, err := storage.NewSet(snap.Storages, so)
	if err != nil {
		_ = closeAll()
		return nil, fmt.Errorf("replay: build storage set: %w", err)
	}
	var g guard.Guard = guard.None{}
	switch s.Guard {
	case "", "none":
	case "redis":
		c, err := redismeta.NewClient(s.GuardConn)
		if err != nil {
			_ = closeAll()
			return nil, fmt.Errorf("replay: copy guard: %w", err)
		}
		closers = append(closers, c.Close)
		g = redisguard.New(c, s.GuardKeyPrefix)
	default:
		_ = closeAll()
		return nil, fmt.Errorf("replay: guard: unknown kind %q (none, redis)", s.Guard)
	}
	blocks := NewPoolBlocks(pool)
	closers = append(closers, blocks.Close)
	return &ReplayDeps{
		Blocks: blocks,
		Rules:  &pipeline.Rules{Config: s.Prober, Storages: set, Guard: g},
		Close:  closeAll,
	}, nil
}

// PoolBlocks is a BlockReader on the metadata stores of a redismeta.Pool: one HMGET
// __uri__ __lru_time__ per block, on a read-only client of its own per store (the pool's
// stores expose only __uri__).
type PoolBlocks struct {
	pool *redismeta.Pool

	mu      sync.Mutex
	clients map[string]*redis.Client
}

// NewPoolBlocks reads through the store addresses pool knows (configured or learned from the
// registry).
func NewPoolBlocks(pool *redismeta.Pool) *PoolBlocks {
	return &PoolBlocks{pool: pool, clients: map[string]*redis.Client{}}
}

// ReadBlock implements BlockReader.
func (p *PoolBlocks) ReadBlock(ctx context.Context, store, instance string, key int64) ([]byte, string, bool, error) {
	c, err := p.client(store)
	if err != nil {
		return nil, "", false, err
	}
	rk := kvcm.BlockKey(instance, key)
	vals, err := c.HMGet(ctx, rk, "__uri__", "__lru_time__").Result()
	if err != nil {
		return nil, "", false, fmt.Errorf("read block %q: %w", rk, err)
	}
	uri, _ := vals[0].(string)
	lru, _ := vals[1].(string)
	if uri == "" {
		return nil, lru, false, nil
	}
	return []byte(uri), lru, true, nil
}

func (p *PoolBlocks) client(store string) (*redis.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[store]; ok {
		return c, nil
	}
	conn, err := p.pool.ConnOptions(store)
	if err != nil {
		return nil, err
	}
	c, err := redismeta.NewClient(conn)
	if err != nil {
		return nil, fmt.Errorf("metadata store %q: %w", store, err)
	}
	p.clients[store] = c
	return c, nil
}

// Close closes the clients.
func (p *PoolBlocks) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for name, c := range p.clients {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close metadata store %q: %w", name, err))
		}
	}
	clear(p.clients)
	return errors.Join(errs...)
}

// StoreBlocks is a BlockReader on a meta.StoreResolver: __uri__ only (GetURI), so a WRITING
// location without create_time can be aged now only when its block is unchanged.
type StoreBlocks struct{ Stores meta.StoreResolver }

// ReadBlock implements BlockReader.
func (s StoreBlocks) ReadBlock(ctx context.Context, store, instance string, key int64) ([]byte, string, bool, error) {
	st, err := s.Stores.Store(store)
	if err != nil {
		return nil, "", false, err
	}
	uri, ok, err := st.GetURI(ctx, instance, key)
	return uri, "", ok, err
}
