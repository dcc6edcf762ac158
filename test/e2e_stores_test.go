package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/testenv"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// TestE2EScannersShareStores: three metadata stores (a redis-server each), two scanner
// processes. Both walk at once, each its own stores; one is killed with SIGKILL mid-walk; the
// survivor takes its stores and resumes each from its checkpoint. In round 1 every key of every
// store is batched, each store's fencing revision never goes back in stream order, and no page
// is published by two holders but the one page the dead holder had not recorded yet. The
// duplicate window is short, so a page published twice stays visible in the stream.
func TestE2EScannersShareStores(t *testing.T) {
	bins := e2eBuild(t)
	ctx := context.Background()
	ms := seedStores(t, e2eCluster, 3, 2, 600, filepath.Join(t.TempDir(), "data"))
	e := &e2eEnv{t: t, bins: bins, nats: testenv.StartNATS(t)}
	e.js = e.nats.JetStream(t)
	var err error
	e.names, err = subjects.NewNames("kvcmgc", e2eCluster)
	require.NoError(t, err)
	e.config = filepath.Join(t.TempDir(), "kvcm-gc.yaml")
	require.NoError(t, os.WriteFile(e.config, []byte(fmt.Sprintf(`
cluster: %s
registry:
  uri: %s
nats:
  url: %s
scan_interval: 10ms
max_keys_per_second: 500
round_pause: 1h
scan_batch_size: 32
backpressure_high_water: 1000000
jetstream:
  lease_ttl: 2s
  duplicate_window: 100ms
http:
  listen: 127.0.0.1:0
log:
  format: json
`, e2eCluster, ms.registry.URI(), e.nats.URL())), 0o600))

	scanners := []*e2eProc{e.start("scanner-a", "scanner"), e.start("scanner-b", "kvcm-gc", "scanner")}
	lease, state := e.buckets(t)
	// Both replicas are present before the stores appear, so they divide them at once.
	require.Eventually(t, func() bool {
		m, err := pipeline.ReadMembers(ctx, lease)
		return err == nil && len(m) == 2
	}, 30*time.Second, 10*time.Millisecond, "the scanners never registered")
	ms.register(t)

	pidOf := func(holder string) int {
		i := strings.LastIndexByte(holder, '/')
		pid, err := strconv.Atoi(holder[i+1:])
		require.NoError(t, err, holder)
		return pid
	}
	procOf := map[int]*e2eProc{}
	for _, p := range scanners {
		procOf[p.cmd.Process.Pid] = p
	}

	// Both scan at once: each holds a store whose walk has read pages.
	var leases []pipeline.StoreLease
	require.Eventually(t, func() bool {
		leases, err = pipeline.ReadLeases(ctx, lease)
		if err != nil || len(leases) != 3 {
			return false
		}
		walking := map[string]bool{}
		for _, l := range leases {
			c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, l.Store)
			if err == nil && c.InRound && c.KeysScanned > 0 {
				walking[l.Record.Holder] = true
			}
		}
		return len(walking) == 2
	}, time.Minute, 10*time.Millisecond, "the two scanners do not walk at once")
	byHolder := map[string][]string{}
	for _, l := range leases {
		byHolder[l.Record.Holder] = append(byHolder[l.Record.Holder], l.Store)
	}
	t.Logf("stores by holder: %v", byHolder)

	// Kill the holder of the most stores, mid-walk.
	var victim, survivor string
	for h := range byHolder {
		if victim == "" || len(byHolder[h]) > len(byHolder[victim]) {
			victim = h
		}
	}
	for h := range byHolder {
		if h != victim {
			survivor = h
		}
	}
	// Well into its walks: a quarter of each of its stores read, none done.
	require.Eventually(t, func() bool {
		for _, st := range byHolder[victim] {
			c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, st)
			if err != nil || c.KeysScanned < 300 {
				return false
			}
		}
		return true
	}, time.Minute, 5*time.Millisecond, "the walks to be under way")
	walking := e.status(t)
	t.Logf("kvcm-gc status while both walk:\n%s", walking)
	// Several stores: the summary counts leases and stores done (the victim's are not), the
	// STORES table has the positions.
	require.Regexp(t, `leases +[1-3] of 3 stores held by [12] replicas \(STORES below\)`, walking)
	require.Regexp(t, `round +1 in progress: [0-2] of 3 stores done, \d+ instances`, walking)
	procOf[pidOf(victim)].kill(t)
	at := map[string]pipeline.Checkpoint{} // the dead holder's last checkpoint of each store
	for _, st := range byHolder[victim] {
		c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, st)
		require.NoError(t, err)
		require.Equal(t, victim, c.Holder)
		require.True(t, c.InRound, "killed mid-walk")
		at[st] = c
	}
	for st, c := range at {
		t.Logf("killed %s on %s in round %d at cursor %d, %d keys", victim, st, c.Round, c.Cursor, c.KeysScanned)
	}

	// The survivor takes every store and ends round 1 of each.
	require.Eventually(t, func() bool {
		cks, err := pipeline.ReadCheckpoints(ctx, state)
		if err != nil || len(cks) != 3 {
			return false
		}
		for _, c := range cks {
			if c.Round < 1 || (c.Round == 1 && c.InRound) {
				return false
			}
		}
		return true
	}, 2*time.Minute, 20*time.Millisecond, "round 1 not done on every store")
	leases, err = pipeline.ReadLeases(ctx, lease)
	require.NoError(t, err)
	require.Len(t, leases, 3)
	for _, l := range leases {
		require.Equal(t, survivor, l.Record.Holder, l.Store)
	}
	for st, k := range at {
		c, _, err := pipeline.ReadStoreCheckpoint(ctx, state, st)
		require.NoError(t, err)
		require.Equal(t, k.Round, c.Round, "%s: resumed in the same round, not a new one", st)
		require.GreaterOrEqual(t, c.LastRoundKeys, k.KeysScanned, "%s: resumed from the checkpoint's count", st)
	}

	pages := readPages(t, e.js, e.names)
	for i := range ms.stores {
		name := ms.storeName(i)
		ps := pages[name]
		require.NotEmpty(t, ps, name)
		// Fencing: the revision of a store's batches never goes back in stream order.
		for j := 1; j < len(ps); j++ {
			require.GreaterOrEqual(t, ps[j].LeaseRev, ps[j-1].LeaseRev, "%s: batch %d", name, j)
		}
		// Every key of the store is batched in round 1.
		got := map[string]bool{}
		for _, p := range ps {
			if p.Round == 1 {
				for _, k := range p.keys {
					got[k] = true
				}
			}
		}
		for k := range ms.blockKeys(i) {
			require.True(t, got[k], "%s: %s never batched in round 1", name, k)
		}
		// No page published by two holders, but the page after the dead holder's checkpoint.
		k, killed := at[name]
		holders := map[string]map[uint64]bool{}
		for _, p := range ps {
			id := fmt.Sprintf("%d/%d/%s/%d", p.Round, p.Cursor, p.Instance, p.Part)
			if holders[id] == nil {
				holders[id] = map[uint64]bool{}
			}
			holders[id][p.LeaseRev] = true
		}
		for id, revs := range holders {
			if len(revs) == 1 {
				continue
			}
			require.True(t, killed, "%s: page %s published under revisions %v", name, id, revs)
			require.Len(t, revs, 2, "%s: page %s", name, id)
			require.True(t, strings.HasPrefix(id, fmt.Sprintf("%d/%d/", k.Round, k.Cursor)),
				"%s: page %s published by both holders, past the checkpoint (round %d, cursor %d)", name, id, k.Round, k.Cursor)
		}
	}

	// status lists every store with its holder.
	rep, err := ops.Status(ctx, e.js, e.names)
	require.NoError(t, err)
	require.Len(t, rep.Scanner.Stores, 3)
	for _, st := range rep.Scanner.Stores {
		require.Equal(t, survivor, st.Holder)
		require.Equal(t, "round_pause", st.State)
		require.True(t, st.InRegistry)
	}
	out := e.status(t)
	for i := range ms.stores {
		require.Contains(t, out, ms.storeName(i))
	}
	t.Logf("kvcm-gc status after the failover:\n%s", out)

	procOf[pidOf(survivor)].stop(t)
	leases, err = pipeline.ReadLeases(ctx, lease)
	require.NoError(t, err)
	require.Empty(t, leases, "the survivor released its leases on SIGTERM")
}

