package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis counts its own work: the CPU time of its main thread (INFO cpu,
// used_cpu_user_main_thread and used_cpu_sys_main_thread, from getrusage(RUSAGE_THREAD)),
// which holds every command, every read of a client's query and every write of its replies,
// and per command the calls and the microseconds spent executing them (INFO commandstats).
// Both are counted by the server whatever else runs on the machine, so unlike a rate or a
// latency they resolve on a shared machine: a core the main thread waits for is not counted.

// redisCounters are Redis's counters at one moment.
type redisCounters struct {
	at time.Time
	// main is the main thread's user plus system CPU time.
	main time.Duration
	// cmds are the commandstats, by lower-case command name.
	cmds map[string]cmdStat
}

// cmdStat is one command's calls and execution time (INFO commandstats).
type cmdStat struct {
	Calls int64
	Usec  int64
}

// RedisWork is what Redis did between two readings of its counters.
type RedisWork struct {
	Wall time.Duration
	// Main is the main thread's CPU time.
	Main time.Duration
	// Cmds are the calls and execution time of each command.
	Cmds map[string]cmdStat
}

// Share is the main thread's CPU time over the wall time: how busy Redis was.
func (w RedisWork) Share() float64 {
	if w.Wall <= 0 {
		return 0
	}
	return w.Main.Seconds() / w.Wall.Seconds()
}

// Cmd is the calls and execution time of one command (lower case).
func (w RedisWork) Cmd(name string) cmdStat { return w.Cmds[name] }

// readRedisCounters reads the main thread's CPU time and the command statistics.
func readRedisCounters(ctx context.Context, rdb redis.UniversalClient) (redisCounters, error) {
	info, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	at := time.Now()
	if err != nil {
		return redisCounters{}, fmt.Errorf("read redis counters: %w", err)
	}
	c, err := parseRedisCounters(info)
	c.at = at
	return c, err
}

// parseRedisCounters reads INFO cpu and INFO commandstats; a server that does not count its
// main thread's CPU is an error, not a zero.
func parseRedisCounters(info string) (redisCounters, error) {
	c := redisCounters{cmds: map[string]cmdStat{}}
	var user, sys bool
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return c, fmt.Errorf("read redis counters: %s %q: %w", k, v, err)
			}
			c.main += time.Duration(f * float64(time.Second))
			user, sys = user || k == "used_cpu_user_main_thread", sys || k == "used_cpu_sys_main_thread"
		case strings.HasPrefix(k, "cmdstat_"):
			var s cmdStat
			for _, kv := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(kv, "=")
				switch name {
				case "calls":
					s.Calls, _ = strconv.ParseInt(val, 10, 64)
				case "usec":
					s.Usec, _ = strconv.ParseInt(val, 10, 64)
				}
			}
			c.cmds[strings.ToLower(strings.TrimPrefix(k, "cmdstat_"))] = s
		}
	}
	if !user || !sys {
		return c, fmt.Errorf("read redis counters: INFO cpu has no used_cpu_user_main_thread and used_cpu_sys_main_thread")
	}
	return c, nil
}

// since is the work from a to b.
func (b redisCounters) since(a redisCounters) RedisWork {
	w := RedisWork{Wall: b.at.Sub(a.at), Main: b.main - a.main, Cmds: map[string]cmdStat{}}
	for name, s := range b.cmds {
		p := a.cmds[name]
		if d := (cmdStat{Calls: s.Calls - p.Calls, Usec: s.Usec - p.Usec}); d.Calls > 0 {
			w.Cmds[name] = d
		}
	}
	return w
}

// redisMeter measures Redis's work over an interval: start it, then call work.
type redisMeter struct {
	rdb   redis.UniversalClient
	start redisCounters
}

func startRedisMeter(ctx context.Context, rdb redis.UniversalClient) (*redisMeter, error) {
	c, err := readRedisCounters(ctx, rdb)
	if err != nil {
		return nil, err
	}
	return &redisMeter{rdb: rdb, start: c}, nil
}

// work is what Redis did since the meter started.
func (m *redisMeter) work(ctx context.Context) (RedisWork, error) {
	c, err := readRedisCounters(ctx, m.rdb)
	if err != nil {
		return RedisWork{}, err
	}
	return c.since(m.start), nil
}
