package metatest

import (
	"context"

	"github.com/kvcm-gc/kvcm-gc/backends/meta"
)

// Registry is a meta.RegistryReader for the tests of what reads the registry: it serves Reg,
// or fails with Err, and counts its reads in Reads. It is not safe for concurrent use.
type Registry struct {
	Reg   *meta.Registry
	Err   error
	Reads int
}

// ReadRegistry counts the read and returns Reg, or Err when set.
func (r *Registry) ReadRegistry(context.Context) (*meta.Registry, error) {
	r.Reads++
	if r.Err != nil {
		return nil, r.Err
	}
	return r.Reg, nil
}
