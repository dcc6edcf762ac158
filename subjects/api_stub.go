package subjects

// THIS FILE IS THE API CONTRACT; implementations replace the stub bodies (move them to proper
// files), signatures are fixed.

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrPoison marks a message that can never be processed (undecodable, unknown version, invalid
// fields): consumers Term it and record it; they never retry it.
var ErrPoison = errors.New("poison message")

// Names derives every stream, subject, consumer and bucket name from a prefix and the KVCM
// cluster name. Nothing else in kvcm-gc spells a subject by hand.
type Names struct {
	Prefix  string // subject prefix, one or more tokens of [A-Za-z0-9_-] joined by '.', e.g. "kvcmgc"
	Cluster string // KVCM cluster name, verbatim (encoded with kvcm.EncodeToken where used)
}

// NewNames validates prefix and cluster.
func NewNames(prefix, cluster string) (Names, error) { panic("stub") }

func (n Names) BatchSubject(instance string) string       { panic("stub") } // <prefix>.<cluster>.batch.<instance>
func (n Names) DeleteSubject(instance string) string      { panic("stub") } // <prefix>.<cluster>.delete.<instance>
func (n Names) EventSubject(kind, instance string) string { panic("stub") } // <prefix>.<cluster>.event.<kind>.<instance>
func (n Names) BatchFilter() string                       { panic("stub") } // <prefix>.<cluster>.batch.*
func (n Names) DeleteFilter() string                      { panic("stub") }
func (n Names) EventFilter() string                       { panic("stub") } // <prefix>.<cluster>.event.>
// InstanceOf returns the decoded instance id of a batch/delete/event subject.
func (n Names) InstanceOf(subject string) (string, error) { panic("stub") }

func (n Names) BatchesStream() string   { panic("stub") }
func (n Names) DeletesStream() string   { panic("stub") }
func (n Names) EventsStream() string    { panic("stub") }
func (n Names) ProberConsumer() string  { panic("stub") }
func (n Names) DeleterConsumer() string { panic("stub") }
func (n Names) StateBucket() string     { panic("stub") } // KV bucket: lease, checkpoint, next round time
func (n Names) LeaseBucket() string     { panic("stub") } // KV bucket with a bucket-wide TTL = lease TTL

// Settings are the JetStream knobs of the topology (defaults from DefaultSettings).
type Settings struct {
	Replicas             int
	MaxAge               time.Duration // BATCHES, DELETES (72h)
	EventsMaxAge         time.Duration // EVENTS (7d)
	MaxBytes             int64         // per stream, -1 unlimited
	Duplicates           time.Duration // dedup window (2m)
	Storage              jetstream.StorageType
	ProberAckWait        time.Duration
	ProberMaxAckPending  int
	DeleterAckWait       time.Duration
	DeleterMaxAckPending int // = max_inflight_delete_requests (the global in-flight cap)
	MaxDeliver           int
	LeaseTTL             time.Duration
}

func DefaultSettings() Settings { panic("stub") }

// Topology is everything Ensure creates.
type Topology struct {
	Streams   []jetstream.StreamConfig
	Consumers map[string]jetstream.ConsumerConfig // stream name -> durable consumer
	Buckets   []jetstream.KeyValueConfig
}

// Topology returns the stream, consumer and bucket configs for these names and settings.
func (n Names) Topology(s Settings) Topology { panic("stub") }

// Ensure creates or updates every stream, consumer and bucket (idempotent). An existing object
// whose config cannot be updated to the wanted one gives an error naming the object and the
// conflicting fields.
func Ensure(ctx context.Context, js jetstream.JetStream, n Names, s Settings) error { panic("stub") }

// Encode marshals a message compactly without HTML escaping.
func Encode(v any) ([]byte, error) { panic("stub") }

// DecodeBatch, DecodeDeleteRequest and DecodeEvent decode and validate; every failure wraps ErrPoison.
func DecodeBatch(data []byte) (Batch, error)                 { panic("stub") }
func DecodeDeleteRequest(data []byte) (DeleteRequest, error) { panic("stub") }
func DecodeEvent(data []byte) (Event, error)                 { panic("stub") }

// SplitBatch splits b's blocks into parts whose encodings are each at most maxBytes, setting
// Part/Parts. Blocks too large to fit alone are left out and returned in oversized.
func SplitBatch(b Batch, maxBytes int) (parts []Batch, oversized []BlockEntry, err error) {
	panic("stub")
}

// Deterministic Nats-Msg-Id values.
func BatchMsgID(b Batch) string          { panic("stub") } // from cluster, instance, round, cursor, part
func DeleteMsgID(r DeleteRequest) string { panic("stub") } // from the source batch's msg id / stream seq
func EventMsgID(e Event) string          { panic("stub") } // from stage, kind, source, key, location, outcome
