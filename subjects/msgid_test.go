package subjects_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

var msgIDRe = regexp.MustCompile(`^[A-Za-z0-9_%~:-]{1,100}$`)

func TestBatchMsgID(t *testing.T) {
	b := sampleBatch(2)
	require.Equal(t, "b:c1:meta-1:inst-0:42:1234:0", subjects.BatchMsgID(b))

	// Only the identity fields matter.
	same := b
	same.Blocks, same.LeaseRev, same.ScannedAt, same.Next, same.Parts, same.BadKeys = nil, 99, 1, 0, 3, 5
	require.Equal(t, subjects.BatchMsgID(b), subjects.BatchMsgID(same))

	seen := map[string]bool{}
	for _, mut := range []func(*subjects.Batch){
		func(*subjects.Batch) {},
		func(b *subjects.Batch) { b.Cluster = "c2" },
		func(b *subjects.Batch) { b.Instance = "inst-1" },
		func(b *subjects.Batch) { b.Store = "meta-2" }, // rounds are a store's own
		func(b *subjects.Batch) { b.Instance = "inst-0:42" },
		func(b *subjects.Batch) { b.Round = 43 },
		func(b *subjects.Batch) { b.Cursor = 0 },
		func(b *subjects.Batch) { b.Part = 1 },
		func(b *subjects.Batch) { b.Instance = strings.Repeat("i", 200) + "a" },
		func(b *subjects.Batch) { b.Instance = strings.Repeat("i", 200) + "b" },
		func(b *subjects.Batch) { b.Instance = strings.Repeat("实", 50) },
		func(b *subjects.Batch) { b.Cluster = strings.Repeat("c", 300) },
		func(b *subjects.Batch) { b.Instance = "a b\tc" },
	} {
		x := sampleBatch(0)
		mut(&x)
		id := subjects.BatchMsgID(x)
		require.Regexp(t, msgIDRe, id)
		require.False(t, seen[id], "duplicate id %q", id)
		seen[id] = true
	}
}

func TestDeleteMsgID(t *testing.T) {
	r := sampleDelete()
	require.Equal(t, "d:KVCMGC_kvcmgc_c1_BATCHES:17", subjects.DeleteMsgID(r))
	same := r
	same.Targets, same.JudgedAt, same.Source.MsgID = nil, 5, "other"
	require.Equal(t, subjects.DeleteMsgID(r), subjects.DeleteMsgID(same))

	seen := map[string]bool{}
	for _, src := range []subjects.Source{
		{Stream: "S", Seq: 1}, {Stream: "S", Seq: 2}, {Stream: "T", Seq: 1},
		{MsgID: "1"}, {MsgID: "S:1"}, {MsgID: "d:S:1"}, {MsgID: strings.Repeat("m", 500)},
	} {
		x := sampleDelete()
		x.Source = src
		id := subjects.DeleteMsgID(x)
		require.Regexp(t, msgIDRe, id)
		require.False(t, seen[id], "duplicate id %q for %+v", id, src)
		seen[id] = true
	}
}

func TestEventMsgID(t *testing.T) {
	e := sampleEvent()
	id := subjects.EventMsgID(e)
	require.Regexp(t, `^e:deleter:delete:[0-9a-f]{24}$`, id)

	// Time, detail and counts do not make another event.
	same := sampleEvent()
	same.At, same.Detail, same.Counts = 1, "retry", nil
	require.Equal(t, id, subjects.EventMsgID(same))

	seen := map[string]bool{id: true}
	k0, k1 := int64(0), int64(-5)
	for name, mut := range map[string]func(*subjects.Event){
		"stage":    func(e *subjects.Event) { e.Stage = "prober" },
		"kind":     func(e *subjects.Event) { e.Kind = subjects.EventSkip },
		"cluster":  func(e *subjects.Event) { e.Cluster = "c2" },
		"instance": func(e *subjects.Event) { e.Instance = "" },
		"round":    func(e *subjects.Event) { e.Round = 0 },
		"no key":   func(e *subjects.Event) { e.Key = nil },
		"key 0":    func(e *subjects.Event) { e.Key = &k0 },
		"location": func(e *subjects.Event) { e.Location = "q0x7m2ab" },
		"reason":   func(e *subjects.Event) { e.Reason = subjects.ReasonStorageMissing },
		"outcome":  func(e *subjects.Event) { e.Outcome = subjects.OutcomeNoopGone },
		"dry run":  func(e *subjects.Event) { e.DryRun = true },
		"seq":      func(e *subjects.Event) { e.Source = &subjects.Source{Stream: "KVCMGC_kvcmgc_c1_DELETES", Seq: 4} },
		"msg id": func(e *subjects.Event) {
			e.Source = &subjects.Source{Stream: "KVCMGC_kvcmgc_c1_DELETES", Seq: 3, MsgID: "x"}
		},
		"no src":  func(e *subjects.Event) { e.Source = nil },
		"shifted": func(e *subjects.Event) { e.Location, e.Reason = "", "k3j9x0cd"+subjects.ReasonOrphanWriting },
		"metadata": func(e *subjects.Event) {
			e.Metadata = []subjects.MetadataField{{Key: "kvcache:instance_i:metadata", Field: "__key_count__", Old: subjects.RawText("5"), New: subjects.RawText("4")}}
		},
		"metadata new": func(e *subjects.Event) {
			e.Metadata = []subjects.MetadataField{{Key: "kvcache:instance_i:metadata", Field: "__key_count__", Old: subjects.RawText("5"), New: subjects.RawText("3")}}
		},
	} {
		x := sampleEvent()
		x.Key = &k1
		mut(&x)
		id := subjects.EventMsgID(x)
		require.Regexp(t, msgIDRe, id, name)
		require.False(t, seen[id], "%s: duplicate id %q", name, id)
		seen[id] = true
	}
}

