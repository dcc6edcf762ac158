// Package procstat reads what Linux reports about a child process in /proc: its resident set
// size, peak and current. The benchmark harness and the fault suite use it for the stage
// processes they start.
//
// getrusage's ru_maxrss cannot be used for a Go child: Go starts children with vfork, and Linux
// carries the parent's high-water mark into a vforked child's ru_maxrss at exec, so every child
// would report at least its parent's peak. VmHWM is the child's own.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// PeakRSS returns the VmHWM of process pid, in bytes; false when it cannot be read (the
// process is gone, or not on Linux).
func PeakRSS(pid int) (int64, bool) { return readStatus(pid, "VmHWM:") }

// RSS returns the VmRSS of process pid, in bytes; false when it cannot be read.
func RSS(pid int) (int64, bool) { return readStatus(pid, "VmRSS:") }

// readStatus returns line field of /proc/<pid>/status, in bytes.
func readStatus(pid int, field string) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	return parseStatus(string(data), field)
}

// parseStatus returns line field ("VmHWM:") of a /proc/<pid>/status text, in bytes.
func parseStatus(status, field string) (int64, bool) {
	for line := range strings.SplitSeq(status, "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

// Peak is the largest VmHWM seen of one process, in bytes.
type Peak struct{ v atomic.Int64 }

// Load returns the peak so far.
func (p *Peak) Load() int64 { return p.v.Load() }

// Sample reads pid's VmHWM once and keeps it if it is larger.
func (p *Peak) Sample(pid int) {
	if v, ok := PeakRSS(pid); ok && v > p.v.Load() {
		p.v.Store(v)
	}
}

// Watch samples pid every period until done is closed. The kernel keeps the high-water mark
// itself, so the period only bounds how much of the process's last moments can be missed.
func (p *Peak) Watch(pid int, period time.Duration, done <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		p.Sample(pid)
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}
