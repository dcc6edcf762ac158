// Package kvcm models the metadata a KV Cache Manager (KVCM) keeps in Redis, byte for byte:
// block keys, the __uri__ JSON of a block's cache locations, data-storage URIs and the
// registry's JSON records. It does no I/O.
//
// Every decoder here reads outside bytes and reports what it cannot understand instead of
// guessing: a location that does not decode is never a deletion candidate.
package kvcm
