package cli

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// TestCountersCommand: on a seeded keyspace whose persisted counters are KVCM's, the repair
// finds nothing; after kvcm-gc's own deletes it shows the drift, refuses while a leader lock
// exists, applies the recount, records it, and the undo puts the old bytes back.
func TestCountersCommand(t *testing.T) {
	ctx := context.Background()
	rs := testenv.StartRedis(t)
	n := testenv.StartNATS(t)
	m, err := seed.Generate(ctx, rs.Client(), seed.Spec{Cluster: "c1", Instances: []string{"i1"}, Blocks: 200,
		GarbageFraction: 0.2, Root: t.TempDir(), MetaURI: rs.URI(), Seed: 5, Layout: kvcm.LayoutLocation})
	require.NoError(t, err)
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	require.NoError(t, subjects.Ensure(ctx, n.JetStream(t), names, subjects.DefaultSettings()))
	base := []string{"--cluster", "c1", "--registry.uri", rs.URI(), "--nats.url", n.URL()}
	counters := func(args ...string) (int, string, string) {
		return run(t, CountersCommand(), append(args, base...)...)
	}
	key := kvcm.MetadataKey("i1")
	hash := func() map[string]string {
		h, err := rs.Client().HGetAll(ctx, key).Result()
		require.NoError(t, err)
		return h
	}

	code, out, errOut := counters("repair", "--instance", "i1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "nothing to repair", "the seed persisted KVCM's own counters")

	// kvcm-gc removes every garbage location of type file (its CAS to DELETING, its CAD).
	st, err := redismeta.OpenStore(ctx, mustConn(t, rs.URI()), redismeta.StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	var cas, cad []meta.CondWrite
	var gone uint64
	for _, l := range m.Garbage() {
		if l.Layout != kvcm.LayoutLocation.String() {
			continue
		}
		raw, err := rs.Client().HGet(ctx, kvcm.BlockKey(l.Instance, l.Key), l.Field).Result()
		require.NoError(t, err)
		loc, err := kvcm.DecodeLocation(l.Location, []byte(raw))
		require.NoError(t, err)
		if loc.Type != kvcm.TypeFile {
			continue
		}
		gone += kvcm.UsageOf(&loc).Bytes
		next, err := kvcm.LocationWithStatus([]byte(raw), kvcm.StatusDeleting)
		require.NoError(t, err)
		cas = append(cas, meta.CondWrite{BlockKey: l.Key, Layout: kvcm.LayoutLocation, Location: l.Location, Expected: []byte(raw), Next: next})
		cad = append(cad, meta.CondWrite{BlockKey: l.Key, Layout: kvcm.LayoutLocation, Location: l.Location, Expected: next})
	}
	require.NotEmpty(t, cas)
	errs, err := st.CASMany(ctx, "i1", cas)
	require.NoError(t, err)
	require.NoError(t, errorsJoin(errs))
	res, err := st.CADMany(ctx, "i1", cad)
	require.NoError(t, err)
	require.NoError(t, errorsJoin(meta.Errs(res)))
	before := hash()

	code, out, errOut = counters("repair", "--instance", "i1")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, regexp.MustCompile(`(?m)^file +\d+ +\d+ +\+`+strconv.FormatUint(gone, 10)+` `), out)
	require.Equal(t, before, hash())

	lock := kvcm.LeaderLockKeys("c1")[0]
	require.NoError(t, rs.Client().Set(ctx, lock, "10.1.2.3:6382_x", 10*time.Second).Err())
	code, _, errOut = counters("repair", "--instance", "i1", "--apply", "--settle", "0s")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "10.1.2.3:6382_x")
	require.Equal(t, before, hash())
	require.NoError(t, rs.Client().Del(ctx, lock).Err())

	code, out, errOut = counters("repair", "--instance", "i1", "--apply", "--settle", "10ms")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "applied: 1 counters set to the recount")
	require.NotEqual(t, before, hash())
	code, out, _ = counters("repair", "--instance", "i1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "nothing to repair")

	code, out, errOut = counters("log", "--instance", "i1", "--json")
	require.Equal(t, 0, code, errOut)
	seqs := regexp.MustCompile(`"seq": (\d+)`).FindAllStringSubmatch(out, -1)
	require.Len(t, seqs, 2, out)
	code, _, errOut = counters("undo", "--instance", "i1", "--seq", seqs[1][1], "--apply", "--settle", "0s")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, before, hash())

	code, _, errOut = counters("repair")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "needs --instance")
	code, _, errOut = counters("repair", "--instance", "nobody")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not in the registry")
}

func mustConn(t *testing.T, uri string) redismeta.ConnOptions {
	c, err := redismeta.ParseURI(uri)
	require.NoError(t, err)
	return c
}

func errorsJoin(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
