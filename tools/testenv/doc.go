// Package testenv starts the real servers kvcm-gc's integration tests run against, on free
// loopback ports with their own temporary directories, and stops them when the test ends: a
// redis-server, an embedded NATS JetStream server, and a JetStream cluster of in-process
// nodes (StartNATSCluster).
package testenv
