package subjects_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestDefaultSettings(t *testing.T) {
	s := subjects.DefaultSettings()
	require.NoError(t, s.Validate())
	require.Equal(t, subjects.Settings{
		Replicas:             1,
		MaxAge:               72 * time.Hour,
		EventsMaxAge:         7 * 24 * time.Hour,
		MaxBytes:             subjects.DefaultMaxBytes,
		Duplicates:           2 * time.Minute,
		Storage:              jetstream.FileStorage,
		ProberAckWait:        60 * time.Second,
		ProberMaxAckPending:  64,
		DeleterAckWait:       60 * time.Second,
		DeleterMaxAckPending: 2,
		MaxDeliver:           10,
		LeaseTTL:             15 * time.Second,
		APITimeout:           2 * time.Second,
		SweeperAckWait:       60 * time.Second,
		SweeperMaxAckPending: 2,
	}, s)
}

func TestSettingsValidate(t *testing.T) {
	// Each mistake is refused under the key at fault, as the configuration names it.
	for _, tt := range []struct {
		key string
		mut func(*subjects.Settings)
	}{
		{"jetstream.replicas", func(s *subjects.Settings) { s.Replicas = 0 }},
		{"jetstream.replicas", func(s *subjects.Settings) { s.Replicas = 6 }},
		{"jetstream.max_age", func(s *subjects.Settings) { s.MaxAge = time.Millisecond }},
		{"jetstream.duplicate_window", func(s *subjects.Settings) { s.MaxAge = time.Minute }},
		{"jetstream.duplicate_window", func(s *subjects.Settings) { s.EventsMaxAge = time.Minute }},
		{"jetstream.max_bytes", func(s *subjects.Settings) { s.MaxBytes = 0 }},
		{"jetstream.duplicate_window", func(s *subjects.Settings) { s.Duplicates = 0 }},
		{"storage type", func(s *subjects.Settings) { s.Storage = 7 }},
		{"jetstream.deleter_ack_wait", func(s *subjects.Settings) { s.DeleterAckWait = 0 }},
		{"max_inflight_delete_requests", func(s *subjects.Settings) { s.DeleterMaxAckPending = 0 }},
		{"jetstream.max_deliver", func(s *subjects.Settings) { s.MaxDeliver = 0 }},
		{"jetstream.lease_ttl", func(s *subjects.Settings) { s.LeaseTTL = 0 }},
		{"jetstream.api_timeout", func(s *subjects.Settings) { s.APITimeout = 0 }},
		{"jetstream.sweeper_ack_wait", func(s *subjects.Settings) { s.SweeperAckWait = 0 }},
		{"max_inflight_sweep_batches", func(s *subjects.Settings) { s.SweeperMaxAckPending = 0 }},
	} {
		s := subjects.DefaultSettings()
		tt.mut(&s)
		require.ErrorContains(t, s.Validate(), tt.key)
	}
	s := subjects.DefaultSettings()
	s.MaxAge, s.EventsMaxAge = 0, 0 // unlimited
	require.NoError(t, s.Validate())
}

func TestTopology(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	s := subjects.DefaultSettings()
	top := n.Topology(s)
	require.Len(t, top.Streams, 4)
	for _, sc := range top.Streams {
		require.Equal(t, jetstream.LimitsPolicy, sc.Retention, sc.Name)
		require.Equal(t, jetstream.DiscardOld, sc.Discard, sc.Name)
		require.True(t, sc.AllowDirect, sc.Name)
		require.Equal(t, s.Duplicates, sc.Duplicates, sc.Name)
	}
	require.Equal(t, []string{n.BatchFilter()}, top.Streams[0].Subjects)
	require.Equal(t, []string{n.DeleteFilter()}, top.Streams[1].Subjects)
	require.Equal(t, []string{n.EventFilter()}, top.Streams[2].Subjects)
	require.Equal(t, []string{n.SweepFilter()}, top.Streams[3].Subjects)
	require.Equal(t, s.EventsMaxAge, top.Streams[2].MaxAge)
	require.Equal(t, s.MaxAge, top.Streams[3].MaxAge)
	require.Equal(t, n.BatchFilter(), top.Consumers[n.BatchesStream()].FilterSubject)
	require.Equal(t, n.DeleteFilter(), top.Consumers[n.DeletesStream()].FilterSubject)
	sw := top.Consumers[n.SweepStream()]
	require.Equal(t, n.SweepFilter(), sw.FilterSubject)
	require.Equal(t, "sweeper", sw.Durable)
	require.Equal(t, s.SweeperMaxAckPending, sw.MaxAckPending, "the sweeps in flight across all sweepers")
	require.Equal(t, s.SweeperAckWait, sw.AckWait)
	require.Len(t, top.Buckets, 3)
	require.Equal(t, s.LeaseTTL, top.Buckets[1].TTL)
	require.Equal(t, n.ObservedBucket(), top.Buckets[2].Bucket)
	require.Positive(t, top.Buckets[2].LimitMarkerTTL, "keys of the observations carry their own TTL")
}

