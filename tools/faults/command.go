package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// Workspace is what the fault suite's and the soak's commands set up before a run: the seed of
// every random choice, the work directory and the binaries built into it.
type Workspace struct {
	Seed uint64
	// Dir is the work directory, absolute: paths under it reach the stages through their
	// config files, and only absolute ones mean the same to all.
	Dir  string
	Bins map[string]string

	temp    bool // Dir was made by Prepare
	started time.Time
}

// Interrupted returns a context that ends at SIGINT or SIGTERM, the context of a command's run.
func Interrupted() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Prepare sets a command's run up: seed 0 is replaced by a new one and work "" by a new
// temporary directory (named as os.MkdirTemp names one from pattern). It prints the title with
// the seed and the directory, then builds the binaries (Build) into its bin.
func Prepare(ctx context.Context, title, pattern string, seed uint64, work string) (*Workspace, error) {
	if seed == 0 {
		seed = rand.Uint64() >> 1
	}
	w := &Workspace{Seed: seed, Dir: work, temp: work == ""}
	if w.temp {
		dir, err := os.MkdirTemp("", pattern)
		if err != nil {
			return nil, err
		}
		w.Dir = dir
	}
	dir, err := filepath.Abs(w.Dir)
	if err != nil {
		return nil, err
	}
	w.Dir = dir
	fmt.Printf("%s: seed %d, work directory %s\n", title, w.Seed, w.Dir)
	if w.Bins, err = Build(ctx, filepath.Join(w.Dir, "bin")); err != nil {
		return nil, err
	}
	w.started = time.Now()
	return w, nil
}

// Elapsed is the time since the binaries were built, in whole seconds.
func (w *Workspace) Elapsed() time.Duration { return time.Since(w.started).Round(time.Second) }

// Passed ends a passing run: a temporary work directory is removed. A failed run keeps it,
// with the servers' files and the process logs.
func (w *Workspace) Passed() {
	if w.temp {
		_ = os.RemoveAll(w.Dir)
	}
}
