package subjects

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Subject kinds: the token after the cluster in every kvcm-gc subject.
const (
	kindBatch  = "batch"
	kindDelete = "delete"
	kindEvent  = "event"
)

// Durable consumer names. They are the same on every cluster because a consumer name is only
// unique within its stream, and the stream name already carries the prefix and the cluster.
const (
	proberConsumer  = "prober"
	deleterConsumer = "deleter"
)

// namePrefix starts every stream and bucket name, so kvcm-gc's objects group together in
// `nats stream ls` whatever prefix an operator chose.
const namePrefix = "KVCMGC"

// Limits of the object-name component encoding (see nameComponent).
const (
	nameVerbatimMax = 32 // longest component kept verbatim
	nameReadableMax = 24 // readable part kept in front of the hash of a hashed component
	nameHashHex     = 12 // hex digits of the sha256 suffix (48 bits)
)

// Names derives every stream, subject, consumer and bucket name from a prefix and the KVCM
// cluster name. Nothing else in kvcm-gc spells a subject by hand.
type Names struct {
	Prefix  string // subject prefix, one or more tokens of [A-Za-z0-9_-] joined by '.', e.g. "kvcmgc"
	Cluster string // KVCM cluster name, verbatim (encoded with kvcm.EncodeToken where used)
}

// ErrBadNames reports an invalid prefix or cluster.
var ErrBadNames = errors.New("invalid subject names")

// NewNames validates prefix and cluster.
func NewNames(prefix, cluster string) (Names, error) {
	n := Names{Prefix: prefix, Cluster: cluster}
	if err := n.Validate(); err != nil {
		return Names{}, err
	}
	return n, nil
}

// Validate checks the prefix (one or more tokens of [A-Za-z0-9_-] joined by '.') and that the
// cluster is not empty. Any cluster string is accepted otherwise: it is encoded wherever used.
func (n Names) Validate() error {
	if !validPrefix(n.Prefix) {
		return fmt.Errorf("%w: prefix %q must be tokens of [A-Za-z0-9_-] joined by '.'", ErrBadNames, n.Prefix)
	}
	if n.Cluster == "" {
		return fmt.Errorf("%w: cluster is empty", ErrBadNames)
	}
	return nil
}

func validPrefix(p string) bool {
	if p == "" {
		return false
	}
	for tok := range strings.SplitSeq(p, ".") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			if !plainByte(tok[i]) && tok[i] != '_' {
				return false
			}
		}
	}
	return true
}

// base is "<prefix>.<enc cluster>.".
func (n Names) base() string {
	return n.Prefix + "." + kvcm.EncodeToken(n.Cluster) + "."
}

// BatchSubject is "<prefix>.<enc cluster>.batch.<enc instance>".
func (n Names) BatchSubject(instance string) string {
	return n.base() + kindBatch + "." + kvcm.EncodeToken(instance)
}

// DeleteSubject is "<prefix>.<enc cluster>.delete.<enc instance>".
func (n Names) DeleteSubject(instance string) string {
	return n.base() + kindDelete + "." + kvcm.EncodeToken(instance)
}

// EventSubject is "<prefix>.<enc cluster>.event.<enc kind>.<enc instance>". The kind is
// encoded too, so even an unexpected kind stays one token; the Event* kinds encode to
// themselves. Events about no instance use instance "" (token "%").
func (n Names) EventSubject(kind, instance string) string {
	return n.base() + kindEvent + "." + kvcm.EncodeToken(kind) + "." + kvcm.EncodeToken(instance)
}

// BatchFilter is "<prefix>.<enc cluster>.batch.*": every instance's batches.
func (n Names) BatchFilter() string { return n.base() + kindBatch + ".*" }

// DeleteFilter is "<prefix>.<enc cluster>.delete.*": every instance's delete requests.
func (n Names) DeleteFilter() string { return n.base() + kindDelete + ".*" }

// EventFilter is "<prefix>.<enc cluster>.event.>": every event.
func (n Names) EventFilter() string { return n.base() + kindEvent + ".>" }

// EventKindFilter is "<prefix>.<enc cluster>.event.<enc kind>.*": every event of one kind.
func (n Names) EventKindFilter(kind string) string {
	return n.base() + kindEvent + "." + kvcm.EncodeToken(kind) + ".*"
}

// InstanceOf returns the decoded instance id of a batch/delete/event subject.
func (n Names) InstanceOf(subject string) (string, error) {
	base := n.base()
	rest, ok := strings.CutPrefix(subject, base)
	if !ok {
		return "", fmt.Errorf("instance of subject %q: not under %q", subject, base+">")
	}
	kind, rest, _ := strings.Cut(rest, ".")
	switch kind {
	case kindBatch, kindDelete, kindSweep:
	case kindEvent:
		var evKind string
		evKind, rest, _ = strings.Cut(rest, ".")
		if _, err := kvcm.DecodeToken(evKind); err != nil || evKind == "" {
			return "", fmt.Errorf("instance of subject %q: bad event kind token %q", subject, evKind)
		}
	default:
		return "", fmt.Errorf("instance of subject %q: unknown kind %q", subject, kind)
	}
	if rest == "" || strings.Contains(rest, ".") {
		return "", fmt.Errorf("instance of subject %q: want exactly one instance token after %q", subject, kind)
	}
	inst, err := kvcm.DecodeToken(rest)
	if err != nil {
		return "", fmt.Errorf("instance of subject %q: %w", subject, err)
	}
	return inst, nil
}

