package subjects

import (
	"bytes"
	"fmt"

	"github.com/klauspost/compress/s2"
)

// A delete request carries the exact bytes of every target's location, about 0.1 kB of DELETES
// per scanned block at 10% garbage: as much as the binary batches. The prober stores it as its
// JSON compressed with S2 behind the magic "KVZ\x01" (a sealed message), unless S2 would not
// shrink it; DecodeDeleteRequest reads both forms, so requests of an older prober still in
// DELETES are executed. Events stay plain JSON: every reader of the audit trail reads them.

// sealedMagic starts a sealed message; a JSON message starts with '{' or white space.
const sealedMagic = "KVZ\x01"

// maxSealedJSON bounds the JSON a sealed message may claim to hold; more is refused unread.
const maxSealedJSON = 256 << 20

// EncodeDeleteRequest is Encode of r, sealed (S2-compressed) when that makes it smaller.
func EncodeDeleteRequest(r DeleteRequest) ([]byte, error) {
	data, err := Encode(r)
	if err != nil {
		return nil, err
	}
	return seal(data), nil
}

// seal compresses a JSON message behind sealedMagic, or returns it as it is when S2 does not
// make it smaller.
func seal(data []byte) []byte {
	c := s2.Encode(make([]byte, len(sealedMagic)+s2.MaxEncodedLen(len(data)))[len(sealedMagic):], data)
	if len(sealedMagic)+len(c) >= len(data) {
		return data
	}
	out := make([]byte, 0, len(sealedMagic)+len(c))
	return append(append(out, sealedMagic...), c...)
}

// IsSealed reports whether data is a sealed message (it may still be malformed).
func IsSealed(data []byte) bool { return bytes.HasPrefix(data, []byte(sealedMagic)) }

// unseal returns the JSON of a sealed message, and data itself when it is not sealed; a
// sealed message that does not decompress is poison.
func unseal(data []byte, what string) ([]byte, error) {
	if !IsSealed(data) {
		return data, nil
	}
	body := data[len(sealedMagic):]
	n, err := s2.DecodedLen(body)
	if err == nil && n > maxSealedJSON {
		err = fmt.Errorf("decodes to %d bytes, more than %d", n, maxSealedJSON)
	}
	if err == nil {
		data, err = s2.Decode(make([]byte, n), body)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: decode %s: sealed message: %w", ErrPoison, what, err)
	}
	return data, nil
}

// Unseal returns the JSON of a sealed message (data itself when it is not sealed), for people
// to read.
func Unseal(data []byte) ([]byte, error) { return unseal(data, "message") }
