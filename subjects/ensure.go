package subjects

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/internal/backoff"
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

// Defaults of Ensure's retries.
const (
	// DefaultCallTimeout bounds one JetStream request of Ensure: a request sent while the
	// cluster elects a leader gets no answer, and is better sent again than waited on.
	DefaultCallTimeout = 2 * time.Second
	// EnsureRetryInitial and EnsureRetryMax are the waits between Ensure's attempts.
	EnsureRetryInitial = 100 * time.Millisecond
	EnsureRetryMax     = 5 * time.Second
)

// EnsureOption tunes Ensure.
type EnsureOption func(*ensureOptions)

type ensureOptions struct {
	log         *slog.Logger
	callTimeout time.Duration
	retry       backoff.Policy
	update      bool
}

// WithEnsureLogger receives a line per failed attempt that Ensure retries; nil discards them.
func WithEnsureLogger(l *slog.Logger) EnsureOption { return func(o *ensureOptions) { o.log = l } }

// WithCallTimeout bounds each JetStream request (default DefaultCallTimeout).
func WithCallTimeout(d time.Duration) EnsureOption {
	return func(o *ensureOptions) {
		if d > 0 {
			o.callTimeout = d
		}
	}
}

// WithUpdate makes EnsureReport update the existing objects that differ from the configuration
// in fields the server updates in place (a stream's max_bytes, max_age, replicas; a consumer's
// max_ack_pending, ack_wait, max_deliver; a bucket's ttl, history …), all or nothing: when an
// object differs in a field the server cannot update (FieldDiff.Updatable false), nothing at
// all is updated and that object is reported as differing. An update carries the existing
// object's other fields over unchanged: fields EnsureReport does not manage keep their
// values, and a consumer paused by an operator stays paused.
func WithUpdate() EnsureOption { return func(o *ensureOptions) { o.update = true } }

// WithEnsureRetry sets the waits between attempts (default EnsureRetryInitial doubling up to
// EnsureRetryMax, with jitter).
func WithEnsureRetry(p backoff.Policy) EnsureOption { return func(o *ensureOptions) { o.retry = p } }

