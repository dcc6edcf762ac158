// Package pipeline holds the decisions of kvcm-gc's three stages — scanner, prober and
// deleter (DESIGN §4–§6) — and the loops that run them on JetStream consumers. The rules are
// plain functions over small interfaces (a metadata store, a storage set, a copy guard, a
// publisher) so each can be tested with a table; the loops add leases, checkpoints,
// backpressure and acknowledgement.
//
// The sweep of orphan data files (DESIGN §7) adds two stages beside them, in package sweep:
// a walker per swept storage publishes candidate files, and sweepers judge each against its
// block and move an orphan through a quarantine before it is unlinked. They run on this
// package's lease, event log, publishers and consumer.
//
// Every rule fails closed: anything uncertain means keep.
package pipeline
