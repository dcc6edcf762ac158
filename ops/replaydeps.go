package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/kvcm-gc/kvcm-gc/backends/guard/redisguard"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
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
	Prober         prober.Config
	// Sweep is the sweep's configuration (sweeper replay); the zero value means its defaults
	// with no storage swept.
	Sweep sweep.Config
	// Guard is "none" or "redis" (hashes under GuardKeyPrefix on GuardConn), as in app.Options.
	Guard          string
	GuardConn      redismeta.ConnOptions
	GuardKeyPrefix string
	Logger         *slog.Logger
}

// OpenReplayDeps connects what a replay consults, all of it unable to write: metadata stores
// and storages are opened in dry-run (the Redis writer and the storage deleter refuse every
// write, DESIGN §8.8), and blocks are read whole with HGETALL. It reads the registry once, for the
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
	g, closeGuard, err := redisguard.Open(s.Guard, s.GuardConn, s.GuardKeyPrefix)
	if err != nil {
		_ = closeAll()
		return nil, fmt.Errorf("replay: %w", err)
	}
	closers = append(closers, closeGuard)
	sw, err := replaySweeper(s, reg, pool, so)
	if err != nil {
		_ = closeAll()
		return nil, fmt.Errorf("replay: %w", err)
	}
	return &ReplayDeps{
		Blocks:  StoreBlocks{Stores: pool},
		Rules:   &prober.Rules{Config: s.Prober, Storages: set, Guard: g},
		Sweeper: sw,
		Close:   closeAll,
	}, nil
}

// StoreBlocks is a BlockReader on a meta.StoreResolver: each block read whole (ReadBlocks).
type StoreBlocks struct{ Stores meta.StoreResolver }

// ReadBlock implements BlockReader.
func (s StoreBlocks) ReadBlock(ctx context.Context, store, instance string, key int64) (meta.Entry, bool, error) {
	st, err := s.Stores.Store(store)
	if err != nil {
		return meta.Entry{}, false, err
	}
	r, err := st.ReadBlocks(ctx, instance, []int64{key})
	if err != nil {
		return meta.Entry{}, false, err
	}
	return r[0].Entry, r[0].Exists, r[0].Err
}
