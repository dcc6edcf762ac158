package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc CPU times (USER_HZ, 100 on every Linux platform Go runs on).
const clockTick = 10 * time.Millisecond

// CPUShare is where the machine's CPU went during an interval: whether a stage was limited by
// its own code, by Redis, by NATS, or by the cores being full.
type CPUShare struct {
	Wall time.Duration
	// Busy is the machine's non-idle CPU time, all processes (from /proc/stat).
	Busy time.Duration
	// Redis, NATS, Stages and Harness are those processes' CPU time; RedisMain is Redis's
	// main thread's (every command runs on it: how busy Redis was, by its own count).
	Redis, NATS, Stages, Harness time.Duration
	RedisMain                    time.Duration
	// StagesWait and RedisWait are the time those processes' threads were ready to run but
	// waited for a core (schedstat run delay): how much the machine's other load held them
	// back. Busy cannot say it: it is sampled at clock ticks and misses short bursts.
	StagesWait, RedisWait time.Duration
	// HarnessWait is the same for the harness, whose clients measure the serving latency: a
	// request that waits for a core in the client looks slow too.
	HarnessWait time.Duration
}

// Cores is the average number of busy cores.
func (c CPUShare) Cores() float64 {
	if c.Wall <= 0 {
		return 0
	}
	return c.Busy.Seconds() / c.Wall.Seconds()
}

type cpuSample struct {
	at                      time.Time
	busy                    time.Duration
	redis, nats, proc, self time.Duration
	redisMain               time.Duration
	procWait, redisWait     time.Duration
	selfWait                time.Duration
}

// cpuNow reads the counters; pids are the stage processes of interest.
func (h *Harness) cpuNow(ctx context.Context, pids ...int) cpuSample {
	s := cpuSample{at: time.Now(), busy: machineBusy(), self: procCPU(os.Getpid()), selfWait: runDelay(os.Getpid())}
	if h.redisPid > 0 {
		s.redisWait = runDelay(h.redisPid)
	}
	if info, err := h.redis.Client().Info(ctx, "cpu").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			switch k {
			case "used_cpu_sys", "used_cpu_user":
				s.redis += time.Duration(f * float64(time.Second))
			case "used_cpu_sys_main_thread", "used_cpu_user_main_thread":
				s.redisMain += time.Duration(f * float64(time.Second))
			}
		}
	}
	if h.nats != nil {
		s.nats = procCPU(h.nats.c.Pid())
	}
	for _, pid := range pids {
		s.proc += procCPU(pid)
		s.procWait += runDelay(pid)
	}
	return s
}

// since is the share of the interval from s to now.
func (h *Harness) cpuSince(ctx context.Context, s cpuSample, pids ...int) CPUShare {
	e := h.cpuNow(ctx, pids...)
	return CPUShare{Wall: e.at.Sub(s.at), Busy: e.busy - s.busy, Redis: e.redis - s.redis, RedisMain: e.redisMain - s.redisMain, NATS: e.nats - s.nats,
		Stages: e.proc - s.proc, Harness: e.self - s.self, StagesWait: e.procWait - s.procWait, RedisWait: e.redisWait - s.redisWait,
		HarnessWait: e.selfWait - s.selfWait}
}

// machineBusy is the non-idle time of all CPUs since boot.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is already counted in user
			break
		}
		busy += n
	}
	return time.Duration(busy) * clockTick
}

// procCPU is a process's user plus system time so far.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; the fields after it are fixed.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * clockTick
}

// runDelay is the time a process's threads have spent runnable but waiting for a core.
func runDelay(pid int) time.Duration {
	_, wait := schedTimes(pid)
	return wait
}

// schedTimes are the time a process's threads have spent on a core and the time they spent
// runnable but waiting for one: the first two fields of each /proc/<pid>/task/<tid>/schedstat,
// in nanoseconds (procCPU counts clock ticks of 10 ms). A thread that has exited is no longer
// counted.
func schedTimes(pid int) (run, wait time.Duration) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, 0
	}
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(data)); len(f) >= 2 {
			r, _ := strconv.ParseInt(f[0], 10, 64)
			w, _ := strconv.ParseInt(f[1], 10, 64)
			run, wait = run+time.Duration(r), wait+time.Duration(w)
		}
	}
	return run, wait
}
