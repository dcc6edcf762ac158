package kube

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill the child when the process that started it exits,
// timed-out and panicking tests included (in cmd.SysProcAttr, which startProc sets).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