func TestEnsure(t *testing.T) {
	ctx := testCtx(t)
	js := testenv.StartNATS(t).JetStream(t)
	n := mustNames(t, "kvcmgc", "c1")
	s := subjects.DefaultSettings()
	s.ProberMaxAckPending, s.DeleterMaxAckPending, s.MaxDeliver = 7, 3, 5
	s.ProberAckWait, s.DeleterAckWait = 45*time.Second, 90*time.Second
	require.NoError(t, subjects.Ensure(ctx, js, n, s))

	for _, name := range []string{n.BatchesStream(), n.DeletesStream(), n.EventsStream()} {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		require.Equal(t, jetstream.LimitsPolicy, cfg.Retention, name)
		require.Equal(t, jetstream.FileStorage, cfg.Storage, name)
		require.Equal(t, 2*time.Minute, cfg.Duplicates, name)
		require.True(t, cfg.AllowDirect, name)
	}
	for stream, want := range map[string]struct {
		name, filter  string
		maxAckPending int
		ackWait       time.Duration
	}{
		n.BatchesStream(): {"prober", n.BatchFilter(), 7, 45 * time.Second},
		n.DeletesStream(): {"deleter", n.DeleteFilter(), 3, 90 * time.Second},
	} {
		c, err := js.Consumer(ctx, stream, want.name)
		require.NoError(t, err)
		info, err := c.Info(ctx)
		require.NoError(t, err)
		cfg := info.Config
		require.Equal(t, want.name, cfg.Durable)
		require.Equal(t, want.filter, cfg.FilterSubject)
		require.Equal(t, want.maxAckPending, cfg.MaxAckPending)
		require.Equal(t, want.ackWait, cfg.AckWait)
		require.Equal(t, 5, cfg.MaxDeliver)
		require.Equal(t, jetstream.AckExplicitPolicy, cfg.AckPolicy)
		require.Equal(t, jetstream.DeliverAllPolicy, cfg.DeliverPolicy)
		require.NotEmpty(t, cfg.Description)
	}
	lease, err := js.KeyValue(ctx, n.LeaseBucket())
	require.NoError(t, err)
	st, err := lease.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, st.TTL())
	require.Equal(t, int64(1), st.History())
	state, err := js.KeyValue(ctx, n.StateBucket())
	require.NoError(t, err)
	st, err = state.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, time.Duration(0), st.TTL())
}

// TestEnsureIdempotent runs Ensure twice and checks nothing was recreated or reset: the
// consumer keeps its delivered position and the streams their messages.
func TestEnsureIdempotent(t *testing.T) {
	ctx := testCtx(t)
	s := subjects.DefaultSettings()
	js, n := testenv.Topology(t, s)

	_, err := js.Publish(ctx, n.BatchSubject("i"), []byte("x"))
	require.NoError(t, err)
	c, err := js.Consumer(ctx, n.BatchesStream(), n.ProberConsumer())
	require.NoError(t, err)
	msgs, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for m := range msgs.Messages() {
		require.NoError(t, m.DoubleAck(ctx))
	}
	before, err := c.Info(ctx)
	require.NoError(t, err)
	stBefore, err := js.Stream(ctx, n.BatchesStream())
	require.NoError(t, err)

	require.NoError(t, subjects.Ensure(ctx, js, n, s))

	after, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, before.Created, after.Created)
	require.Equal(t, before.Config, after.Config)
	require.Equal(t, uint64(1), after.AckFloor.Stream)
	stAfter, err := js.Stream(ctx, n.BatchesStream())
	require.NoError(t, err)
	require.Equal(t, stBefore.CachedInfo().Created, stAfter.CachedInfo().Created)
	require.Equal(t, stBefore.CachedInfo().Config, stAfter.CachedInfo().Config)
	require.Equal(t, uint64(1), stAfter.CachedInfo().State.Msgs)

	// Changed settings are applied to the existing objects.
	s.DeleterMaxAckPending, s.MaxAge = 5, 24*time.Hour
	require.NoError(t, subjects.Ensure(ctx, js, n, s))
	dc, err := js.Consumer(ctx, n.DeletesStream(), n.DeleterConsumer())
	require.NoError(t, err)
	require.Equal(t, 5, dc.CachedInfo().Config.MaxAckPending)
	st, err := js.Stream(ctx, n.DeletesStream())
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, st.CachedInfo().Config.MaxAge)
}

