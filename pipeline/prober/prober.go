package prober

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	"github.com/kvcm-gc/kvcm-gc/backends/storage"
	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Prober is the prober stage: it judges batches and publishes delete requests.
type Prober struct {
	cfg       Config
	names     subjects.Names
	registry  meta.RegistryReader
	storageOp storage.Options
	guard     guard.Guard
	observer  DeletingObserver
	publisher pipeline.Publisher
	events    *pipeline.EventLog
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time
	gather    *gatherer
	judging   chan struct{} // a slot per batch being judged (cfg.Workers)

	// registry serves every batch the storage table of one snapshot for RegistryRefresh; after
	// a failed read, batches are judged with the previous table or, without one, fail at once,
	// and the next read waits for the registry backoff.
	registryCache *pipeline.RegistryCache[registrySnapshot]
}

// Deps are what the prober is wired to. Registry (for the storage table), Guard and
// Publisher are required; a nil Observer collects no DELETING location, nil Events records
// no event, a nil Metrics counts on an unregistered set, a nil Logger discards, a nil Now is
// time.Now.
type Deps struct {
	Names          subjects.Names
	Registry       meta.RegistryReader
	StorageOptions storage.Options // local overrides, probe modes
	// Guard is the migration copy-target guard.
	Guard guard.Guard
	// Observer remembers first sights of DELETING locations (collect_deleting).
	Observer  DeletingObserver
	Publisher pipeline.Publisher
	Events    *pipeline.EventLog
	Metrics   *Metrics
	Logger    *slog.Logger
	Now       func() time.Time
}

// New returns the prober stage of cfg.
func New(cfg Config, deps Deps) (*Prober, error) {
	refused := pipeline.Refusals{cfg.Validate()}
	refused.Need(cfg.MaxTargets > 0, "max targets must be > 0")
	refused.Need(cfg.GatherLinger >= 0 && cfg.GatherLinger <= maxGatherLinger,
		fmt.Sprintf("gather linger must be in 0..%s", maxGatherLinger))
	refused.Need(deps.Registry != nil, "no registry reader")
	refused.Need(deps.Guard != nil, "no copy-target guard")
	refused.Need(deps.Publisher != nil, "no publisher")
	if err := refused.Err("prober"); err != nil {
		return nil, err
	}
	p := &Prober{cfg: cfg, names: deps.Names, registry: deps.Registry, storageOp: deps.StorageOptions,
		guard: deps.Guard, observer: deps.Observer, publisher: deps.Publisher, events: deps.Events,
		metrics: orUnregistered(deps.Metrics), log: pipeline.OrDiscard(deps.Logger), now: pipeline.OrNow(deps.Now)}
	p.registryCache = pipeline.NewRegistryCache(
		pipeline.RegistryCacheConfig[registrySnapshot]{Reader: deps.Registry, Build: p.buildSnapshot,
			Refresh: cfg.RegistryRefresh, Backoff: backoff.New(RegistryRetryInitial, RegistryRetryMax).Delay, ServeStale: true},
	)
	p.gather = newGatherer(cfg.MaxTargets, cfg.GatherLinger, p.publish)
	p.judging = make(chan struct{}, max(cfg.Workers, 1))
	return p, nil
}

// Wait waits for the delete requests the prober still publishes in the background (gather.go):
// call it once the consumer running Handle has returned, which ends their contexts.
func (p *Prober) Wait() { p.gather.wait() }

// publish stores one gathered delete request.
func (p *Prober) publish(ctx context.Context, req subjects.DeleteRequest) error {
	data, err := subjects.EncodeDeleteRequest(req)
	if err != nil {
		return fmt.Errorf("encode delete request: %w", err)
	}
	if err := p.publisher.Publish(ctx, p.names.DeleteSubject(req.Instance), data, subjects.DeleteMsgID(req)); err != nil {
		p.metrics.opError("publish")
		return err
	}
	return nil
}

// registrySnapshot is what the prober takes from the registry.
type registrySnapshot struct {
	set    *storage.StaticSet
	tables map[string]kvcm.StorageConfig
	delays map[string]time.Duration
}

// groupDelay is Rules.GroupDelay on the snapshot.
func (s registrySnapshot) groupDelay(group string) (time.Duration, bool) {
	d, ok := s.delays[group]
	return d, ok
}

// Waits between failed registry reads of the prober (backoff.Policy, with jitter).
const (
	RegistryRetryInitial = time.Second
	RegistryRetryMax     = 30 * time.Second
)

// storages returns the registry snapshot, re-reading the registry at most every
// RegistryRefresh, and after a failed read not before the registry backoff allows: every
// batch of a busy prober would otherwise send the failing registry a read of its own.
// Meanwhile batches are judged with the last table: a stale table can only make storages
// unknown.
func (p *Prober) storages(ctx context.Context) (registrySnapshot, error) {
	now := p.now()
	snap, info, err := p.registryCache.Get(ctx, now)
	switch {
	case info.Read && info.Stale:
		p.log.Warn("refresh registry; using the previous storage table",
			"failures", info.Failures, "retry_in", info.RetryAt.Sub(now), "err", info.Err)
	case info.Read && err != nil:
		p.log.Warn("read registry", "failures", info.Failures, "retry_in", info.RetryAt.Sub(now), "err", info.Err)
	}
	return snap, err
}

