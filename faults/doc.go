// Package faults is kvcm-gc's fault suite: it runs the stage binaries (scanner, prober,
// deleter) as separate processes on a seeded keyspace, injects faults, and checks DESIGN §8
// after each scenario.
//
// Every scenario starts from fresh servers: a redis-server with an append-only file synced on
// every write (so a restart or a kill loses nothing), a NATS JetStream server on a file store
// (embedded in the driver, restartable on the same port; three nats-server processes for the
// cluster scenario), and a keyspace from seed.Generate
// with a manifest of garbage and live locations. The faults:
//
//   - kill-scanner, kill-prober, kill-deleter, kill-any: kill -9 of a stage at random moments
//     (aimed, most of the time, at a deleter or prober holding messages or a scanner leading a
//     round), then a new process;
//   - redis-restart: Redis restarted mid-round, gracefully and then after a kill -9;
//   - redis-outage: Redis stopped mid-round for a while, then started on the same port and data;
//   - nats-restart: the NATS server stopped mid-round twice, then started on its store;
//   - scanner-failover: two scanners; the leader killed mid-round; the other must take over and
//     resume from the checkpoint (in the first round, each key counted exactly once);
//   - concurrent-writer: a KVCM-like writer finishing writes (SERVING whatever the status, as
//     KVCM's FinishWriteCache) and adding locations in the blocks being collected, also right
//     after each probe, between the prober's judgement and the deleter's compare-and-swap;
//   - clock-skew: WRITING locations whose create_time or __lru_time__ lies in the future;
//   - cluster-leaders: a JetStream cluster of three nats-server processes, every stream and
//     bucket at replicas 3; mid-round the node leading the BATCHES stream, then the node
//     leading the LEASE bucket, is killed with SIGKILL (no leadership hand-over) and started
//     again on its store once another node leads.
//   - sweep-kills: the sweep of orphan data files (walker and sweepers beside the other
//     stages) under kill -9 of the walker and of sweepers mid-batch; a whole walk after the
//     kills must leave exactly the orphans gone, every other file byte-identical and nothing
//     in quarantine.
//
// After the fault ends the suite waits, round by round (round_pause is short), until Redis and
// the files are exactly as expected: every garbage location gone with its unshared files,
// everything else byte-identical, nothing left DELETING. That must happen within two rounds.
// A writer's changes adjust the expectation: a location it finished or added is live; an
// orphan whose age came from a __lru_time__ it refreshed may go or stay. The stage processes'
// peak resident set size (VmHWM) and goroutine count must stay under limits, all must stop
// cleanly, and the driver's own goroutines must wind down.
//
// Every random choice comes from one seed, printed with the results: `go run ./faults/cmd/faults
// -seed N` repeats the schedule (the timing of real processes varies, the choices do not).
package faults
