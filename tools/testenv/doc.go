// Package testenv starts the real servers kvcm-gc's integration tests run against, on free
// loopback ports with their own temporary directories, and stops them when the test ends: a
// redis-server, an embedded NATS JetStream server, and a JetStream cluster of in-process
// nodes (StartNATSCluster). It wraps package servers, whose starters return errors and
// import no testing, for the programs that are not tests.
package testenv
