package kube

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProc: a component runs in dir, in the test's process group, its output in
// <dir>/<name>.log; exited names it once it has exited, and stop kills it.
func TestProc(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	dir := t.TempDir()
	p, err := startProc(dir, "comp", sh, "-c", "pwd; echo err >&2; exec sleep 60")
	require.NoError(t, err)
	t.Cleanup(p.stop)
	require.Eventually(t, func() bool {
		return p.tail(1024) == dir+"\nerr\n"
	}, time.Minute, 10*time.Millisecond, "log: %q", p.tail(1024))
	require.NoError(t, p.exited())
	pgid, err := syscall.Getpgid(p.Pid())
	require.NoError(t, err)
	require.Equal(t, syscall.Getpgrp(), pgid, "the test's process group")

	p.stop()
	require.ErrorContains(t, p.exited(), "comp exited: signal: killed")
	p.stop() // stopped already: returns at once

	_, err = startProc(dir, "none", dir+"/no-such-binary")
	require.ErrorContains(t, err, "start none")
}
