// Package subjects is the single definition of kvcm-gc's JetStream topology and message
// schemas: every subject, stream, consumer and bucket name, their configurations, the JSON
// messages the stages exchange, and their Nats-Msg-Id values. Nothing else in kvcm-gc spells a
// subject by hand.
//
// # Names
//
// Everything derives from a subject prefix (tokens of [A-Za-z0-9_-] joined by '.', e.g.
// "kvcmgc") and the KVCM cluster name, so several clusters and deployments can share one NATS
// account. With prefix "kvcmgc" and cluster "c1":
//
//	kvcmgc.c1.batch.<instance>          scanner → prober     stream KVCMGC_kvcmgc_c1_BATCHES
//	kvcmgc.c1.delete.<instance>         prober → deleter     stream KVCMGC_kvcmgc_c1_DELETES
//	kvcmgc.c1.event.<kind>.<instance>   every stage → audit  stream KVCMGC_kvcmgc_c1_EVENTS
//	kvcmgc.c1.sweep.<instance>          walker → sweeper     stream KVCMGC_kvcmgc_c1_SWEEP
//	consumer "prober" on BATCHES, "deleter" on DELETES, "sweeper" on SWEEP (durable, pull)
//	KV buckets KVCMGC_kvcmgc_c1_STATE (checkpoint, next round) and KVCMGC_kvcmgc_c1_LEASE (leader lease)
//
// # Subject tokens
//
// The cluster name, instance ids and event kinds are arbitrary strings; each is encoded into
// exactly one subject token by kvcm.EncodeToken: bytes in [A-Za-z0-9_-] stay as they are and
// every other byte becomes %XX (upper-case hex); the empty string is "%". The encoding is a
// bijection, so common ids stay readable ("inst-1" → "inst-1"), ids that differ give different
// tokens ("a.b" → "a%2Eb", "a*" → "a%2A", "实例" → "%E5%AE%9E%E4%BE%8B"), no id can inject a
// '.', '*' or '>' into a subject, and Names.InstanceOf recovers the id from a subject. Since a
// token is never a prefix match, a consumer filtered on "kvcmgc.c1.batch.inst1" never receives
// "inst10".
//
// Deployments sharing an account must not nest prefixes: with prefix "a" and cluster "b", the
// events subjects "a.b.event.>" would overlap the batches "a.b.event.batch.*" of prefix "a.b"
// and cluster "event". The server refuses overlapping streams, and Ensure names the other one.
//
// # Stream and bucket names
//
// A stream name becomes a directory in the server's store and a bucket name allows only
// [A-Za-z0-9_-], so names are "KVCMGC_<prefix>_<cluster>_<KIND>" where prefix and cluster are
// each mapped to [A-Za-z0-9-] (no '_', which separates the parts): a string of at most 32
// bytes of [a-z0-9-] without "--" is kept; any other becomes a readable part followed by "--"
// and 12 hex digits of its sha256 ("Prod_A" → "Prod-A--<hash>", "kvcm.gc" → "kvcm-gc--<hash>").
// Kept and hashed parts never collide (only hashed ones contain "--"), and upper-case letters
// force the hash so names differing only in case never share a directory on a case-insensitive
// file system.
//
// # Streams, consumers, buckets
//
// The three streams use limits retention (MaxAge, MaxBytes, discard old): an acked message is
// kept, so any stage's input can be replayed later with an ordered consumer to explain a
// decision. The prober and deleter consumers are durable pull consumers with explicit acks;
// the deleter's MaxAckPending is the global cap on delete requests in flight. Every publish
// carries a deterministic Nats-Msg-Id (BatchMsgID, DeleteMsgID, EventMsgID), so a re-publish
// after a crash inside the Duplicates window is dropped by the server. Ensure creates or
// updates all of it and names the fields of an existing object that conflict.
//
// # Messages
//
// Messages are compact JSON (Encode) with a schema version "v". Decoders tolerate unknown
// members (a newer minor producer may add some) but require a known version and the fields a
// consumer relies on; any failure wraps ErrPoison, and the consumer terminates such a message
// and records it instead of retrying it. Metadata bytes travel as RawText: a JSON string when
// they are valid UTF-8, else {"base64":"…"}, exact either way. SplitBatch keeps a batch under
// the server's max payload.
//
// # Reading it with the nats CLI
//
//	nats stream ls                                        # the KVCMGC_* streams
//	nats kv ls                                            # the KVCMGC_* buckets
//	nats stream subjects KVCMGC_kvcmgc_c1_BATCHES         # instances with messages
//	nats stream view KVCMGC_kvcmgc_c1_EVENTS --subject 'kvcmgc.c1.event.delete.>'
//	nats stream view KVCMGC_kvcmgc_c1_BATCHES --subject 'kvcmgc.c1.batch.a%2Eb'
//	nats stream get KVCMGC_kvcmgc_c1_DELETES 42           # one message, with its Nats-Msg-Id
//	nats consumer report KVCMGC_kvcmgc_c1_DELETES         # pending, ack pending, redelivered
//	nats consumer info KVCMGC_kvcmgc_c1_BATCHES prober
//	nats kv ls KVCMGC_kvcmgc_c1_STATE
//	nats kv get KVCMGC_kvcmgc_c1_LEASE <key>
//	nats event --js-advisory                              # max deliveries, terminated messages
//
// In a shell, quote subjects: '%' is harmless but '>' and '*' are not.
package subjects
