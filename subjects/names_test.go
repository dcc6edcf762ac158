package subjects_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

// awkwardIDs are instance ids that a naive subject builder would get wrong.
var awkwardIDs = []string{
	"inst1", "inst10", "a.b", "a b", "tab\there", "实例-1", "*", ">", "a.>", "[x]", "%", "%41",
	"", "_-", "x/y\\z", "new\nline", "\x00nul", "\xff\xfe", strings.Repeat("long", 100),
}

func mustNames(t *testing.T, prefix, cluster string) subjects.Names {
	t.Helper()
	n, err := subjects.NewNames(prefix, cluster)
	require.NoError(t, err)
	return n
}

func TestNewNamesValidation(t *testing.T) {
	for _, tc := range []struct {
		prefix, cluster string
		ok              bool
	}{
		{"kvcmgc", "c1", true},
		{"kvcm.gc", "c1", true},
		{"a_b-c.D9", "any cluster . * >", true},
		{"", "c1", false},
		{"kvcmgc.", "c1", false},
		{".kvcmgc", "c1", false},
		{"kv..gc", "c1", false},
		{"kv*gc", "c1", false},
		{"kv>", "c1", false},
		{"kv gc", "c1", false},
		{"kvcmgc", "", false},
	} {
		_, err := subjects.NewNames(tc.prefix, tc.cluster)
		if tc.ok {
			require.NoError(t, err, "%q %q", tc.prefix, tc.cluster)
		} else {
			require.ErrorIs(t, err, subjects.ErrBadNames, "%q %q", tc.prefix, tc.cluster)
		}
	}
}

func TestSubjectsRoundTrip(t *testing.T) {
	tokenRe := regexp.MustCompile(`^[A-Za-z0-9_%-]+$`)
	for _, cluster := range []string{"c1", "a.b c", "集群", "*"} {
		n := mustNames(t, "kvcm.gc", cluster)
		seen := map[string]string{}
		for _, id := range awkwardIDs {
			for _, subj := range []string{
				n.BatchSubject(id), n.DeleteSubject(id),
				n.EventSubject(subjects.EventDelete, id), n.EventSubject("odd.kind*", id),
			} {
				toks := strings.Split(subj, ".")
				require.Equal(t, "kvcm", toks[0])
				require.Equal(t, "gc", toks[1])
				for _, tok := range toks[2:] {
					require.Regexp(t, tokenRe, tok, "subject %q", subj)
				}
				got, err := n.InstanceOf(subj)
				require.NoError(t, err, "subject %q", subj)
				require.Equal(t, id, got, "subject %q", subj)
				if prev, dup := seen[subj]; dup {
					t.Fatalf("ids %q and %q share subject %q", prev, id, subj)
				}
				seen[subj] = id
			}
		}
	}
}

func TestSubjectShapes(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	require.Equal(t, "kvcmgc.c1.batch.inst-1", n.BatchSubject("inst-1"))
	require.Equal(t, "kvcmgc.c1.delete.a%2Eb", n.DeleteSubject("a.b"))
	require.Equal(t, "kvcmgc.c1.event.round.%", n.EventSubject(subjects.EventRound, ""))
	require.Equal(t, "kvcmgc.c1.batch.*", n.BatchFilter())
	require.Equal(t, "kvcmgc.c1.delete.*", n.DeleteFilter())
	require.Equal(t, "kvcmgc.c1.event.>", n.EventFilter())
	require.Equal(t, "kvcmgc.c1.event.skip.*", n.EventKindFilter(subjects.EventSkip))
	require.Equal(t, "KVCMGC_kvcmgc_c1_BATCHES", n.BatchesStream())
	require.Equal(t, "KVCMGC_kvcmgc_c1_DELETES", n.DeletesStream())
	require.Equal(t, "KVCMGC_kvcmgc_c1_EVENTS", n.EventsStream())
	require.Equal(t, "KVCMGC_kvcmgc_c1_STATE", n.StateBucket())
	require.Equal(t, "KVCMGC_kvcmgc_c1_LEASE", n.LeaseBucket())
	require.Equal(t, "prober", n.ProberConsumer())
	require.Equal(t, "deleter", n.DeleterConsumer())

	ok := mustNames(t, "kvcmgc", "prod-a")
	require.Equal(t, "KVCMGC_kvcmgc_prod-a_BATCHES", ok.BatchesStream())
	hashed := mustNames(t, "kvcm.gc", "Prod_A")
	require.Regexp(t, `^KVCMGC_kvcm-gc--[0-9a-f]{12}_Prod-A--[0-9a-f]{12}_BATCHES$`, hashed.BatchesStream())
}