func TestEnsureConflicts(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	for _, tc := range []struct {
		name    string
		prepare conflictSetup
		object  string
		fields  []string
	}{
		{
			name: "work-queue stream",
			prepare: createStream(jetstream.StreamConfig{
				Name: n.BatchesStream(), Subjects: []string{n.BatchFilter()}, Retention: jetstream.WorkQueuePolicy,
			}),
			object: `stream "` + n.BatchesStream() + `"`,
			fields: []string{"retention: have WorkQueue, want Limits"},
		},
		{
			name: "memory stream",
			prepare: createStream(jetstream.StreamConfig{
				Name: n.DeletesStream(), Subjects: []string{n.DeleteFilter()}, Storage: jetstream.MemoryStorage,
			}),
			object: `stream "` + n.DeletesStream() + `"`,
			fields: []string{"storage: have Memory, want File"},
		},
		{
			name:    "subjects taken by another stream",
			prepare: createStream(jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"kvcmgc.>"}}),
			object:  `stream "` + n.BatchesStream() + `"`,
			fields:  []string{`overlaps stream "OTHER"`},
		},
		{
			name: "consumer with another deliver policy",
			prepare: replaceConsumer(n, n.DeletesStream(), jetstream.ConsumerConfig{
				Durable: "deleter", DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckExplicitPolicy,
				FilterSubject: n.DeleteFilter() + ".x",
			}),
			object: `consumer "` + n.DeletesStream() + `/deleter"`,
			fields: []string{"deliver_policy: have new, want all", "filter_subject: have"},
		},
		{
			name: "consumer with ack none",
			prepare: replaceConsumer(n, n.BatchesStream(), jetstream.ConsumerConfig{
				Durable: "prober", AckPolicy: jetstream.AckNonePolicy,
			}),
			object: `consumer "` + n.BatchesStream() + `/prober"`,
			fields: []string{"ack_policy: have AckNone, want AckExplicit"},
		},
		{
			name: "bucket in memory",
			prepare: func(ctx context.Context, t *testing.T, js jetstream.JetStream) {
				_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: n.StateBucket(), Storage: jetstream.MemoryStorage})
				require.NoError(t, err)
			},
			object: `bucket "` + n.StateBucket() + `"`,
			fields: []string{"storage: have Memory, want File"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			js := testenv.StartNATS(t).JetStream(t)
			tc.prepare(ctx, t, js)
			err := subjects.Ensure(ctx, js, n, subjects.DefaultSettings())
			require.Error(t, err)
			var ce *subjects.ConflictError
			require.True(t, errors.As(err, &ce), "%v", err)
			require.Contains(t, err.Error(), tc.object)
			for _, f := range tc.fields {
				require.Contains(t, err.Error(), f)
			}
			var api *jetstream.APIError
			require.True(t, errors.As(err, &api), "the server's answer is kept: %v", err)
			t.Log(err)
		})
	}
}

// A conflictSetup puts something in the way of Ensure.
type conflictSetup func(ctx context.Context, t *testing.T, js jetstream.JetStream)

// createStream creates the stream cfg.
func createStream(cfg jetstream.StreamConfig) conflictSetup {
	return func(ctx context.Context, t *testing.T, js jetstream.JetStream) {
		_, err := js.CreateStream(ctx, cfg)
		require.NoError(t, err)
	}
}

// replaceConsumer ensures n's topology, then replaces stream's durable consumer
// cfg.Durable with cfg.
func replaceConsumer(n subjects.Names, stream string, cfg jetstream.ConsumerConfig) conflictSetup {
	return func(ctx context.Context, t *testing.T, js jetstream.JetStream) {
		require.NoError(t, subjects.Ensure(ctx, js, n, subjects.DefaultSettings()))
		require.NoError(t, js.DeleteConsumer(ctx, stream, cfg.Durable))
		_, err := js.CreateConsumer(ctx, stream, cfg)
		require.NoError(t, err)
	}
}

func TestEnsureRejectsBadInput(t *testing.T) {
	ctx := testCtx(t)
	js := testenv.StartNATS(t).JetStream(t)
	require.ErrorIs(t, subjects.Ensure(ctx, js, subjects.Names{Prefix: "a b", Cluster: "c"}, subjects.DefaultSettings()), subjects.ErrBadNames)
	s := subjects.DefaultSettings()
	s.MaxDeliver = 0
	require.ErrorContains(t, subjects.Ensure(ctx, js, mustNames(t, "a", "c"), s), "jetstream.max_deliver")
}

// TestEnsureSurvivesRestart checks the topology is kept by the file store and a second Ensure
// after a server restart changes nothing.
func TestEnsureSurvivesRestart(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartNATS(t)
	js := srv.JetStream(t)
	n := mustNames(t, "kvcmgc", "c1")
	require.NoError(t, subjects.Ensure(ctx, js, n, subjects.DefaultSettings()))
	_, err := js.Publish(ctx, n.DeleteSubject("i"), []byte("x"))
	require.NoError(t, err)

	srv.Restart(t)
	js = srv.JetStream(t)
	require.NoError(t, subjects.Ensure(ctx, js, n, subjects.DefaultSettings()))
	st, err := js.Stream(ctx, n.DeletesStream())
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.CachedInfo().State.Msgs)
	c, err := js.Consumer(ctx, n.DeletesStream(), n.DeleterConsumer())
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.CachedInfo().NumPending)
}

