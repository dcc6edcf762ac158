package guard_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/backends/guard"
)

func TestNone(t *testing.T) {
	var g guard.Guard = guard.None{}
	protected, err := g.IsCopyTarget(context.Background(), "inst_a", -1, "q0x7m2ab")
	require.NoError(t, err)
	require.False(t, protected)
}
