package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// ErrNotRunning: Run has not started the stages yet, or has returned.
var ErrNotRunning = errors.New("stages not running")

// ErrNoGroups: the registry holds no instance group for the configured cluster, so there is
// nothing to collect. A misspelt cluster name looks exactly like this.
var ErrNoGroups = errors.New("no instance groups in the registry")

// Health is the readiness of a process's stages, what /readyz reports. Run fills it: a
// process is ready only while
//
//   - its NATS connection is up;
//   - the registry (scanner, prober) can be read and holds instance groups for the cluster;
//   - every metadata store its stages use answers PING (scanner, deleter): the stores the
//     registry names (scanner), the configured ones, and those the deleter has been sent to;
//   - every stage loop runs, a scanner holding store leases or able to read who holds them.
//
// A stage an operator paused is ready, and says so ("ready, paused until …"). Before the
// stages start, Ready says what startup is waiting for.
type Health struct {
	mu      sync.Mutex
	running bool
	phase   string // what startup does, or "stopped"
	checks  []checker
}

// checker returns one or more lines of the report.
type checker func(ctx context.Context) []checkLine

type checkLine struct {
	name, detail string
	err          error
}

// Ready runs every check, concurrently. It returns one "name: detail" line per check, and an
// error naming every check that failed (ErrNotRunning, with what startup waits for, before
// Run has started the stages).
func (h *Health) Ready(ctx context.Context) (string, error) {
	h.mu.Lock()
	running, phase, checks := h.running, h.phase, slices.Clone(h.checks)
	h.mu.Unlock()
	if !running {
		if phase == "" {
			return "", ErrNotRunning
		}
		return "", fmt.Errorf("%w: %s", ErrNotRunning, phase)
	}
	results := make([][]checkLine, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() { results[i] = c(ctx) })
	}
	wg.Wait()
	var b strings.Builder
	var errs []error
	for _, lines := range results {
		for _, l := range lines {
			detail := l.detail
			if l.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", l.name, l.err))
				detail = "NOT READY: " + l.err.Error()
			}
			fmt.Fprintf(&b, "%s: %s\n", l.name, detail)
		}
	}
	return b.String(), errors.Join(errs...)
}

func (h *Health) add(c checker) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, c)
}

// starting records what startup is doing; the process is not ready meanwhile.
func (h *Health) starting(what string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.phase, h.checks = false, "starting: "+what, nil
}

// setRunning makes the registered checks decide readiness.
func (h *Health) setRunning() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.phase = true, ""
}

// stopped marks the stages gone.
func (h *Health) stopped() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.phase, h.checks = false, "stopped", nil
}

// alive reports whether a stage loop runs.
type alive struct {
	mu sync.Mutex
	on bool
}

func (a *alive) set(on bool) {
	a.mu.Lock()
	a.on = on
	a.mu.Unlock()
}

func (a *alive) running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.on
}

// usedStores is the stages' store resolver; it remembers every store a stage has opened, so
// readiness pings the stores the deleter is sent to as well as those the registry names.
type usedStores struct {
	meta.StoreResolver
	mu    sync.Mutex
	names map[string]bool
}

func (u *usedStores) Store(name string) (meta.Store, error) {
	s, err := u.StoreResolver.Store(name)
	if err == nil {
		u.mu.Lock()
		if u.names == nil {
			u.names = map[string]bool{}
		}
		u.names[name] = true
		u.mu.Unlock()
	}
	return s, err
}

func (u *usedStores) list() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Collect(maps.Keys(u.names))
}

// readiness holds what the checks of Run read.
type readiness struct {
	o        Options
	nc       *nats.Conn
	js       jetstream.JetStream
	names    subjects.Names
	registry *redismeta.RegistryReader // nil: the process has no registry
	pool     *redismeta.Pool
	stores   *usedStores
	which    Stages

	mu      sync.Mutex
	known   []string                 // the stores of the last registry snapshot read
	clients map[string]*redis.Client // a one-connection ping client per store
}

// register adds the connection checks to h and returns a func that closes the ping clients.
func (r *readiness) register(h *Health) func() {
	if h == nil {
		return func() {}
	}
	h.add(func(context.Context) []checkLine {
		if s := r.nc.Status(); s != nats.CONNECTED {
			return []checkLine{{name: "nats", err: fmt.Errorf("connection %s", s)}}
		}
		return []checkLine{{name: "nats", detail: "connected to " + r.nc.ConnectedUrlRedacted()}}
	})
	if r.registry != nil || r.which.Scanner || r.which.Deleter || r.which.Sweeper {
		h.add(r.registryAndStores)
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.clients {
			_ = c.Close()
		}
		clear(r.clients)
	}
}

