package pipeline

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// bodyMsg is a stored message with a subject, a body and a message id.
type bodyMsg struct {
	jetstream.Msg
	subject string
	data    []byte
	md      *jetstream.MsgMetadata
}

func (m bodyMsg) Subject() string { return m.subject }
func (m bodyMsg) Data() []byte    { return m.data }
func (m bodyMsg) Headers() nats.Header {
	return nats.Header{jetstream.MsgIDHeader: []string{"id-1"}}
}
func (m bodyMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.md == nil {
		return nil, jetstream.ErrNotJSMessage
	}
	return m.md, nil
}

// TestReceive: a message is acted on only when its subject and its body name the same instance
// of this cluster; anything else is poison, and its source is where it is stored.
func TestReceive(t *testing.T) {
	names, err := subjects.NewNames("kvcmgc", "c1")
	require.NoError(t, err)
	req := func(inst, cluster string) []byte {
		data, err := subjects.EncodeDeleteRequest(subjects.DeleteRequest{V: subjects.SchemaVersion, Cluster: cluster, Instance: inst,
			Group: "g", Store: "s", Round: 1, JudgedAt: 1, Source: subjects.Source{Stream: "BATCHES", Seq: 1},
			Targets: []subjects.Target{{Key: 1, Location: "a", Reason: subjects.ReasonOrphanWriting, Expected: subjects.RawText(`{"status":1}`)}}})
		require.NoError(t, err)
		return data
	}
	owner := func(r subjects.DeleteRequest) (string, string) { return r.Instance, r.Cluster }
	md := &jetstream.MsgMetadata{Stream: "DELETES", Sequence: jetstream.SequencePair{Stream: 7}}

	got, src, err := Receive(names, bodyMsg{subject: names.DeleteSubject("i1"), data: req("i1", "c1"), md: md}, "request",
		subjects.DecodeDeleteRequest, owner)
	require.NoError(t, err)
	require.Equal(t, "i1", got.Instance)
	require.Equal(t, subjects.Source{Stream: "DELETES", Seq: 7, MsgID: "id-1"}, src)

	for name, m := range map[string]bodyMsg{
		"another instance's subject": {subject: names.DeleteSubject("i2"), data: req("i1", "c1")},
		"another cluster":            {subject: names.DeleteSubject("i1"), data: req("i1", "c2")},
		"not a stage subject":        {subject: "elsewhere", data: req("i1", "c1")},
		"undecodable":                {subject: names.DeleteSubject("i1"), data: []byte("{")},
	} {
		_, _, err := Receive(names, m, "request", subjects.DecodeDeleteRequest, owner)
		require.ErrorIs(t, err, subjects.ErrPoison, name)
	}
	require.Equal(t, subjects.Source{MsgID: "id-1"}, SourceOf(bodyMsg{}), "no metadata: the message id alone")
}
