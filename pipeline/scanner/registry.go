package scanner

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
)

// What every walk of a scanner shares besides its controls (pipeline.Controls): the registry
// snapshot (one read serves every store; failed reads back off).

// RegistryBackoff is the default delay before the attempt-th retry (1-based) of a failed
// registry read: the project's one retry policy (internal/backoff), 200ms doubling up to 30s,
// with jitter so that scanners that failed together do not retry together.
func RegistryBackoff(attempt int) time.Duration {
	return backoff.New(200*time.Millisecond, 30*time.Second).Delay(attempt)
}

// registryReuse is how long a registry snapshot serves every walk (and the lease
// coordination) before it is read again.
const registryReuse = time.Second

// registryCache reads the registry for every walk of a scanner: a RegistryCache that serves
// one snapshot for registryReuse and, after a failure, reads none before the backoff delay has
// passed and serves no stale one (DESIGN §4: no cursor advance on a registry failure; finding:
// retrying at scan_interval floods the logs and the registry). Failures are logged here, once
// per read.
type registryCache struct {
	rc  *pipeline.RegistryCache[scanSnapshot]
	m   *Metrics
	log *slog.Logger

	mu      sync.Mutex
	skipped int // entries of the last snapshot not collected, for the log
	logged  bool
}

// scanSnapshot is what the scanner takes from one registry snapshot.
type scanSnapshot struct {
	instances []meta.Instance  // sorted by (group, id)
	view      pipeline.RegView // every instance id listed, the collected groups, partial
	skipped   []meta.Skip
	quotas    map[string]uint64 // quota.capacity by instance group
}

// newRegistryCache returns the scanner's registry cache over r, retrying a failed read after
// backoff(attempt).
func newRegistryCache(
	r meta.RegistryReader,
	backoff func(attempt int) time.Duration,
	m *Metrics,
	log *slog.Logger,
) *registryCache {
	return &registryCache{m: m, log: log, rc: pipeline.NewRegistryCache(pipeline.RegistryCacheConfig[scanSnapshot]{
		Reader: r, Build: buildScanSnapshot, Refresh: registryReuse, Backoff: backoff})}
}

func buildScanSnapshot(_ context.Context, reg *meta.Registry, now time.Time) (scanSnapshot, error) {
	snap := append([]meta.Instance(nil), reg.Instances...)
	sort.SliceStable(snap, func(i, j int) bool {
		if snap[i].Group != snap[j].Group {
			return snap[i].Group < snap[j].Group
		}
		return snap[i].ID < snap[j].ID
	})
	quotas := make(map[string]uint64, len(reg.Groups))
	for name, g := range reg.Groups {
		quotas[name] = g.QuotaCapacity
	}
	return scanSnapshot{instances: snap, view: pipeline.NewRegView(reg, now), skipped: reg.Skipped, quotas: quotas}, nil
}

// listed returns the collected instances of store the last snapshot lists, as the store's
// checkpoint remembers them (nil before a snapshot, or while the last read failed).
func (c *registryCache) listed(store string) map[string]pipeline.SeenInstance {
	v, at, ok, failing := c.rc.Last()
	if !ok || failing {
		return nil
	}
	out := map[string]pipeline.SeenInstance{}
	for _, in := range v.instances {
		if in.Store == store {
			out[in.ID] = pipeline.SeenInstance{Group: in.Group, LastRegisteredUs: at.UnixMicro()}
		}
	}
	return out
}

// view reads the registry again (unless a snapshot of the last registryReuse serves) and
// returns what the collection of unregistered instances takes from it.
func (c *registryCache) view(ctx context.Context, now time.Time) pipeline.RegView {
	v, _, err := c.snapshot(ctx, now)
	if err != nil {
		return pipeline.RegView{Err: err}
	}
	rv := pipeline.RegView{
		At:       v.view.At,
		Known:    v.view.Known,
		Groups:   v.view.Groups,
		Partial:  v.view.Partial,
		Instance: map[string]meta.Instance{},
	}
	for _, in := range v.instances {
		rv.Instance[in.ID] = in
	}
	return rv
}

// registered reports whether the last snapshot lists instance id, collected or skipped; ok is
// false before any snapshot was read.
func (c *registryCache) registered(id string) (known, ok bool) {
	v, _, have, _ := c.rc.Last()
	if !have {
		return false, false
	}
	return v.view.Known[id], true
}

// get returns the snapshot, sorted by (group, id), or the last error and when to try again.
func (c *registryCache) get(ctx context.Context, now time.Time) ([]meta.Instance, time.Time, error) {
	v, retryAt, err := c.snapshot(ctx, now)
	return v.instances, retryAt, err
}

// snapshot is get with the whole snapshot. A read is logged once: its failure, or what it
// changed.
func (c *registryCache) snapshot(ctx context.Context, now time.Time) (scanSnapshot, time.Time, error) {
	v, info, err := c.rc.Get(ctx, now)
	switch {
	case err != nil && info.Read:
		c.m.opError("registry")
		pipeline.Warn(ctx, c.log, "read registry; backing off",
			"attempt", info.Failures, "retry_in", info.RetryAt.Sub(now), "err", info.Err)
	case err == nil && info.Read:
		c.readLogs(info, v)
	}
	return v, info.RetryAt, err
}

// readLogs says, once per read, that the registry answers again, and which entries it lists
// that are not collected when their number changed.
func (c *registryCache) readLogs(info pipeline.RegistryRead, v scanSnapshot) {
	if info.Recovered > 0 {
		c.log.Info("registry readable again", "after_attempts", info.Recovered)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(v.skipped) > 0 && (!c.logged || len(v.skipped) != c.skipped) {
		c.log.Info("registry entries not collected",
			"count", len(v.skipped), "first", v.skipped[0].Instance, "reason", v.skipped[0].Reason)
	}
	c.skipped, c.logged = len(v.skipped), true
}

// quota returns the quota.capacity of instance group group in the last snapshot (0: none).
func (c *registryCache) quota(group string) uint64 {
	v, _, _, _ := c.rc.Last()
	return v.quotas[group]
}

// last returns the last snapshot read (nil: none yet), without reading.
func (c *registryCache) last() []meta.Instance {
	v, _, _, _ := c.rc.Last()
	return v.instances
}

// instancesOf returns the instances of a snapshot whose metadata store is store, by id (the
// first by (group, id) wins a duplicate id).
func instancesOf(snap []meta.Instance, store string) map[string]meta.Instance {
	out := map[string]meta.Instance{}
	for _, in := range snap {
		if in.Store != store {
			continue
		}
		if _, dup := out[in.ID]; !dup {
			out[in.ID] = in
		}
	}
	return out
}

// storesOf returns the metadata stores of a snapshot, sorted.
func storesOf(snap []meta.Instance) []string {
	seen := map[string]bool{}
	var out []string
	for _, in := range snap {
		if !seen[in.Store] {
			seen[in.Store] = true
			out = append(out, in.Store)
		}
	}
	sort.Strings(out)
	return out
}
