package subjects

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ConflictError reports an existing JetStream object that Ensure could not create or update to
// the wanted configuration. Fields lists the managed fields whose existing value differs from
// the wanted one, those the server never updates first and marked so (for example
// "retention: have WorkQueue, want Limits (not updatable)"), and the other streams whose
// subjects overlap; Err is the server's answer. The cure is an operator's: delete or fix the
// object (after draining it), or change the prefix.
type ConflictError struct {
	Kind   string // "stream", "consumer" or "bucket"
	Name   string // the stream or bucket name; "<stream>/<consumer>" for a consumer
	Fields []string
	Err    error
}

func (e *ConflictError) Error() string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf("ensure %s %q: server refused the wanted config: %v", e.Kind, e.Name, e.Err)
	}
	return fmt.Sprintf("ensure %s %q: existing config conflicts in %s: %v",
		e.Kind, e.Name, strings.Join(e.Fields, "; "), e.Err)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// Ensure creates or updates every stream, consumer and bucket (idempotent). An existing object
// whose config cannot be updated to the wanted one gives an error naming the object and the
// conflicting fields.
//
// An object whose managed fields already have the wanted values is left alone: a second run
// sends no update, and a process allowed only to read object info can run Ensure against a
// prepared deployment. Fields Ensure does not manage (compression, placement, metadata …) are
// reset to their defaults whenever it does have to update an object.
func Ensure(ctx context.Context, js jetstream.JetStream, n Names, s Settings) error {
	if err := n.Validate(); err != nil {
		return fmt.Errorf("ensure topology: %w", err)
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("ensure topology: %w", err)
	}
	top := n.Topology(s)
	for _, cfg := range top.Streams {
		if err := ensureStream(ctx, js, cfg); err != nil {
			return err
		}
		if cc, ok := top.Consumers[cfg.Name]; ok {
			if err := ensureConsumer(ctx, js, cfg.Name, cc); err != nil {
				return err
			}
		}
	}
	for _, cfg := range top.Buckets {
		if err := ensureBucket(ctx, js, cfg); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	var have *jetstream.StreamConfig
	st, err := js.Stream(ctx, want.Name)
	switch {
	case err == nil:
		cfg := st.CachedInfo().Config
		if len(streamDiff(cfg, want)) == 0 {
			return nil
		}
		have = &cfg
	case errors.Is(err, jetstream.ErrStreamNotFound):
	default:
		return fmt.Errorf("ensure stream %q: read info: %w", want.Name, err)
	}
	if have == nil {
		// Create, not create-or-update: when another process created the stream in the
		// meantime, compare again rather than rewrite an identical config (a needless update
		// also races the server's own consumer creation).
		_, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, rerr := js.Stream(ctx, want.Name)
			if rerr != nil {
				return fmt.Errorf("ensure stream %q: read info: %w", want.Name, rerr)
			}
			cfg := st.CachedInfo().Config
			if len(streamDiff(cfg, want)) == 0 {
				return nil
			}
			have = &cfg
			_, err = js.UpdateStream(ctx, want)
		}
	} else {
		_, err = js.UpdateStream(ctx, want)
	}
	if err != nil {
		ce := &ConflictError{Kind: "stream", Name: want.Name, Err: err}
		if have != nil {
			ce.Fields = streamDiff(*have, want)
		}
		ce.Fields = append(ce.Fields, overlapping(ctx, js, want)...)
		return ce
	}
	return nil
}