// Ensure creates or updates every stream, consumer and bucket (idempotent), and keeps trying
// until the topology is as wanted, a real conflict is found, or ctx ends.
//
// Processes of a deployment start together, on a cluster that may still be electing its
// leaders: a request that times out, an answer that the system is temporarily unavailable or
// short of peers, another process creating the same object first — none of that is a
// failure. Ensure sends every request with its own short timeout and, when an attempt fails
// that way, starts it over after a wait of the backoff policy. What waiting cannot cure ends
// it at once: an existing object whose config cannot be updated to the wanted one (a
// *ConflictError naming the object and the fields that differ), or any other refusal of the
// server (permissions, a server without JetStream).
//
// An object whose managed fields already have the wanted values is left alone: a second run
// sends no update, and a process allowed only to read object info can run Ensure against a
// prepared deployment. Fields Ensure does not manage (compression, placement, metadata …) are
// reset to their defaults whenever it does have to update an object.
func Ensure(ctx context.Context, js jetstream.JetStream, n Names, s Settings, opts ...EnsureOption) error {
	if err := n.Validate(); err != nil {
		return fmt.Errorf("ensure topology: %w", err)
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("ensure topology: %w", err)
	}
	if err := replicasFit(js, s); err != nil {
		return fmt.Errorf("ensure topology: %w", err)
	}
	o := ensureOptions{callTimeout: DefaultCallTimeout, retry: backoff.New(EnsureRetryInitial, EnsureRetryMax)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	return ensurer{js: js, timeout: o.callTimeout}.run(ctx, n.Topology(s), o)
}

// Object states of EnsureReport.
const (
	StateCreated   = "created"   // it did not exist; created as wanted
	StateIdentical = "identical" // it exists with every managed field as wanted
	StateDiffers   = "differs"   // it exists with fields that differ; left as it is
	StateUpdated   = "updated"   // it existed with fields that differ; updated in place (WithUpdate)
)

// ObjectState is one stream, consumer or bucket as EnsureReport left it.
type ObjectState struct {
	Kind  string `json:"kind"` // "stream", "consumer" or "bucket"
	Name  string `json:"name"` // the stream or bucket name; "<stream>/<consumer>" for a consumer
	State string `json:"state"`
	// Fields are the managed fields whose existing value differs from the wanted one
	// (StateDiffers), those the server cannot update first; for StateUpdated, the fields the
	// update changed, Have being the value before it.
	Fields []FieldDiff `json:"fields,omitempty"`
}

// FieldDiff is one managed field of an existing object whose value differs from the wanted one.
type FieldDiff struct {
	Field string `json:"field"` // its JSON name, e.g. max_age
	Have  string `json:"have"`
	Want  string `json:"want"`
	// Updatable is false for a field the server never changes on an existing object
	// (retention, storage, a consumer's deliver and ack policies, …): only deleting and
	// creating the object again changes it.
	Updatable bool `json:"updatable"`
}

func (d FieldDiff) String() string {
	s := fmt.Sprintf("%s: have %s, want %s", d.Field, d.Have, d.Want)
	if !d.Updatable {
		s += " (not updatable)"
	}
	return s
}

// EnsureReport is Ensure for an operator who must see a change before it is made: it creates
// every stream, consumer and bucket that is missing, changes none that exists, and returns the
// state of each, in the order of the topology (streams each followed by its consumer, then the
// buckets): created, identical, or differing field by field. It retries what heals by itself
// as Ensure does; an object it cannot create is an error (a *ConflictError when the server
// refuses it, e.g. for subjects another stream holds).
func EnsureReport(
	ctx context.Context,
	js jetstream.JetStream,
	n Names,
	s Settings,
	opts ...EnsureOption,
) ([]ObjectState, error) {
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("ensure topology: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("ensure topology: %w", err)
	}
	if err := replicasFit(js, s); err != nil {
		return nil, fmt.Errorf("ensure topology: %w", err)
	}
	o := ensureOptions{callTimeout: DefaultCallTimeout, retry: backoff.New(EnsureRetryInitial, EnsureRetryMax)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	r := &report{created: map[string]bool{}}
	top := n.Topology(s)
	e := ensurer{js: js, timeout: o.callTimeout, report: r}
	if err := e.run(ctx, top, o); err != nil {
		return nil, err
	}
	if !o.update {
		return r.objects, nil
	}
	for _, obj := range r.objects {
		if obj.State == StateDiffers && !allUpdatable(obj.Fields) {
			// All or nothing: the operator first settles what cannot be updated, then one
			// run applies everything, rather than a deployment left half tuned.
			return r.objects, nil
		}
	}
	for i, obj := range r.objects {
		if obj.State != StateDiffers {
			continue
		}
		var changed []FieldDiff
		lost := false // an attempt failed on a lost answer: the server may have applied it
		err := o.retry.Retry(ctx, func(ctx context.Context) error {
			var err error
			changed, err = e.update(ctx, top, obj)
			if err != nil && !Transient(err) {
				return backoff.Permanent(err)
			}
			return err
		}, func(err error, failures int, wait time.Duration) {
			lost = true
			o.log.Warn("update jetstream object; retrying",
				"kind", obj.Kind, "name", obj.Name, "failures", failures, "retry_in", wait,
				"err", err)
		})
		if err != nil {
			return r.objects, err
		}
		r.objects[i].State, r.objects[i].Fields = StateUpdated, changed
		switch {
		case len(changed) == 0 && lost:
			// An earlier attempt's update was applied and its answer lost (a timeout under
			// load): this run updated it, with the fields it found differing.
			r.objects[i].Fields = obj.Fields
		case len(changed) == 0:
			// Someone else made it as wanted meanwhile.
			r.objects[i].State, r.objects[i].Fields = StateIdentical, nil
		}
	}
	return r.objects, nil
}

func allUpdatable(diff []FieldDiff) bool {
	for _, d := range diff {
		if !d.Updatable {
			return false
		}
	}
	return true
}

// report is what EnsureReport found. created outlives a failed attempt: an object created by
// it is found identical by the next one, and was still created by this run.
type report struct {
	objects []ObjectState
	created map[string]bool // by kind + " " + name
}

func (r *report) add(kind, name, state string, fields []FieldDiff) {
	id := kind + " " + name
	switch {
	case state == StateCreated:
		r.created[id] = true
	case state == StateIdentical && r.created[id]:
		state = StateCreated
	}
	r.objects = append(r.objects, ObjectState{Kind: kind, Name: name, State: state, Fields: fields})
}

// run makes attempts at the whole topology until one succeeds, a failure that waiting cannot
// cure, or ctx ends.
func (e ensurer) run(ctx context.Context, top Topology, o ensureOptions) error {
	return o.retry.Retry(ctx, func(ctx context.Context) error {
		if e.report != nil {
			e.report.objects = nil
		}
		err := e.all(ctx, top)
		if err != nil && !Transient(err) {
			return backoff.Permanent(err)
		}
		return err
	}, func(err error, failures int, wait time.Duration) {
		o.log.Warn("ensure jetstream topology; retrying", "failures", failures, "retry_in", wait, "err", err)
	})
}

// Transient reports whether err is a JetStream failure that heals by itself and is worth
// retrying: no answer in time, no responder yet, a connection being re-established, or the
// server saying it cannot serve the request at the moment (no leader, a leader change, too
// few peers, an object offline). A refusal of the request itself (a conflict, bad config,
// permissions, an unknown object) is not transient.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{errRaced, context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders,
		nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrNoServers, jetstream.ErrNoHeartbeat} {
		if errors.Is(err, e) {
			return true
		}
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10004, // cluster incomplete results
			10007, // cluster not assigned to this server
			10008, // JetStream system temporarily unavailable
			10009, // cluster can not handle request (no leader)
			10023, // insufficient resources (peers not known yet)
			10041, // raft general error
			10075, // peer remap failed
			10118, // stream offline
			10119, // consumer offline
			10194, // stream offline: reason
			10195, // consumer offline: reason
			10202: // cluster member change in progress
			return true
		}
	}
	return false
}

