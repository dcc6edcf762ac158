// Package faults is kvcm-gc's fault suite: it runs the stages as separate processes on a
// seeded keyspace, injects faults (kill -9 of a stage, Redis and NATS restarts and outages,
// a leader failover, a concurrent KVCM-like writer, clock skew) and checks DESIGN §8 after
// each: nothing live deleted or changed, nothing left DELETING, every garbage location gone
// within two rounds after the fault, no goroutine leak, bounded memory.
package faults