// TestEnsureConcurrent starts several processes' worth of Ensure at once on a fresh server, as
// replicas of every stage do when a deployment starts.
func TestEnsureConcurrent(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartNATS(t)
	n := mustNames(t, "kvcmgc", "c1")
	errs := make(chan error, 6)
	for range cap(errs) {
		js := srv.JetStream(t)
		go func() { errs <- subjects.Ensure(ctx, js, n, subjects.DefaultSettings()) }()
	}
	for range cap(errs) {
		require.NoError(t, <-errs)
	}
	js := srv.JetStream(t)
	names := js.StreamNames(ctx)
	var got []string
	for name := range names.Name() {
		got = append(got, name)
	}
	require.NoError(t, names.Err())
	require.ElementsMatch(t, n.Streams(), got)
}

// flakyJS answers the first fails requests of Ensure's kinds with the given error (or, for
// errHang, waits for the request's context to end) and passes the rest to a real server.
type flakyJS struct {
	jetstream.JetStream
	mu    sync.Mutex
	fails int
	err   error
	calls int
}

// errHang makes flakyJS wait for the request's deadline: a request no leader answers.
var errHang = errors.New("hang")

func (f *flakyJS) fail(ctx context.Context) error {
	f.mu.Lock()
	f.calls++
	fail := f.calls <= f.fails
	f.mu.Unlock()
	if !fail {
		return nil
	}
	if f.err == errHang {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.err
}

func (f *flakyJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if err := f.fail(ctx); err != nil {
		return nil, err
	}
	return f.JetStream.Stream(ctx, name)
}

func (f *flakyJS) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := f.fail(ctx); err != nil {
		return nil, err
	}
	return f.JetStream.CreateStream(ctx, cfg)
}

func (f *flakyJS) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if err := f.fail(ctx); err != nil {
		return nil, err
	}
	return f.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
}

func (f *flakyJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if err := f.fail(ctx); err != nil {
		return nil, err
	}
	return f.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
}

// TestEnsureRetriesTransient: requests that time out, get no answer, or are told the system
// is temporarily unavailable are retried until the topology is there, each retry logged.
func TestEnsureRetriesTransient(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	fast := subjects.WithEnsureRetry(backoff.New(time.Millisecond, 10*time.Millisecond))
	for name, err := range map[string]error{
		"deadline":    context.DeadlineExceeded,
		"no answer":   errHang,
		"timeout":     nats.ErrTimeout,
		"unavailable": &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		"no leader":   &jetstream.APIError{Code: 500, ErrorCode: 10009, Description: "JetStream cluster can not handle request"},
		"no peers":    &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			js := &flakyJS{JetStream: testenv.StartNATS(t).JetStream(t), fails: 4, err: err}
			log := &testenv.Messages{}
			require.NoError(t, subjects.Ensure(ctx, js, n, subjects.DefaultSettings(), fast,
				subjects.WithCallTimeout(300*time.Millisecond), subjects.WithEnsureLogger(slog.New(log))))
			// One line per retried attempt (a slow real request may add one).
			require.GreaterOrEqual(t, len(log.All()), 4)
			for _, stream := range []string{n.BatchesStream(), n.DeletesStream(), n.EventsStream(), subjects.KVStream(n.LeaseBucket())} {
				_, err := js.JetStream.Stream(ctx, stream)
				require.NoError(t, err, stream)
			}
		})
	}
}

