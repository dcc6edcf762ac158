package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// ScannerPauseKey is the key of the scanner's pause in the state bucket. The scanner has no
// consumer to pause, so an operator's pause is a value it reads before every tick.
const ScannerPauseKey = pipeline.ScannerPauseKey

// StageAll names every stage at once in Pause and Resume.
const StageAll = "all"

// ErrUnknownStage reports a stage name other than scanner, prober, deleter (or all).
var ErrUnknownStage = errors.New("unknown stage")

// ScannerPause is the value of ScannerPauseKey: the scanner starts no tick before UntilUs. An
// expired value is harmless, so Resume may delete it or leave it to age out.
type ScannerPause struct {
	UntilUs int64  `json:"until_us"`     // µs since the epoch; no tick starts before it
	SetUs   int64  `json:"set_us"`       // when the pause was set, µs since the epoch
	By      string `json:"by,omitempty"` // who set it (host/pid of the operator's command)
}

// Until is UntilUs as a time.
func (p ScannerPause) Until() time.Time { return time.UnixMicro(p.UntilUs) }

// Active reports whether the pause still holds at now.
func (p ScannerPause) Active(now time.Time) bool { return now.UnixMicro() < p.UntilUs }

// ReadScannerPause returns the stored scanner pause, or nil when there is none.
func ReadScannerPause(ctx context.Context, state jetstream.KeyValue) (*ScannerPause, error) {
	e, err := state.Get(ctx, ScannerPauseKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read scanner pause: %w", err)
	}
	var p ScannerPause
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, fmt.Errorf("decode scanner pause %q: %w", e.Value(), err)
	}
	return &p, nil
}

// PauseState is a stage's pause as the server (or the state bucket) reports it.
type PauseState struct {
	Stage  string    `json:"stage"`
	Paused bool      `json:"paused"`
	Until  time.Time `json:"until,omitzero"`
}

// Stages lists the stages in pipeline order.
func Stages() []string {
	return []string{pipeline.StageScanner, pipeline.StageProber, pipeline.StageDeleter}
}

// expandStage turns a stage argument into the stages it names.
func expandStage(stage string) ([]string, error) {
	switch stage {
	case pipeline.StageScanner, pipeline.StageProber, pipeline.StageDeleter:
		return []string{stage}, nil
	case StageAll:
		return Stages(), nil
	default:
		return nil, fmt.Errorf("%w %q (scanner, prober, deleter, all)", ErrUnknownStage, stage)
	}
}

// stageConsumer returns the stream and durable consumer a stage reads; ok is false for the
// scanner, which reads no stream.
func stageConsumer(names subjects.Names, stage string) (stream, consumer string, ok bool) {
	switch stage {
	case pipeline.StageProber:
		return names.BatchesStream(), names.ProberConsumer(), true
	case pipeline.StageDeleter:
		return names.DeletesStream(), names.DeleterConsumer(), true
	}
	return "", "", false
}

