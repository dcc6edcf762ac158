package config

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/pipeline/deleter"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/pipeline/scanner"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// RegistryConn returns the connection to the registry Redis.
func (c Config) RegistryConn() (redismeta.ConnOptions, error) {
	return signIn("registry", redismeta.ConnOptions{Username: c.Registry.Username, Password: c.Registry.Password,
		TLS: c.Registry.TLS.options()}, c.Registry.URI)
}

// GuardConn returns the connection to guard.uri's Redis, signed in with guard.username and
// guard.password unless the URI's userinfo does it.
func (c Config) GuardConn() (redismeta.ConnOptions, error) {
	return signIn("guard", redismeta.ConnOptions{Username: c.Guard.Username, Password: c.Guard.Password}, c.Guard.URI)
}

// signIn applies the URI of section (its key section.uri) over base, which holds the
// section's username and password.
func signIn(section string, base redismeta.ConnOptions, uri string) (redismeta.ConnOptions, error) {
	conn, err := base.ApplyURI(uri)
	if err != nil {
		return conn, fmt.Errorf("%s.uri: %w", section, err)
	}
	// ApplyURI lets a URI's userinfo win silently; configured ACL credentials that would be
	// ignored are a mistake worth stopping for.
	if conn.UserInfo != "" && (base.Username != "" || base.Password != "") {
		return conn, fmt.Errorf("%[1]s.username, %[1]s.password: exclusive with a userinfo in %[1]s.uri", section)
	}
	return conn, nil
}

func (t RedisTLS) options() redismeta.TLSOptions {
	return redismeta.TLSOptions{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
}

// MetaConn is the connection defaults of every metadata store.
func (c Config) MetaConn() redismeta.ConnOptions {
	return redismeta.ConnOptions{Username: c.Meta.Username, Password: c.Meta.Password, TLS: c.Meta.TLS.options()}
}

// StorageOptions returns the local storage settings.
func (c Config) StorageOptions() storage.Options {
	o := storage.Options{DryRun: c.DryRun, DefaultProbe: c.Storage.DefaultProbe}
	if len(c.Storage.Overrides) > 0 {
		o.Overrides = make(map[string]storage.Override, len(c.Storage.Overrides))
		for name, ov := range c.Storage.Overrides {
			so := storage.Override{Probe: ov.Probe, Delete: ov.Delete}
			for _, pm := range ov.PathMap {
				so.PathMap = append(so.PathMap, storage.PathMap{From: pm.From, To: pm.To})
			}
			o.Overrides[name] = so
		}
	}
	return o
}

// Settings returns the JetStream settings: the jetstream: keys, with the consumers' caps
// of in-flight messages, whose keys are max_inflight_delete_requests and
// max_inflight_sweep_batches.
func (c Config) Settings() subjects.Settings {
	s := c.JS
	s.DeleterMaxAckPending, s.SweeperMaxAckPending = c.MaxInflightDeletes, c.MaxInflightSweep
	return s
}

// Names returns the stream, subject and bucket names.
func (c Config) Names() (subjects.Names, error) {
	n, err := subjects.NewNames(c.Prefix, c.Cluster)
	if err != nil {
		return n, fmt.Errorf("subject_prefix, cluster: %w", err)
	}
	return n, nil
}

// Conns returns the connections to the registry Redis and to the guard's, which is the
// registry's when guard.uri is empty.
func (c Config) Conns() (registry, guard redismeta.ConnOptions, err error) {
	if c.Registry.URI != "" {
		if registry, err = c.RegistryConn(); err != nil {
			return registry, guard, err
		}
	}
	guard = registry
	if c.Guard.URI != "" {
		if guard, err = c.GuardConn(); err != nil {
			return registry, guard, err
		}
	}
	return registry, guard, nil
}

// DeleterWorkers is workers.deleter, or max_inflight_delete_requests when it is 0.
func (c Config) DeleterWorkers() int {
	if c.Workers.Deleter == 0 {
		return c.MaxInflightDeletes
	}
	return c.Workers.Deleter
}

// SweeperWorkers is workers.sweeper, or max_inflight_sweep_batches when it is 0.
func (c Config) SweeperWorkers() int {
	if c.Workers.Sweeper == 0 {
		return c.MaxInflightSweep
	}
	return c.Workers.Sweeper
}

// StageConfigs are the stages' configurations: their own keys, with the wiring they read
// from keys other components own. Their rules live with them (Validate).
func (c Config) StageConfigs() (scanner.Config, prober.Config, deleter.Config) {
	pc := c.Prober
	pc.ExcludedTypes = slices.Clone(c.Prober.ExcludedTypes)
	pc.MaxTargets = c.Scanner.ScanBatchSize
	dc := c.Deleter
	dc.AckWait = c.JS.DeleterAckWait // the deleter keeps a delayed request alive within it
	return c.Scanner, pc, dc
}

// LogValue summarises the configuration for the startup log line, without secrets.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("cluster", c.Cluster),
		slog.String("subject_prefix", c.Prefix),
		slog.Bool("enabled", c.Enabled),
		slog.Bool("dry_run", c.DryRun),
		slog.String("registry", redismeta.Redact(c.Registry.URI)),
		slog.String("nats", Key{Secret: "uri"}.redact(c.NATS.URL)),
		slog.Duration("scan_interval", c.Scanner.ScanInterval),
		slog.Duration("round_pause", c.Scanner.RoundPause),
		slog.Int("scan_batch_size", c.Scanner.ScanBatchSize),
		slog.Float64("scanner.duty", c.Scanner.Duty),
		slog.Int("scanner.burst_keys", c.Scanner.BurstKeys),
		slog.Float64("scanner.redis_cpu_ceiling", c.Scanner.CPUCeiling),
		slog.Duration("orphan_writing_grace", c.Prober.OrphanWritingGrace),
		slog.Int("max_inflight_delete_requests", c.MaxInflightDeletes),
		slog.Duration("delete_delay", c.Deleter.DeleteDelay),
		slog.Float64("delete_duty", c.Deleter.Duty),
		slog.String("empty_block", c.EmptyBlock),
		slog.Bool("collect_deleting", c.Prober.CollectDeleting),
		slog.Duration("deleting_grace", c.Prober.DeletingGrace),
		slog.Bool("collect_unregistered_instances", c.Scanner.CollectUnregistered),
		slog.Duration("unregistered_grace", c.Scanner.UnregisteredGrace),
		slog.Any("swept_storages", c.SweepConfig().Storages),
	)
}

// SweepConfig is the sweep's configuration: its own keys, the storages whose override sets
// sweep (sorted), and what it reads from the scanner's, the prober's and jetstream's keys.
func (c Config) SweepConfig() sweep.Config {
	sw := c.Sweep
	sw.Storages = nil
	for _, name := range slices.Sorted(maps.Keys(c.Storage.Overrides)) {
		if c.Storage.Overrides[name].Sweep {
			sw.Storages = append(sw.Storages, name)
		}
	}
	sw.HighWater, sw.RegistryRefresh, sw.AckWait = c.Scanner.HighWater, c.Prober.RegistryRefresh, c.JS.SweeperAckWait
	sw.CollectUnregistered, sw.UnregisteredGrace = c.Scanner.CollectUnregistered, c.Scanner.UnregisteredGrace
	return sw
}

// EmptyBlockPolicy is empty_block as the metadata stores take it.
func (c Config) EmptyBlockPolicy() meta.EmptyBlock {
	if c.EmptyBlock == "delete" {
		return meta.EmptyBlockDelete
	}
	return meta.EmptyBlockKeep
}
