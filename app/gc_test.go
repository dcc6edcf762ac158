package app

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	t.Setenv("GOGC", "150")
	TuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set in the environment: the target became %d, want it left alone", got)
	}
	t.Setenv("GOGC", "") // set, even if empty: the operator's choice
	TuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("empty GOGC: the target became %d, want it left alone", got)
	}
}

func TestTuneGCDefault(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	t.Setenv("GOGC", "x")
	if err := os.Unsetenv("GOGC"); err != nil { // restored by t.Setenv's cleanup
		t.Fatal(err)
	}
	TuneGC()
	if got := debug.SetGCPercent(100); got != DefaultGOGC {
		t.Fatalf("no GOGC: the target is %d, want %d", got, DefaultGOGC)
	}
}
