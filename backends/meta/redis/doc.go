// Package redismeta is the Redis implementation of kvcm-gc's metadata contracts
// (backends/meta): the side-effect-free maintenance scan of a KVCM metadata store, the
// deleter's exact-bytes Lua CAS/CAD, a read-only registry reader, and a pool that opens
// one store per metadata Redis.
//
// Connections accept KVCM's own redis:// URIs and authenticate as KVCM does (the raw
// userinfo as AUTH's single argument, sent only after a NOAUTH reply), besides ordinary ACL
// users and TLS for kvcm-gc's own connections. Nothing in this package writes
// __lru_time__, the registry or KVCM's leader lock (DESIGN §8.5), and only WatchMetadata,
// the compare-and-set of an operator's counters repair, writes an instance's metadata hash
// (__key_count__, __storage_usage_data__; DESIGN §13.3); the scan and the registry reader
// send read commands only, so both work as an ACL user that may not write.
package redismeta