// TestEnsurePermanent: a refusal that waiting cannot cure ends Ensure at once, however long
// its context would let it retry.
func TestEnsurePermanent(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	for name, err := range map[string]error{
		"permissions":  nats.ErrPermissionViolation,
		"no jetstream": jetstream.ErrJetStreamNotEnabled,
		"bad request":  &jetstream.APIError{Code: 400, ErrorCode: 10003, Description: "bad request"},
	} {
		t.Run(name, func(t *testing.T) {
			js := &flakyJS{JetStream: testenv.StartNATS(t).JetStream(t), fails: 1000, err: err}
			start := time.Now()
			got := subjects.Ensure(testCtx(t), js, n, subjects.DefaultSettings())
			require.ErrorIs(t, got, err)
			require.Equal(t, 1, js.calls)
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
	// A conflict too, and it names the field.
	ctx := testCtx(t)
	js := testenv.StartNATS(t).JetStream(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: n.BatchesStream(), Subjects: []string{n.BatchFilter()}, Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	start := time.Now()
	err = subjects.Ensure(ctx, js, n, subjects.DefaultSettings())
	var ce *subjects.ConflictError
	require.ErrorAs(t, err, &ce)
	require.ErrorContains(t, err, "retention: have WorkQueue, want Limits")
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestEnsureCluster: six processes' worth of Ensure at once on a fresh three-node cluster at
// replicas 3, before and after the cluster has elected its meta leader, all succeed and agree.
func TestEnsureCluster(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	s := subjects.DefaultSettings()
	s.Replicas = 3
	for _, settled := range []bool{false, true} {
		t.Run(fmt.Sprintf("settled=%v", settled), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := testenv.StartNATSCluster(t, 3)
			if settled {
				require.NoError(t, c.WaitJetStream(ctx))
			}
			errs := make(chan error, 6)
			for range cap(errs) {
				js := c.JetStream(t)
				go func() { errs <- subjects.Ensure(ctx, js, n, s) }()
			}
			for range cap(errs) {
				require.NoError(t, <-errs)
			}
			js := c.JetStream(t)
			for _, name := range []string{n.BatchesStream(), n.DeletesStream(), n.EventsStream(), subjects.KVStream(n.StateBucket()), subjects.KVStream(n.LeaseBucket())} {
				st, err := js.Stream(ctx, name)
				require.NoError(t, err, name)
				require.Equal(t, 3, st.CachedInfo().Config.Replicas, name)
			}
		})
	}
}

func TestTransient(t *testing.T) {
	require.False(t, subjects.Transient(nil))
	require.True(t, subjects.Transient(fmt.Errorf("read info: %w", context.DeadlineExceeded)))
	require.True(t, subjects.Transient(fmt.Errorf("x: %w", &jetstream.APIError{ErrorCode: 10008})))
	require.False(t, subjects.Transient(context.Canceled))
	require.False(t, subjects.Transient(jetstream.ErrStreamNotFound))
	require.False(t, subjects.Transient(&subjects.ConflictError{Kind: "stream", Err: errors.New("x")}))
}

// TestEnsureReport: on a fresh server every object is created; run again, every one is
// identical; with other settings the objects that differ are named field by field and left as
// they are, and a missing one is still created.
func TestEnsureReport(t *testing.T) {
	ctx := testCtx(t)
	js := testenv.StartNATS(t).JetStream(t)
	n := mustNames(t, "kvcmgc", "c1")
	s := subjects.DefaultSettings()
	top := n.Topology(s)
	var all []string // kind name, in the topology's order
	for _, st := range top.Streams {
		all = append(all, "stream "+st.Name)
		if c, ok := top.Consumers[st.Name]; ok {
			all = append(all, "consumer "+st.Name+"/"+c.Durable)
		}
	}
	for _, b := range top.Buckets {
		all = append(all, "bucket "+b.Bucket)
	}
	states := func(objs []subjects.ObjectState) (names []string, by map[string]subjects.ObjectState) {
		by = map[string]subjects.ObjectState{}
		for _, o := range objs {
			names = append(names, o.Kind+" "+o.Name)
			by[o.Kind+" "+o.Name] = o
		}
		return names, by
	}

	objs, err := subjects.EnsureReport(ctx, js, n, s)
	require.NoError(t, err)
	names, _ := states(objs)
	require.Equal(t, all, names)
	for _, o := range objs {
		require.Equal(t, subjects.StateCreated, o.State, o.Name)
	}
	objs, err = subjects.EnsureReport(ctx, js, n, s)
	require.NoError(t, err)
	for _, o := range objs {
		require.Equal(t, subjects.StateIdentical, o.State, o.Name)
		require.Empty(t, o.Fields)
	}

	// Other settings; the sweep's stream and consumer gone.
	require.NoError(t, js.DeleteStream(ctx, n.SweepStream()))
	other := s
	other.EventsMaxAge, other.DeleterMaxAckPending, other.LeaseTTL = time.Hour, 9, 30*time.Second
	before, err := js.Stream(ctx, n.EventsStream())
	require.NoError(t, err)
	objs, err = subjects.EnsureReport(ctx, js, n, other)
	require.NoError(t, err)
	names, by := states(objs)
	require.Equal(t, all, names)
	require.Equal(t, []subjects.FieldDiff{{Field: "max_age", Have: "168h0m0s", Want: "1h0m0s", Updatable: true}},
		by["stream "+n.EventsStream()].Fields)
	require.Equal(t, []subjects.FieldDiff{{Field: "max_ack_pending", Have: "2", Want: "9", Updatable: true}},
		by["consumer "+n.DeletesStream()+"/"+n.DeleterConsumer()].Fields)
	require.Equal(t, []subjects.FieldDiff{{Field: "ttl", Have: "15s", Want: "30s", Updatable: true}},
		by["bucket "+n.LeaseBucket()].Fields)
	for id, o := range by {
		switch id {
		case "stream " + n.EventsStream(), "consumer " + n.DeletesStream() + "/" + n.DeleterConsumer(), "bucket " + n.LeaseBucket():
			require.Equal(t, subjects.StateDiffers, o.State, id)
		case "stream " + n.SweepStream(), "consumer " + n.SweepStream() + "/" + n.SweeperConsumer():
			require.Equal(t, subjects.StateCreated, o.State, id)
		default:
			require.Equal(t, subjects.StateIdentical, o.State, id)
		}
	}
	// Nothing that differs was changed.
	after, err := js.Stream(ctx, n.EventsStream())
	require.NoError(t, err)
	require.Equal(t, before.CachedInfo().Config, after.CachedInfo().Config)
	dc, err := js.Consumer(ctx, n.DeletesStream(), n.DeleterConsumer())
	require.NoError(t, err)
	require.Equal(t, 2, dc.CachedInfo().Config.MaxAckPending)
	lease, err := js.KeyValue(ctx, n.LeaseBucket())
	require.NoError(t, err)
	st, err := lease.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, st.TTL())

	// An object that differs where the server cannot update it says so.
	require.NoError(t, js.DeleteStream(ctx, n.DeletesStream()))
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: n.DeletesStream(), Subjects: []string{n.DeleteFilter()},
		Storage: jetstream.MemoryStorage, Retention: jetstream.LimitsPolicy, MaxAge: s.MaxAge, Duplicates: s.Duplicates,
		MaxBytes: s.MaxBytes, MaxMsgs: -1, AllowDirect: true, Description: top.Streams[1].Description})
	require.NoError(t, err)
	objs, err = subjects.EnsureReport(ctx, js, n, s)
	require.NoError(t, err)
	_, by = states(objs)
	require.Equal(t, []subjects.FieldDiff{{Field: "storage", Have: "Memory", Want: "File", Updatable: false}},
		by["stream "+n.DeletesStream()].Fields)
	require.Equal(t, "storage: have Memory, want File (not updatable)", by["stream "+n.DeletesStream()].Fields[0].String())
	require.Equal(t, subjects.StateCreated, by["consumer "+n.DeletesStream()+"/"+n.DeleterConsumer()].State,
		"the consumer went with its stream")
}

// TestEnsureReportUpdate: with WithUpdate, the objects whose differing fields the server
// updates in place are updated (a raised max_bytes, max_inflight_delete_requests, ack waits,
// max_deliver, the lease TTL), each field named with its old value; a paused consumer stays
// paused and a stream's field Ensure does not manage keeps its value; a second run finds all
// identical. When one object differs in a field the server cannot update, nothing is updated.
func TestEnsureReportUpdate(t *testing.T) {
	ctx := testCtx(t)
	s := subjects.DefaultSettings()
	js, n := testenv.Topology(t, s)
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	_, err := js.PauseConsumer(ctx, n.DeletesStream(), n.DeleterConsumer(), until)
	require.NoError(t, err, "an operator paused the deleter")
	// A field Ensure does not manage, set by hand.
	bst, err := js.Stream(ctx, n.BatchesStream())
	require.NoError(t, err)
	hand := bst.CachedInfo().Config
	hand.MaxMsgSize = 4 << 20
	_, err = js.UpdateStream(ctx, hand)
	require.NoError(t, err)

	tuned := s
	tuned.MaxBytes, tuned.DeleterMaxAckPending, tuned.DeleterAckWait, tuned.MaxDeliver = 2<<30, 8, 2*time.Minute, 12
	tuned.LeaseTTL, tuned.EventsMaxAge = 30*time.Second, 14*24*time.Hour

	// Without WithUpdate nothing changes (TestEnsureReport); a run with the option that finds a
	// field it cannot update changes nothing either, not even the updatable fields.
	before := configs(t, js, n)
	require.NoError(t, js.DeleteStream(ctx, n.SweepStream()))
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: n.SweepStream(), Subjects: []string{n.SweepFilter()},
		Storage: jetstream.MemoryStorage, Retention: jetstream.LimitsPolicy, MaxAge: s.MaxAge, Duplicates: s.Duplicates,
		MaxBytes: s.MaxBytes, MaxMsgs: -1, AllowDirect: true, Description: n.Topology(s).Streams[3].Description})
	require.NoError(t, err)
	objs, err := subjects.EnsureReport(ctx, js, n, tuned, subjects.WithUpdate())
	require.NoError(t, err)
	by := byName(objs)
	require.Equal(t, subjects.StateDiffers, by["stream "+n.SweepStream()].State)
	require.Equal(t, "storage", by["stream "+n.SweepStream()].Fields[0].Field)
	require.False(t, by["stream "+n.SweepStream()].Fields[0].Updatable)
	require.Equal(t, subjects.StateDiffers, by["consumer "+n.DeletesStream()+"/"+n.DeleterConsumer()].State, "left as it is")
	after := configs(t, js, n)
	require.Equal(t, subjects.StateCreated, by["consumer "+n.SweepStream()+"/"+n.SweeperConsumer()].State, "what is missing is still created")
	for name, cfg := range before {
		if !strings.HasPrefix(name, n.SweepStream()) { // remade by hand above
			require.Equal(t, cfg, after[name], "%s changed although another object cannot be updated", name)
		}
	}

	// The sweep's stream as it should be: now every difference can be updated.
	require.NoError(t, js.DeleteStream(ctx, n.SweepStream()))
	objs, err = subjects.EnsureReport(ctx, js, n, tuned, subjects.WithUpdate())
	require.NoError(t, err)
	by = byName(objs)
	require.Equal(t, subjects.StateCreated, by["stream "+n.SweepStream()].State)
	for _, name := range []string{n.BatchesStream(), n.DeletesStream(), n.SweepStream()} {
		o := by["stream "+name]
		if name == n.SweepStream() {
			continue
		}
		require.Equal(t, subjects.StateUpdated, o.State, name)
		require.Equal(t, []subjects.FieldDiff{{Field: "max_bytes", Have: "1073741824", Want: "2147483648", Updatable: true}}, o.Fields, name)
	}
	require.Equal(t, []subjects.FieldDiff{
		{Field: "max_age", Have: "168h0m0s", Want: "336h0m0s", Updatable: true},
		{Field: "max_bytes", Have: "1073741824", Want: "2147483648", Updatable: true},
	}, by["stream "+n.EventsStream()].Fields)
	require.Equal(t, []subjects.FieldDiff{
		{Field: "ack_wait", Have: "1m0s", Want: "2m0s", Updatable: true},
		{Field: "max_deliver", Have: "10", Want: "12", Updatable: true},
		{Field: "max_ack_pending", Have: "2", Want: "8", Updatable: true},
	}, by["consumer "+n.DeletesStream()+"/"+n.DeleterConsumer()].Fields)
	require.Equal(t, []subjects.FieldDiff{{Field: "max_deliver", Have: "10", Want: "12", Updatable: true}},
		by["consumer "+n.BatchesStream()+"/"+n.ProberConsumer()].Fields)
	require.Equal(t, subjects.StateUpdated, by["bucket "+n.LeaseBucket()].State)
	require.Equal(t, []subjects.FieldDiff{{Field: "ttl", Have: "15s", Want: "30s", Updatable: true}}, by["bucket "+n.LeaseBucket()].Fields)
	require.Equal(t, subjects.StateIdentical, by["bucket "+n.StateBucket()].State)

	// On the server: the new values, the pause and the hand-set field kept.
	dc, err := js.Consumer(ctx, n.DeletesStream(), n.DeleterConsumer())
	require.NoError(t, err)
	info, err := dc.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, info.Config.MaxAckPending)
	require.Equal(t, 2*time.Minute, info.Config.AckWait)
	require.True(t, info.Paused, "the update did not lift the operator's pause")
	require.NotNil(t, info.Config.PauseUntil)
	require.True(t, until.Equal(*info.Config.PauseUntil), "paused until %v, want %v", info.Config.PauseUntil, until)
	bst, err = js.Stream(ctx, n.BatchesStream())
	require.NoError(t, err)
	require.Equal(t, int32(4<<20), bst.CachedInfo().Config.MaxMsgSize, "a field Ensure does not manage keeps its value")
	require.Equal(t, int64(2<<30), bst.CachedInfo().Config.MaxBytes)
	lease, err := js.KeyValue(ctx, n.LeaseBucket())
	require.NoError(t, err)
	st, err := lease.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, st.TTL())
	_, err = lease.Create(ctx, "probe", []byte("x"))
	require.NoError(t, err, "the bucket works after its update")

	objs, err = subjects.EnsureReport(ctx, js, n, tuned, subjects.WithUpdate())
	require.NoError(t, err)
	for _, o := range objs {
		require.Equal(t, subjects.StateIdentical, o.State, o.Name)
	}
}

