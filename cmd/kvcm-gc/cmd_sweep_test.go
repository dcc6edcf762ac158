package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/app"
)

// TestSweepCommands: the sweep's stages have a command each, and run includes both.
func TestSweepCommands(t *testing.T) {
	var names []string
	for _, c := range sweepCommands() {
		names = append(names, c.Name)
		require.NotEmpty(t, c.Summary)
		require.True(t, c.Config, c.Name)
	}
	require.Equal(t, []string{"walker", "sweeper"}, names)
	require.True(t, app.All.Walker && app.All.Sweeper, "kvcm-gc run runs the sweep's stages")
}