// Pause stops a stage (or all) until the given time. The prober and the deleter are paused
// with JetStream consumer pause: the server delivers nothing to any replica until then, and
// messages keep arriving in the stream, so nothing is lost and every replica stops at once
// without a restart. In-flight messages finish normally. The scanner, which has no consumer,
// reads ScannerPauseKey in the state bucket before each tick.
//
// A paused deleter lets the DELETES backlog grow; once it passes the scanner's high-water
// mark the scanner stops scanning by itself (backpressure), which is the intended effect of
// pausing deletions.
func Pause(ctx context.Context, js jetstream.JetStream, names subjects.Names, stage string, until time.Time) ([]PauseState, error) {
	stages, err := expandStage(stage)
	if err != nil {
		return nil, err
	}
	if !until.After(time.Now()) {
		return nil, fmt.Errorf("pause %s until %s: the time is not in the future", stage, until.Format(time.RFC3339))
	}
	var out []PauseState
	for _, st := range stages {
		if stream, cons, ok := stageConsumer(names, st); ok {
			resp, err := js.PauseConsumer(ctx, stream, cons, until)
			if err != nil {
				return out, fmt.Errorf("pause consumer %s/%s: %w", stream, cons, err)
			}
			out = append(out, PauseState{Stage: st, Paused: resp.Paused, Until: resp.PauseUntil})
			continue
		}
		kv, err := js.KeyValue(ctx, names.StateBucket())
		if err != nil {
			return out, fmt.Errorf("pause scanner: open state bucket: %w", err)
		}
		p := ScannerPause{UntilUs: until.UnixMicro(), SetUs: time.Now().UnixMicro(), By: whoami()}
		val, err := json.Marshal(p)
		if err != nil {
			return out, fmt.Errorf("pause scanner: encode: %w", err)
		}
		if _, err := kv.Put(ctx, ScannerPauseKey, val); err != nil {
			return out, fmt.Errorf("pause scanner: write %s: %w", ScannerPauseKey, err)
		}
		out = append(out, PauseState{Stage: st, Paused: true, Until: p.Until()})
	}
	return out, nil
}

// Resume lifts a stage's pause (or all) at once.
func Resume(ctx context.Context, js jetstream.JetStream, names subjects.Names, stage string) ([]PauseState, error) {
	stages, err := expandStage(stage)
	if err != nil {
		return nil, err
	}
	var out []PauseState
	for _, st := range stages {
		if stream, cons, ok := stageConsumer(names, st); ok {
			resp, err := js.ResumeConsumer(ctx, stream, cons)
			if err != nil {
				return out, fmt.Errorf("resume consumer %s/%s: %w", stream, cons, err)
			}
			out = append(out, PauseState{Stage: st, Paused: resp.Paused})
			continue
		}
		kv, err := js.KeyValue(ctx, names.StateBucket())
		if err != nil {
			return out, fmt.Errorf("resume scanner: open state bucket: %w", err)
		}
		if err := kv.Delete(ctx, ScannerPauseKey); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return out, fmt.Errorf("resume scanner: delete %s: %w", ScannerPauseKey, err)
		}
		out = append(out, PauseState{Stage: st})
	}
	return out, nil
}

// StagePause reads a stage's current pause.
func StagePause(ctx context.Context, js jetstream.JetStream, names subjects.Names, stage string) (PauseState, error) {
	if stream, cons, ok := stageConsumer(names, stage); ok {
		c, err := js.Consumer(ctx, stream, cons)
		if err != nil {
			return PauseState{Stage: stage}, fmt.Errorf("read consumer %s/%s: %w", stream, cons, err)
		}
		return ConsumerPause(stage, c.CachedInfo()), nil
	}
	if stage != pipeline.StageScanner {
		return PauseState{Stage: stage}, fmt.Errorf("%w %q", ErrUnknownStage, stage)
	}
	kv, err := js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		return PauseState{Stage: stage}, fmt.Errorf("open state bucket: %w", err)
	}
	p, err := ReadScannerPause(ctx, kv)
	if err != nil || p == nil || !p.Active(time.Now()) {
		return PauseState{Stage: stage}, err
	}
	return PauseState{Stage: stage, Paused: true, Until: p.Until()}, nil
}

// ConsumerPause reads the pause out of a consumer's info. The server reports the remaining
// time; the configured PauseUntil is the exact end when present.
func ConsumerPause(stage string, info *jetstream.ConsumerInfo) PauseState {
	st := PauseState{Stage: stage}
	if info == nil || !info.Paused {
		return st
	}
	st.Paused = true
	switch {
	case info.Config.PauseUntil != nil:
		st.Until = *info.Config.PauseUntil
	case !info.TimeStamp.IsZero():
		st.Until = info.TimeStamp.Add(info.PauseRemaining)
	default:
		st.Until = time.Now().Add(info.PauseRemaining)
	}
	return st
}

// whoami names the operator's process in records it writes.
func whoami() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
