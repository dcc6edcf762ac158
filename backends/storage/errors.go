package storage

import "errors"

var (
	// ErrForeignURI: the URI's host names another storage than the backend it was given to.
	// Nothing was touched; a probe answers Unknown for it.
	ErrForeignURI = errors.New("uri names another storage")
	// ErrUnsafePath: the URI's path is not one the backend may touch: not under the storage's
	// root, relative, with "." or ".." segments or a NUL byte, or mapped by the path map to a
	// place outside the root's local path (or the storage's own root is unusable). Nothing was
	// touched; a probe answers Unknown for it.
	ErrUnsafePath = errors.New("unsafe data path")
)
