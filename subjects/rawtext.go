package subjects

// RawText carries exact bytes in JSON: as a JSON string when they are valid UTF-8 (readable in
// `nats stream view`), else as {"base64":"…"}. Decoding gives back the same bytes either way.
type RawText []byte
