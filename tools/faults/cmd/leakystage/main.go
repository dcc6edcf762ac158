// Command leakystage runs one of kvcm-gc's stages as the stage's own command does, with a
// leak planted: every SOAK_LEAK_EVERY it keeps SOAK_LEAK_BYTES more, written to so that it is
// resident. It exists to test the soak: a soak that runs a stage as this command must find
// the stage's memory growing (faults.SoakConfig.Leak, TestSoakShortLeak). SOAK_LEAK_STAGE names
// the stage; the arguments are the stage's.
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/cli"
)

// kept is what the leak keeps, reachable until the process ends.
var (
	keptMu sync.Mutex
	kept   [][]byte
)

func main() {
	stages := map[string]app.Stages{"scanner": {Scanner: true}, "prober": {Prober: true}, "deleter": {Deleter: true},
		"walker": {Walker: true}, "sweeper": {Sweeper: true}}
	name := os.Getenv("SOAK_LEAK_STAGE")
	which, ok := stages[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "leakystage: SOAK_LEAK_STAGE %q: want scanner, prober, deleter, walker or sweeper\n", name)
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Getenv("SOAK_LEAK_BYTES"))
	if err != nil || n <= 0 {
		fmt.Fprintf(os.Stderr, "leakystage: SOAK_LEAK_BYTES %q: want a positive number of bytes\n", os.Getenv("SOAK_LEAK_BYTES"))
		os.Exit(2)
	}
	every, err := time.ParseDuration(os.Getenv("SOAK_LEAK_EVERY"))
	if err != nil || every <= 0 {
		fmt.Fprintf(os.Stderr, "leakystage: SOAK_LEAK_EVERY %q: want a positive duration\n", os.Getenv("SOAK_LEAK_EVERY"))
		os.Exit(2)
	}
	go leak(n, every)
	cli.StageMain(name, "Runs the "+name+" with a leak planted (a test of the soak).", which)
}

// leak keeps n bytes more every period.
func leak(n int, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		b := make([]byte, n)
		for i := 0; i < len(b); i += 512 {
			b[i] = 1
		}
		keptMu.Lock()
		kept = append(kept, b)
		keptMu.Unlock()
	}
}
