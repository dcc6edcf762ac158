// Package sweep is the sweep of orphan data files (DESIGN §7): a walker per swept storage
// publishes candidate files (walker.go), and sweepers judge each against its block (judge.go)
// and move an orphan through a quarantine before it is unlinked (sweeper.go). It runs on
// package pipeline's pieces: its Lease, its EventLog, its publishers and consumer.
//
// Every rule fails closed: anything uncertain means keep.
package sweep
