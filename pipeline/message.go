package pipeline

import (
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// Receive is the preamble of every stage's Handle: it decodes msg's body with decode (whose
// error is the decoder's: poison for bad bytes), checks that the subject and the body name the
// same instance and cluster (invariant 4: a message on another instance's subject is poison,
// never acted on), and returns the body and the message's source. what names the body in the
// error; owner returns its instance and cluster.
func Receive[T any](names subjects.Names, msg jetstream.Msg, what string, decode func([]byte) (T, error),
	owner func(T) (instance, cluster string)) (T, subjects.Source, error) {
	body, err := decode(msg.Data())
	if err != nil {
		return body, subjects.Source{}, err
	}
	inst, err := names.InstanceOf(msg.Subject())
	if err != nil {
		return body, subjects.Source{}, fmt.Errorf("%w: subject %q: %v", subjects.ErrPoison, msg.Subject(), err)
	}
	if bi, bc := owner(body); inst != bi || bc != names.Cluster {
		return body, subjects.Source{}, fmt.Errorf("%w: %s for instance %q of cluster %q on subject %q",
			subjects.ErrPoison, what, bi, bc, msg.Subject())
	}
	return body, SourceOf(msg), nil
}

// SourceOf is where msg is stored (its stream and sequence, when it has metadata) and its
// message id: what the events of its handling name.
func SourceOf(msg jetstream.Msg) subjects.Source {
	src := subjects.Source{MsgID: msg.Headers().Get(jetstream.MsgIDHeader)}
	if md, err := msg.Metadata(); err == nil {
		src.Stream, src.Seq = md.Stream, md.Sequence.Stream
	}
	return src
}
