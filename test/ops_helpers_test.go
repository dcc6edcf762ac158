package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	redismeta "github.com/kvcm-gc/kvcm-gc/backends/meta/redis"
	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
)

// Helpers of the operations tests. Their names start with "ops" so they stay apart from the
// helpers of other test files in this package.

// opsSeed writes a small KVCM deployment and returns its manifest and a snapshot of Redis.
func opsSeed(t *testing.T, e *env, instances []string, blocks int, seedNo uint64) (*seed.Manifest, seed.Snapshot) {
	t.Helper()
	ctx := context.Background()
	m, err := seed.Generate(ctx, e.redis.Client(), seed.Spec{Cluster: cluster, Instances: instances, Blocks: blocks,
		GarbageFraction: 0.3, TrickyFraction: 0.1, Root: e.root, MetaURI: e.redis.URI(), Seed: seedNo})
	require.NoError(t, err)
	before, err := seed.Take(ctx, e.redis.Client(), "*")
	require.NoError(t, err)
	return m, before
}

// opsTarget points the operator's commands at the test servers: the configuration flags of
// the kvcm-gc command line.
type opsTarget struct{ flags []string }

// opsEnv is the operator commands' configuration for the test servers and the options o.
func opsEnv(t *testing.T, e *env, o app.Options) opsTarget {
	t.Helper()
	return opsTarget{flags: []string{"--cluster", cluster, "--subject_prefix", e.names.Prefix, "--nats.url", e.srv.ClientURL(),
		"--registry.uri", e.redis.URI(), "--storage.default_probe", o.Storage.DefaultProbe,
		"--scan_batch_size", strconv.Itoa(o.Prober.MaxTargets), "--orphan_writing_grace", o.Prober.OrphanWritingGrace.String()}}
}

// errOpsUsage: an operator's command refused its arguments (exit status 2).
var errOpsUsage = errors.New("usage error")

// opsCommand returns a runner of the kvcm-gc command line's operator command name, with its
// arguments, against the target: nil for exit status 0, errOpsUsage for 2, an error with the
// command's stderr for any other.
func opsCommand(name string) func(ctx context.Context, env opsTarget, args []string, stdout, stderr io.Writer) error {
	return func(_ context.Context, env opsTarget, args []string, stdout, stderr io.Writer) error {
		var errOut bytes.Buffer
		all := append(append([]string{name}, args...), env.flags...)
		switch code := cli.Main("kvcm-gc", cli.OperatorCommands(), all, stdout, io.MultiWriter(stderr, &errOut)); code {
		case cli.ExitOK:
			return nil
		case cli.ExitUsage:
			return fmt.Errorf("%w: %s", errOpsUsage, errOut.String())
		default:
			return fmt.Errorf("kvcm-gc %s: exit status %d: %s", name, code, errOut.String())
		}
	}
}

func opsReplaySetup(t *testing.T, e *env, o app.Options) ops.ReplaySetup {
	t.Helper()
	conn, err := redismeta.ParseURI(e.redis.URI())
	require.NoError(t, err)
	return ops.ReplaySetup{Cluster: cluster, Registry: conn, Meta: conn, Storage: o.Storage, Prober: o.Prober}
}

// streamNow returns stream name and its info, read now.
func streamNow(t *testing.T, js jetstream.JetStream, name string) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, name)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return s, info
}

// opsEvents returns the events of one kind, read one by one by sequence: fast on the small
// streams of these tests, where a batch fetch would wait out its timeout.
func opsEvents(t *testing.T, e *env, kind string) []subjects.Event {
	t.Helper()
	ctx := context.Background()
	s, info := streamNow(t, e.js, e.names.EventsStream())
	var out []subjects.Event
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(e.names.EventKindFilter(kind)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		require.NoError(t, err)
		ev, err := subjects.DecodeEvent(m.Data)
		require.NoError(t, err)
		out = append(out, ev.PerTarget()...) // a request's delete event: one per target
		seq = m.Sequence
	}
	return out
}

// opsConsumerNames lists every consumer of kvcm-gc's streams, durable or not.
func opsConsumerNames(t *testing.T, e *env) map[string]bool {
	t.Helper()
	ctx := context.Background()
	out := map[string]bool{}
	for _, stream := range []string{e.names.BatchesStream(), e.names.DeletesStream(), e.names.EventsStream()} {
		s, err := e.js.Stream(ctx, stream)
		require.NoError(t, err)
		l := s.ConsumerNames(ctx)
		for n := range l.Name() {
			out[stream+"/"+n] = true
		}
		require.NoError(t, l.Err())
	}
	return out
}

// opsConsumerInfo reads a durable consumer's info.
func opsConsumerInfo(t *testing.T, e *env, stream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := e.js.Consumer(context.Background(), stream, name)
	require.NoError(t, err)
	return c.CachedInfo()
}

// opsVerify compares Redis and the files with the snapshot taken after seeding.
func opsVerify(t *testing.T, e *env, before seed.Snapshot, m *seed.Manifest) seed.Report {
	t.Helper()
	r, err := seed.Verify(context.Background(), e.redis.Client(), before, m, "*")
	require.NoError(t, err)
	require.True(t, r.OK(), "verification: %+v", r)
	return r
}
