// Command kvcmstage runs one kvcm-gc stage for the benchmark harness (kvcmbench), which
// starts it, reads its peak memory and CPU time when it exits, and stops it with SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvcm-gc/kvcm-gc/tools/bench/stage"
)

func main() {
	spec := flag.String("spec", "", "the stage to run, as JSON (written by kvcmbench)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var s stage.Spec
	if err := json.Unmarshal([]byte(*spec), &s); err != nil {
		fmt.Fprintf(os.Stderr, "kvcmstage: decode -spec: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := stage.Run(ctx, s, log.With("stage", s.Stage)); err != nil {
		log.Error("stage failed", "err", err)
		os.Exit(1)
	}
}
