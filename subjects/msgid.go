package subjects

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
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

// BatchMsgID identifies a batch by cluster, instance, round, cursor and part. Within one round
// an instance's SCAN visits each cursor once, so (round, cursor) names one page; a scanner that
// re-reads the page after a crash or failover splits it the same way (SplitBatch is
// deterministic) and so re-publishes under the same ids. Parts is left out: if the page
// changed in between and splits differently, the extra parts are new messages, which is
// harmless as every decision is re-checked at delete time.
//
// Example: "b:c1:inst-1:7:0:0".
func BatchMsgID(b Batch) string {
	return "b:" + idPart(b.Cluster) + ":" + idPart(b.Instance) + ":" +
		strconv.FormatUint(b.Round, 10) + ":" + strconv.FormatUint(b.Cursor, 10) + ":" +
		strconv.Itoa(b.Part)
}

// DeleteMsgID identifies a delete request by its source: a prober derives exactly one request
// from one batch message, so a prober re-judging a redelivered batch re-publishes under the
// same id. The source is the batch's stream and sequence ("d:<stream>:<seq>"), or, for a
// producer without one, the source message id ("dm:<msg id>").
func DeleteMsgID(r DeleteRequest) string {
	if r.Source.Stream != "" && r.Source.Seq > 0 {
		return "d:" + idPart(r.Source.Stream) + ":" + strconv.FormatUint(r.Source.Seq, 10)
	}
	return "dm:" + idPart(r.Source.MsgID)
}

// EventMsgID identifies an event by stage, kind, round, instance, key, location, reason,
// outcome, dry-run flag and source message: what the event says, not when it was said. Details,
// counts and the time are left out, so re-handling the same input (a redelivery) records the
// same outcome once; a different outcome is a different event. Example:
// "e:deleter:delete:3f0c…" (the last part is 24 hex digits of a sha256 of those fields).
func EventMsgID(e Event) string {
	h := sha256.New()
	var num [binary.MaxVarintLen64]byte
	field := func(s string) {
		h.Write(binary.AppendUvarint(num[:0], uint64(len(s))))
		h.Write([]byte(s))
	}
	number := func(v uint64) { h.Write(binary.AppendUvarint(num[:0], v)) }
	field(e.Cluster)
	field(e.Instance)
	field(e.Stage)
	field(e.Kind)
	number(e.Round)
	if e.Key != nil {
		number(1)
		number(uint64(*e.Key))
	} else {
		number(0)
	}
	field(e.Location)
	field(e.Reason)
	field(e.Outcome)
	if e.DryRun {
		number(1)
	} else {
		number(0)
	}
	if e.Source != nil {
		number(1)
		field(e.Source.Stream)
		number(e.Source.Seq)
		field(e.Source.MsgID)
	} else {
		number(0)
	}
	sum := h.Sum(nil)
	return "e:" + idPart(e.Stage) + ":" + idPart(e.Kind) + ":" + hex.EncodeToString(sum[:12])
}

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
