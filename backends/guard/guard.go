// Package guard tells whether a WRITING location is the target of an active migration copy,
// which must never be collected as an orphan (DESIGN §5 rule 1). A guard error means "keep".
package guard

import "context"

// Guard answers whether a location is an active copy target.
type Guard interface {
	IsCopyTarget(ctx context.Context, instanceID string, blockKey int64, locationID string) (bool, error)
}

// None is the guard for deployments without migration: nothing is a copy target.
type None struct{}

// IsCopyTarget always reports false.
func (None) IsCopyTarget(context.Context, string, int64, string) (bool, error) { return false, nil }