// TestEnsureReportUpdateRefused: an update the server refuses (a max_bytes of an exbibyte, more
// storage than the server has) is an error naming the object and the field, not a retry.
func TestEnsureReportUpdateRefused(t *testing.T) {
	ctx := testCtx(t)
	s := subjects.DefaultSettings()
	js, n := testenv.Topology(t, s)
	s.MaxBytes = 1 << 60
	start := time.Now()
	_, err := subjects.EnsureReport(ctx, js, n, s, subjects.WithUpdate())
	var ce *subjects.ConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "stream", ce.Kind)
	require.Equal(t, n.BatchesStream(), ce.Name)
	require.ErrorContains(t, err, "max_bytes: have 1073741824, want 1152921504606846976")
	require.ErrorContains(t, err, "insufficient storage resources")
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestEnsureReportUpdateReplicas: on a three-node cluster, streams and buckets made with one
// replica are raised to three in place.
func TestEnsureReportUpdateReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testenv.StartNATSCluster(t, 3)
	require.NoError(t, c.WaitJetStream(ctx))
	js := c.JetStream(t)
	n := mustNames(t, "kvcmgc", "c1")
	s := subjects.DefaultSettings()
	_, err := subjects.EnsureReport(ctx, js, n, s)
	require.NoError(t, err)
	s.Replicas = 3
	objs, err := subjects.EnsureReport(ctx, js, n, s, subjects.WithUpdate())
	require.NoError(t, err)
	for _, o := range objs {
		if o.Kind == "consumer" {
			require.Equal(t, subjects.StateIdentical, o.State, o.Name)
			continue
		}
		require.Equal(t, subjects.StateUpdated, o.State, o.Name)
		require.Equal(t, []subjects.FieldDiff{{Field: "num_replicas", Have: "1", Want: "3", Updatable: true}}, o.Fields, o.Name)
	}
	for _, name := range []string{n.BatchesStream(), n.DeletesStream(), subjects.KVStream(n.LeaseBucket())} {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err, name)
		require.Equal(t, 3, st.CachedInfo().Config.Replicas, name)
	}
}

