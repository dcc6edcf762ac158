package servers

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Child is a child process of a harness program (a stage, or a NATS server of the benchmark),
// its output appended to a log file.
type Child struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string

	exited chan struct{}
	err    error // how it exited, set before exited is closed
}

// StartChild starts cmd, its stderr, and its stdout unless cmd sets one, appended to logPath.
// The child gets a process group of its own unless cmd sets a SysProcAttr: an interrupt of
// the harness reaches the harness alone, which then stops its children itself, in order,
// rather than every child at once.
func StartChild(name, logPath string, cmd *exec.Cmd) (*Child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	cmd.Stderr = logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &Child{Name: name, Cmd: cmd, LogPath: logPath, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = logf.Close()
		close(c.exited)
	}()
	return c, nil
}

// Pid is the process id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Exited returns a channel closed once the process has exited.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Running reports whether the process has not exited yet.
func (c *Child) Running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Err is how the process exited (cmd.Wait's error); read it once Exited is closed.
func (c *Child) Err() error { return c.err }