// replicasFit refuses, before anything is created, replicas a server outside any cluster
// cannot give: such a server refuses every replicated stream ("replicas > 1 not supported in
// non-clustered mode"), and the operator should read which setting to change rather than
// the first stream's refusal. The size of a cluster is not known to a client (a server may
// not advertise its peers), so within one the server's answer decides.
func replicasFit(js jetstream.JetStream, s Settings) error {
	nc := js.Conn()
	if s.Replicas <= 1 || nc == nil || !nc.IsConnected() || nc.ConnectedClusterName() != "" {
		return nil
	}
	return fmt.Errorf("jetstream.replicas is %d, but the NATS server %s is not part of a cluster "+
		"(a cluster of 1 server): "+
		"a stream has at most one replica per server; set jetstream.replicas to 1, or run "+
		"JetStream as a cluster of at least %d servers",
		s.Replicas, nc.ConnectedServerName(), s.Replicas)
}

// errRaced: an object another process was creating or deleting at the same time was not
// there when read again; the next attempt finds it in one state or the other.
var errRaced = errors.New("created and removed again by another process")

// ensurer sends Ensure's requests, each with its own timeout. With a report (EnsureReport)
// it creates what is missing, updates nothing, and records every object's state.
type ensurer struct {
	js      jetstream.JetStream
	timeout time.Duration
	report  *report
}

// found records an existing object's state (report mode) and says whether Ensure is done with
// it: when it is identical, or when a report leaves it as it is.
func (e ensurer) found(kind, name string, diff []FieldDiff) bool {
	if e.report == nil {
		return len(diff) == 0
	}
	state := StateIdentical
	if len(diff) > 0 {
		state = StateDiffers
	}
	e.report.add(kind, name, state, diff)
	return true
}

