package meta

import "errors"

// ErrProbeRefused is a store's answer that it will not run a probe command (a Redis user
// without +time): the caller probes another way from then on.
var ErrProbeRefused = errors.New("the store refuses the probe command")