// objectName is "KVCMGC_<prefix component>_<cluster component>_<suffix>".
func (n Names) objectName(suffix string) string {
	return namePrefix + "_" + nameComponent(n.Prefix) + "_" + nameComponent(n.Cluster) + "_" + suffix
}

// BatchesStream is "KVCMGC_<prefix>_<cluster>_BATCHES", with both parts made name-safe by
// nameComponent.
func (n Names) BatchesStream() string { return n.objectName("BATCHES") }

// DeletesStream is "KVCMGC_<prefix>_<cluster>_DELETES".
func (n Names) DeletesStream() string { return n.objectName("DELETES") }

// EventsStream is "KVCMGC_<prefix>_<cluster>_EVENTS".
func (n Names) EventsStream() string { return n.objectName("EVENTS") }

// ProberConsumer is the durable pull consumer of BatchesStream: "prober".
func (n Names) ProberConsumer() string { return proberConsumer }

// DeleterConsumer is the durable pull consumer of DeletesStream: "deleter".
func (n Names) DeleterConsumer() string { return deleterConsumer }

// StateBucket is the KV bucket of lease revision, checkpoint and next round time:
// "KVCMGC_<prefix>_<cluster>_STATE".
func (n Names) StateBucket() string { return n.objectName("STATE") }

// ObservedBucket is the KV bucket of the prober's observations: when a DELETING location of
// the location layout was first seen with its bytes (keys expire on their own, per-key TTL).
func (n Names) ObservedBucket() string { return n.objectName("OBSERVED") }

// LeaseBucket is the KV bucket of the scanner leader lease, whose bucket-wide TTL is the lease
// TTL: "KVCMGC_<prefix>_<cluster>_LEASE".
func (n Names) LeaseBucket() string { return n.objectName("LEASE") }

// IdentityAdmin is the admin's name among the identities (the stages are the others): the
// identity that creates the topology and runs the operator's commands.
const IdentityAdmin = "admin"

// InboxPrefix is the reply inbox of an identity (a stage, or "admin"):
// "_INBOX.<prefix>.<enc cluster>.<identity>". Every reply to a request of the identity's
// connection (a JetStream API answer, a publish acknowledgement, a pulled message) arrives
// under it, so an identity allowed to subscribe to its own inbox only can read no reply meant
// for another (docs/security.md). The identity must be one subject token.
func (n Names) InboxPrefix(identity string) string {
	return "_INBOX." + n.base() + identity
}

// KVStream is the stream that holds a KV bucket's keys: "KV_<bucket>".
func KVStream(bucket string) string { return "KV_" + bucket }

// KVSubjectPrefix is the prefix of the subjects of a KV bucket's keys, "$KV.<bucket>.": a key's
// subject is the prefix and the key.
func KVSubjectPrefix(bucket string) string { return "$KV." + bucket + "." }

// nameComponent maps an arbitrary string to a part of a stream or bucket name. Stream names
// become directory names in the server's store, and bucket names allow only [A-Za-z0-9_-], so
// the result uses only [A-Za-z0-9-] ('_' separates the components of a name):
//
//   - a string of 1 to 32 bytes of [a-z0-9-] without "--" is kept as is ("prod-a" → "prod-a");
//   - anything else becomes a readable part (the first 24 bytes, each run of other bytes
//     replaced by one '-') followed by "--" and 12 hex digits of its sha256
//     ("Prod_A" → "Prod-A--<hash>", "kvcm.gc" → "kvcm-gc--<hash>").
//
// A verbatim component never contains "--" and a hashed one always does, so the two forms never
// collide; two hashed ones collide only if 48 bits of sha256 do. Upper-case letters force the
// hashed form so that names differing only in case stay distinct on case-insensitive file
// systems.
func nameComponent(s string) string {
	if len(s) <= nameVerbatimMax && s != "" && !strings.Contains(s, "--") {
		plain := true
		for i := 0; i < len(s); i++ {
			if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				plain = false
				break
			}
		}
		if plain {
			return s
		}
	}
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < nameReadableMax; i++ {
		c := s[i]
		switch {
		case c != '-' && plainByte(c):
			b.WriteByte(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	readable := strings.TrimSuffix(b.String(), "-")
	sum := sha256.Sum256([]byte(s))
	return readable + "--" + hex.EncodeToString(sum[:])[:nameHashHex]
}

// plainByte reports whether c is in [A-Za-z0-9-].
func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}