// buildSnapshot is what the prober takes from a registry snapshot.
func (p *Prober) buildSnapshot(_ context.Context, reg *meta.Registry, _ time.Time) (registrySnapshot, error) {
	set, err := storage.NewSet(reg.Storages, p.storageOp)
	if err != nil {
		return registrySnapshot{}, fmt.Errorf("build storage set: %w", err)
	}
	delays := make(map[string]time.Duration, len(reg.Groups))
	for name, g := range reg.Groups {
		delays[name] = time.Duration(g.DelayBeforeDeleteMs) * time.Millisecond
	}
	return registrySnapshot{set, reg.Storages, delays}, nil
}

// judge judges b in one of the cfg.Workers slots, once one is free.
func (p *Prober) judge(ctx context.Context, rules Rules, b subjects.Batch) (Verdict, error) {
	select {
	case p.judging <- struct{}{}:
	case <-ctx.Done():
		return Verdict{}, ctx.Err()
	}
	defer func() { <-p.judging }()
	return rules.Judge(ctx, b, p.now()), nil
}

// Handle judges one batch message (a Handler).
func (p *Prober) Handle(ctx context.Context, msg jetstream.Msg) error {
	b, src, err := pipeline.Receive(p.names, msg, "batch", subjects.DecodeBatch,
		func(b subjects.Batch) (string, string) { return b.Instance, b.Cluster })
	if err != nil {
		return err
	}
	snap, err := p.storages(ctx)
	if err != nil {
		p.metrics.opError("registry")
		return err
	}
	now := p.now
	rules := Rules{
		Config:   p.cfg,
		Storages: snap.set,
		Guard:    p.guard,
		ObserveProbe: func(t kvcm.StorageType, d time.Duration) {
			p.metrics.ProbeDuration.WithLabelValues(t.String()).Observe(d.Seconds())
		},
		GroupDelay: snap.groupDelay,
		Observer:   p.observer,
	}
	// Batches of the instance held at the same time, being judged or waiting to be, go into
	// one delete request (gather.go); cfg.Workers of them are judged at once.
	tk := p.gather.start(gatherKey{instance: b.Instance, group: b.Group, store: b.Store, round: b.Round})
	defer tk.cancel(ctx)
	v, err := p.judge(ctx, rules, b)
	if err != nil {
		return err
	}

	if len(v.Targets) > 0 {
		base := subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: b.Cluster, Instance: b.Instance, Group: b.Group,
			Store: b.Store, Round: b.Round, JudgedAt: now().UnixMicro()}
		// The batch is acknowledged only after the request holding its targets is stored
		// (DESIGN §5.4).
		if err := tk.add(ctx, base, src, v.Targets, storageInfos(v.Hosts, snap.tables)); err != nil {
			return err
		}
	}

	p.metrics.ProbedLocations.Add(float64(v.Judged))
	for r, n := range v.Candidates {
		p.metrics.Candidates.WithLabelValues(r).Add(float64(n))
	}
	for r, n := range v.Skips {
		p.metrics.ProberSkips.WithLabelValues(r).Add(float64(n))
	}
	if p.events == nil {
		return nil
	}
	var fs []jetstream.PubAckFuture
	// The batch's candidates in events of up to candidatesPerEvent targets (event schema 3).
	for ts := range slices.Chunk(v.Targets, candidatesPerEvent) {
		fs = append(fs, p.events.Emit(ctx, candidateEvent(b, ts, &src)))
	}
	for _, n := range v.Notes {
		key := n.Key
		fs = append(
			fs,
			p.events.Emit(ctx, subjects.Event{Kind: subjects.EventSkip, Stage: pipeline.StageProber, Instance: b.Instance,
				Round: b.Round, Key: &key, Location: n.Location, Reason: n.Reason, Detail: n.Detail, Source: &src}),
		)
	}
	if err := p.events.Wait(ctx, fs); err != nil {
		p.log.Warn("store prober events", "instance", b.Instance, "err", err)
	}
	return nil
}

// candidatesPerEvent bounds the targets of one candidate event (about 100 bytes each).
const candidatesPerEvent = 512

// candidateEvent is the event of candidates ts of batch b.
func candidateEvent(b subjects.Batch, ts []subjects.Target, src *subjects.Source) subjects.Event {
	ev := subjects.Event{Kind: subjects.EventCandidate, Stage: pipeline.StageProber, Instance: b.Instance, Round: b.Round,
		Source: src, Targets: make([]subjects.EventTarget, len(ts)), Counts: map[string]int64{}}
	for i, t := range ts {
		ev.Targets[i] = subjects.EventTarget{Key: t.Key, Location: t.Location, Reason: t.Reason}
		ev.Counts[t.Reason]++
	}
	ev.Reason = subjects.OutcomeMixed
	if len(ev.Counts) == 1 {
		ev.Reason = ts[0].Reason
	}
	return ev
}

// storageInfos describes the storages the targets' specs name, for the deleter.
func storageInfos(hosts map[string]bool, tables map[string]kvcm.StorageConfig) map[string]subjects.StorageInfo {
	out := map[string]subjects.StorageInfo{}
	for host := range hosts {
		if sc, ok := tables[host]; ok {
			out[host] = subjects.StorageInfo{Type: sc.TypeName, RootPath: sc.RootPath, Mountpoint: sc.Mountpoint,
				RootDir: sc.RootDir, KeyCountPerFile: sc.KeyCountPerFile}
		}
	}
	return out
}