func TestInstanceOfRejects(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	for _, subj := range []string{
		"", "kvcmgc", "kvcmgc.c1", "kvcmgc.c2.batch.x", "other.c1.batch.x",
		"kvcmgc.c1.batch", "kvcmgc.c1.batch.", "kvcmgc.c1.batch.a.b", "kvcmgc.c1.scan.x",
		"kvcmgc.c1.batch.a%2e", "kvcmgc.c1.batch.%41", "kvcmgc.c1.batch.a%",
		"kvcmgc.c1.event.x", "kvcmgc.c1.event..x", "kvcmgc.c1.event.k%zz.x", "kvcmgc.c1.batch.*",
	} {
		_, err := n.InstanceOf(subj)
		require.Error(t, err, "subject %q", subj)
	}
}

// TestObjectNamesDistinct checks that distinct (prefix, cluster) pairs never share a stream or
// bucket name, and that every name is valid for the server and safe as a file name.
func TestObjectNamesDistinct(t *testing.T) {
	prefixes := []string{"kvcmgc", "kvcm.gc", "kvcm_gc", "kvcm-gc", "KVCMGC", "a", "a.b", "a_b"}
	clusters := []string{
		"c1", "C1", "c-1", "c_1", "c.1", "c 1", "c--1", "c-", "-c", "集群", "a_b", "b",
		"x" + strings.Repeat("y", 31), "x" + strings.Repeat("y", 32), "x" + strings.Repeat("y", 300),
		"c1--0123456789ab", "%", "*", ">",
	}
	nameRe := regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	seen := map[string]string{}
	for _, p := range prefixes {
		for _, c := range clusters {
			n := mustNames(t, p, c)
			for _, name := range []string{n.BatchesStream(), n.DeletesStream(), n.EventsStream(), n.StateBucket(), n.LeaseBucket()} {
				require.Regexp(t, nameRe, name)
				require.LessOrEqual(t, len(name), 120, name)
				key := strings.ToLower(name) // case-insensitive file systems
				if prev, dup := seen[key]; dup {
					t.Fatalf("%q and %q/%q share object name %q", prev, p, c, name)
				}
				seen[key] = p + "/" + c
			}
		}
	}
}

// TestPrefixSharingInstances publishes to inst1 and inst10 and checks a consumer filtered on
// inst1's subject receives only inst1's message.
func TestPrefixSharingInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := testenv.StartNATS(t).JetStream(t)
	n := mustNames(t, "kvcmgc", "c1")
	require.NoError(t, subjects.Ensure(ctx, js, n, subjects.DefaultSettings()))

	require.NotEqual(t, n.BatchSubject("inst1"), n.BatchSubject("inst10"))
	for _, id := range []string{"inst10", "inst1", "inst1.0", "inst1*"} {
		_, err := js.Publish(ctx, n.BatchSubject(id), []byte(id))
		require.NoError(t, err)
	}
	c, err := js.OrderedConsumer(ctx, n.BatchesStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{n.BatchSubject("inst1")},
	})
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.NumPending)
	msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, "inst1", string(msg.Data()))
	got, err := n.InstanceOf(msg.Subject())
	require.NoError(t, err)
	require.Equal(t, "inst1", got)
}
