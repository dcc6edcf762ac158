package ops

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/pipeline/prober"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

func TestEstimate(t *testing.T) {
	now := time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC)
	started := now.Add(-100 * time.Second).UnixMicro()
	tests := []struct {
		name  string
		ck    pipeline.Checkpoint
		rate  float64
		eta   time.Time
		basis string
	}{
		{"by keys of the previous round", pipeline.Checkpoint{RoundStartedUs: started, KeysScanned: 1000, LastRoundKeys: 3000},
			10, now.Add(200 * time.Second), "keys"},
		{"past the previous count: unknown", pipeline.Checkpoint{RoundStartedUs: started, KeysScanned: 4000, LastRoundKeys: 3000},
			40, time.Time{}, ""},
		{"first round, by stores", pipeline.Checkpoint{RoundStartedUs: started, KeysScanned: 500, Index: 1, Stores: 4},
			5, now.Add(300 * time.Second), "stores"},
		{"first round, first store: unknown", pipeline.Checkpoint{RoundStartedUs: started, KeysScanned: 500, Index: 0, Stores: 4},
			5, time.Time{}, ""},
		{"nothing scanned yet", pipeline.Checkpoint{RoundStartedUs: started, LastRoundKeys: 3000}, 0, time.Time{}, ""},
		{"no start time", pipeline.Checkpoint{KeysScanned: 10}, 0, time.Time{}, ""},
		{"start in the future", pipeline.Checkpoint{RoundStartedUs: now.Add(time.Minute).UnixMicro(), KeysScanned: 10}, 0, time.Time{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rate, eta, basis := estimate(tt.ck, now)
			require.InDelta(t, tt.rate, rate, 1e-9)
			require.True(t, tt.eta.Equal(eta), "eta %s, want %s", eta, tt.eta)
			require.Equal(t, tt.basis, basis)
		})
	}
}

func TestStoresETA(t *testing.T) {
	now := time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC)
	walking := func(eta time.Duration) StoreStatus {
		s := StoreStatus{InRegistry: true, InRound: true}
		if eta != 0 {
			s.ETA = now.Add(eta)
		}
		return s
	}
	done := StoreStatus{InRegistry: true, InRound: false}
	gone := StoreStatus{InRegistry: false, InRound: true}
	tests := []struct {
		name   string
		stores []StoreStatus
		want   time.Time
	}{
		{"the latest of the walking stores", []StoreStatus{walking(time.Minute), walking(3 * time.Minute), walking(2 * time.Minute)}, now.Add(3 * time.Minute)},
		{"done stores do not count", []StoreStatus{done, walking(time.Minute)}, now.Add(time.Minute)},
		{"a store gone from the registry does not count", []StoreStatus{gone, walking(time.Minute)}, now.Add(time.Minute)},
		{"one walking store without an estimate: unknown", []StoreStatus{walking(time.Minute), walking(0)}, time.Time{}},
		{"nothing walking: unknown", []StoreStatus{done, gone}, time.Time{}},
		{"no stores: unknown", nil, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := storesETA(tt.stores)
			require.True(t, tt.want.Equal(got), "eta %s, want %s", got, tt.want)
		})
	}
}

func TestExpandStage(t *testing.T) {
	for _, s := range Stages() {
		got, err := expandStage(s)
		require.NoError(t, err)
		require.Equal(t, []string{s}, got)
	}
	got, err := expandStage(StageAll)
	require.NoError(t, err)
	require.Equal(t, Stages(), got)
	// all is every stage that writes or unlinks, and the walks that feed them.
	require.Equal(t, []string{"scanner", "prober", "deleter", "walker", "sweeper"}, got)
	for _, s := range []string{"sweep", "Scanner", ""} {
		_, err = expandStage(s)
		require.ErrorIs(t, err, ErrUnknownStage, s)
	}
}

