package demo

import (
	"context"
	"fmt"
	"io"
	"strings"

	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// countersRepair shows, per instance, the drift of KVCM's counters the demo's deletes left
// (persisted minus a recount: the seed persisted counters matching its keyspace), then
// repairs them as `kvcm-gc counters repair --apply` would and shows the drift left. The demo
// runs no KVCM, so no leader lock exists and nothing writes the hash; the repair's counters
// events are kept in memory (the demo's NATS is gone by now) and counted.
func countersRepair(ctx context.Context, w io.Writer, redisURI string, instances []string) error {
	c, err := redismeta.ParseURI(redisURI)
	if err != nil {
		return err
	}
	st, err := redismeta.OpenStore(ctx, c, redismeta.StoreOptions{})
	if err != nil {
		return err
	}
	defer st.Close()
	var events int
	deps := ops.CountersDeps{Store: st, Publish: func(context.Context, subjects.Event) error { events++; return nil }}
	fmt.Fprintln(w, "\nKVCM's counters (persisted - recount), before and after counters repair --apply:")
	for _, inst := range instances {
		cfg := ops.CountersConfig{Cluster: Cluster, Instance: inst, LockKeys: kvcm.LeaderLockKeys(Cluster), Apply: true}
		before, err := ops.RepairCounters(ctx, cfg, deps)
		if err != nil {
			fmt.Fprintf(w, "  %-8s before %s; repair not applied: %v\n", inst, driftLine(before), err)
			continue
		}
		cfg.Apply = false
		after, err := ops.RepairCounters(ctx, cfg, deps)
		if err != nil {
			return fmt.Errorf("recount %s after the repair: %w", inst, err)
		}
		fmt.Fprintf(w, "  %-8s before %s; after %s\n", inst, driftLine(before), driftLine(after))
	}
	fmt.Fprintf(w, "  (%d counters events recorded)\n", events)
	return nil
}

// driftLine lists a repair report's non-zero drifts ("none" when every counter agrees).
func driftLine(r *ops.CountersReport) string {
	if r == nil {
		return "unknown"
	}
	var parts []string
	for _, row := range r.Rows {
		if row.Drift != nil && *row.Drift != 0 {
			unit := " B"
			if row.Counter == "keys" {
				unit = ""
			}
			parts = append(parts, fmt.Sprintf("%s %+d%s", row.Counter, *row.Drift, unit))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
