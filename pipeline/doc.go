// Package pipeline is the runtime kvcm-gc's stages share (DESIGN §3): the consume loop that
// runs a stage's handler over a JetStream consumer and decides, in one place, ack, nak, term
// or dead letter (Consumer); publishing (Publisher, AsyncPublisher, JSPublisher); the one
// Lease type and the walk abstraction every long-running walk is built on (Loop, Stepper,
// WalkTick, Controls for pauses and backpressure); the event log (EventLog); the registry
// cache; message receipt (Receive); pauses and dead letters; stage names; and the metrics
// every stage shares (Metrics).
//
// It also holds the records and decisions two stages share: the scanner's store checkpoint,
// which the sweep reads (Checkpoint), whether an unregistered instance may be collected
// (CollectableUnregistered), and a block's migration copy guards, which the prober's rules
// and the deleter's protocol both respect (MigrationPins).
//
// The stages are packages of their own, each importing this one and none of the others:
// scanner (DESIGN §4), prober (§5), deleter (§6) and sweep (§7).
package pipeline
