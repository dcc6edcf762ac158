// Package scanner is the scanner stage (DESIGN §4): it walks each metadata store whose lease
// it holds, once a round, with a full, read-only SCAN, and publishes the blocks it reads as
// batches for the prober, routed to their registered instances. A store's walk is a pure
// state machine (walk.go) run by a driver (driver.go) that performs its reads, publishes and
// checkpoint writes; replicas divide the stores by store leases (scanner.go); a duty pace
// keeps each walk to a share of its store's time (pace.go). It counts
// the keys of instances the registry no longer lists (unregistered.go) and, when asked to,
// sends them to the deleter (unregistered_collect.go).
//
// The scanner only reads and publishes: it never writes to KVCM's stores.
package scanner
