package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvcm-gc/kvcm-gc/subjects"
)

// DeadLetter is one message a stage gave up on: terminated as undecodable or invalid
// (poison), or failed on its last allowed delivery (deadletter). The message itself stays in
// its limits-retention stream until it ages out, so it can be inspected and retried.
type DeadLetter struct {
	EventSeq uint64    `json:"event_seq"`
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"` // poison | deadletter
	Stage    string    `json:"stage"`
	Instance string    `json:"instance,omitempty"`
	Reason   string    `json:"reason"`
	Stream   string    `json:"stream,omitempty"`
	Seq      uint64    `json:"seq,omitempty"`
	MsgID    string    `json:"msg_id,omitempty"`
	// Records counts the events recorded for this message when there were several: a last
	// delivery that hung past AckWait is recorded by the server's advisory, and again by the
	// consumer loop if the handler fails after all.
	Records int `json:"records,omitempty"`
}

// DLQList lists the poison and dead-letter events recorded since the given time (zero: all
// the EVENTS stream holds), oldest first: one entry per message a stage gave up on, the first
// event recorded for it (Records counts them when there were several).
func DLQList(ctx context.Context, js jetstream.JetStream, names subjects.Names, since time.Time) ([]DeadLetter, error) {
	var out []DeadLetter
	// The entry of each dead-lettered message: stage, stream and sequence name it.
	type msgKey struct {
		stage, stream string
		seq           uint64
	}
	first := map[msgKey]int{}
	rng := readRange{
		Filters:   []string{names.EventKindFilter(subjects.EventPoison), names.EventKindFilter(subjects.EventDeadLetter)},
		StartTime: since,
	}
	err := readStream(ctx, js, names.EventsStream(), rng, nil, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
		d := DeadLetter{EventSeq: md.Sequence.Stream, Time: md.Timestamp.UTC()}
		ev, err := subjects.DecodeEvent(m.Data())
		if err != nil {
			// Listed anyway: an operator should see that something was recorded here.
			d.Kind, d.Reason = "undecodable_event", err.Error()
			out = append(out, d)
			return nil
		}
		d.Kind, d.Stage, d.Instance, d.Reason = ev.Kind, ev.Stage, ev.Instance, ev.Reason
		if ev.Source != nil {
			d.Stream, d.Seq, d.MsgID = ev.Source.Stream, ev.Source.Seq, ev.Source.MsgID
		}
		if d.Kind == subjects.EventDeadLetter && d.Seq > 0 {
			k := msgKey{d.Stage, d.Stream, d.Seq}
			if i, seen := first[k]; seen {
				out[i].Records = max(out[i].Records, 1) + 1
				if out[i].MsgID == "" {
					out[i].MsgID = d.MsgID
				}
				if out[i].Instance == "" {
					out[i].Instance = d.Instance
				}
				return nil
			}
			first[k] = len(out)
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// WriteDeadLetters prints dead letters as a table.
func WriteDeadLetters(w io.Writer, dls []DeadLetter) error {
	ew := &errWriter{w: w}
	tw := newTable(ew)
	fmt.Fprintln(tw, "EVENT\tTIME\tKIND\tSTAGE\tINSTANCE\tSTREAM\tSEQ\tMSG ID\tREASON")
	for _, d := range dls {
		seq := "-"
		if d.Seq > 0 {
			seq = strconv.FormatUint(d.Seq, 10)
		}
		reason := d.Reason
		if d.Records > 1 {
			reason = fmt.Sprintf("%s (recorded %d times)", reason, d.Records)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.EventSeq, timeOnly(d.Time), d.Kind, orDash(d.Stage),
			cell(orDash(d.Instance), 24), orDash(d.Stream), seq, cell(orDash(d.MsgID), 40), cell(reason, 120))
	}
	_ = tw.Flush()
	if len(dls) == 0 {
		fmt.Fprintln(ew, "no dead letters")
	}
	return ew.err
}

// RetryHeader names, on a re-published message, the stream message it is a copy of
// ("<stream>:<seq>"), so the copy can be traced back in `nats stream view`.
const RetryHeader = "Kvcmgc-Retry-Of"

// RetryResult describes a re-published message.
type RetryResult struct {
	Stream   string `json:"stream"`
	Seq      uint64 `json:"seq"` // the original
	Subject  string `json:"subject"`
	MsgID    string `json:"msg_id,omitempty"`
	NewSeq   uint64 `json:"new_seq"`
	NewMsgID string `json:"new_msg_id"`
	// Warning says why the message was re-published although it would likely fail again
	// (DLQRetry with force: the PoisonError it overrode).
	Warning string `json:"warning,omitempty"`
}

// ErrNotRetryable reports a stream dlq retry refuses: only the stages' input streams hold
// messages a stage consumes.
var ErrNotRetryable = errors.New("not a stage input stream")

// PoisonError refuses to re-publish a message a stage gave up on for a reason re-publishing
// does not cure: it was terminated as poison (it does not decode or does not make sense, and
// its copy is the same bytes), or it is itself a copy a dead letter was re-published as, and
// dead-lettered again. DLQRetry re-publishes it all the same with force.
type PoisonError struct {
	Stream string
	Seq    uint64
	// Record is what was recorded of it: the poison event, or the copy's dead letter.
	Record DeadLetter
	// Copy: the message is a re-published copy (RetryHeader names its original) that was
	// dead-lettered again.
	Copy bool
}

func (e *PoisonError) Error() string {
	if e.Copy {
		return fmt.Sprintf("%s #%d is a re-published copy (of %s) that the %s dead-lettered again: %s; the cause seems "+
			"not fixed, and another copy would likely fail the same way",
			e.Stream, e.Seq, e.Record.MsgID, e.Record.Stage, e.Record.Reason)
	}
	return fmt.Sprintf("%s #%d was terminated as poison by the %s: %s; a copy is the same bytes and will be terminated "+
		"again (the next round judges its blocks anew)", e.Stream, e.Seq, e.Record.Stage, e.Record.Reason)
}

// retryRefusal returns the PoisonError of the message at seq of stream, given what was
// recorded of the messages stages gave up on, or nil when re-publishing it can help.
func retryRefusal(dls []DeadLetter, stream string, seq uint64, orig *jetstream.RawStreamMsg) *PoisonError {
	for _, d := range dls {
		if d.Stream != stream || d.Seq != seq {
			continue
		}
		switch {
		case d.Kind == subjects.EventPoison:
			return &PoisonError{Stream: stream, Seq: seq, Record: d}
		case d.Kind == subjects.EventDeadLetter && orig.Header.Get(RetryHeader) != "":
			d.MsgID = orig.Header.Get(RetryHeader)
			return &PoisonError{Stream: stream, Seq: seq, Record: d, Copy: true}
		}
	}
	return nil
}

// maxRetryIDs bounds the search for an unused retry id within the duplicate window.
const maxRetryIDs = 1000

// DLQRetry re-publishes the message at seq of a stage's input stream (BATCHES or DELETES; the
// full name or "batches"/"deletes") to its original subject, after the cause was fixed (a
// deleter that lacked a permission, a storage that was unreachable …). The message is fetched
// by sequence from the limits-retention stream, so it must not have aged out yet.
//
// The copy gets a new Nats-Msg-Id, "<original id>:retry:<n>": the original id would be dropped
// as a duplicate inside the server's duplicate window. n starts at 1 and is raised while the
// server reports the id as a duplicate, so retrying twice in quick succession really
// re-publishes twice. Handling a copy is safe in every case: the prober re-judges, and the
// deleter re-checks the exact bytes before any write.
//
// A message that was terminated as poison, or a copy that was dead-lettered again, is not
// re-published (a *PoisonError says why) unless force is true: a copy of it would only fail
// again, add a poison event, and fire the dead-letter alert once more. With force the result's
// Warning says it.
func DLQRetry(
	ctx context.Context,
	js jetstream.JetStream,
	names subjects.Names,
	stream string,
	seq uint64,
	force bool,
) (RetryResult, error) {
	switch strings.ToLower(stream) {
	case "batches", strings.ToLower(names.BatchesStream()):
		stream = names.BatchesStream()
	case "deletes", strings.ToLower(names.DeletesStream()):
		stream = names.DeletesStream()
	default:
		return RetryResult{}, fmt.Errorf("retry %s #%d: %w (want %s or %s)", stream, seq, ErrNotRetryable,
			names.BatchesStream(), names.DeletesStream())
	}
	res := RetryResult{Stream: stream, Seq: seq}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return res, fmt.Errorf("retry %s #%d: open stream: %w", stream, seq, err)
	}
	orig, err := s.GetMsg(ctx, seq)
	if err != nil {
		return res, fmt.Errorf("retry %s #%d: fetch the original: %w", stream, seq, err)
	}
	res.Subject, res.MsgID = orig.Subject, orig.Header.Get(jetstream.MsgIDHeader)
	dls, err := DLQList(ctx, js, names, time.Time{})
	if err != nil {
		return res, fmt.Errorf("retry %s #%d: %w", stream, seq, err)
	}
	if pe := retryRefusal(dls, stream, seq, orig); pe != nil {
		if !force {
			return res, fmt.Errorf("retry %s #%d: %w", stream, seq, pe)
		}
		res.Warning = pe.Error()
	}
	base := res.MsgID
	if base == "" {
		base = fmt.Sprintf("%s:%d", stream, seq)
	}
	hdr := nats.Header{}
	for k, vs := range orig.Header {
		// Server-interpreted headers of the original publish (id, expectations, TTL) must
		// not apply to the copy.
		if strings.HasPrefix(k, "Nats-") {
			continue
		}
		hdr[k] = append([]string(nil), vs...)
	}
	hdr.Set(RetryHeader, fmt.Sprintf("%s:%d", stream, seq))
	for n := 1; n <= maxRetryIDs; n++ {
		id := base + ":retry:" + strconv.Itoa(n)
		hdr.Set(jetstream.MsgIDHeader, id)
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: orig.Subject, Header: hdr, Data: orig.Data})
		if err != nil {
			return res, fmt.Errorf("retry %s #%d: publish to %s: %w", stream, seq, orig.Subject, err)
		}
		if ack.Duplicate {
			continue
		}
		res.NewSeq, res.NewMsgID = ack.Sequence, id
		return res, nil
	}
	return res, fmt.Errorf("retry %s #%d: %d retry ids already used within the duplicate window", stream, seq, maxRetryIDs)
}
