package scanner

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScannerConfigValidate(t *testing.T) {
	s := DefaultConfig()
	require.NoError(t, s.Validate())
	s.ScanBatchSize = 0
	require.ErrorContains(t, s.Validate(), "scan_batch_size")
}
