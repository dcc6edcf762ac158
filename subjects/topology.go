package subjects

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Settings are the JetStream knobs of the topology (defaults from DefaultSettings). Their
// yaml and help tags are the keys under jetstream: that the topology owns (config assembles
// them into the file, the flags and the environment); a field tagged "-" is wiring, set by
// whoever builds the topology.
type Settings struct {
	// Replicas of every stream and bucket (1 on a single server; 3 or 5 in a cluster).
	Replicas int `yaml:"replicas" help:"replicas of every stream and bucket (1 on a single server, 3 or 5 in a cluster)"`
	// MaxAge bounds how long BATCHES and DELETES keep a message, acked or not: the replay
	// horizon for debugging a decision. 0 keeps messages until MaxBytes discards them.
	MaxAge time.Duration `yaml:"max_age" help:"how long BATCHES and DELETES keep messages, acked or not: the replay horizon"`
	// EventsMaxAge is MaxAge for the EVENTS audit trail, usually longer.
	EventsMaxAge time.Duration `yaml:"events_max_age" help:"how long the EVENTS audit stream keeps events"`
	// MaxBytes caps each stream's size (DefaultMaxBytes); the oldest messages are discarded
	// first. -1: unlimited. It caps what is retained, not the backlog: backpressure comes from
	// consumer info. A stream at its cap discards (StreamFillOf): batches or requests nobody
	// consumed yet are then lost work (never a deletion), the audit trail shorter.
	MaxBytes int64 `yaml:"max_bytes" help:"cap on each stream's size in bytes, oldest discarded first (-1: none)"`
	// Duplicates is the Nats-Msg-Id window within which a re-published message is dropped by
	// the server (a re-publish after a crash or failover). At most MaxAge and EventsMaxAge.
	Duplicates time.Duration `yaml:"duplicate_window" help:"window in which a re-published message (same Nats-Msg-Id) is dropped"`
	// Storage of every stream and bucket; FileStorage survives a server restart.
	Storage jetstream.StorageType `yaml:"-"`
	// ProberAckWait is how long a delivered batch may stay unacknowledged before it is
	// redelivered to another prober; a prober working on a slow probe sends InProgress.
	ProberAckWait time.Duration `yaml:"prober_ack_wait" help:"time a batch may stay unacknowledged before it is redelivered"`
	// ProberMaxAckPending caps batches delivered and not yet acked across all probers.
	ProberMaxAckPending int `yaml:"prober_max_ack_pending" help:"batches delivered and not yet acknowledged, across all probers"`
	// DeleterAckWait is the AckWait of delete requests; a deleter waiting out delete_delay
	// sends InProgress.
	DeleterAckWait time.Duration `yaml:"deleter_ack_wait" help:"time a delete request may stay unacknowledged before it is redelivered (kept alive during delete_delay)"`
	// DeleterMaxAckPending = max_inflight_delete_requests: the global cap on delete requests in
	// flight, whatever the number of deleter processes (DESIGN §8.7).
	DeleterMaxAckPending int `yaml:"-"`
	// MaxDeliver bounds deliveries of one message on both consumers; the server then stops
	// redelivering it and publishes a max-deliveries advisory (recorded as a deadletter event).
	MaxDeliver int `yaml:"max_deliver" help:"deliveries of one message before it is dead-lettered"`
	// LeaseTTL is the LEASE bucket's TTL: a leader that does not renew within it loses the lease.
	LeaseTTL time.Duration `yaml:"lease_ttl" help:"scanner store lease TTL: a scanner that cannot renew a store's lease within it stops walking the store, and another takes it over"`
	// APITimeout bounds one JetStream request of a process (WithCallTimeout for Ensure): a
	// request sent while the stream's leader changes gets no answer, and is sent again.
	APITimeout time.Duration `yaml:"api_timeout" help:"longest wait for the answer to one JetStream request before it is retried (a leader change leaves requests unanswered)"`
	// SweeperAckWait is the AckWait of sweep batches; a sweeper working on a slow file system
	// sends InProgress.
	SweeperAckWait time.Duration `yaml:"sweeper_ack_wait" help:"time a sweep batch may stay unacknowledged before it is redelivered (kept alive while a sweeper works)"`
	// SweeperMaxAckPending = max_inflight_sweep_batches: the cap on sweep batches in flight
	// across all sweepers.
	SweeperMaxAckPending int `yaml:"-"`
	// SkipEnsure leaves the topology to someone else: a process then neither creates nor
	// updates it (users without those permissions).
	SkipEnsure bool `yaml:"skip_ensure" help:"do not create or update streams, consumers and buckets (for users without those permissions)"`
}

