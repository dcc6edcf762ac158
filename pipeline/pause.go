package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// An operator pauses a stage until a time. The stages that read a stream (prober, deleter,
// sweeper) are paused with JetStream consumer pause: the server delivers nothing to any
// replica until then. The walks (scanner, walker) have no consumer: their pause is a value in
// the state bucket (PauseRecord under subjects.ScannerPauseKey or subjects.WalkerPauseKey)
// that every walk reads before it moves (Controls). Here is how a pause is read; package ops
// sets and lifts them.

// Stages lists the stages an operator can pause, in pipeline order: the metadata's three,
// then the sweep's two. Each of them writes or unlinks something, or feeds a stage that does.
func Stages() []string {
	return []string{StageScanner, StageProber, StageDeleter, StageWalker, StageSweeper}
}

// UntilResumed is the end of a pause given none (kvcm-gc pause without --for or --until): a
// hundred years on, so that the pause lasts until an operator resumes the stage. A pause of a
// deleter under investigation must never end by itself; a forgotten one only delays
// collection, and the alert KvcmGcStagePausedLong says so after 12 hours.
func UntilResumed(now time.Time) time.Time { return now.AddDate(100, 0, 0) }

// PauseEnd says when a pause ending at until ends, for people: "until resumed" for a pause
// given no end (UntilResumed), else "until <RFC 3339 time>".
func PauseEnd(until, now time.Time) string {
	if until.After(now.AddDate(50, 0, 0)) {
		return "until resumed"
	}
	return "until " + until.UTC().Format(time.RFC3339)
}

// PauseRecord is the value of a walk's pause key: no walk moves before UntilUs. An expired
// value is harmless, so a resume may delete it or leave it to age out.
type PauseRecord struct {
	UntilUs int64  `json:"until_us"`     // µs since the epoch; no walk moves before it
	SetUs   int64  `json:"set_us"`       // when the pause was set, µs since the epoch
	By      string `json:"by,omitempty"` // who set it (host/pid of the operator's command)
}

// Until is UntilUs as a time.
func (p PauseRecord) Until() time.Time { return time.UnixMicro(p.UntilUs) }

// Active reports whether the pause still holds at now.
func (p PauseRecord) Active(now time.Time) bool { return now.UnixMicro() < p.UntilUs }

// PauseKey is the state-bucket key of a walk's pause; ok is false for a stage that is
// paused by its consumer (or is no stage).
func PauseKey(stage string) (key string, ok bool) {
	switch stage {
	case StageScanner:
		return subjects.ScannerPauseKey, true
	case StageWalker:
		return subjects.WalkerPauseKey, true
	}
	return "", false
}

// StageConsumer returns the stream and durable consumer a stage reads; ok is false for a
// walk, which reads no stream (or for no stage).
func StageConsumer(names subjects.Names, stage string) (stream, consumer string, ok bool) {
	switch stage {
	case StageProber:
		return names.BatchesStream(), names.ProberConsumer(), true
	case StageDeleter:
		return names.DeletesStream(), names.DeleterConsumer(), true
	case StageSweeper:
		return names.SweepStream(), names.SweeperConsumer(), true
	}
	return "", "", false
}

// ReadPause returns the pause stored under key, or nil when there is none.
func ReadPause(ctx context.Context, state jetstream.KeyValue, key string) (*PauseRecord, error) {
	e, err := state.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pause %s: %w", key, err)
	}
	var p PauseRecord
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, fmt.Errorf("decode pause %s %q: %w", key, e.Value(), err)
	}
	return &p, nil
}

// ErrUnknownStage reports a stage name that is none of Stages.
var ErrUnknownStage = errors.New("unknown stage")

// PauseState is a stage's pause as the server (or the state bucket) reports it.
type PauseState struct {
	Stage  string    `json:"stage"`
	Paused bool      `json:"paused"`
	Until  time.Time `json:"until,omitzero"`
}

// StagePause reads a stage's current pause.
func StagePause(ctx context.Context, js jetstream.JetStream, names subjects.Names, stage string) (PauseState, error) {
	if stream, cons, ok := StageConsumer(names, stage); ok {
		c, err := js.Consumer(ctx, stream, cons)
		if err != nil {
			return PauseState{Stage: stage}, fmt.Errorf("read consumer %s/%s: %w", stream, cons, err)
		}
		return ConsumerPause(stage, c.CachedInfo()), nil
	}
	key, ok := PauseKey(stage)
	if !ok {
		return PauseState{Stage: stage}, fmt.Errorf("%w %q", ErrUnknownStage, stage)
	}
	kv, err := js.KeyValue(ctx, names.StateBucket())
	if err != nil {
		return PauseState{Stage: stage}, fmt.Errorf("open state bucket: %w", err)
	}
	p, err := ReadPause(ctx, kv, key)
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
