package servers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStartChild: the child's output is appended to its log, it leads a process group of its
// own, and its exit is seen with how it ended.
func TestStartChild(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "child.log")
	require.NoError(t, os.WriteFile(logPath, []byte("before\n"), 0o644))
	c, err := StartChild("sh", logPath, exec.Command("sh", "-c", "echo out; echo err >&2; exec sleep 60"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "out\n") && strings.Contains(string(b), "err\n")
	}, time.Minute, 10*time.Millisecond)
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "before\n"), "appended: %q", b)
	require.True(t, c.Running())
	pgid, err := syscall.Getpgid(c.Pid())
	require.NoError(t, err)
	require.Equal(t, c.Pid(), pgid, "a process group of its own")

	require.NoError(t, c.Cmd.Process.Kill())
	select {
	case <-c.Exited():
	case <-time.After(time.Minute):
		t.Fatal("no exit seen")
	}
	require.False(t, c.Running())
	var ee *exec.ExitError
	require.ErrorAs(t, c.Err(), &ee)

	_, err = StartChild("none", filepath.Join(t.TempDir(), "missing", "x.log"), exec.Command("true"))
	require.ErrorContains(t, err, "open log of none")
	_, err = StartChild("bad", logPath, exec.Command(filepath.Join(t.TempDir(), "no-such-binary")))
	require.ErrorContains(t, err, "start bad")
}

// TestStartChildKeepsSysProcAttr: a cmd that sets a SysProcAttr keeps it, and the child stays
// in the harness's process group.
func TestStartChildKeepsSysProcAttr(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	attr := &syscall.SysProcAttr{}
	cmd.SysProcAttr = attr
	c, err := StartChild("sleep", filepath.Join(t.TempDir(), "child.log"), cmd)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Cmd.Process.Kill()
		<-c.Exited()
	})
	require.Same(t, attr, c.Cmd.SysProcAttr)
	pgid, err := syscall.Getpgid(c.Pid())
	require.NoError(t, err)
	require.Equal(t, syscall.Getpgrp(), pgid, "the harness's process group")
}