// made records an object this attempt created (report mode).
func (e ensurer) made(kind, name string) {
	if e.report != nil {
		e.report.add(kind, name, StateCreated, nil)
	}
}

// call runs one request under the per-call timeout, or ctx's own deadline if sooner.
func call[T any](ctx context.Context, e ensurer, f func(ctx context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	return f(cctx)
}

// all is one attempt at the whole topology.
func (e ensurer) all(ctx context.Context, top Topology) error {
	for _, cfg := range top.Streams {
		if err := e.stream(ctx, cfg); err != nil {
			return err
		}
		if cc, ok := top.Consumers[cfg.Name]; ok {
			if err := e.consumer(ctx, cfg.Name, cc); err != nil {
				return err
			}
		}
	}
	for _, cfg := range top.Buckets {
		if err := e.bucket(ctx, cfg); err != nil {
			return err
		}
	}
	return nil
}

// refused builds the error of a create or update the server did not do: a transient failure
// as such (the attempt is retried), anything else as a ConflictError.
func refused(kind, name, op string, err error, fields []string) error {
	if Transient(err) {
		return fmt.Errorf("ensure %s %q: %s: %w", kind, name, op, err)
	}
	return &ConflictError{Kind: kind, Name: name, Fields: fields, Err: err}
}

func (e ensurer) stream(ctx context.Context, want jetstream.StreamConfig) error {
	info := func() (*jetstream.StreamConfig, error) {
		st, err := call(ctx, e, func(ctx context.Context) (jetstream.Stream, error) { return e.js.Stream(ctx, want.Name) })
		switch {
		case err == nil:
			cfg := st.CachedInfo().Config
			return &cfg, nil
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, nil
		default:
			return nil, fmt.Errorf("ensure stream %q: read info: %w", want.Name, err)
		}
	}
	have, err := info()
	if err != nil {
		return err
	}
	if have != nil && e.found("stream", want.Name, streamDiff(*have, want)) {
		return nil
	}
	if have == nil {
		// Create, not create-or-update: when another process created the stream in the
		// meantime, compare again rather than rewrite an identical config (a needless update
		// also races the server's own consumer creation).
		_, err = call(ctx, e, func(ctx context.Context) (jetstream.Stream, error) { return e.js.CreateStream(ctx, want) })
		if err == nil {
			e.made("stream", want.Name)
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return refused("stream", want.Name, "create", err, e.overlapping(ctx, want))
		}
		if have, err = info(); err != nil {
			return err
		}
		if have == nil {
			return fmt.Errorf("ensure stream %q: %w", want.Name, errRaced)
		}
		if e.found("stream", want.Name, streamDiff(*have, want)) {
			return nil // created by another process
		}
	}
	update := func(ctx context.Context) (jetstream.Stream, error) { return e.js.UpdateStream(ctx, want) }
	if _, err := call(ctx, e, update); err != nil {
		return refused("stream", want.Name, "update", err,
			append(texts(streamDiff(*have, want)), e.overlapping(ctx, want)...))
	}
	return nil
}

// overlapping names the other streams whose subjects overlap want's: the server refuses a
// stream that would share a subject with another one.
func (e ensurer) overlapping(ctx context.Context, want jetstream.StreamConfig) []string {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var out []string
	for _, subj := range want.Subjects {
		l := e.js.ListStreams(ctx, jetstream.WithStreamListSubject(subj))
		for info := range l.Info() {
			if info.Config.Name != want.Name {
				out = append(out, fmt.Sprintf("subjects: %q overlaps stream %q (subjects %q)",
					subj, info.Config.Name, info.Config.Subjects))
			}
		}
	}
	return out
}

func (e ensurer) consumer(ctx context.Context, stream string, want jetstream.ConsumerConfig) error {
	name := stream + "/" + want.Durable
	var have *jetstream.ConsumerConfig
	c, err := call(ctx, e, func(ctx context.Context) (jetstream.Consumer, error) {
		return e.js.Consumer(ctx, stream, want.Durable)
	})
	switch {
	case err == nil:
		cfg := c.CachedInfo().Config
		if e.found("consumer", name, consumerDiff(cfg, want)) {
			return nil
		}
		have = &cfg
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	default:
		return fmt.Errorf("ensure consumer %q: read info: %w", name, err)
	}
	if e.report != nil {
		// Create only: one created otherwise by another process in the meantime is compared
		// on the next attempt, not changed.
		_, err = call(ctx, e, func(ctx context.Context) (jetstream.Consumer, error) {
			return e.js.CreateConsumer(ctx, stream, want)
		})
		switch {
		case err == nil:
			e.made("consumer", name)
			return nil
		case errors.Is(err, jetstream.ErrConsumerExists):
			return fmt.Errorf("ensure consumer %q: %w", name, errRaced)
		}
		return refused("consumer", name, "create", err, nil)
	}
	// Create-or-update: a consumer created identically by another process in the meantime is
	// simply confirmed.
	_, err = call(ctx, e, func(ctx context.Context) (jetstream.Consumer, error) {
		return e.js.CreateOrUpdateConsumer(ctx, stream, want)
	})
	if err != nil {
		var fields []string
		if have != nil {
			fields = texts(consumerDiff(*have, want))
		}
		return refused("consumer", name, "create or update", err, fields)
	}
	return nil
}

func (e ensurer) bucket(ctx context.Context, want jetstream.KeyValueConfig) error {
	var have *jetstream.StreamConfig
	// A bucket is the stream "KV_<bucket>"; its info holds everything bucketDiff compares.
	st, err := call(ctx, e, func(ctx context.Context) (jetstream.Stream, error) {
		return e.js.Stream(ctx, KVStream(want.Bucket))
	})
	switch {
	case err == nil:
		cfg := st.CachedInfo().Config
		if e.found("bucket", want.Bucket, bucketDiff(cfg, want)) {
			return nil
		}
		have = &cfg
	case errors.Is(err, jetstream.ErrStreamNotFound):
	default:
		return fmt.Errorf("ensure bucket %q: read info: %w", want.Bucket, err)
	}
	if e.report != nil {
		_, err = call(ctx, e, func(ctx context.Context) (jetstream.KeyValue, error) { return e.js.CreateKeyValue(ctx, want) })
		switch {
		case err == nil:
			e.made("bucket", want.Bucket)
			return nil
		case errors.Is(err, jetstream.ErrBucketExists):
			return fmt.Errorf("ensure bucket %q: %w", want.Bucket, errRaced)
		}
		return refused("bucket", want.Bucket, "create", err, nil)
	}
	_, err = call(ctx, e, func(ctx context.Context) (jetstream.KeyValue, error) {
		return e.js.CreateOrUpdateKeyValue(ctx, want)
	})
	if err != nil {
		var fields []string
		if have != nil {
			fields = texts(bucketDiff(*have, want))
		}
		return refused("bucket", want.Bucket, "create or update", err, fields)
	}
	return nil
}

// field is one managed field of a config: its JSON name, whether the server can change it
// on an existing object, and both values as text.
type field struct {
	name      string
	immutable bool
	have      string
	want      string
}

// describe returns the differing fields, those the server cannot update first.
func describe(fields []field) []FieldDiff {
	var fixed, other []FieldDiff
	for _, f := range fields {
		if f.have == f.want {
			continue
		}
		d := FieldDiff{Field: f.name, Have: f.have, Want: f.want, Updatable: !f.immutable}
		if f.immutable {
			fixed = append(fixed, d)
		} else {
			other = append(other, d)
		}
	}
	return append(fixed, other...)
}

// texts are the differing fields as ConflictError.Fields lists them.
func texts(diffs []FieldDiff) []string {
	out := make([]string, len(diffs))
	for i, d := range diffs {
		out[i] = d.String()
	}
	return out
}

func str(v any) string { return fmt.Sprint(v) }

// streamDiff compares the fields Topology sets on a stream.
func streamDiff(have, want jetstream.StreamConfig) []FieldDiff {
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
func consumerDiff(have, want jetstream.ConsumerConfig) []FieldDiff {
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
func bucketDiff(have jetstream.StreamConfig, want jetstream.KeyValueConfig) []FieldDiff {
	history := int64(want.History)
	if history == 0 {
		history = 1
	}
	return describe([]field{
		{"storage", true, have.Storage.String(), want.Storage.String()},
		{"subjects", false, fmt.Sprintf("%q", have.Subjects),
			fmt.Sprintf("%q", []string{KVSubjectPrefix(want.Bucket) + ">"})},
		{"history", false, str(have.MaxMsgsPerSubject), str(history)},
		{"ttl", false, have.MaxAge.String(), want.TTL.String()},
		{"num_replicas", false, str(have.Replicas), str(want.Replicas)},
		// The stages read keys with direct gets only: their permissions name the keys in the
		// direct get's subject (deploy/privileges), which STREAM.MSG.GET cannot.
		{"allow_direct", false, str(have.AllowDirect), str(true)},
		{"description", false, fmt.Sprintf("%q", have.Description), fmt.Sprintf("%q", want.Description)},
	})
}

// update updates one existing object that differs from want (EnsureReport WithUpdate) and
// returns the fields it changed. It reads the object again and sends the existing
// configuration with the managed fields set as wanted, so what EnsureReport does not manage
// stays as it is: above all a consumer's pause (pause_until), which an update without it
// would lift, resuming a deleter an operator paused. A field the server cannot update, found
// now, is a *ConflictError naming it, as is a field the server kept at another value.
func (e ensurer) update(ctx context.Context, top Topology, obj ObjectState) ([]FieldDiff, error) {
	switch obj.Kind {
	case "stream":
		for _, want := range top.Streams {
			if want.Name == obj.Name {
				return e.updateStream(ctx, want)
			}
		}
	case "consumer":
		stream, durable, _ := strings.Cut(obj.Name, "/")
		if want, ok := top.Consumers[stream]; ok && want.Durable == durable {
			return e.updateConsumer(ctx, stream, want)
		}
	case "bucket":
		for _, want := range top.Buckets {
			if want.Bucket == obj.Name {
				return e.updateBucket(ctx, want)
			}
		}
	}
	return nil, fmt.Errorf("update %s %q: not in the topology", obj.Kind, obj.Name)
}

// checkUpdatable refuses an update of an object differing in a field the server cannot update.
func checkUpdatable(kind, name string, diff []FieldDiff) error {
	if allUpdatable(diff) {
		return nil
	}
	return &ConflictError{Kind: kind, Name: name, Fields: texts(diff),
		Err: errors.New("the server cannot update these fields in place: drain, delete and " +
			"create the object again, or keep its value")}
}

// kept reports the fields an update left other than wanted.
func kept(kind, name string, left []FieldDiff) error {
	if len(left) == 0 {
		return nil
	}
	return &ConflictError{
		Kind:   kind,
		Name:   name,
		Fields: texts(left),
		Err:    errors.New("the server accepted the update but kept these values"),
	}
}

func (e ensurer) updateStream(ctx context.Context, want jetstream.StreamConfig) ([]FieldDiff, error) {
	return e.updateStreamConfig(ctx, "stream", want.Name, want.Name,
		func(have jetstream.StreamConfig) []FieldDiff { return streamDiff(have, want) },
		func(cfg *jetstream.StreamConfig) {
			cfg.Subjects, cfg.Discard = want.Subjects, want.Discard
			cfg.MaxAge, cfg.MaxBytes, cfg.MaxMsgs = want.MaxAge, want.MaxBytes, want.MaxMsgs
			cfg.Duplicates, cfg.Replicas = want.Duplicates, want.Replicas
			cfg.AllowDirect, cfg.Description = want.AllowDirect, want.Description
		})
}

// updateStreamConfig is the update of a stream, or of the stream under a bucket: kind and
// name say which object, stream is its stream. It reads the stream's configuration, compares
// it with diff, and when it differs only in fields the server updates in place, sends it back
// with set's changes and compares what the server kept.
func (e ensurer) updateStreamConfig(
	ctx context.Context,
	kind, name, stream string,
	diff func(have jetstream.StreamConfig) []FieldDiff,
	set func(cfg *jetstream.StreamConfig),
) ([]FieldDiff, error) {
	st, err := call(ctx, e, func(ctx context.Context) (jetstream.Stream, error) { return e.js.Stream(ctx, stream) })
	if err != nil {
		return nil, fmt.Errorf("update %s %q: read info: %w", kind, name, err)
	}
	have := st.CachedInfo().Config
	d := diff(have)
	if len(d) == 0 {
		return nil, nil
	}
	if err := checkUpdatable(kind, name, d); err != nil {
		return nil, err
	}
	cfg := have
	set(&cfg)
	got, err := call(ctx, e, func(ctx context.Context) (jetstream.Stream, error) { return e.js.UpdateStream(ctx, cfg) })
	if err != nil {
		return nil, refused(kind, name, "update", err, texts(d))
	}
	return d, kept(kind, name, diff(got.CachedInfo().Config))
}

func (e ensurer) updateConsumer(
	ctx context.Context,
	stream string,
	want jetstream.ConsumerConfig,
) ([]FieldDiff, error) {
	name := stream + "/" + want.Durable
	c, err := call(ctx, e, func(ctx context.Context) (jetstream.Consumer, error) {
		return e.js.Consumer(ctx, stream, want.Durable)
	})
	if err != nil {
		return nil, fmt.Errorf("update consumer %q: read info: %w", name, err)
	}
	have := c.CachedInfo().Config
	diff := consumerDiff(have, want)
	if len(diff) == 0 {
		return nil, nil
	}
	if err := checkUpdatable("consumer", name, diff); err != nil {
		return nil, err
	}
	// have carries pause_until. The server keeps a consumer's pause through an update anyway
	// (it sets the request's back to its own), and the request then says what is meant: a
	// paused deleter deletes nothing until the operator resumes it or the pause ends (§8.7).
	cfg := have
	cfg.FilterSubject, cfg.FilterSubjects = want.FilterSubject, want.FilterSubjects
	cfg.AckWait, cfg.MaxDeliver, cfg.MaxAckPending = want.AckWait, want.MaxDeliver, want.MaxAckPending
	cfg.BackOff, cfg.Description = want.BackOff, want.Description
	got, err := call(ctx, e, func(ctx context.Context) (jetstream.Consumer, error) {
		return e.js.UpdateConsumer(ctx, stream, cfg)
	})
	if err != nil {
		return nil, refused("consumer", name, "update", err, texts(diff))
	}
	return diff, kept("consumer", name, consumerDiff(got.CachedInfo().Config, want))
}

func (e ensurer) updateBucket(ctx context.Context, want jetstream.KeyValueConfig) ([]FieldDiff, error) {
	return e.updateStreamConfig(ctx, "bucket", want.Bucket, KVStream(want.Bucket),
		func(have jetstream.StreamConfig) []FieldDiff { return bucketDiff(have, want) },
		// The bucket's stream, as the client maps a bucket's config onto it (History to
		// MaxMsgsPerSubject, TTL to MaxAge, a duplicate window of 2 minutes or the TTL if
		// shorter: the server refuses a window longer than MaxAge).
		func(cfg *jetstream.StreamConfig) {
			cfg.Subjects = []string{KVSubjectPrefix(want.Bucket) + ">"}
			cfg.MaxMsgsPerSubject = max(int64(want.History), 1)
			cfg.MaxAge, cfg.Replicas, cfg.Description, cfg.AllowDirect = want.TTL, want.Replicas, want.Description, true
			cfg.Duplicates = 2 * time.Minute
			if want.TTL > 0 && want.TTL < cfg.Duplicates {
				cfg.Duplicates = want.TTL
			}
		})
}
