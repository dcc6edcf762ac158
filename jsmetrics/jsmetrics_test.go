package jsmetrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
	"github.com/kvcm-gc/kvcm-gc/jsmetrics"
	"github.com/kvcm-gc/kvcm-gc/ops"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/sweep"
	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func setup(t *testing.T) (jetstream.JetStream, subjects.Names) {
	t.Helper()
	s := subjects.DefaultSettings()
	s.Storage = jetstream.MemoryStorage
	s.DeleterMaxAckPending = 3
	return testenv.Topology(t, s)
}

// waitPending waits until the deleter consumer counts n pending messages: the count follows
// the stream asynchronously, and a loaded server may report the last publishes a moment later.
func waitPending(t *testing.T, js jetstream.JetStream, names subjects.Names, n uint64) {
	t.Helper()
	cons, err := js.Consumer(context.Background(), names.DeletesStream(), names.DeleterConsumer())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == n
	}, 10*time.Second, 10*time.Millisecond, "the deleter consumer to count %d pending", n)
}

// gather returns the collector's samples as "name{label=value,…}" → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

func TestCollectorReadsConsumerInfoAndPause(t *testing.T) {
	ctx := context.Background()
	js, names := setup(t)
	reg := prometheus.NewRegistry()
	require.NoError(t, jsmetrics.Register(reg, js, names, pipeline.Stages()))

	// Five delete requests stored, two of them delivered and not acknowledged.
	for i := range 5 {
		_, err := js.Publish(ctx, names.DeleteSubject("inst1"), []byte(`{}`), jetstream.WithMsgID(string(rune('a'+i))))
		require.NoError(t, err)
	}
	cons, err := js.Consumer(ctx, names.DeletesStream(), names.DeleterConsumer())
	require.NoError(t, err)
	b, err := cons.Fetch(2, jetstream.FetchMaxWait(2*time.Second))
	require.NoError(t, err)
	n := 0
	for range b.Messages() {
		n++
	}
	require.Equal(t, 2, n)
	waitPending(t, js, names, 3)

	until := time.Now().Add(time.Hour).Truncate(time.Second)
	_, err = ops.Pause(ctx, js, names, pipeline.StageDeleter, until)
	require.NoError(t, err)
	_, err = ops.Pause(ctx, js, names, pipeline.StageScanner, until)
	require.NoError(t, err)
	_, err = ops.Pause(ctx, js, names, pipeline.StageWalker, until)
	require.NoError(t, err)
	_, err = ops.Pause(ctx, js, names, pipeline.StageSweeper, until)
	require.NoError(t, err)

	del := "consumer=deleter,stage=deleter,stream=" + names.DeletesStream()
	prb := "consumer=prober,stage=prober,stream=" + names.BatchesStream()
	got := gather(t, reg)
	want := map[string]float64{
		"kvcm_gc_consumer_pending_messages{" + del + "}":          3,
		"kvcm_gc_consumer_ack_pending_messages{" + del + "}":      2,
		"kvcm_gc_consumer_max_ack_pending_messages{" + del + "}":  3,
		"kvcm_gc_consumer_redelivered_messages{" + del + "}":      0,
		"kvcm_gc_consumer_pending_messages{" + prb + "}":          0,
		"kvcm_gc_stage_paused{stage=deleter}":                     1,
		"kvcm_gc_stage_paused{stage=prober}":                      0,
		"kvcm_gc_stage_paused{stage=scanner}":                     1,
		"kvcm_gc_stage_paused{stage=walker}":                      1,
		"kvcm_gc_stage_paused{stage=sweeper}":                     1,
		"kvcm_gc_stage_pause_end_timestamp_seconds{stage=prober}": 0,
		"kvcm_gc_jetstream_stats_up{stage=deleter}":               1,
		"kvcm_gc_jetstream_stats_up{stage=prober}":                1,
		"kvcm_gc_jetstream_stats_up{stage=scanner}":               1,
		"kvcm_gc_jetstream_stats_up{stage=walker}":                1,
		"kvcm_gc_jetstream_stats_up{stage=sweeper}":               1,
	}
	for k, v := range want {
		require.Contains(t, got, k)
		require.Equal(t, v, got[k], k)
	}
	for _, stage := range []string{"deleter", "scanner", "walker", "sweeper"} {
		end := got["kvcm_gc_stage_pause_end_timestamp_seconds{stage="+stage+"}"]
		require.InDelta(t, float64(until.Unix()), end, 1, stage)
	}

	_, err = ops.Resume(ctx, js, names, ops.StageAll)
	require.NoError(t, err)
	got = gather(t, reg)
	for _, stage := range pipeline.Stages() {
		require.Zero(t, got["kvcm_gc_stage_paused{stage="+stage+"}"], stage)
	}
}

