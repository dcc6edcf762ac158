// Package steptest has the assertions of a walk's table tests. A walk's step returns a list
// of sealed actions (package pipeline's walk.go); a test asks which of them are of one type.
// The functions are generic in the action interface, so each walk's tests use them with its
// own.
package steptest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// OfType returns the actions of type T in acts, in order.
func OfType[T, A any](acts []A) []T {
	var out []T
	for _, a := range acts {
		if x, ok := any(a).(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// Only fails t unless acts holds exactly one action of type T, and returns it.
func Only[T, A any](t testing.TB, acts []A) T {
	t.Helper()
	xs := OfType[T](acts)
	require.Len(t, xs, 1, "actions %#v", acts)
	return xs[0]
}

// None fails t if acts holds an action of type T.
func None[T, A any](t testing.TB, acts []A) {
	t.Helper()
	require.Empty(t, OfType[T](acts), "actions %#v", acts)
}

// Last fails t unless acts holds an action of type T, and returns the last one (of a walk's
// waits, the last one wins).
func Last[T, A any](t testing.TB, acts []A) T {
	t.Helper()
	xs := OfType[T](acts)
	require.NotEmpty(t, xs, "actions %#v", acts)
	return xs[len(xs)-1]
}
