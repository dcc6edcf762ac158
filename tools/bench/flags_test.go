package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRates(t *testing.T) {
	r, err := ParseRates(" 100, 2.5,,0 ")
	require.NoError(t, err)
	require.Equal(t, []float64{100, 2.5, 0}, r, "blank elements skipped")
	r, err = ParseRates("")
	require.NoError(t, err)
	require.Empty(t, r)
	for _, bad := range []string{"x", "-1", "1,,y"} {
		_, err := ParseRates(bad)
		require.ErrorContains(t, err, "not a number of keys per second", bad)
	}
}
