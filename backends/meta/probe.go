package meta

import "errors"

// ErrProbeRefused is a store's answer that it will not run a probe command (a Redis user
// without +time): the caller probes another way from then on.
var ErrProbeRefused = errors.New("the store refuses the probe command")

// ErrInfoRefused is a store's answer that it will not report its own load (a Redis user
// without +info, a proxy that does not pass INFO on, a server that does not count its main
// thread's CPU): the caller goes without it from then on.
var ErrInfoRefused = errors.New("the store refuses to report its CPU time")
