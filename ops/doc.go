// Package ops is what an operator of kvcm-gc uses to see, explain and steer the pipeline:
//
//   - Status: streams, consumers (pending, ack pending, redelivered, paused), the scanner
//     leader, the current round with an estimated end, the next round, the last event of
//     each kind; a table or JSON.
//   - Replay: a stage's input read back from its stream with an ordered ephemeral consumer,
//     and per location the decision then (recorded events), the rules re-run on the recorded
//     bytes, and the decision now against the current metadata, all without writing.
//   - Pause and Resume: JetStream consumer pause for the prober and the deleter, a pause
//     value in the state bucket for the scanner.
//   - DLQList and DLQRetry: the poison and dead-letter events, and re-publishing a message
//     from its limits-retention stream after a fix.
//
// Every function takes clients the caller has connected; the *Command functions parse a
// subcommand's own flags so a CLI mounts each with one line (see Commands).
package ops
