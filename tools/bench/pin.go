package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// The serving windows' placements (PinPinned, PinShared) are set with taskset (util-linux):
// Redis, NATS and the harness (whose clients are the read load) are moved between cores as
// they run, and a pinned window's stage processes start under taskset -c, so every thread
// they ever have is on kvcm-gc's core.

// allowedCPUs are the cores this process may run on when it starts, in order: its
// Cpus_allowed_list (nil when unreadable).
func allowedCPUs() []int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			cpus, err := parseCPUList(strings.TrimSpace(v))
			if err != nil {
				return nil
			}
			return cpus
		}
	}
	return nil
}

// parseCPUList reads a kernel CPU list such as "0-3,6".
func parseCPUList(s string) ([]int, error) {
	ranges, err := parseList(s, func(part string) ([]int, error) {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if b < a {
			return nil, fmt.Errorf("cpu list %q: descending range %q", s, part)
		}
		cpus := make([]int, 0, b-a+1)
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
		return cpus, nil
	})
	if err != nil {
		return nil, err
	}
	out := slices.Concat(ranges...)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// cpuList formats cores as taskset -c takes them.
func cpuList(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// redisCPUs is the core of Redis and the read load in a pinned window: the first allowed one.
func (h *Harness) redisCPUs() string { return cpuList(h.cpus[:1]) }

// gcCPUs are the cores of kvcm-gc's stages and NATS in a pinned window: the others.
func (h *Harness) gcCPUs() string { return cpuList(h.cpus[1:]) }

// canPin reports why the pinned placement cannot be set up, if it cannot.
func (h *Harness) canPin() error {
	if len(h.cpus) < 2 {
		return fmt.Errorf("pinned serving windows need 2 cores, this process may use %d (%s)", len(h.cpus), cpuList(h.cpus))
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return errors.New("pinned serving windows need taskset (util-linux: apt-get install -y util-linux), or -serving-pin shared")
	}
	if h.redisPid <= 0 || h.nats == nil {
		return errors.New("pinned serving windows: the pids of Redis and NATS are unknown")
	}
	return nil
}

// place moves Redis, the harness and NATS to the cores of a placement: for PinPinned Redis
// and the harness on redisCPUs and NATS on gcCPUs, for PinShared all three on every allowed
// core (a no-op until a placement was set).
func (h *Harness) place(_ context.Context, pin string) error {
	if pin == PinShared && !h.placed {
		return nil
	}
	all := cpuList(h.cpus)
	redisSet, gcSet := all, all
	if pin == PinPinned {
		redisSet, gcSet = h.redisCPUs(), h.gcCPUs()
	}
	var errs []error
	for _, p := range []struct {
		pid  int
		cpus string
	}{{h.redisPid, redisSet}, {os.Getpid(), redisSet}, {h.nats.c.Pid(), gcSet}} {
		errs = append(errs, setAffinity(p.pid, p.cpus))
	}
	h.placed = pin != PinShared
	return errors.Join(errs...)
}

// setAffinity pins every thread of pid to cpus.
func setAffinity(pid int, cpus string) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p -c %s %d: %w: %s", cpus, pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}
