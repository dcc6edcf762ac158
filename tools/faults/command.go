package faults

import (
	"context"
	"flag"
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

// WorkspaceFlags are the flags of a command's workspace (Prepare): -seed and -work.
type WorkspaceFlags struct {
	Seed uint64
	Work string
}

// Register adds -seed and -work to fs.
func (f *WorkspaceFlags) Register(fs *flag.FlagSet) {
	fs.Uint64Var(&f.Seed, "seed", 0, "seed of every random choice (0: a new one, printed)")
	fs.StringVar(&f.Work, "work", "",
		"directory for servers' files and logs (default a new temporary one, removed after a passing run)")
}

// RegisterKeyspaceFlags adds to fs the flags the fault suite and the soak share: the seeded
// keyspace's size and the stages' round pause, each defaulting to the value it sets.
func RegisterKeyspaceFlags(fs *flag.FlagSet, instances, blocks *int, roundPause *time.Duration) {
	fs.IntVar(instances, "instances", *instances, "KVCM instances in the keyspace")
	fs.IntVar(blocks, "blocks", *blocks, "blocks per instance")
	fs.DurationVar(roundPause, "round-pause", *roundPause, "round_pause of the stages")
}

// RunCommand runs the command name (its errors are prefixed with it): it prepares a workspace
// from f (Prepare, titled title), runs body in it with a context that ends at SIGINT or
// SIGTERM, and prints the time taken. It returns the exit code: 0 when body passed, the
// temporary work directory removed (Passed); 1 when the workspace could not be prepared, or
// body failed or returned an error, the work directory kept with the servers' files and the
// process logs.
func RunCommand(name, title string, f WorkspaceFlags, body func(ctx context.Context, ws *Workspace) (bool, error)) int {
	ctx, stop := Interrupted()
	defer stop()
	ws, err := Prepare(ctx, title, "kvcm-gc-"+name+"-", f.Seed, f.Work)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	passed, err := body(ctx, ws)
	fmt.Printf("total %s\n", ws.Elapsed())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	}
	if !passed || err != nil {
		fmt.Printf("FAILED (reproduce with -seed %d); logs and server files kept in %s\n", ws.Seed, ws.Dir)
		return 1
	}
	ws.Passed()
	return 0
}