// registryAndStores reads the registry (it must hold instance groups for the cluster) and
// pings every metadata store the stages use: those of the registry's instances (the last
// snapshot read, when this read failed), the configured ones, and those the stages opened.
func (r *readiness) registryAndStores(ctx context.Context) []checkLine {
	var out []checkLine
	if r.registry != nil {
		reg, err := r.registry.ReadRegistry(ctx)
		switch {
		case err != nil:
			out = append(out, checkLine{name: "registry", err: err})
		case len(reg.Groups) == 0:
			out = append(
				out,
				checkLine{
					name: "registry",
					err: fmt.Errorf("cluster %q: %w (kvcache_registry:%s:instance_group is empty): is the cluster name right?",
						r.o.Cluster, ErrNoGroups, r.o.Cluster),
				},
			)
		default:
			known := map[string]bool{}
			for _, in := range reg.Instances {
				known[in.Store] = true
			}
			r.mu.Lock()
			r.known = slices.Sorted(maps.Keys(known))
			r.mu.Unlock()
			out = append(
				out,
				checkLine{
					name: "registry",
					detail: fmt.Sprintf(
						"cluster %q: %d instance groups, %d instances collected, %d entries skipped, %d metadata stores",
						r.o.Cluster,
						len(reg.Groups),
						len(reg.Instances),
						len(reg.Skipped),
						len(known),
					),
				},
			)
		}
	}
	if !r.which.Scanner && !r.which.Deleter && !r.which.Sweeper {
		return out // the prober and the walker read no metadata store
	}
	r.mu.Lock()
	names := map[string]bool{}
	for _, n := range r.known {
		names[n] = true
	}
	r.mu.Unlock()
	for n := range r.o.MetaURIs {
		names[n] = true
	}
	for _, n := range r.stores.list() {
		names[n] = true
	}
	sorted := slices.Sorted(maps.Keys(names))
	lines := make([]checkLine, len(sorted))
	var wg sync.WaitGroup
	for i, name := range sorted {
		wg.Go(func() { lines[i] = r.ping(ctx, name) })
	}
	wg.Wait()
	return append(out, lines...)
}

func (r *readiness) ping(ctx context.Context, name string) checkLine {
	l := checkLine{name: "store " + name}
	conn, err := r.pool.ConnOptions(name)
	if err != nil {
		l.err = err
		return l
	}
	r.mu.Lock()
	c := r.clients[name]
	if c == nil {
		pc := conn
		pc.MaxPoolSize, pc.MinPoolSize = 1, 0
		if c, err = redismeta.NewClient(pc); err == nil {
			if r.clients == nil {
				r.clients = map[string]*redis.Client{}
			}
			r.clients[name] = c
		}
	}
	r.mu.Unlock()
	if err != nil {
		l.err = fmt.Errorf("readiness check of store %s: %w", name, err)
		return l
	}
	if err := c.Ping(ctx).Err(); err != nil {
		l.err = err
		return l
	}
	l.detail = "ping ok (" + conn.String() + ")"
	return l
}

// stage registers the check of a stage loop: ready while it runs and extra (if any) passes,
// with the stage's pause, if an operator set one. The loop clears it when it returns.
func (r *readiness) stage(h *Health, stage string, extra func(context.Context) (string, error)) *alive {
	a := &alive{on: true}
	h.add(func(ctx context.Context) []checkLine {
		l := checkLine{name: stage}
		if !a.running() {
			l.err = errors.New("stopped")
			return []checkLine{l}
		}
		l.detail = "running"
		if extra != nil {
			if l.detail, l.err = extra(ctx); l.err != nil {
				return []checkLine{l}
			}
		}
		// A pause is an operator's choice, not a fault: the stage stays ready and says so.
		st, err := pipeline.StagePause(ctx, r.js, r.names, stage)
		switch {
		case err != nil:
			l.detail += " (pause unknown: " + err.Error() + ")"
		case st.Paused:
			l.detail = "ready, paused " + pipeline.PauseEnd(st.Until, time.Now()) + "; " + l.detail
		}
		return []checkLine{l}
	})
	return a
}