// status runs `kvcm-gc status` with the deployment's configuration.
func (e *e2eEnv) status(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(e.bins, "kvcm-gc"), "status", "--config", e.config).Output()
	require.NoError(t, err, "kvcm-gc status: %s", out)
	return string(out)
}

func (e *e2eEnv) buckets(t *testing.T) (lease, state jetstream.KeyValue) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var err1, err2 error
		lease, err1 = e.js.KeyValue(ctx, e.names.LeaseBucket())
		state, err2 = e.js.KeyValue(ctx, e.names.StateBucket())
		return err1 == nil && err2 == nil
	}, 30*time.Second, 10*time.Millisecond, "the scanners never created their buckets")
	return lease, state
}

// pageMsg is one batch message of the BATCHES stream, in stream order.
type pageMsg struct {
	subjects.Batch
	keys []string // "instance/key" of its blocks
}

// readPages reads every batch of the BATCHES stream, by store, in stream order.
func readPages(t *testing.T, js jetstream.JetStream, names subjects.Names) map[string][]pageMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, names.BatchesStream())
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	out := map[string][]pageMsg{}
	for n := uint64(0); n < info.State.Msgs; {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		got := 0
		for msg := range batch.Messages() {
			got++
			b, err := subjects.DecodeBatch(msg.Data())
			require.NoError(t, err)
			p := pageMsg{Batch: b}
			for _, blk := range b.Blocks {
				p.keys = append(p.keys, b.Instance+"/"+strconv.FormatInt(blk.Key, 10))
			}
			p.Blocks = nil
			out[b.Store] = append(out[b.Store], p)
		}
		require.NotZero(t, got, "the stream stalled at %d of %d", n, info.State.Msgs)
		n += uint64(got)
	}
	return out
}
