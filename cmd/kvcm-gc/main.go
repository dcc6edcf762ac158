// Command kvcm-gc is kvcm-gc's all-in-one command line: each stage on its own (scanner,
// prober, deleter, and the sweep's walker and sweeper), all of them in one process with an
// embedded NATS JetStream server (run), the seed generator (seed), the one-command demonstration (demo) and the version.
//
// Adding a subcommand is a one-file change: write cmd_<name>.go whose init function passes
// the command to register, for example
//
//	// cmd_status.go
//	package main
//
//	func init() { register(opsCommand("status")) }
//
// opsCommand mounts an operator command of package ops with the process's configuration and
// NATS connection; a command of another kind builds a *cli.Command (see cmd_seed.go).
// Self-registration keeps the table in one place without every new command editing a shared
// file.
package main

import (
	"os"
	"slices"
	"strings"

	"github.com/kvcm-gc/kvcm-gc/internal/cli"
)

// commands is the command table; register fills it, main lists it by name.
var commands []*cli.Command

// register adds a command to the table. It panics on a duplicate name: two files claiming one
// command is a build mistake, not a runtime condition.
func register(c *cli.Command) {
	if slices.ContainsFunc(commands, func(o *cli.Command) bool { return o.Name == c.Name }) {
		panic("kvcm-gc: command " + c.Name + " registered twice")
	}
	commands = append(commands, c)
}

func main() {
	for _, c := range sweepCommands() {
		register(c)
	}
	slices.SortFunc(commands, func(a, b *cli.Command) int { return strings.Compare(a.Name, b.Name) })
	os.Exit(cli.Main("kvcm-gc", commands, os.Args[1:], os.Stdout, os.Stderr))
}