// DefaultMaxBytes is the default cap of each stream: a round of a store of a million blocks
// keeps about 0.2 GB in its streams (batch schema 2, sealed delete requests, 2 locations per
// block, 10% garbage), so three rounds within max_age fit with room. A larger store needs
// more: README's sizing formula gives it. The server reserves it on its disk for every stream.
const DefaultMaxBytes = 1 << 30

// DefaultSettings returns the settings kvcm-gc runs with unless configured otherwise.
func DefaultSettings() Settings {
	return Settings{
		Replicas:             1,
		MaxAge:               72 * time.Hour,
		EventsMaxAge:         7 * 24 * time.Hour,
		MaxBytes:             DefaultMaxBytes,
		Duplicates:           2 * time.Minute,
		Storage:              jetstream.FileStorage,
		ProberAckWait:        60 * time.Second,
		ProberMaxAckPending:  64,
		DeleterAckWait:       60 * time.Second,
		DeleterMaxAckPending: 2,
		MaxDeliver:           10,
		LeaseTTL:             15 * time.Second,
		APITimeout:           DefaultCallTimeout,
		SweeperAckWait:       60 * time.Second,
		SweeperMaxAckPending: 2,
	}
}

// minWindow is the shortest max age, duplicate window, lease TTL and request timeout the
// server takes.
const minWindow = 100 * time.Millisecond

// Validate checks s against what the server accepts. Every error starts with the key at
// fault: jetstream.<key>, or the key of a consumer's cap of in-flight messages.
func (s Settings) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		bad("jetstream.replicas", "must be in 1..5, got %d", s.Replicas)
	}
	for _, a := range []struct {
		key string
		v   time.Duration
	}{{"max_age", s.MaxAge}, {"events_max_age", s.EventsMaxAge}} {
		if a.v < 0 || (a.v != 0 && a.v < minWindow) {
			bad("jetstream."+a.key, "must be 0 (unlimited) or at least %s, got %s", minWindow, a.v)
		}
		if a.v != 0 && s.Duplicates > a.v {
			bad("jetstream.duplicate_window", "%s is longer than jetstream.%s %s", s.Duplicates, a.key, a.v)
		}
	}
	if s.MaxBytes != -1 && s.MaxBytes <= 0 {
		bad("jetstream.max_bytes", "must be -1 (unlimited) or > 0, got %d", s.MaxBytes)
	}
	if s.Duplicates < minWindow {
		bad("jetstream.duplicate_window", "must be at least %s, got %s", minWindow, s.Duplicates)
	}
	if s.Storage != jetstream.FileStorage && s.Storage != jetstream.MemoryStorage {
		errs = append(errs, fmt.Errorf("unknown storage type %d", s.Storage))
	}
	if s.DeleterAckWait <= 0 {
		bad("jetstream.deleter_ack_wait", "must be > 0, got %s", s.DeleterAckWait)
	}
	if s.SweeperAckWait <= 0 {
		bad("jetstream.sweeper_ack_wait", "must be > 0, got %s", s.SweeperAckWait)
	}
	if s.ProberAckWait <= 0 {
		bad("jetstream.prober_ack_wait", "must be > 0, got %s", s.ProberAckWait)
	}
	if s.ProberMaxAckPending < 1 {
		bad("jetstream.prober_max_ack_pending", "must be >= 1, got %d", s.ProberMaxAckPending)
	}
	if s.DeleterMaxAckPending < 1 {
		bad("max_inflight_delete_requests", "must be >= 1, got %d", s.DeleterMaxAckPending)
	}
	if s.SweeperMaxAckPending < 1 {
		bad("max_inflight_sweep_batches", "must be >= 1, got %d", s.SweeperMaxAckPending)
	}
	if s.MaxDeliver < 1 {
		bad("jetstream.max_deliver", "must be >= 1, got %d", s.MaxDeliver)
	}
	if s.LeaseTTL < minWindow {
		bad("jetstream.lease_ttl", "must be at least %s, got %s", minWindow, s.LeaseTTL)
	}
	if s.APITimeout < minWindow {
		bad("jetstream.api_timeout", "must be at least %s, got %s", minWindow, s.APITimeout)
	}
	return errors.Join(errs...)
}

// Topology is everything Ensure creates.
type Topology struct {
	Streams   []jetstream.StreamConfig
	Consumers map[string]jetstream.ConsumerConfig // stream name -> durable consumer
	Buckets   []jetstream.KeyValueConfig
}

