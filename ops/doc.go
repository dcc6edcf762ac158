// Package ops is what an operator of kvcm-gc uses to see, explain and steer the pipeline:
//
//   - Status: streams, consumers (pending, ack pending, redelivered, paused, age of the
//     reading), the scanner replicas and every metadata store's lease holder and walk (the
//     replicas divide the stores), the current round with an estimated end and what holds it
//     back, the next round, the last event of each kind; a table or JSON. Everything is read
//     at once, each request under its own timeout, and what cannot be read says so.
//   - Report: what a round's deletes free, or in a dry run would free.
//   - Ensure: the topology created, or checked field by field without a change.
//   - Replay: a stage's input read back from its stream with an ordered ephemeral consumer,
//     and per location the decision then (recorded events), the rules re-run on the recorded
//     bytes, and the decision now against the current metadata, all without writing.
//   - Pause and Resume: JetStream consumer pause for the prober and the deleter, a pause
//     value in the state bucket for the scanner.
//   - DLQList and DLQRetry: the poison and dead-letter events, and re-publishing a message
//     from its limits-retention stream after a fix.
//
// Every function takes clients the caller has connected and writes nothing but what it is
// for; the kvcm-gc command line (cli) declares the commands on top of them.
package ops