// TestMsgIDDeduplication re-publishes each kind of message with its id and checks the server
// drops the copy.
func TestMsgIDDeduplication(t *testing.T) {
	ctx := testCtx(t)
	js := testenv.StartNATS(t).JetStream(t)
	n := mustNames(t, "kvcmgc", "c1")
	require.NoError(t, subjects.Ensure(ctx, js, n, subjects.DefaultSettings()))

	b := sampleBatch(3)
	r := sampleDelete()
	e := sampleEvent()
	for _, m := range []struct {
		subject, id, stream string
		msg                 any
	}{
		{n.BatchSubject(b.Instance), subjects.BatchMsgID(b), n.BatchesStream(), b},
		{n.DeleteSubject(r.Instance), subjects.DeleteMsgID(r), n.DeletesStream(), r},
		{n.EventSubject(e.Kind, e.Instance), subjects.EventMsgID(e), n.EventsStream(), e},
	} {
		data, err := subjects.Encode(m.msg)
		require.NoError(t, err)
		first, err := js.Publish(ctx, m.subject, data, jetstream.WithMsgID(m.id))
		require.NoError(t, err)
		require.False(t, first.Duplicate)
		again, err := js.Publish(ctx, m.subject, data, jetstream.WithMsgID(m.id))
		require.NoError(t, err)
		require.True(t, again.Duplicate, m.id)
		require.Equal(t, first.Sequence, again.Sequence)

		st, err := js.Stream(ctx, m.stream)
		require.NoError(t, err)
		require.Equal(t, uint64(1), st.CachedInfo().State.Msgs, m.stream)
		got, err := st.GetMsg(ctx, first.Sequence)
		require.NoError(t, err)
		require.Equal(t, m.id, got.Header.Get(jetstream.MsgIDHeader))
	}
}

// TestDeleteMsgIDWithoutSource checks requests whose source names nothing still get distinct,
// deterministic ids instead of one shared id that would drop all but the first.
func TestDeleteMsgIDWithoutSource(t *testing.T) {
	a := sampleDelete()
	a.Source = subjects.Source{}
	b := a
	b.Targets = a.Targets[:1]
	idA, idB := subjects.DeleteMsgID(a), subjects.DeleteMsgID(b)
	require.Regexp(t, `^dh:[0-9a-f]{24}$`, idA)
	require.NotEqual(t, idA, idB)
	require.Equal(t, idA, subjects.DeleteMsgID(a))
	a.JudgedAt++
	require.Equal(t, idA, subjects.DeleteMsgID(a))
}

// TestDeleteMsgIDGathered: a request gathering several batches is named by all of them, in any
// order; another set of batches is another request.
func TestDeleteMsgIDGathered(t *testing.T) {
	r := sampleDelete()
	one := subjects.DeleteMsgID(r)
	r.Sources = []subjects.Source{{Stream: r.Source.Stream, Seq: 18}, {Stream: r.Source.Stream, Seq: 19}}
	gathered := subjects.DeleteMsgID(r)
	require.NotEqual(t, one, gathered)
	require.Regexp(t, msgIDRe, gathered)
	swapped := r
	swapped.Sources = []subjects.Source{r.Sources[1], r.Sources[0]}
	require.Equal(t, gathered, subjects.DeleteMsgID(swapped), "the order of the sources does not matter")
	fewer := r
	fewer.Sources = r.Sources[:1]
	require.NotEqual(t, gathered, subjects.DeleteMsgID(fewer))
}