// Topology returns the stream, consumer and bucket configs for these names and settings.
//
// Streams use limits retention: a message stays after it is acked, so an ordered consumer can
// replay any stage's input to explain a decision. Work-queue retention would delete it on ack
// and refuse a second consumer. Discard old keeps the newest messages when MaxBytes is reached.
// AllowDirect lets a stage fetch a message by sequence (an advisory's stream_seq) from any
// replica without going through the stream leader.
func (n Names) Topology(s Settings) Topology {
	stream := func(name, what, filter string, maxAge time.Duration) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: fmt.Sprintf("kvcm-gc %s of KVCM cluster %q", what, n.Cluster),
			Subjects:    []string{filter},
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			MaxAge:      maxAge,
			MaxBytes:    s.MaxBytes,
			MaxMsgs:     -1,
			Duplicates:  s.Duplicates,
			Storage:     s.Storage,
			Replicas:    s.Replicas,
			AllowDirect: true,
		}
	}
	consumer := func(name, what, filter string, ackWait time.Duration, maxAckPending int) jetstream.ConsumerConfig {
		return jetstream.ConsumerConfig{
			Durable:       name,
			Description:   fmt.Sprintf("kvcm-gc %s of KVCM cluster %q", what, n.Cluster),
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
			MaxDeliver:    s.MaxDeliver,
			MaxAckPending: maxAckPending,
			FilterSubject: filter,
			ReplayPolicy:  jetstream.ReplayInstantPolicy,
		}
	}
	return Topology{
		Streams: []jetstream.StreamConfig{
			stream(n.BatchesStream(), "scan batches (scanner to prober)", n.BatchFilter(), s.MaxAge),
			stream(n.DeletesStream(), "delete requests (prober to deleter)", n.DeleteFilter(), s.MaxAge),
			stream(n.EventsStream(), "audit events", n.EventFilter(), s.EventsMaxAge),
			stream(n.SweepStream(), "sweep batches of data files (walker to sweeper)", n.SweepFilter(), s.MaxAge),
		},
		Consumers: map[string]jetstream.ConsumerConfig{
			n.BatchesStream(): consumer(n.ProberConsumer(), "probers judging scan batches",
				n.BatchFilter(), s.ProberAckWait, s.ProberMaxAckPending),
			n.DeletesStream(): consumer(n.DeleterConsumer(), "deleters executing delete requests",
				n.DeleteFilter(), s.DeleterAckWait, s.DeleterMaxAckPending),
			n.SweepStream(): consumer(n.SweeperConsumer(), "sweepers judging data files",
				n.SweepFilter(), s.SweeperAckWait, s.SweeperMaxAckPending),
		},
		Buckets: []jetstream.KeyValueConfig{
			{
				Bucket:      n.StateBucket(),
				Description: fmt.Sprintf("kvcm-gc scanner checkpoint and schedule of KVCM cluster %q", n.Cluster),
				History:     1,
				Storage:     s.Storage,
				Replicas:    s.Replicas,
			},
			{
				Bucket:      n.LeaseBucket(),
				Description: fmt.Sprintf("kvcm-gc scanner leader lease of KVCM cluster %q", n.Cluster),
				History:     1,
				TTL:         s.LeaseTTL,
				Storage:     s.Storage,
				Replicas:    s.Replicas,
			},
			{
				Bucket: n.ObservedBucket(),
				Description: fmt.Sprintf("kvcm-gc prober observations (first sight of a DELETING "+
					"location) of KVCM cluster %q", n.Cluster),
				History: 1,
				// Every key is written with its own TTL; expired keys leave no marker for long.
				LimitMarkerTTL: time.Minute,
				Storage:        s.Storage,
				Replicas:       s.Replicas,
			},
		},
	}
}

// Fill is how full a stream is against its max_bytes.
type Fill struct {
	Bytes, MaxBytes int64 // MaxBytes <= 0: unlimited
	// Discarding: the stream is within one large message of its cap, so every message
	// stored now discards the oldest ones (discard old).
	Discarding bool
	// Lost is how many messages the stream discarded before its consumer acknowledged them
	// (0 without a consumer): work that will not be done this round.
	Lost uint64
}

// discardMargin is how close to max_bytes a stream discarding its oldest messages stays: it
// removes them until a new message fits, so it sits within about one message (at most the
// max payload, 1 MiB by default) of the cap.
func discardMargin(maxBytes int64) int64 { return min(maxBytes/20, 2<<20) }

// StreamFillOf reads a stream's fill from its config and state, and, when cons is not nil,
// what its consumer lost: messages below the stream's first sequence that the consumer's ack
// floor never reached.
func StreamFillOf(cfg jetstream.StreamConfig, st jetstream.StreamState, cons *jetstream.ConsumerInfo) Fill {
	f := Fill{Bytes: int64(st.Bytes), MaxBytes: cfg.MaxBytes}
	f.Discarding = f.MaxBytes > 0 && f.Bytes >= f.MaxBytes-discardMargin(f.MaxBytes)
	if cons != nil && st.FirstSeq > 1 && cons.AckFloor.Stream+1 < st.FirstSeq {
		f.Lost = st.FirstSeq - 1 - cons.AckFloor.Stream
	}
	return f
}
