package subjects

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrPoison marks a message that can never be processed (undecodable, unknown version, invalid
// fields): consumers Term it and record it; they never retry it.
var ErrPoison = errors.New("poison message")

// Encode marshals a message compactly without HTML escaping ('&', '<', '>' stay as they are,
// so payloads read naturally in `nats stream view`), without a trailing newline.
func Encode(v any) ([]byte, error) {
	switch m := v.(type) {
	case Batch:
		return m.encode(), nil
	case *Batch:
		if m != nil {
			return m.encode(), nil
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// encode is Encode of a batch: the binary schema 2 (batchbin.go) when V says so, else JSON.
func (b *Batch) encode() []byte {
	if b.V == BatchSchemaVersion {
		return b.encodeBinary()
	}
	return b.appendJSON(make([]byte, 0, b.sizeHint()))
}

// DecodeBatch decodes and validates a batch of either schema; every failure wraps ErrPoison.
//
// A schema 2 batch (batchbin.go) is recognised by its magic. Of JSON, a batch in the form
// Encode writes is decoded by hand (see decodeBatchFast); any other input goes through
// encoding/json. Both give the same batch, or the same error.
func DecodeBatch(data []byte) (Batch, error) {
	if IsBinaryBatch(data) {
		b, err := decodeBinaryBatch(data)
		if err != nil {
			return Batch{}, err
		}
		return valid(b)
	}
	if b, ok := decodeBatchFast(data); ok {
		return validJSONBatch(b)
	}
	return decodeBatchJSON(data)
}

// validJSONBatch is validBatch of a batch read from JSON, which only schema 1 is written in.
func validJSONBatch(b Batch) (Batch, error) {
	if err := checkVersion(b.V); err != nil {
		return Batch{}, fmt.Errorf("%w: batch: %w", ErrPoison, err)
	}
	return valid(b)
}

// decodeBatchJSON is DecodeBatch through encoding/json only.
func decodeBatchJSON(data []byte) (Batch, error) {
	var b Batch
	if err := decode(data, &b, "batch"); err != nil {
		return Batch{}, err
	}
	return validJSONBatch(b)
}

// validator is a message type whose pointer has Validate.
type validator[T any] interface {
	*T
	Validate() error
}

// valid returns m when it validates, else the zero message and the error wrapped in ErrPoison.
func valid[T any, P validator[T]](m T) (T, error) {
	if err := P(&m).Validate(); err != nil {
		var zero T
		return zero, fmt.Errorf("%w: %w", ErrPoison, err)
	}
	return m, nil
}

// decodeValid decodes one JSON message through encoding/json (see decode) and validates it;
// every failure wraps ErrPoison.
func decodeValid[T any, P validator[T]](data []byte, what string) (T, error) {
	var m T
	if err := decode(data, &m, what); err != nil {
		var zero T
		return zero, err
	}
	return valid[T, P](m)
}

// DecodeDeleteRequest decodes and validates a delete request, sealed (sealed.go) or not; every
// failure wraps ErrPoison.
// Like DecodeBatch, it decodes the form Encode writes by hand and anything else through
// encoding/json, with the same result.
func DecodeDeleteRequest(data []byte) (DeleteRequest, error) {
	data, err := unseal(data, "delete request")
	if err != nil {
		return DeleteRequest{}, err
	}
	if r, ok := decodeDeleteRequestFast(data); ok {
		return valid(r)
	}
	return decodeDeleteRequestJSON(data)
}

// decodeDeleteRequestJSON is DecodeDeleteRequest through encoding/json only.
func decodeDeleteRequestJSON(data []byte) (DeleteRequest, error) {
	return decodeValid[DeleteRequest](data, "delete request")
}

// DecodeEvent decodes and validates an event; every failure wraps ErrPoison.
func DecodeEvent(data []byte) (Event, error) {
	return decodeValid[Event](data, "event")
}

// decode unmarshals one JSON object. Unknown members are tolerated, so a producer of a newer
// minor revision may add fields; trailing data after the object is not. When the object does
// not fit the schema, a "v" this build does not know is reported instead of the field error,
// since another version may legitimately have other types.
func decode(data []byte, v any, what string) error {
	if len(bytes.TrimSpace(data)) == 0 || bytes.TrimSpace(data)[0] != '{' {
		return fmt.Errorf("%w: decode %s: not a JSON object", ErrPoison, what)
	}
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var ver struct {
		V *json.RawMessage `json:"v"`
	}
	if json.Unmarshal(data, &ver) == nil && ver.V != nil && string(*ver.V) != "1" &&
		(what != "event" || string(*ver.V) != "2") {
		return fmt.Errorf("%w: decode %s: unsupported schema version %s (this build reads %d)",
			ErrPoison, what, *ver.V, SchemaVersion)
	}
	return fmt.Errorf("%w: decode %s: %w", ErrPoison, what, err)
}

func checkVersion(v int) error {
	if v != SchemaVersion {
		return fmt.Errorf("unsupported schema version %d (this build reads %d)", v, SchemaVersion)
	}
	return nil
}

// Validate checks what every consumer of a batch relies on. Producers may call it before
// publishing; DecodeBatch calls it on every message.
func (b *Batch) Validate() error {
	if b.V != SchemaVersion && b.V != BatchSchemaVersion {
		return fmt.Errorf("batch: unsupported schema version %d (this build reads %d and %d)", b.V,
			SchemaVersion, BatchSchemaVersion)
	}
	switch {
	case b.Cluster == "":
		return errors.New("batch: cluster is empty")
	case b.Instance == "":
		return errors.New("batch: instance is empty")
	case b.Parts < 1:
		return fmt.Errorf("batch: parts %d is less than 1", b.Parts)
	case b.Part < 0 || b.Part >= b.Parts:
		return fmt.Errorf("batch: part %d not in [0, %d)", b.Part, b.Parts)
	case b.BadKeys < 0:
		return fmt.Errorf("batch: bad_keys %d is negative", b.BadKeys)
	}
	for i := range b.Blocks {
		e := &b.Blocks[i]
		legacy, location := len(e.URI) > 0 || e.LRUTime != "", len(e.Locs) > 0
		var ok bool
		switch e.Layout {
		case "", LayoutLegacy:
			ok = !location
		case LayoutLocation:
			ok = location && !legacy
		case LayoutAmbiguous:
			ok = true
		}
		if !ok {
			return fmt.Errorf("batch: block %d (key %d): layout %q does not fit its fields", i, e.Key, e.Layout)
		}
	}
	return nil
}

// Validate checks what a deleter relies on: a source that identifies the request (its message
// id derives from it), at least one target, and for each target a known reason, a location id
// and the exact bytes to compare with. Two targets naming the same location are refused: the
// prober de-duplicates, so a repeat means the producer is broken.
func (r *DeleteRequest) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return fmt.Errorf("delete request: %w", err)
	}
	switch {
	case r.Cluster == "":
		return errors.New("delete request: cluster is empty")
	case r.Instance == "":
		return errors.New("delete request: instance is empty")
	case !r.Source.identifies():
		return errors.New("delete request: source names neither a stream message (stream and seq) nor a msg_id")
	case len(r.Targets) == 0:
		return errors.New("delete request: no targets")
	}
	for i, s := range r.Sources {
		if !s.identifies() {
			return fmt.Errorf("delete request: source %d names neither a stream message nor a msg_id", i+1)
		}
	}
	type loc struct {
		key int64
		id  string
	}
	seen := make(map[loc]struct{}, len(r.Targets))
	for i, t := range r.Targets {
		switch {
		case t.Location == "":
			return fmt.Errorf("delete request: target %d (key %d): location is empty", i, t.Key)
		case t.Reason != ReasonOrphanWriting && t.Reason != ReasonStorageMissing && t.Reason != ReasonStuckDeleting &&
			t.Reason != ReasonUnregisteredInstance:
			return fmt.Errorf("delete request: target %d (key %d, location %q): unknown reason %q",
				i, t.Key, t.Location, t.Reason)
		case len(t.Expected) == 0:
			return fmt.Errorf("delete request: target %d (key %d, location %q): expected bytes are empty", i, t.Key, t.Location)
		case t.Layout != "" && t.Layout != LayoutLegacy && t.Layout != LayoutLocation:
			return fmt.Errorf("delete request: target %d (key %d, location %q): unknown layout %q",
				i, t.Key, t.Location, t.Layout)
		}
		k := loc{t.Key, t.Location}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("delete request: target %d repeats key %d location %q", i, t.Key, t.Location)
		}
		seen[k] = struct{}{}
	}
	return nil
}

// identifies reports whether s names a message: a stream sequence or a message id.
func (s Source) identifies() bool {
	return s.Stream != "" && s.Seq > 0 || s.MsgID != ""
}

// Validate checks an event. Kinds are not limited to the Event* constants, so that a newer
// producer's events still decode.
func (e *Event) Validate() error {
	if e.V < 1 || e.V > EventSchemaVersion {
		return fmt.Errorf("event: unsupported schema version %d (this build reads 1 to %d)", e.V, EventSchemaVersion)
	}
	switch {
	case e.Kind == "":
		return errors.New("event: kind is empty")
	case e.Stage == "":
		return fmt.Errorf("event %s: stage is empty", e.Kind)
	case e.Cluster == "":
		return fmt.Errorf("event %s: cluster is empty", e.Kind)
	case e.At <= 0:
		return fmt.Errorf("event %s: at_us %d is not a time", e.Kind, e.At)
	case e.Source != nil && !e.Source.identifies():
		return fmt.Errorf("event %s: source names neither a stream message nor a msg_id", e.Kind)
	}
	return nil
}
