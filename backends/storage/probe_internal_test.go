package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProbeResult pins the error classification, including errnos a test cannot provoke on a
// local disk (or as root): only "no such file or directory" is Missing.
func TestProbeResult(t *testing.T) {
	pathErr := func(e error) error { return &fs.PathError{Op: "lstat", Path: "inst/tp0/1", Err: e} }
	cases := []struct {
		name string
		err  error
		want Result
	}{
		{"exists", nil, Present},
		{"ENOENT", pathErr(syscall.ENOENT), Missing},
		{"wrapped ENOENT", fmt.Errorf("probe: %w", pathErr(syscall.ENOENT)), Missing},
		{"EACCES", pathErr(syscall.EACCES), Unknown},
		{"EPERM", pathErr(syscall.EPERM), Unknown},
		{"ENOTDIR", pathErr(syscall.ENOTDIR), Unknown},
		{"EIO", pathErr(syscall.EIO), Unknown},
		{"ESTALE", pathErr(syscall.ESTALE), Unknown},
		{"ELOOP", pathErr(syscall.ELOOP), Unknown},
		{"ENAMETOOLONG", pathErr(syscall.ENAMETOOLONG), Unknown},
		{"root escape", pathErr(errors.New("path escapes from parent")), Unknown},
		{"fs.ErrNotExist alone", fs.ErrNotExist, Unknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, probeResult(c.err))
		})
	}
}

func TestApplyPathMap(t *testing.T) {
	pm := []PathMap{
		{From: "/tmp/test_storage_01", To: "/mnt/ts01"},
		{From: "/tmp/", To: "/mnt/tmp/"},
	}
	cases := []struct{ in, want string }{
		{"/tmp/test_storage_01test_instance_01/tp0/1f", "/mnt/ts01test_instance_01/tp0/1f"}, // first match wins
		{"/tmp/nfs/inst/tp0/1f", "/mnt/tmp/nfs/inst/tp0/1f"},
		{"/data/inst/tp0/1f", "/data/inst/tp0/1f"}, // no match: unchanged
	}
	for _, c := range cases {
		require.Equal(t, c.want, applyPathMap(pm, c.in), c.in)
	}
	require.Equal(t, "/a", applyPathMap(nil, "/a"))
}