func byName(objs []subjects.ObjectState) map[string]subjects.ObjectState {
	by := map[string]subjects.ObjectState{}
	for _, o := range objs {
		by[o.Kind+" "+o.Name] = o
	}
	return by
}

// configs reads the config of every stream (buckets' included) and consumer of the topology.
func configs(t *testing.T, js jetstream.JetStream, n subjects.Names) map[string]any {
	t.Helper()
	ctx := testCtx(t)
	out := map[string]any{}
	top := n.Topology(subjects.DefaultSettings())
	var streams []string
	for _, s := range top.Streams {
		streams = append(streams, s.Name)
	}
	for _, b := range top.Buckets {
		streams = append(streams, subjects.KVStream(b.Bucket))
	}
	for _, name := range streams {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err, name)
		out[name] = st.CachedInfo().Config
		if cc, ok := top.Consumers[name]; ok {
			c, err := js.Consumer(ctx, name, cc.Durable)
			require.NoError(t, err)
			out[name+"/"+cc.Durable] = c.CachedInfo().Config
		}
	}
	return out
}

// TestEnsureReplicasAboveServers: replicas above 1 against a server outside any cluster are
// refused before anything is created, naming the setting and the cluster's size, by Ensure and
// by EnsureReport alike.
func TestEnsureReplicasAboveServers(t *testing.T) {
	n := mustNames(t, "kvcmgc", "c1")
	s := subjects.DefaultSettings()
	s.Replicas = 2
	ctx := testCtx(t)
	js := testenv.StartNATS(t).JetStream(t)
	for name, ensure := range map[string]func() error{
		"ensure": func() error { return subjects.Ensure(ctx, js, n, s) },
		"report": func() error { _, err := subjects.EnsureReport(ctx, js, n, s); return err },
	} {
		t.Run(name, func(t *testing.T) {
			err := ensure()
			require.ErrorContains(t, err, "jetstream.replicas is 2")
			require.ErrorContains(t, err, "not part of a cluster (a cluster of 1 server)")
			streams := 0
			for range js.StreamNames(ctx).Name() {
				streams++
			}
			require.Zero(t, streams, "nothing created")
		})
	}
	s.Replicas = 1
	require.NoError(t, subjects.Ensure(ctx, js, n, s))
}