func TestCollectorReportsDownWhenConsumerMissing(t *testing.T) {
	ctx := context.Background()
	js, names := setup(t)
	require.NoError(t, js.DeleteConsumer(ctx, names.BatchesStream(), names.ProberConsumer()))
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(jsmetrics.New(js, names, []string{pipeline.StageProber})))
	got := gather(t, reg)
	require.Equal(t, map[string]float64{"kvcm_gc_jetstream_stats_up{stage=prober}": 0}, got)
}

func TestRegisterNothing(t *testing.T) {
	js, names := setup(t)
	require.NoError(t, jsmetrics.Register(nil, js, names, pipeline.Stages()))
	reg := prometheus.NewRegistry()
	require.NoError(t, jsmetrics.Register(reg, js, names, nil))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Empty(t, mfs)
}

// TestMetricNamesLint runs the checks of `promtool check metrics` on every series a process
// exports: the pipeline's and the sweep's metrics and this collector's.
func TestMetricNamesLint(t *testing.T) {
	js, names := setup(t)
	reg := prometheus.NewRegistry()
	app.NewMetrics(reg)
	sweep.NewMetrics(reg)
	require.NoError(t, jsmetrics.Register(reg, js, names, pipeline.Stages()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	require.Empty(t, problems)
	var gauges int
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "kvcm_gc_consumer_") || strings.HasPrefix(mf.GetName(), "kvcm_gc_stage_") {
			require.Equal(t, dto.MetricType_GAUGE, mf.GetType(), mf.GetName())
			gauges++
		}
	}
	require.Equal(t, 8, gauges)
}

// TestCollectorKeepsLastReading: when the consumer cannot be read (its stream's leader is
// being elected, the server is down), a scrape reports the numbers last read with their age,
// and up 0, instead of dropping them.
func TestCollectorKeepsLastReading(t *testing.T) {
	ctx := context.Background()
	js, names := setup(t)
	for i := range 4 {
		_, err := js.Publish(ctx, names.DeleteSubject("inst1"), []byte(`{}`), jetstream.WithMsgID(string(rune('a'+i))))
		require.NoError(t, err)
	}
	waitPending(t, js, names, 4)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(jsmetrics.New(js, names, []string{pipeline.StageDeleter})))
	del := "consumer=deleter,stage=deleter,stream=" + names.DeletesStream()
	got := gather(t, reg)
	require.Equal(t, 4.0, got["kvcm_gc_consumer_pending_messages{"+del+"}"])
	require.Less(t, got["kvcm_gc_consumer_info_age_seconds{"+del+"}"], 1.0, "read at this scrape")
	require.Equal(t, 1.0, got["kvcm_gc_jetstream_stats_up{stage=deleter}"])

	require.NoError(t, js.DeleteConsumer(ctx, names.DeletesStream(), names.DeleterConsumer()))
	got = gather(t, reg)
	require.Equal(t, 0.0, got["kvcm_gc_jetstream_stats_up{stage=deleter}"])
	require.Equal(t, 4.0, got["kvcm_gc_consumer_pending_messages{"+del+"}"], "the last reading is kept")
	require.Contains(t, got, "kvcm_gc_consumer_info_age_seconds{"+del+"}")
	require.Greater(t, got["kvcm_gc_consumer_info_age_seconds{"+del+"}"], 0.0, "and says how old it is")
	require.Contains(t, got, "kvcm_gc_stage_paused{stage=deleter}")
}

// TestCollectorReportsDiscards: a stream at its max_bytes reports discarding, and the messages
// it discarded before its consumer acknowledged them as lost.
func TestCollectorReportsDiscards(t *testing.T) {
	ctx := context.Background()
	s := subjects.DefaultSettings()
	s.Storage = jetstream.MemoryStorage
	s.MaxBytes = 64 << 10
	js, names := testenv.Topology(t, s)
	reg := prometheus.NewRegistry()
	require.NoError(t, jsmetrics.Register(reg, js, names, []string{pipeline.StageDeleter}))

	m := gather(t, reg)
	deletes := "{stream=" + names.DeletesStream() + "}"
	require.Equal(t, 0.0, m[jsmetrics.MetricStreamDiscarding+deletes])
	require.Equal(t, float64(64<<10), m[jsmetrics.MetricStreamMaxBytes+deletes])

	payload := make([]byte, 4<<10)
	for i := range 40 { // 160 kB into a 64 kB stream: the oldest are discarded, none was consumed
		_, err := js.Publish(ctx, names.DeleteSubject("inst1"), payload, jetstream.WithMsgID("m"+string(rune('A'+i))))
		require.NoError(t, err)
	}
	m = gather(t, reg)
	require.Equal(t, 1.0, m[jsmetrics.MetricStreamDiscarding+deletes])
	require.Positive(t, m[jsmetrics.MetricStreamLost+deletes])
	require.LessOrEqual(t, m[jsmetrics.MetricStreamBytes+deletes], float64(64<<10))
	require.Contains(t, m, jsmetrics.MetricStreamDiscarding+"{stream="+names.EventsStream()+"}")
}