func TestReplayQueryValidate(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		q  ReplayQuery
		ok bool
	}{
		{ReplayQuery{Stage: pipeline.StageProber}, true},
		{ReplayQuery{Stage: pipeline.StageDeleter, SeqFrom: 5, SeqTo: 5}, true},
		{ReplayQuery{Stage: pipeline.StageScanner}, false},
		{ReplayQuery{}, false},
		{ReplayQuery{Stage: pipeline.StageProber, SeqFrom: 6, SeqTo: 5}, false},
		{ReplayQuery{Stage: pipeline.StageProber, TimeFrom: now, TimeTo: now.Add(-time.Second)}, false},
	} {
		err := tt.q.Validate()
		require.Equal(t, tt.ok, err == nil, "%+v: %v", tt.q, err)
	}
}

func TestVerdictString(t *testing.T) {
	require.Equal(t, "candidate orphan_writing → deleted",
		Verdict{Decision: DecisionCandidate, Reason: subjects.ReasonOrphanWriting, Outcome: subjects.OutcomeDeleted}.String())
	require.Equal(t, "candidate storage_missing", Verdict{Decision: DecisionCandidate, Reason: subjects.ReasonStorageMissing}.String())
	require.Equal(t, "noop_mismatch", Verdict{Decision: DecisionDelete, Reason: subjects.ReasonOrphanWriting, Outcome: subjects.OutcomeNoopMismatch}.String())
	require.Equal(t, "kept", Verdict{Decision: DecisionKept}.String())
}

func TestDecisionClass(t *testing.T) {
	for v, want := range map[Verdict]string{
		{Decision: DecisionCandidate}:                                 "delete",
		{Decision: DecisionWouldDelete}:                               "delete",
		{Decision: DecisionWouldResume}:                               "delete",
		{Decision: DecisionDelete, Outcome: subjects.OutcomeDeleted}:  "delete",
		{Decision: DecisionDelete, Outcome: subjects.OutcomeNoopGone}: "keep",
		{Decision: DecisionKept}:                                      "keep",
		{Decision: DecisionSkip}:                                      "keep",
		{Decision: DecisionGone}:                                      "gone",
		{Decision: DecisionNoEvent}:                                   DecisionNoEvent,
		{Decision: DecisionError}:                                     DecisionError,
	} {
		require.Equal(t, want, decisionClass(v), "%+v", v)
	}
}

func TestDiffers(t *testing.T) {
	deleted := Verdict{Decision: DecisionCandidate, Outcome: subjects.OutcomeDeleted}
	require.False(t, differs(deleted, Verdict{Decision: DecisionGone}))
	require.False(t, differs(Verdict{Decision: DecisionDelete, Outcome: subjects.OutcomeDeleted}, Verdict{Decision: DecisionNoopGone}))
	require.False(t, differs(Verdict{Decision: DecisionKept}, Verdict{Decision: DecisionSkip}))
	require.True(t, differs(Verdict{Decision: DecisionKept}, Verdict{Decision: DecisionCandidate}))
	require.True(t, differs(deleted, Verdict{Decision: DecisionKept}))
	require.True(t, differs(Verdict{Decision: DecisionKept}, Verdict{Decision: DecisionGone}))
}

func TestOneLocation(t *testing.T) {
	raw := []byte(`{"id":"a\"b&","status":2,"x_future":{"s":"<&>"}}`)
	blk, err := kvcm.DecodeBlock(oneLocation(`a"b&`, raw))
	require.NoError(t, err)
	require.Len(t, blk.Locations, 1)
	require.Equal(t, `a"b&`, blk.Locations[0].ID)
	require.NoError(t, blk.Locations[0].Err)
	require.Equal(t, raw, blk.Locations[0].Raw)
}

