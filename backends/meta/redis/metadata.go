package redismeta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// A repair of KVCM's persisted counters writes the one hash kvcm-gc otherwise never writes,
// kvcache:instance_<id>:metadata (DESIGN §2.5), and only while no KVCM leader runs: KVCM's
// leader rewrites the hash blindly about every second and restores it at every promotion
// (kvcm.MetadataKey). So the write is a transaction that WATCHes the hash and KVCM's leader
// lock keys from before anything is read until EXEC: a lock taken, or the hash written, at
// any moment in between makes EXEC fail and nothing is written.

// WatchMetadata implements meta.MetadataWriter: a compare-and-set of instance's metadata
// hash. It WATCHes the hash and lockKeys, refuses with a *meta.LeaderLockError while a lock
// key exists (GET on the watching connection), reads the hash (HGETALL), and calls fn. The
// fields fn returns are written with HSET in MULTI/EXEC, which Redis runs only if no watched
// key changed since the WATCH (a lock created, the hash rewritten); otherwise the result is
// meta.ErrConflict and nothing is written. Fields not returned are left as they are. A dry-run
// store refuses any write with meta.ErrDryRun before sending it.
func (s *Store) WatchMetadata(ctx context.Context, instance string, lockKeys []string,
	fn func(ctx context.Context, tx meta.MetadataTx) (map[string]string, error)) (written map[string]string, err error) {
	key := kvcm.MetadataKey(instance)
	watched := append([]string{key}, lockKeys...)
	err = s.c.Watch(ctx, func(tx *redis.Tx) error {
		locked := func(ctx context.Context) error { return heldLock(ctx, tx, lockKeys) }
		if err := locked(ctx); err != nil {
			return err
		}
		fields, err := tx.HGetAll(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		set, err := fn(ctx, meta.MetadataTx{Key: key, Fields: fields, Locked: locked})
		if err != nil || len(set) == 0 {
			return err
		}
		if s.dryRun {
			return fmt.Errorf("write %s: %w", key, meta.ErrDryRun)
		}
		args := make([]any, 0, 2*len(set))
		for _, f := range slices.Sorted(maps.Keys(set)) {
			args = append(args, f, set[f])
		}
		if _, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, key, args...)
			return nil
		}); err != nil {
			if errors.Is(err, redis.TxFailedErr) {
				return fmt.Errorf("write %s: a watched key changed since it was read: %w", key, meta.ErrConflict)
			}
			return fmt.Errorf("write %s: %w", key, err)
		}
		written = set
		return nil
	}, watched...)
	if err != nil {
		return nil, err
	}
	return written, nil
}

// ReadMetadata implements meta.MetadataReader: one HGETALL of instance's metadata hash.
func (s *Store) ReadMetadata(ctx context.Context, instance string) (map[string]string, error) {
	key := kvcm.MetadataKey(instance)
	fields, err := s.c.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return fields, nil
}

// ReadMetadataMany implements meta.MetadataBatchReader: one HGETALL per instance, pipelined
// in one round trip.
func (s *Store) ReadMetadataMany(ctx context.Context, instances []string) ([]map[string]string, []error) {
	cmds := make([]*redis.MapStringStringCmd, len(instances))
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, inst := range instances {
			cmds[i] = p.HGetAll(ctx, kvcm.MetadataKey(inst))
		}
		return nil
	})
	out, errs := make([]map[string]string, len(instances)), make([]error, len(instances))
	for i, c := range cmds {
		if fields, err := c.Result(); err != nil {
			errs[i] = fmt.Errorf("read %s: %w", kvcm.MetadataKey(instances[i]), err)
		} else {
			out[i] = fields
		}
	}
	return out, errs
}

// LeaderLock reports a KVCM leader lock key that exists among keys, as a *meta.LeaderLockError
// (nil when none does): for a lock kept on another Redis than the metadata store (KVCM's
// coordination URI may name any), which no transaction here can WATCH.
func LeaderLock(ctx context.Context, c redis.Cmdable, keys []string) error {
	return heldLock(ctx, c, keys)
}

func heldLock(ctx context.Context, c redis.Cmdable, keys []string) error {
	for _, k := range keys {
		holder, err := c.Get(ctx, k).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			// A key that is not a string (WRONGTYPE) still exists: a lock, for all kvcm-gc knows.
			if isWrongType(err) {
				return &meta.LeaderLockError{Key: k, Holder: "(not a string)"}
			}
			return fmt.Errorf("read leader lock %s: %w", k, err)
		}
		return &meta.LeaderLockError{Key: k, Holder: holder}
	}
	return nil
}
