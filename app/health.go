package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
)

// ErrNotRunning: Run has not started the stages yet, or has returned.
var ErrNotRunning = errors.New("stages not running")

// Health is the readiness of a process's stages, what /readyz reports. Run fills it: a
// process is ready only while its NATS connection is up, the Redis servers its stages use
// answer PING, every consumer loop runs, and a scanner either holds the leader lease or can
// read who does (it is waiting for it). Between those, a stage that cannot work is not ready.
type Health struct {
	mu      sync.Mutex
	running bool
	checks  []healthCheck
}

type healthCheck struct {
	name string
	fn   func(ctx context.Context) (string, error)
}

// Ready runs every check. It returns one "name: detail" line per check, and an error naming
// every check that failed (ErrNotRunning before Run has registered its checks).
func (h *Health) Ready(ctx context.Context) (string, error) {
	h.mu.Lock()
	running, checks := h.running, append([]healthCheck(nil), h.checks...)
	h.mu.Unlock()
	if !running {
		return "", ErrNotRunning
	}
	var b strings.Builder
	var errs []error
	for _, c := range checks {
		detail, err := c.fn(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
			detail = "NOT READY: " + err.Error()
		}
		fmt.Fprintf(&b, "%s: %s\n", c.name, detail)
	}
	return b.String(), errors.Join(errs...)
}

func (h *Health) add(name string, fn func(ctx context.Context) (string, error)) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, healthCheck{name: name, fn: fn})
}

func (h *Health) setRunning(running bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = running
	if !running {
		h.checks = nil
	}
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

func (a *alive) check(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.on {
		return "", errors.New("stopped")
	}
	return "running", nil
}

// readiness registers the connection checks of Run: NATS, and a PING of every Redis server
// known before the first message (the registry, and the stores named in MetaURIs; stores
// learned from the registry later are not pinged). It marks the process running; the returned
// func marks it stopped and closes the ping clients.
func (o Options) readiness(nc *nats.Conn, pool *redismeta.Pool, which Stages) (func(), error) {
	h := o.Health
	h.add("nats", func(context.Context) (string, error) {
		if s := nc.Status(); s != nats.CONNECTED {
			return "", fmt.Errorf("connection %s", s)
		}
		return "connected to " + nc.ConnectedUrlRedacted(), nil
	})
	var clients []*redis.Client
	closeAll := func() {
		h.setRunning(false)
		for _, c := range clients {
			_ = c.Close()
		}
	}
	ping := func(name string, conn redismeta.ConnOptions) error {
		conn.MaxPoolSize, conn.MinPoolSize = 1, 0
		c, err := redismeta.NewClient(conn)
		if err != nil {
			return fmt.Errorf("readiness check of redis %s: %w", name, err)
		}
		clients = append(clients, c)
		h.add("redis "+name, func(ctx context.Context) (string, error) {
			if err := c.Ping(ctx).Err(); err != nil {
				return "", err
			}
			return "ping ok (" + conn.String() + ")", nil
		})
		return nil
	}
	if o.Registry.Addr != "" {
		if err := ping("registry", o.Registry); err != nil {
			closeAll()
			return nil, err
		}
	}
	if which.Deleter || which.Scanner {
		for _, name := range slices.Sorted(maps.Keys(o.MetaURIs)) {
			conn, err := pool.ConnOptions(name)
			if err == nil {
				err = ping("store "+name, conn)
			}
			if err != nil {
				closeAll()
				return nil, err
			}
		}
	}
	h.setRunning(true)
	return closeAll, nil
}

// stageAlive registers the check of a stage loop: ready while it runs and extra (if any)
// passes. The loop clears it when it returns.
func (o Options) stageAlive(stage string, extra func(context.Context) (string, error)) *alive {
	a := &alive{on: true}
	o.Health.add(stage, func(ctx context.Context) (string, error) {
		detail, err := a.check(ctx)
		if err != nil || extra == nil {
			return detail, err
		}
		return extra(ctx)
	})
	return a
}