func TestKeptReason(t *testing.T) {
	now := time.Now()
	cfg := prober.DefaultConfig()
	lru := now.Add(-time.Hour).UnixMicro()
	w := &kvcm.Location{Status: kvcm.StatusWriting}
	require.True(t, strings.HasPrefix(keptReason(w, strconv.FormatInt(lru, 10), subjects.LayoutLegacy, now, cfg), "writing_within_grace (age 1h0m0s < 24h0m0s)"))
	require.Equal(t, "specs_present_or_unknown", keptReason(&kvcm.Location{Status: kvcm.StatusServing}, "", subjects.LayoutLegacy, now, cfg))
	ct := &kvcm.Location{Status: kvcm.StatusWriting, HasCreateTime: true, CreateTimeUs: now.Add(-2 * time.Hour).UnixMicro()}
	require.True(t, strings.HasPrefix(keptReason(ct, "", subjects.LayoutLocation, now, cfg), "writing_within_grace (age 2h0m0s"))
	require.Equal(t, "status_deleting", keptReason(&kvcm.Location{Status: kvcm.StatusDeleting}, "", subjects.LayoutLegacy, now, cfg))
}

func TestHumanFormats(t *testing.T) {
	require.Equal(t, "512 B", humanBytes(512))
	require.Equal(t, "1.5 KiB", humanBytes(1536))
	require.Equal(t, "3.0 GiB", humanBytes(3<<30))
	require.Equal(t, "250ms", humanDuration(250*time.Millisecond))
	require.Equal(t, "1.5s", humanDuration(1500*time.Millisecond))
	require.Equal(t, "1h1m1s", humanDuration(time.Hour+time.Minute+time.Second+300*time.Millisecond))
	require.Equal(t, "3d2h0m0s", humanDuration(74*time.Hour))
	require.Equal(t, "-2s", humanDuration(-2*time.Second))
	require.Equal(t, "a b c", cell("a\tb\nc", 0))
	require.Equal(t, "abc…", cell("abcdef", 4))
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newProgress(&buf, "replay prober", 100)
	p.start, p.now = clock, func() time.Time { return clock }
	p.Add(10) // within the first half second: silent
	require.Empty(t, buf.String())
	clock = clock.Add(time.Second)
	p.Add(40)
	require.Contains(t, buf.String(), "\rreplay prober [===============               ] 50/100  50% 50/s eta 1s")
	buf.Reset()
	clock = clock.Add(50 * time.Millisecond)
	p.Add(1) // within the redraw interval: silent
	require.Empty(t, buf.String())
	p.Done()
	require.True(t, strings.HasSuffix(buf.String(), "\n"))
	p.Done() // idempotent
	var nilProgress *progress
	nilProgress.Add(1)
	nilProgress.Done()
	require.Nil(t, newProgress(nil, "x", 1))

	// Short reads draw nothing at all.
	buf.Reset()
	q := newProgress(&buf, "read events", 3)
	q.Add(3)
	q.Done()
	require.Empty(t, buf.String())
}

func TestErrWriter(t *testing.T) {
	w := &errWriter{w: failingWriter{}}
	_, err := w.Write([]byte("x"))
	require.Error(t, err)
	_, err = w.Write([]byte("y"))
	require.ErrorIs(t, err, errBroken)
	require.ErrorIs(t, StatusReport{}.WriteTable(failingWriter{}), errBroken)
}

var errBroken = errors.New("broken pipe")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errBroken }

// TestIDCell: a location id is shown whole, and quoted where the table would hide what it is.
func TestIDCell(t *testing.T) {
	for id, want := range map[string]string{
		"":         "-",
		"-":        `"-"`,
		"a1b2c3d4": "a1b2c3d4",
		"kvs#event_report_l1p5#hbm#10.0.0.8:9000": "kvs#event_report_l1p5#hbm#10.0.0.8:9000",
		"kvs#event_report_l2#mem#h:1|x":           "kvs#event_report_l2#mem#h:1|x",
		"é中文🙂":                                    "é中文🙂",
		"with space":                              `"with space"`,
		"tab\there":                               `"tab\there"`,
		"nul\x00":                                 `"nul\x00"`,
		"bad\xff":                                 `"bad\xff"`,
	} {
		require.Equal(t, want, idCell(id), "%q", id)
		if want != "-" && want[0] == '"' {
			back, err := strconv.Unquote(want)
			require.NoError(t, err)
			require.Equal(t, id, back)
		}
	}
}
