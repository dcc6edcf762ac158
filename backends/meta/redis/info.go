package redismeta

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
)

// MainThreadCPU returns the CPU time Redis's main thread has used so far, as Redis counts it
// (INFO cpu: used_cpu_user_main_thread + used_cpu_sys_main_thread, getrusage of that thread).
// Every command, every read of a query and write of a reply runs on it, so its growth over
// an interval is how busy Redis was, whatever else runs on its host. A server that refuses
// INFO (a user without +info, a proxy that does not pass it on) or does not count its main
// thread gets meta.ErrInfoRefused.
func (s *Store) MainThreadCPU(ctx context.Context) (time.Duration, error) {
	info, err := s.c.Info(ctx, "cpu").Result()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return 0, fmt.Errorf("%w: INFO cpu: %w", meta.ErrInfoRefused, err)
		}
		return 0, fmt.Errorf("read INFO cpu: %w", err)
	}
	return parseMainThreadCPU(info)
}

// parseMainThreadCPU reads used_cpu_user_main_thread and used_cpu_sys_main_thread (seconds)
// from INFO's reply.
func parseMainThreadCPU(info string) (time.Duration, error) {
	var cpu time.Duration
	var seen int
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if !ok || (k != "used_cpu_user_main_thread" && k != "used_cpu_sys_main_thread") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("read INFO cpu: %s is %q, not a number of seconds", k, v)
		}
		cpu += time.Duration(f * float64(time.Second))
		seen++
	}
	if seen != 2 {
		return 0, fmt.Errorf("%w: INFO cpu has no used_cpu_user_main_thread and "+
			"used_cpu_sys_main_thread", meta.ErrInfoRefused)
	}
	return cpu, nil
}
