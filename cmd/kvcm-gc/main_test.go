package main

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/cli"
	"github.com/kvcm-gc/kvcm-gc/ops"
)

func TestCommandTable(t *testing.T) {
	var names []string
	for _, c := range commands {
		names = append(names, c.Name)
		require.NotEmpty(t, c.Summary, c.Name)
		require.NotNil(t, c.Run, c.Name)
	}
	for _, want := range []string{"scanner", "prober", "deleter", "run", "seed", "demo", "version"} {
		require.Contains(t, names, want)
	}
	require.Panics(t, func() { register(&cli.Command{Name: "run"}) }, "a duplicate name is refused")
}

// TestOpsCommands: every operator command of package ops mounts with opsCommand, takes the
// configuration and documents its own arguments without a connection.
func TestOpsCommands(t *testing.T) {
	for _, oc := range ops.Commands() {
		t.Run(oc.Name, func(t *testing.T) {
			c := opsCommand(oc.Name)
			require.Equal(t, oc.Name, c.Name)
			require.True(t, c.Config && c.Args)
			var out bytes.Buffer
			code := cli.RunCommand("kvcm-gc "+c.Name, c, []string{"--help"}, &out, &out)
			require.Equal(t, cli.ExitOK, code, out.String())
			require.Contains(t, out.String(), "usage:")
			require.Contains(t, out.String(), "--nats.url", "the configuration keys are documented too")
		})
	}
	require.Panics(t, func() { opsCommand("no-such-command") })
	for _, oc := range ops.Commands() {
		require.True(t, slices.ContainsFunc(commands, func(c *cli.Command) bool { return c.Name == oc.Name }),
			"operator command %s is mounted (cmd_%s.go)", oc.Name, oc.Name)
	}
}