// lostAnswerJS applies the first stream update and answers it with a timeout: the answer lost
// on a loaded server.
type lostAnswerJS struct {
	jetstream.JetStream
	mu   sync.Mutex
	lost bool
}

func (l *lostAnswerJS) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := l.JetStream.UpdateStream(ctx, cfg)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && !l.lost {
		l.lost = true
		return nil, nats.ErrTimeout
	}
	return st, err
}

// TestEnsureReportUpdateLostAnswer: an update the server applied but whose answer was lost is
// retried, finds nothing left to change, and is still reported as this run's update, with the
// fields it changed (a loaded cluster reported such objects "identical").
func TestEnsureReportUpdateLostAnswer(t *testing.T) {
	ctx := testCtx(t)
	n := mustNames(t, "kvcmgc", "c1")
	srv := testenv.StartNATS(t)
	s := subjects.DefaultSettings()
	_, err := subjects.EnsureReport(ctx, srv.JetStream(t), n, s)
	require.NoError(t, err)
	s.EventsMaxAge = time.Hour
	js := &lostAnswerJS{JetStream: srv.JetStream(t)}
	log := &testenv.Messages{}
	objs, err := subjects.EnsureReport(ctx, js, n, s, subjects.WithUpdate(),
		subjects.WithEnsureRetry(backoff.New(time.Millisecond, 10*time.Millisecond)),
		subjects.WithEnsureLogger(slog.New(log)))
	require.NoError(t, err)
	require.True(t, js.lost, "the update's answer was lost")
	require.Equal(t, 1, len(log.All()), "the lost answer was retried once")
	o := byName(objs)["stream "+n.EventsStream()]
	require.Equal(t, subjects.StateUpdated, o.State)
	require.Equal(t, []subjects.FieldDiff{{Field: "max_age", Have: "168h0m0s", Want: "1h0m0s", Updatable: true}}, o.Fields)
	for _, o := range objs {
		if o.Name != n.EventsStream() {
			require.Equal(t, subjects.StateIdentical, o.State, o.Name)
		}
	}
}
