// Package faults is kvcm-gc's fault suite: it runs the stage binaries (scanner, prober,
// deleter) as separate processes on a seeded keyspace, injects faults, and checks DESIGN §8
// after each scenario.
//
// Every scenario starts from fresh servers: a redis-server with an append-only file synced on
// every write (so a restart or a kill loses nothing), a NATS JetStream server on a file store
// (embedded in the driver, restartable on the same port; three nats-server processes for the
// cluster scenario), and a keyspace from seed.Generate
// with a manifest of garbage and live locations, in one of KVCM's two block layouts (DESIGN
// §2): the location layout of today's KVCM (one L#<id> field per location) or the legacy
// layout of KVCM f6aa2b2 (one __uri__ map and __lru_time__).
//
// Which layout a scenario runs in is chosen per scenario: -layout location or -layout legacy
// runs every scenario in that layout; -layout both (the default) runs every scenario in the
// location layout, and again in the legacy layout those whose faults meet what differs
// between the layouts — kill-deleter (CAS and CAD cut short), concurrent-writer (KVCM's
// writes of each layout), beside-upstream (KVCM's own deletes in each layout), clock-skew
// (ages: create_time alone, or the later of create_time and __lru_time__), stuck-deleting
// (ages by __lru_time__, or by kvcm-gc's own first sight). The other faults act on the processes, Redis and NATS as wholes and read and write block
// bytes no differently than kill-deleter does; -layout legacy runs them in the legacy layout
// too. A scenario named as name:location or name:legacy in -scenarios runs in that layout
// alone. The faults:
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
//     after each probe, between the prober's judgement and the deleter's compare-and-swap. It
//     writes as KVCM of the layout does: HMGET and HSET of one L#<id> field (a new one with
//     BP#prev_key only when it creates the key), or the whole __uri__ and __lru_time__;
//   - clock-skew: WRITING locations whose create_time (or __lru_time__) lies in the future, or
//     is 0 (location layout);
//   - stuck-deleting: collect_deleting on (deleting_grace 2h: at least 1h, and above the seed
//     group's delay_before_delete_ms + 1h), DELETING locations that have been DELETING longer
//     — legacy: by an old __lru_time__; location layout: by a first-sight record in the
//     OBSERVED bucket from before round 1 (those without one are first seen in round 1, and
//     stay) — collected under kill -9 of random stages; only per-block file names are unlinked, data
//     on other names, shared files, mooncake, or named by another location of the block stays.
//     Right after kvcm-gc nominates one, a KVCM-like writer flips it to SERVING (a late
//     FinishWriteCache) or finishes it as KVCM's delete executor (its CAD), or leaves it;
//   - cluster-leaders: a JetStream cluster of three nats-server processes, every stream and
//     bucket at replicas 3; mid-round the node leading the BATCHES stream, then the node
//     leading the LEASE bucket, is killed with SIGKILL (no leadership hand-over) and started
//     again on its store once another node leads.
//   - beside-upstream: KVCM's own in-process GC (UpstreamGC, an emulator of its five-step
//     delete protocol: re-read, compare, CAS to DELETING, physical delete but the confirmed
//     missing, CAD and empty-key recycle) collecting the same keyspace and the same garbage at
//     the same time, its nfs_01 storage able to stat and delete files; no upgraded keys. Once
//     both converged, every garbage location must have been removed exactly once, by kvcm-gc's
//     CAD or KVCM's; the races kvcm-gc lost must be no-ops, no delete of either an error, and
//     no unlink of a file the other deleted first a failure; the races each way (a DELETING
//     mark of KVCM's finished by kvcm-gc, a location KVCM marked or removed lost by kvcm-gc
//     as a no-op) are counted by location and reported, with the phantom bytes each side
//     left in KVCM's usage;
//   - sweep-kills: the sweep of orphan data files (walker and sweepers beside the other
//     stages) under kill -9 of the walker and of sweepers mid-batch; a whole walk after the
//     kills must leave exactly the orphans gone, every other file byte-identical and nothing
//     in quarantine.
//
// After the fault ends the suite waits, round by round (round_pause is short), until Redis and
// the files are exactly as expected: every garbage location gone with its unshared files,
// every key that lost its last location in KVCM's "exists, no location" form (empty_block:
// keep: legacy __uri__ = {}; location layout, its other fields, or BP#prev_key = ""),
// everything else byte-identical, nothing left DELETING. That must happen within two rounds.
// A writer's changes adjust the expectation: a location it finished or added is live (one it
// finished over a DELETING whose data kvcm-gc may have unlinked may go or stay, and whatever
// stays is byte for byte the writer's); a location it removed is gone; in the legacy layout a
// WRITING or DELETING location of a block whose __lru_time__ it refreshed may go or stay (its
// age is the later of create_time and __lru_time__). The stage processes'
// peak resident set size (VmHWM) and goroutine count must stay under limits, all must stop
// cleanly, and the driver's own goroutines must wind down.
//
// Every random choice comes from one seed, printed with the results:
// `go run ./tools/faults/cmd/faults -seed N` repeats the schedule (the timing of real
// processes varies, the choices do not).
//
// The soak (RunSoak, soak*.go, `make soak`) runs on the same deployment for many rounds
// instead of one scenario: KVCM's workload all the time at a fixed rate, crashed writers
// among it (soak_kvcm.go), upstream's GC beside kvcm-gc (UpstreamGC), faults by a schedule
// that holds every kind (soak_faults.go), every round checked against a model of what KVCM
// wrote (soak_model.go) before the next one ends — the keys written since the last check,
// learnt from Redis's keyspace notifications (soak_keys.go), and the others in turn — every
// stream watched for messages discarded before their consumer took them (soak_streams.go),
// and each stage's memory, goroutines and open files judged by the slope of a fit with a
// confidence interval over the last rounds (soak_steady.go, tools/trend).
package faults