// overlapping names the other streams whose subjects overlap want's: the server refuses a
// stream that would share a subject with another one.
func overlapping(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) []string {
	var out []string
	for _, subj := range want.Subjects {
		l := js.ListStreams(ctx, jetstream.WithStreamListSubject(subj))
		for info := range l.Info() {
			if info.Config.Name != want.Name {
				out = append(out, fmt.Sprintf("subjects: %q overlaps stream %q (subjects %q)",
					subj, info.Config.Name, info.Config.Subjects))
			}
		}
	}
	return out
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig) error {
	name := stream + "/" + want.Durable
	var have *jetstream.ConsumerConfig
	c, err := js.Consumer(ctx, stream, want.Durable)
	switch {
	case err == nil:
		cfg := c.CachedInfo().Config
		if len(consumerDiff(cfg, want)) == 0 {
			return nil
		}
		have = &cfg
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	default:
		return fmt.Errorf("ensure consumer %q: read info: %w", name, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, want); err != nil {
		ce := &ConflictError{Kind: "consumer", Name: name, Err: err}
		if have != nil {
			ce.Fields = consumerDiff(*have, want)
		}
		return ce
	}
	return nil
}

func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) error {
	var have *jetstream.StreamConfig
	// A bucket is the stream "KV_<bucket>"; its info holds everything bucketDiff compares.
	st, err := js.Stream(ctx, kvStreamPrefix+want.Bucket)
	switch {
	case err == nil:
		cfg := st.CachedInfo().Config
		if len(bucketDiff(cfg, want)) == 0 {
			return nil
		}
		have = &cfg
	case errors.Is(err, jetstream.ErrStreamNotFound):
	default:
		return fmt.Errorf("ensure bucket %q: read info: %w", want.Bucket, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, want); err != nil {
		ce := &ConflictError{Kind: "bucket", Name: want.Bucket, Err: err}
		if have != nil {
			ce.Fields = bucketDiff(*have, want)
		}
		return ce
	}
	return nil
}

// kvStreamPrefix names the stream behind a KV bucket.
const kvStreamPrefix = "KV_"

// field is one managed field of a config: its JSON name, whether the server can change it
// on an existing object, and both values as text.
type field struct {
	name      string
	immutable bool
	have      string
	want      string
}

// describe returns the differing fields, those the server cannot update first.
func describe(fields []field) []string {
	var fixed, other []string
	for _, f := range fields {
		if f.have == f.want {
			continue
		}
		d := fmt.Sprintf("%s: have %s, want %s", f.name, f.have, f.want)
		if f.immutable {
			fixed = append(fixed, d+" (not updatable)")
		} else {
			other = append(other, d)
		}
	}
	return append(fixed, other...)
}

func str(v any) string { return fmt.Sprint(v) }

// streamDiff compares the fields Topology sets on a stream.
func streamDiff(have, want jetstream.StreamConfig) []string {
	return describe([]field{
		// The server refuses to change retention to or from work-queue, and storage at all.
		{"retention", true, have.Retention.String(), want.Retention.String()},
		{"storage", true, have.Storage.String(), want.Storage.String()},
		{"subjects", false, fmt.Sprintf("%q", have.Subjects), fmt.Sprintf("%q", want.Subjects)},
		{"discard", false, have.Discard.String(), want.Discard.String()},
		{"max_age", false, have.MaxAge.String(), want.MaxAge.String()},
		{"max_bytes", false, str(have.MaxBytes), str(want.MaxBytes)},
		{"max_msgs", false, str(have.MaxMsgs), str(want.MaxMsgs)},
		{"duplicate_window", false, have.Duplicates.String(), want.Duplicates.String()},
		{"num_replicas", false, str(have.Replicas), str(want.Replicas)},
		{"allow_direct", false, str(have.AllowDirect), str(want.AllowDirect)},
		{"description", false, fmt.Sprintf("%q", have.Description), fmt.Sprintf("%q", want.Description)},
	})
}

// serverMaxWaiting is the server's default MaxWaiting of a pull consumer, which Topology leaves
// unset; an existing consumer with another value cannot be updated.
const serverMaxWaiting = 512

// consumerDiff compares the fields Topology sets on a consumer.
func consumerDiff(have, want jetstream.ConsumerConfig) []string {
	filter := func(c jetstream.ConsumerConfig) string {
		fs := slices.Clone(c.FilterSubjects)
		if c.FilterSubject != "" {
			fs = append(fs, c.FilterSubject)
		}
		return fmt.Sprintf("%q", fs)
	}
	kind := func(c jetstream.ConsumerConfig) string {
		if c.DeliverSubject != "" {
			return "push (deliver subject " + c.DeliverSubject + ")"
		}
		return "pull"
	}
	wantWaiting := want.MaxWaiting
	if wantWaiting == 0 {
		wantWaiting = serverMaxWaiting
	}
	return describe([]field{
		{"deliver_subject", true, kind(have), kind(want)},
		{"deliver_policy", true, have.DeliverPolicy.String(), want.DeliverPolicy.String()},
		{"ack_policy", true, have.AckPolicy.String(), want.AckPolicy.String()},
		{"replay_policy", true, have.ReplayPolicy.String(), want.ReplayPolicy.String()},
		{"max_waiting", true, str(have.MaxWaiting), str(wantWaiting)},
		{"filter_subject", false, filter(have), filter(want)},
		{"ack_wait", false, have.AckWait.String(), want.AckWait.String()},
		{"max_deliver", false, str(have.MaxDeliver), str(want.MaxDeliver)},
		{"max_ack_pending", false, str(have.MaxAckPending), str(want.MaxAckPending)},
		{"backoff", false, str(have.BackOff), str(want.BackOff)},
		{"description", false, fmt.Sprintf("%q", have.Description), fmt.Sprintf("%q", want.Description)},
	})
}

// bucketDiff compares the stream behind a bucket with the fields Topology sets on the bucket
// (the client maps History to MaxMsgsPerSubject and TTL to MaxAge).
func bucketDiff(have jetstream.StreamConfig, want jetstream.KeyValueConfig) []string {
	history := int64(want.History)
	if history == 0 {
		history = 1
	}
	return describe([]field{
		{"storage", true, have.Storage.String(), want.Storage.String()},
		{"subjects", false, fmt.Sprintf("%q", have.Subjects), fmt.Sprintf("%q", []string{"$KV." + want.Bucket + ".>"})},
		{"history", false, str(have.MaxMsgsPerSubject), str(history)},
		{"ttl", false, have.MaxAge.String(), want.TTL.String()},
		{"num_replicas", false, str(have.Replicas), str(want.Replicas)},
		{"description", false, fmt.Sprintf("%q", have.Description), fmt.Sprintf("%q", want.Description)},
	})
}
