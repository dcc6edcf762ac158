package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/cli"
	"github.com/kvcm-gc/kvcm-gc/tools/seed"
	"github.com/kvcm-gc/kvcm-gc/tools/testenv"
)

func command(t *testing.T, name string) *cli.Command {
	t.Helper()
	cmds := commands()
	i := slices.IndexFunc(cmds, func(c *cli.Command) bool { return c.Name == name })
	require.GreaterOrEqual(t, i, 0, name)
	return cmds[i]
}

// TestSeedCommandLayouts: seed writes today's layout unless told otherwise, and its manifest
// says which.
func TestSeedCommandLayouts(t *testing.T) {
	r := testenv.StartRedis(t)
	for _, tc := range []struct {
		args      []string
		layout    string
		ambiguous bool
	}{
		{nil, "location", true},
		{[]string{"--layout", "legacy"}, "legacy", false},
		{[]string{"--layout", "legacy", "--ambiguous"}, "legacy", true},
	} {
		dir := t.TempDir()
		manifest := filepath.Join(dir, "m.json")
		var out bytes.Buffer
		args := append([]string{"--redis", r.URI(), "--instances", "1", "--blocks", "60", "--tricky", "0.3",
			"--root", filepath.Join(dir, "data"), "--manifest", manifest}, tc.args...)
		code := cli.RunCommand("kvcm-gc seed", command(t, "seed"), args, &out, &out)
		require.Equal(t, cli.ExitOK, code, out.String())
		require.Contains(t, out.String(), ", "+tc.layout+" layout:")
		m, err := seed.ReadManifest(manifest)
		require.NoError(t, err)
		require.Equal(t, tc.layout, m.Layout)
		require.Equal(t, tc.ambiguous, len(m.Ambiguous) > 0, out.String())
	}
}

func TestSeedAndDemoRefuseUnknownLayouts(t *testing.T) {
	for _, name := range []string{"seed", "demo"} {
		for _, layout := range []string{"ambiguous", "none", "L#"} {
			var out bytes.Buffer
			code := cli.RunCommand("kvcm-gc "+name, command(t, name), []string{"--layout", layout}, &out, &out)
			require.Equal(t, cli.ExitUsage, code, out.String())
			require.Contains(t, out.String(), "want location or legacy")
		}
	}
	var out bytes.Buffer
	code := cli.RunCommand("kvcm-gc demo", command(t, "demo"), []string{"--empty-block", "drop"}, &out, &out)
	require.Equal(t, cli.ExitUsage, code, out.String())
}
