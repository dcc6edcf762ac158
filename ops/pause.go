package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/pipeline"
	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// StageAll names every stage at once in Pause and Resume.
const StageAll = "all"

// ErrUnknownStage reports a stage name other than the pausable stages (or all).
var ErrUnknownStage = pipeline.ErrUnknownStage

// PauseState is a stage's pause as the server (or the state bucket) reports it.
type PauseState = pipeline.PauseState

// Stages lists the stages an operator can pause, in pipeline order.
func Stages() []string { return pipeline.Stages() }

// expandStage turns a stage argument into the stages it names.
func expandStage(stage string) ([]string, error) {
	stages := Stages()
	switch {
	case stage == StageAll:
		return stages, nil
	case slices.Contains(stages, stage):
		return []string{stage}, nil
	}
	return nil, fmt.Errorf("%w %q (%s, %s)", ErrUnknownStage, stage, strings.Join(stages, ", "), StageAll)
}

// Pause stops a stage (or all: every stage that writes or unlinks, and those that feed them)
// until the given time. The prober, the deleter and the sweeper are paused with JetStream
// consumer pause: the server delivers nothing to any replica until then, and messages keep
// arriving in the stream, so nothing is lost and every replica stops at once without a
// restart. In-flight messages finish normally. The scanner and the walker, which have no
// consumer, read their pause key in the state bucket (subjects.ScannerPauseKey,
// subjects.WalkerPauseKey) before each tick.
//
// A paused deleter lets the DELETES backlog grow; once it passes the scanner's high-water
// mark the scanner stops scanning by itself (backpressure), which is the intended effect of
// pausing deletions.
func Pause(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	stage string,
	until time.Time,
) ([]PauseState, error) {
	stages, err := expandStage(stage)
	if err != nil {
		return nil, err
	}
	if !until.After(time.Now()) {
		return nil, fmt.Errorf("pause %s until %s: the time is not in the future", stage, until.Format(time.RFC3339))
	}
	var out []PauseState
	for _, st := range stages {
		if stream, cons, ok := pipeline.StageConsumer(names, st); ok {
			resp, err := js.PauseConsumer(ctx, stream, cons, until)
			if err != nil {
				return out, fmt.Errorf("pause consumer %s/%s: %w", stream, cons, err)
			}
			out = append(out, PauseState{Stage: st, Paused: resp.Paused, Until: resp.PauseUntil})
			continue
		}
		key, _ := pipeline.PauseKey(st)
		kv, err := js.KeyValue(ctx, names.StateBucket())
		if err != nil {
			return out, fmt.Errorf("pause %s: open state bucket: %w", st, err)
		}
		p := pipeline.PauseRecord{UntilUs: until.UnixMicro(), SetUs: time.Now().UnixMicro(), By: whoami()}
		val, err := json.Marshal(p)
		if err != nil {
			return out, fmt.Errorf("pause %s: encode: %w", st, err)
		}
		if _, err := kv.Put(ctx, key, val); err != nil {
			return out, fmt.Errorf("pause %s: write %s: %w", st, key, err)
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
		if stream, cons, ok := pipeline.StageConsumer(names, st); ok {
			resp, err := js.ResumeConsumer(ctx, stream, cons)
			if err != nil {
				return out, fmt.Errorf("resume consumer %s/%s: %w", stream, cons, err)
			}
			out = append(out, PauseState{Stage: st, Paused: resp.Paused})
			continue
		}
		key, _ := pipeline.PauseKey(st)
		kv, err := js.KeyValue(ctx, names.StateBucket())
		if err != nil {
			return out, fmt.Errorf("resume %s: open state bucket: %w", st, err)
		}
		if err := kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return out, fmt.Errorf("resume %s: delete %s: %w", st, key, err)
		}
		out = append(out, PauseState{Stage: st})
	}
	return out, nil
}

// whoami names the operator's process in records it writes.
func whoami() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
