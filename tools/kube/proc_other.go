//go:build !linux

package kube

import "os/exec"

// setDeathSignal does nothing where the kernel cannot kill a child with its parent: a test
// binary that dies there may leave the control plane running.
func setDeathSignal(*exec.Cmd) {}
