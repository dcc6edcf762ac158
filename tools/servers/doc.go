// Package servers starts the real servers kvcm-gc's tests and harness programs run against,
// on free loopback ports: a redis-server child process, an embedded NATS JetStream server,
// and a JetStream cluster of in-process nodes; and the harness programs' other children (the
// stage processes, the processes of tools/kube's control plane: Child), their output in a log
// file. Every starter returns an error and the caller stops what it started (Close,
// Shutdown), so that the programs users run (kvcm-gc demo) do not link the testing package;
// package testenv wraps these for tests, stopping them when a test ends.
package servers
