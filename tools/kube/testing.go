package kube

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// RequireEnv, when set, makes a test without the tools fail instead of skipping: `make
// test` sets it after `make tools` built them, so a broken tools cache cannot pass quietly.
const RequireEnv = "REQUIRE_DEPLOY_TOOLS"

// RequireTools returns the tools ToolsEnv lists. Without them it skips tb, or fails it when
// RequireEnv is set.
func RequireTools(tb testing.TB) Tools {
	tb.Helper()
	t, err := ToolsFromEnv()
	if err == nil {
		return t
	}
	if os.Getenv(RequireEnv) != "" {
		tb.Fatalf("kubernetes control plane: %v (make tools builds it; make -s tools-env prints %s)", err, ToolsEnv)
	}
	tb.Skipf("kubernetes control plane: %v (make tools builds it, make test requires it)", err)
	return Tools{}
}

// Shared is one control plane for every test of a package that asks for it: started by the
// first, stopped by Stop (from TestMain, after m.Run). Starting one takes seconds and a
// few hundred MiB, so tests share it and keep apart by namespace.
type Shared struct {
	Options Options

	once sync.Once
	mu   sync.Mutex
	c    *Cluster
	err  error
}

// Get returns the control plane, starting it on the first call; it skips or fails tb as
// RequireTools does without the tools, and fails it when the control plane did not start.
// When tb fails, the tail of every component's log is logged.
func (s *Shared) Get(tb testing.TB) *Cluster {
	tb.Helper()
	tools := RequireTools(tb)
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		c, err := Start(ctx, tools, s.Options)
		s.mu.Lock()
		s.c, s.err = c, err
		s.mu.Unlock()
		if err == nil {
			tb.Logf("kubernetes control plane ready in %v at %s", time.Since(start).Round(time.Millisecond), c.Server)
		}
	})
	s.mu.Lock()
	c, err := s.c, s.err
	s.mu.Unlock()
	if err != nil {
		tb.Fatalf("start kubernetes control plane: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Check(); err != nil {
			tb.Errorf("kubernetes control plane: %v", err)
		}
		if tb.Failed() {
			tb.Logf("kubernetes control plane logs:\n%s", c.Logs(8192))
		}
	})
	return c
}

// Stop stops the control plane if one was started.
func (s *Shared) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		s.c.Stop()
		s.c = nil
	}
}
