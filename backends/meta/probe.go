package meta

import "errors"

// ErrInfoRefused is a store's answer that it will not report its own load (a Redis user
// without +info, a proxy that does not pass INFO on, a server that does not count its main
// thread's CPU): the caller goes without it from then on.
var ErrInfoRefused = errors.New("the store refuses to report its CPU time")
