package subjects

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strconv"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/kvcm"
)

// Nats-Msg-Id values. The server drops a message whose id it saw within the stream's duplicate
// window, so an id must be a function of what the message means, never of when or by whom it
// was produced: a stage that crashed after publishing and before recording it, or a new
// scanner leader resuming a round, publishes the same logical message again with the same id,
// and the server stores it once. Beyond the window, consumers absorb duplicates (every delete
// is compare-and-swap). Ids use only [A-Za-z0-9_%~:-] and stay under about 100 bytes.

// Limits of idPart.
const (
	idVerbatimMax = 32 // longest encoded string kept verbatim
	idReadableMax = 12 // encoded bytes kept in front of the hash
	idHashHex     = 12 // hex digits of the sha256 (48 bits)
)

// BatchMsgID identifies a batch by cluster, store, instance, round, cursor and part. Rounds are
// a store's own, and within one round the store's SCAN visits each cursor once, so (store,
// round, cursor) names one page; a scanner that
// re-reads the page after a crash or failover splits it the same way (SplitBatch is
// deterministic) and so re-publishes under the same ids. Parts is left out: if the page
// changed in between and splits differently, the extra parts are new messages, which is
// harmless as every decision is re-checked at delete time.
//
// Example: "b:c1:10.0.0.7%3A6379:inst-1:7:0:0".
func BatchMsgID(b Batch) string {
	return "b:" + idPart(b.Cluster) + ":" + idPart(b.Store) + ":" + idPart(b.Instance) + ":" +
		strconv.FormatUint(b.Round, 10) + ":" + strconv.FormatUint(b.Cursor, 10) + ":" +
		strconv.Itoa(b.Part)
}

// DeleteMsgID identifies a delete request by its source: a prober derives exactly one request
// from one batch message, so a prober re-judging a redelivered batch re-publishes under the
// same id. The source is the batch's stream and sequence ("d:<stream>:<seq>"), or, for a
// producer without one, the source message id ("dm:<msg id>"). A request whose source names
// neither (which DecodeDeleteRequest refuses) gets "dh:" and a hash of its cluster, instance,
// round and targets, so that two such requests never share an id and one is silently dropped.
func DeleteMsgID(r DeleteRequest) string {
	switch {
	case len(r.Sources) > 0:
		// A request gathered from several batches is named by all of them: a redelivery
		// that gathers them otherwise publishes under another id, so no batch's targets are
		// ever dropped as a duplicate of a request that did not hold them.
		srcs := append([]Source{r.Source}, r.Sources...)
		slices.SortFunc(srcs, func(a, b Source) int {
			return cmp.Or(strings.Compare(a.Stream, b.Stream), cmp.Compare(a.Seq, b.Seq), strings.Compare(a.MsgID, b.MsgID))
		})
		h := newFieldHash()
		for _, s := range srcs {
			h.field(s.Stream)
			h.number(s.Seq)
			h.field(s.MsgID)
		}
		return "dg:" + idPart(r.Source.Stream) + ":" + strconv.FormatUint(r.Source.Seq, 10) + ":" + h.hex()
	case r.Source.Stream != "" && r.Source.Seq > 0:
		return "d:" + idPart(r.Source.Stream) + ":" + strconv.FormatUint(r.Source.Seq, 10)
	case r.Source.MsgID != "":
		return "dm:" + idPart(r.Source.MsgID)
	}
	h := newFieldHash()
	h.field(r.Cluster)
	h.field(r.Instance)
	h.number(r.Round)
	for _, t := range r.Targets {
		h.number(uint64(t.Key))
		h.field(t.Location)
		h.field(t.Reason)
		h.field(string(t.Expected))
	}
	return "dh:" + h.hex()
}

// EventMsgID identifies an event by stage, kind, round, instance, key, location, reason,
// outcome, dry-run flag, source message and file: what the event says, not when it was said.
// Details, counts and the time are left out, so re-handling the same input (a redelivery)
// records the same outcome once; a different outcome is a different event. Example:
// "e:deleter:delete:3f0c…" (the last part is 24 hex digits of a sha256 of those fields).
func EventMsgID(e Event) string {
	h := newFieldHash()
	h.field(e.Cluster)
	h.field(e.Instance)
	h.field(e.Store)
	h.field(e.Stage)
	h.field(e.Kind)
	h.number(e.Round)
	h.flag(e.Key != nil)
	if e.Key != nil {
		h.number(uint64(*e.Key))
	}
	h.field(e.Location)
	h.field(e.Reason)
	h.field(e.Outcome)
	h.flag(e.DryRun)
	h.flag(e.Source != nil)
	if e.Source != nil {
		h.field(e.Source.Stream)
		h.number(e.Source.Seq)
		h.field(e.Source.MsgID)
	}
	// The optional parts only when set, so the ids of events without them stay what they were.
	if len(e.Targets) > 0 {
		// A request's event: two deliveries that end the same way are one event, and one
		// that ends otherwise (an error, then done) is another.
		h.number(uint64(len(e.Targets)))
		for _, t := range e.Targets {
			h.number(uint64(t.Key))
			h.field(t.Location)
			h.field(t.Outcome)
		}
	}
	if len(e.File) > 0 {
		h.field(string(e.File))
	}
	for _, f := range e.Metadata {
		h.field(f.Key)
		h.field(f.Field)
		h.field(string(f.Old))
		h.field(string(f.New))
	}
	return "e:" + idPart(e.Stage) + ":" + idPart(e.Kind) + ":" + h.hex()
}

// fieldHash hashes a sequence of fields unambiguously: every string is preceded by its length,
// so ("ab", "c") and ("a", "bc") differ.
type fieldHash struct {
	h   hash.Hash
	num [binary.MaxVarintLen64]byte
}

func newFieldHash() *fieldHash { return &fieldHash{h: sha256.New()} }

func (f *fieldHash) number(v uint64) { f.h.Write(binary.AppendUvarint(f.num[:0], v)) }

func (f *fieldHash) field(s string) {
	f.number(uint64(len(s)))
	f.h.Write([]byte(s))
}

func (f *fieldHash) flag(b bool) {
	if b {
		f.number(1)
	} else {
		f.number(0)
	}
}

// hex is 24 hex digits (96 bits) of the hash.
func (f *fieldHash) hex() string { return hex.EncodeToString(f.h.Sum(nil)[:12]) }

// idPart encodes s into a part of a message id with kvcm.EncodeToken (so ':' never appears in
// it); an encoding longer than 32 bytes is cut to its first 12 bytes (never inside a %XX
// escape) followed by '~' and 12 hex digits of the sha256 of s. EncodeToken never writes '~',
// so a shortened part never equals a verbatim one.
func idPart(s string) string {
	enc := kvcm.EncodeToken(s)
	if len(enc) <= idVerbatimMax {
		return enc
	}
	cut := idReadableMax
	if i := strings.LastIndexByte(enc[:cut], '%'); i >= 0 && i+3 > cut {
		cut = i
	}
	sum := sha256.Sum256([]byte(s))
	return enc[:cut] + "~" + hex.EncodeToString(sum[:])[:idHashHex]
}
